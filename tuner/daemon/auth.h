// Bearer-token check shared by evotuned's gRPC services.
#ifndef EVOTUNE_TUNER_DAEMON_AUTH_H_
#define EVOTUNE_TUNER_DAEMON_AUTH_H_

#include <grpcpp/grpcpp.h>

#include <string>

namespace evotune {

// OK when `token` is empty or the call carries "authorization: Bearer
// <token>"; UNAUTHENTICATED otherwise. Compares in constant time.
grpc::Status CheckBearerToken(const grpc::ServerContextBase* ctx,
                              const std::string& token);

}  // namespace evotune

#endif  // EVOTUNE_TUNER_DAEMON_AUTH_H_
