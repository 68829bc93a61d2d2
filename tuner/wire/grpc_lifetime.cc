#include "tuner/wire/grpc_lifetime.h"

#include <grpc/grpc.h>

#include "absl/time/clock.h"

namespace evotune {

GrpcLifetime::GrpcLifetime() { grpc_init(); }

GrpcLifetime::~GrpcLifetime() {
  grpc_shutdown();
  // Another user still holding gRPC (a call's last reference in one of its
  // threads) ends it later, on a thread of its own: wait for that too.
  const absl::Time deadline = absl::Now() + kWait;
  while (grpc_is_initialized() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
}

}  // namespace evotune
