// GrpcLifetime: gRPC initialized for the whole of a program's main, and shut
// down before main returns, waiting until its threads have ended.
//
// gRPC shuts down when its last user goes; when that is one of its own
// threads (a call's last reference dropped in a completion), the clean-up
// runs on a detached thread that can still be ending its threads while the
// program exits. A thread that ends after OpenSSL's exit handler has run
// loses OpenSSL's per-thread state (a leak LeakSanitizer reports, seen in the
// CLI with TLS). Holding gRPC from the start of main makes main's own release
// the last one.
#ifndef EVOTUNE_TUNER_WIRE_GRPC_LIFETIME_H_
#define EVOTUNE_TUNER_WIRE_GRPC_LIFETIME_H_

#include "absl/time/time.h"

namespace evotune {

class GrpcLifetime {
 public:
  GrpcLifetime();
  // Releases gRPC and waits, at most kWait, until it has shut down.
  ~GrpcLifetime();
  GrpcLifetime(const GrpcLifetime&) = delete;
  GrpcLifetime& operator=(const GrpcLifetime&) = delete;

  static constexpr absl::Duration kWait = absl::Seconds(5);
};

}  // namespace evotune

#endif  // EVOTUNE_TUNER_WIRE_GRPC_LIFETIME_H_
