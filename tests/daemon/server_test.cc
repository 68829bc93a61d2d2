// Stock gRPC tooling can talk to the daemon's server: health checking answers
// SERVING and server reflection lists the Tuner service. Both are called by
// method name with hand-encoded protobuf bytes, as a generic client would.
#include "tuner/daemon/server.h"

#include <grpcpp/generic/generic_stub.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <future>
#include <thread>

#include "evotune/v1/worker.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/daemon/synthetic_tuner.h"
#include "tuner/daemon/grpc_service.h"
#include "tuner/daemon/worker_service.h"
#include "tuner/jobs/worker_pool.h"
#include "tuner/wire/message_convert.h"

namespace evotune {
namespace {

grpc::ByteBuffer Bytes(const std::string& s) {
  grpc::Slice slice(s);
  return grpc::ByteBuffer(&slice, 1);
}

std::string String(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& s : slices) {
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return out;
}

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("server_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    tuning_ = std::make_unique<SyntheticTuner>(dir_);
    grpc_ = std::make_unique<GrpcTuner>(&tuning_->service, AccessTokens{});
    absl::StatusOr<BuiltServer> built =
        BuildServer("127.0.0.1:0", {grpc_.get()});
    ASSERT_TRUE(built.ok()) << built.status();
    server_ = std::move(built->server);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", built->port),
                                   grpc::InsecureChannelCredentials());
  }
  void TearDown() override {
    server_->Shutdown();
    std::filesystem::remove_all(dir_);
  }

  std::filesystem::path dir_;
  std::unique_ptr<SyntheticTuner> tuning_;
  std::unique_ptr<GrpcTuner> grpc_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(ServerTest, HealthCheckAnswersServing) {
  grpc::GenericStub stub(channel_);
  grpc::ClientContext ctx;
  grpc::ByteBuffer request = Bytes(""), response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(),
                 &request, &response,
                 [&done](grpc::Status s) { done.set_value(s); });
  grpc::Status status = done.get_future().get();
  ASSERT_TRUE(status.ok()) << status.error_message();
  // HealthCheckResponse{status: SERVING}: field 1, varint 1.
  EXPECT_EQ(String(response), std::string("\x08\x01", 2));
}

TEST_F(ServerTest, ReflectionListsTheTunerService) {
  grpc::GenericStub stub(channel_);
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  auto call = stub.PrepareCall(
      &ctx, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
      &cq);
  auto step = [&cq](intptr_t tag) {
    void* got = nullptr;
    bool ok = false;
    EXPECT_TRUE(cq.Next(&got, &ok));
    EXPECT_EQ(reinterpret_cast<intptr_t>(got), tag);
    return ok;
  };
  call->StartCall(reinterpret_cast<void*>(1));
  ASSERT_TRUE(step(1));
  // ServerReflectionRequest{list_services: ""}: field 7, length 0.
  call->Write(Bytes(std::string("\x3a\x00", 2)), reinterpret_cast<void*>(2));
  ASSERT_TRUE(step(2));
  call->WritesDone(reinterpret_cast<void*>(3));
  ASSERT_TRUE(step(3));
  grpc::ByteBuffer response;
  call->Read(&response, reinterpret_cast<void*>(4));
  ASSERT_TRUE(step(4));
  const std::string bytes = String(response);
  EXPECT_NE(bytes.find("evotune.v1.Tuner"), std::string::npos);
  EXPECT_NE(bytes.find("grpc.health.v1.Health"), std::string::npos);
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(5));
  step(5);
  EXPECT_TRUE(status.ok()) << status.error_message();
  cq.Shutdown();
  void* tag;
  bool ok;
  while (cq.Next(&tag, &ok)) {
  }
}

// A worker pool served over gRPC on a port of 127.0.0.1, as the daemon
// serves its workers.
class ServerLimitsTest : public ::testing::Test {
 protected:
  // At most `max_threads` calls served at once.
  void Serve(int max_threads) {
    absl::StatusOr<BuiltServer> built =
        BuildServer("127.0.0.1:0", {&service_}, nullptr, false, max_threads);
    ASSERT_TRUE(built.ok()) << built.status();
    server_ = std::move(built->server);
    stub_ = v1::WorkerPool::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", built->port),
                            grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
    pool_.Close();
  }

  WorkerPool pool_{WorkerPool::Options{}};
  GrpcWorkerPool service_{&pool_, AccessTokens{}};
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::WorkerPool::Stub> stub_;
};

