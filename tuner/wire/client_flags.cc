#include "tuner/wire/client_flags.h"

#include "absl/flags/flag.h"
#include "tuner/wire/credentials.h"

ABSL_FLAG(std::string, token, "",
          "bearer token the daemon asks of this program (the clients' for "
          "the CLI, the workers' for a worker; default: $EVOTUNE_TOKEN)");
ABSL_FLAG(std::string, token_file, "",
          "read --token from this file instead (keeps it off the command "
          "line)");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA certificates: talk TLS to the daemon, verifying its "
          "certificate against them");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM client certificate, for a daemon that requires one (with "
          "--tls_ca and --tls_key)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_server_name, "",
          "with --tls_ca: the name the daemon's certificate must carry, when "
          "it is not the host dialled (an IP address, a tunnel)");

namespace evotune {

absl::StatusOr<DaemonCredentials> DaemonCredentialsFromFlags() {
  absl::StatusOr<std::string> token = ResolveToken(
      absl::GetFlag(FLAGS_token), "--token", absl::GetFlag(FLAGS_token_file),
      "--token_file", "EVOTUNE_TOKEN");
  if (!token.ok()) return token.status();
  return DaemonCredentials{
      *std::move(token),
      {absl::GetFlag(FLAGS_tls_ca), absl::GetFlag(FLAGS_tls_cert),
       absl::GetFlag(FLAGS_tls_key), absl::GetFlag(FLAGS_tls_server_name)}};
}

}  // namespace evotune
