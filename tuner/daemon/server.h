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

// The largest request the server reads (gRPC's default, stated): a larger
// one is refused with RESOURCE_EXHAUSTED before any handler runs.
inline constexpr int kMaxRequestBytes = 4 << 20;
// Threads the server runs calls on at most (each call holds one while it
// runs; a worker's lease or a watch stream for long). A call beyond gets
// RESOURCE_EXHAUSTED at once, instead of the process creating threads until
// the system refuses and every call stalls.
inline constexpr int kMaxServerThreads = 1024;

struct BuiltServer {
  std::unique_ptr<grpc::Server> server;
  int port = 0;  // The port actually bound (address ":0" picks one).
  // With a loopback port asked for: its port on 127.0.0.1, plaintext.
  int loopback_port = 0;
};

// Serves `services` on `address` with `credentials` (plaintext when null)
// and, if `loopback_port`, also in plaintext on a free port of 127.0.0.1
// (for the daemon's own workers when the address speaks TLS).
// UNAVAILABLE when an address cannot be bound. `services` must outlive the
// server.
absl::StatusOr<BuiltServer> BuildServer(
    const std::string& address, const std::vector<grpc::Service*>& services,
    std::shared_ptr<grpc::ServerCredentials> credentials = nullptr,
    bool loopback_port = false, int max_threads = kMaxServerThreads);

}  // namespace evotune

#endif  // EVOTUNE_TUNER_DAEMON_SERVER_H_
