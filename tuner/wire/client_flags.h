// The flags by which the CLI and the workers say how to reach evotuned
// securely: --token, --token_file, --tls_ca, --tls_cert, --tls_key (defined
// here once, for both programs).
#ifndef EVOTUNE_TUNER_WIRE_CLIENT_FLAGS_H_
#define EVOTUNE_TUNER_WIRE_CLIENT_FLAGS_H_

#include <grpcpp/security/credentials.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace evotune {

struct DaemonCredentials {
  std::string token;  // Bearer token; empty for none.
  std::shared_ptr<grpc::ChannelCredentials> channel;  // TLS or plaintext.
};

// The token (--token, --token_file or $EVOTUNE_TOKEN) and the channel's
// credentials (--tls_ca, --tls_cert, --tls_key); INVALID_ARGUMENT naming a
// bad flag.
absl::StatusOr<DaemonCredentials> DaemonCredentialsFromFlags();

}  // namespace evotune

#endif  // EVOTUNE_TUNER_WIRE_CLIENT_FLAGS_H_
