// Every method of both of evotuned's services refuses calls without the
// caller's role's token: UNAUTHENTICATED without a token or with an unknown
// one, PERMISSION_DENIED with the other role's token. Methods are found in
// the services' descriptors and called with empty requests through the
// generic API, so a method added later is covered too.
#include "tuner/daemon/auth.h"

#include <google/protobuf/descriptor.h>
#include <grpcpp/generic/generic_stub.h>
#include <unistd.h>

#include <filesystem>
#include <future>

#include "gtest/gtest.h"
#include "tests/daemon/synthetic_tuner.h"
#include "tuner/daemon/grpc_service.h"
#include "tuner/daemon/server.h"
#include "tuner/daemon/worker_service.h"

namespace evotune {
namespace {

constexpr char kTuner[] = "evotune.v1.Tuner";
constexpr char kWorkerPool[] = "evotune.v1.WorkerPool";

// "/service/Method" of every method of `service`.
std::vector<std::string> Methods(const std::string& service) {
  const google::protobuf::ServiceDescriptor* d =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
          service);
  EXPECT_NE(d, nullptr) << service;
  std::vector<std::string> paths;
  for (int i = 0; d != nullptr && i < d->method_count(); ++i) {
    paths.push_back("/" + service + "/" + d->method(i)->name());
  }
  return paths;
}

class AuthTest : public ::testing::Test {
 protected:
  void Serve(const AccessTokens& tokens) {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("auth_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    tuning_ = std::make_unique<SyntheticTuner>(dir_);
    tuner_ = std::make_unique<GrpcTuner>(&tuning_->service, tokens);
    pool_ = std::make_unique<WorkerPool>(WorkerPool::Options{});
    workers_ = std::make_unique<GrpcWorkerPool>(pool_.get(), tokens);
    absl::StatusOr<BuiltServer> built =
        BuildServer("127.0.0.1:0", {tuner_.get(), workers_.get()});
    ASSERT_TRUE(built.ok()) << built.status();
    server_ = std::move(built->server);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", built->port),
                                   grpc::InsecureChannelCredentials());
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
    if (pool_ != nullptr) pool_->Close();
    std::filesystem::remove_all(dir_);
  }

  // The status of `method` called with an empty request and `token` (none
  // if empty).
  grpc::Status Call(const std::string& method, const std::string& token) {
    grpc::GenericStub stub(channel_);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(10));
    if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
    grpc::Slice empty("");
    grpc::ByteBuffer request(&empty, 1), response;
    std::promise<grpc::Status> done;
    stub.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response,
                   [&](grpc::Status s) { done.set_value(std::move(s)); });
    return done.get_future().get();
  }

  std::filesystem::path dir_;
  std::unique_ptr<SyntheticTuner> tuning_;
  std::unique_ptr<GrpcTuner> tuner_;
  std::unique_ptr<WorkerPool> pool_;
  std::unique_ptr<GrpcWorkerPool> workers_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

bool Refused(const grpc::Status& s) {
  return s.error_code() == grpc::UNAUTHENTICATED ||
         s.error_code() == grpc::PERMISSION_DENIED;
}

TEST_F(AuthTest, EachRoleCallsOnlyItsOwnService) {
  Serve({"client-token", "worker-token"});
  struct Case {
    const char* service;
    const char* own;
    const char* other;
  };
  for (const Case& c : {Case{kTuner, "client-token", "worker-token"},
                        Case{kWorkerPool, "worker-token", "client-token"}}) {
    const std::vector<std::string> methods = Methods(c.service);
    EXPECT_GE(methods.size(), 4u);
    for (const std::string& m : methods) {
      SCOPED_TRACE(m);
      grpc::Status none = Call(m, "");
      EXPECT_EQ(none.error_code(), grpc::UNAUTHENTICATED);
      EXPECT_NE(none.error_message().find("authorization"), std::string::npos);
      EXPECT_EQ(Call(m, "not-a-token").error_code(), grpc::UNAUTHENTICATED);
      EXPECT_EQ(Call(m, std::string(c.own) + "x").error_code(),
                grpc::UNAUTHENTICATED);
      grpc::Status other = Call(m, c.other);
      EXPECT_EQ(other.error_code(), grpc::PERMISSION_DENIED);
      EXPECT_NE(other.error_message().find(c.service + 11),
                std::string::npos)  // "Tuner" or "WorkerPool".
          << other.error_message();
      EXPECT_FALSE(Refused(Call(m, c.own))) << Call(m, c.own).error_message();
    }
  }
  // Nothing a refused call asked for happened.
  EXPECT_TRUE(tuning_->store->ListJobs(std::nullopt).value().empty());
  EXPECT_EQ(pool_->workers(), 0);
}

TEST_F(AuthTest, OneTokenServesBothRoles) {
  Serve({"shared", "shared"});
  for (const char* service : {kTuner, kWorkerPool}) {
    for (const std::string& m : Methods(service)) {
      SCOPED_TRACE(m);
      EXPECT_EQ(Call(m, "").error_code(), grpc::UNAUTHENTICATED);
      EXPECT_EQ(Call(m, "other").error_code(), grpc::UNAUTHENTICATED);
      EXPECT_FALSE(Refused(Call(m, "shared")));
    }
  }
}

TEST_F(AuthTest, ARoleWithoutATokenIsOpen) {
  Serve({"", "worker-token"});
  for (const std::string& m : Methods(kTuner)) {
    EXPECT_FALSE(Refused(Call(m, ""))) << m;
  }
  for (const std::string& m : Methods(kWorkerPool)) {
    EXPECT_EQ(Call(m, "").error_code(), grpc::UNAUTHENTICATED) << m;
  }
}

}  // namespace
}  // namespace evotune