// Calls beyond the server's threads are refused at once (RESOURCE_EXHAUSTED)
// rather than queued behind long ones; the server serves again after.
TEST_F(ServerLimitsTest, CallsBeyondTheThreadLimitAreRefusedAtOnce) {
  Serve(/*max_threads=*/6);
  v1::RegisterWorkerRequest reg;
  reg.set_name("w");
  reg.mutable_device()->mutable_device()->set_name("GPU");
  reg.mutable_device()->set_smem_per_block_bytes(48 << 10);
  reg.mutable_device()->set_max_threads_per_block(1024);
  v1::RegisterWorkerResponse id;
  grpc::ClientContext rc;
  ASSERT_TRUE(stub_->RegisterWorker(&rc, reg, &id).ok());
  // Leases that wait 2 s for a trial that never comes hold their threads.
  std::atomic<int> exhausted{0}, waited{0};
  std::vector<std::thread> calls;
  for (int i = 0; i < 24; ++i) {
    calls.emplace_back([&] {
      grpc::ClientContext ctx;
      v1::LeaseTrialRequest lease;
      lease.set_worker_id(id.worker_id());
      lease.set_wait_ms(2000);
      v1::LeaseTrialResponse resp;
      const absl::Time start = absl::Now();
      grpc::Status s = stub_->LeaseTrial(&ctx, lease, &resp);
      if (s.error_code() == grpc::RESOURCE_EXHAUSTED &&
          absl::Now() - start < absl::Seconds(1)) {
        ++exhausted;
      } else if (s.ok()) {
        ++waited;
      }
    });
  }
  for (std::thread& t : calls) t.join();
  EXPECT_GT(exhausted.load(), 0);
  EXPECT_GT(waited.load(), 0);
  EXPECT_EQ(exhausted + waited, 24);
  grpc::ClientContext hc;
  v1::HeartbeatRequest beat;
  beat.set_worker_id(id.worker_id());
  v1::HeartbeatResponse ack;
  EXPECT_TRUE(stub_->Heartbeat(&hc, beat, &ack).ok());
}

// A worker says how many trials it compiles at once; the pool queues that
// many for it, at most kMaxCompileAhead.
TEST_F(ServerLimitsTest, AWorkersCompileAheadReachesThePool) {
  Serve(/*max_threads=*/8);
  DeviceInfo device;
  for (auto [name, ahead] : {std::pair{"a", 6}, std::pair{"b", 99}}) {
    v1::RegisterWorkerRequest reg;
    reg.set_name(name);
    reg.mutable_device()->mutable_device()->set_name("GPU");
    reg.mutable_device()->set_smem_per_block_bytes(48 << 10);
    reg.mutable_device()->set_max_threads_per_block(1024);
    reg.set_compile_ahead(ahead);
    v1::RegisterWorkerResponse id;
    grpc::ClientContext rc;
    ASSERT_TRUE(stub_->RegisterWorker(&rc, reg, &id).ok());
    device = *DeviceFromProto(reg.device());
  }
  EXPECT_EQ(pool_.QueuedAhead(device), 6 + WorkerPool::kMaxCompileAhead);
}

// The device a worker registers keeps its multiprocessors (the cost model's
// launch features and the fitted configs need them); a count past any GPU's
// is refused, naming the field.
TEST_F(ServerLimitsTest, AWorkersMultiprocessorsReachThePool) {
  Serve(/*max_threads=*/8);
  DeviceInfo h100;
  h100.name = "GPU";
  h100.cc_major = 9;
  h100.limits.smem_per_block_bytes = 227 << 10;
  h100.limits.multiprocessors = 132;
  v1::RegisterWorkerRequest reg;
  reg.set_name("w");
  *reg.mutable_device() = WorkerDeviceToProto(h100);
  v1::RegisterWorkerResponse id;
  grpc::ClientContext rc;
  ASSERT_TRUE(stub_->RegisterWorker(&rc, reg, &id).ok());
  absl::StatusOr<DeviceInfo> found = pool_.FindDevice("GPU");
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->limits.multiprocessors, 132);
  EXPECT_EQ(found->limits.smem_per_block_bytes, 227 << 10);
  EXPECT_EQ(found->limits.compute_capability, 90);

  reg.set_name("absurd");
  reg.mutable_device()->set_multiprocessors(1u << 30);
  grpc::ClientContext bad;
  const grpc::Status s = stub_->RegisterWorker(&bad, reg, &id);
  EXPECT_EQ(s.error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("device.multiprocessors"), std::string::npos)
      << s.error_message();
}

}  // namespace
}  // namespace evotune
