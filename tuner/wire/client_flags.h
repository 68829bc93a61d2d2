// The flags by which the CLI and the workers say how to reach evotuned
// securely: --token, --token_file, --tls_ca, --tls_cert, --tls_key,
// --tls_server_name (defined here once, for both programs).
#ifndef EVOTUNE_TUNER_WIRE_CLIENT_FLAGS_H_
#define EVOTUNE_TUNER_WIRE_CLIENT_FLAGS_H_

#include <grpcpp/security/credentials.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "tuner/wire/credentials.h"

namespace evotune {

struct DaemonCredentials {
  std::string token;  // Bearer token; empty for none.
  ClientTls tls;      // For DaemonChannel, which checks it.
};

// The token (--token, --token_file or $EVOTUNE_TOKEN) and the channel's TLS
// (--tls_ca, --tls_cert, --tls_key, --tls_server_name); INVALID_ARGUMENT
// naming a bad token flag. DaemonChannel reads the TLS files and names a
// missing or unreadable one.
absl::StatusOr<DaemonCredentials> DaemonCredentialsFromFlags();

}  // namespace evotune

#endif  // EVOTUNE_TUNER_WIRE_CLIENT_FLAGS_H_
