// Credentials of evotune's gRPC connections, shared by the daemon, the CLI
// and the workers: bearer tokens (from a flag, a file or the environment)
// and TLS from PEM files.
#ifndef EVOTUNE_TUNER_WIRE_CREDENTIALS_H_
#define EVOTUNE_TUNER_WIRE_CREDENTIALS_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace evotune {

// A token given as `value` (flag `flag`), else read from the file `file`
// (flag `file_flag`; surrounding whitespace dropped), else $`env`; empty if
// none. INVALID_ARGUMENT naming the flag when both are given, the file
// cannot be read or holds no token. A file keeps the token off command
// lines, where other users of the machine can read it.
absl::StatusOr<std::string> ResolveToken(const std::string& value,
                                         const std::string& flag,
                                         const std::string& file,
                                         const std::string& file_flag,
                                         const char* env);

// PEM files of the daemon's TLS: its certificate chain and private key, and
// optionally the CA that client certificates must chain to (mutual TLS).
struct ServerTls {
  std::string cert, key, client_ca;
  bool enabled() const { return !cert.empty() || !key.empty(); }
};

// Plaintext when `tls` is not enabled. INVALID_ARGUMENT naming the flag
// (--tls_cert, --tls_key, --tls_client_ca) when one is missing or
// unreadable.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(
    const ServerTls& tls);

// PEM files of a client's or worker's TLS: the CA that the daemon's
// certificate must chain to, and optionally a certificate and key to
// present (when the daemon asks for one).
// `server_name`, when set, is the name the daemon's certificate must carry
// instead of the host of the address dialled (an IP address, a tunnel).
struct ClientTls {
  std::string ca, cert, key;
  std::string server_name;
  bool enabled() const { return !ca.empty() || !cert.empty(); }
};

// Plaintext when `tls` is not enabled. INVALID_ARGUMENT naming the flag
// (--tls_ca, --tls_cert, --tls_key, --tls_server_name) when one is missing
// or unreadable.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentials(
    const ClientTls& tls);

// A channel to the daemon at `address` with ChannelCredentials(tls) and its
// server name; the same errors.
absl::StatusOr<std::shared_ptr<grpc::Channel>> DaemonChannel(
    const std::string& address, const ClientTls& tls);

}  // namespace evotune

#endif  // EVOTUNE_TUNER_WIRE_CREDENTIALS_H_
