// No gRPC thread outlives a GrpcLifetime, even where gRPC's last user lets
// go on one of gRPC's own threads.
#include "tuner/wire/grpc_lifetime.h"

#include <grpc/grpc.h>
#include <grpcpp/grpcpp.h>

#include <filesystem>
#include <memory>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "evotune/v1/evotune.grpc.pb.h"
#include "gtest/gtest.h"

namespace evotune {
namespace {

int Threads() {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
    (void)e;
    ++n;
  }
  return n;
}

// A call that fails (nothing listens on port 1) and, in its completion on
// a gRPC thread, destroys the channel: gRPC's last user but the test's
// lifetime lets go there.
void ReleaseTheChannelOnAGrpcThread() {
  auto channel = std::make_unique<std::shared_ptr<grpc::Channel>>(
      grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials()));
  auto stub = v1::Tuner::NewStub(*channel);
  grpc::ClientContext context;
  v1::ListJobsRequest request;
  v1::ListJobsResponse response;
  absl::Notification done;
  stub->async()->ListJobs(&context, &request, &response, [&](grpc::Status) {
    stub.reset();
    channel.reset();
    done.Notify();
  });
  done.WaitForNotification();
}

TEST(GrpcLifetimeTest, NoGrpcThreadOutlivesIt) {
  const int before = Threads();
  for (int i = 0; i < 2; ++i) {
    {
      GrpcLifetime lifetime;
      ReleaseTheChannelOnAGrpcThread();
      EXPECT_GT(Threads(), before);  // gRPC's threads are running.
    }
    EXPECT_FALSE(grpc_is_initialized());
    // The detached thread that shut gRPC down ends just after it has.
    const absl::Time deadline = absl::Now() + absl::Seconds(2);
    while (Threads() > before && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    EXPECT_EQ(Threads(), before) << "round " << i;
  }
}

}  // namespace
}  // namespace evotune
