// Who may call evotuned's gRPC services: a bearer token per role. Clients
// (the Tuner service: jobs, results, kernels) and workers (the WorkerPool
// service: registering, leasing and reporting trials) may hold different
// tokens, so that a worker's credential cannot submit or cancel jobs and a
// client's cannot register workers or report trials.
#ifndef EVOTUNE_TUNER_DAEMON_AUTH_H_
#define EVOTUNE_TUNER_DAEMON_AUTH_H_

#include <grpcpp/grpcpp.h>

#include <string>

namespace evotune {

enum class Role { kClient, kWorker };

// The bearer token of each role; empty: that role needs none. Equal tokens
// give one credential both roles.
struct AccessTokens {
  std::string client;
  std::string worker;
};

// OK when `role` needs no token or the call carries "authorization: Bearer
// <its token>"; PERMISSION_DENIED when the call carries the other role's
// token instead; UNAUTHENTICATED otherwise. Compares in constant time.
grpc::Status Authorize(const grpc::ServerContextBase* ctx,
                       const AccessTokens& tokens, Role role);

}  // namespace evotune

#endif  // EVOTUNE_TUNER_DAEMON_AUTH_H_
