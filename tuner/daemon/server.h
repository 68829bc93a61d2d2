// Builds evotuned's gRPC server: the Tuner service, gRPC health checking and
// server reflection, so that stock gRPC tools can talk to the daemon.
#ifndef EVOTUNE_TUNER_DAEMON_SERVER_H_
#define EVOTUNE_TUNER_DAEMON_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace evotune {

struct BuiltServer {
  std::unique_ptr<grpc::Server> server;
  int port = 0;  // The port actually bound (address ":0" picks one).
};

// UNAVAILABLE when the address cannot be bound. `services` must outlive the
// server.
absl::StatusOr<BuiltServer> BuildServer(
    const std::string& address, const std::vector<grpc::Service*>& services);

}  // namespace evotune

#endif  // EVOTUNE_TUNER_DAEMON_SERVER_H_
