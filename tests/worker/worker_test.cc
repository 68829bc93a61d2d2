// Worker against a stand-in WorkerPool service in this process: what it
// sends the daemon, and how it rides out a daemon that is gone, restarted,
// refusing its token or losing results, with a fake evaluator below it.
#include "tuner/worker/worker.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tuner/wire/message_convert.h"

namespace evotune {
namespace {

using ::testing::HasSubstr;

// Answers every config with `us`, or crashes it when told to.
class FakeEvaluator : public Evaluator {
 public:
  FakeEvaluator() {
    device_.name = "Fake GPU";
    device_.cc_major = 9;
  }
  const DeviceInfo& device() const override { return device_; }
  absl::StatusOr<TrialResult> Evaluate(const KernelTemplate&, const Config&,
                                       const Problem&) override {
    ++evaluations;
    TrialResult r;
    r.status = crash ? TrialStatus::kCrashed : TrialStatus::kOk;
    r.median_us = r.min_us = r.p90_us = 12.5;
    r.samples = 5;
    return r;
  }
  std::atomic<int> evaluations = 0;
  std::atomic<bool> crash = false;

 private:
  DeviceInfo device_;
};

// The daemon's side of the protocol, scripted: each RPC answers the next
// scripted status (OK once the script is spent), and records what came.
class StandInPool : public v1::WorkerPool::Service {
 public:
  grpc::Status RegisterWorker(grpc::ServerContext* ctx,
                              const v1::RegisterWorkerRequest* request,
                              v1::RegisterWorkerResponse* response) override {
    absl::MutexLock lock(&mu);
    registrations.push_back(*request);
    tokens.push_back(Token(*ctx));
    response->set_worker_id(absl::StrCat("w", registrations.size()));
    response->set_heartbeat_ms(100);
    return Next(register_script);
  }
  grpc::Status LeaseTrial(grpc::ServerContext*,
                          const v1::LeaseTrialRequest* request,
                          v1::LeaseTrialResponse* response) override {
    absl::MutexLock lock(&mu);
    leased_by.push_back(request->worker_id());
    grpc::Status s = Next(lease_script);
    if (s.ok() && !tasks.empty()) {
      *response->mutable_task() = tasks.front();
      tasks.pop_front();
    }
    return s;
  }
  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest*,
                         v1::HeartbeatResponse*) override {
    return grpc::Status::OK;
  }
  grpc::Status CompleteTrial(grpc::ServerContext*,
                             const v1::CompleteTrialRequest* request,
                             v1::CompleteTrialResponse*) override {
    absl::MutexLock lock(&mu);
    ++complete_calls;
    grpc::Status s = Next(complete_script);
    if (s.ok()) completed.push_back(*request);
    return s;
  }

  static std::string Token(const grpc::ServerContext& ctx) {
    auto it = ctx.client_metadata().find("authorization");
    return it == ctx.client_metadata().end()
               ? ""
               : std::string(it->second.data(), it->second.size());
  }
  static grpc::Status Next(std::deque<grpc::Status>& script) {
    if (script.empty()) return grpc::Status::OK;
    grpc::Status s = script.front();
    script.pop_front();
    return s;
  }

  absl::Mutex mu;
  std::deque<grpc::Status> register_script, lease_script, complete_script;
  std::deque<v1::TrialTask> tasks;
  std::vector<v1::RegisterWorkerRequest> registrations;
  std::vector<std::string> tokens, leased_by;
  std::vector<v1::CompleteTrialRequest> completed;
  int complete_calls = 0;
};

const grpc::Status kUnavailable(grpc::StatusCode::UNAVAILABLE, "gone");

class WorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port_);
    builder.RegisterService(&pool_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(port_, 0);
  }
  void TearDown() override { server_->Shutdown(); }

  WorkerOptions Options() {
    WorkerOptions o;
    o.daemon = absl::StrCat("127.0.0.1:", port_);
    o.token = "s3cret";
    o.name = "test-worker";
    o.lease_wait = absl::Milliseconds(20);
    o.max_retry = absl::Milliseconds(20);
    return o;
  }

  // A trial of the builtin naive template on the seed problem.
  v1::TrialTask Task(const std::string& id) {
    TrialTask t;
    t.device = evaluator_.device();
    const KernelTemplate& naive = *TemplateRegistry::Builtin().Find("naive");
    t.template_name = naive.name;
    t.template_hash = naive.hash;
    t.config = naive.defaults.front();
    t.problem.heads = t.problem.kv_heads = 8;
    t.problem.seq_q = t.problem.seq_k = 512;
    return TaskToProto(id, t, absl::Seconds(60));
  }

  // Runs the worker on a thread until it returns or `done` holds (then it
  // is stopped; 10 s at most); returns its exit code.
  int RunUntil(const std::function<bool()>& done) {
    Worker worker(Options(), &evaluator_, &TemplateRegistry::Builtin());
    absl::Notification stop, returned;
    int exit = -1;
    std::thread t([&] {
      exit = worker.Run(&stop);
      returned.Notify();
    });
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    while (!done() && absl::Now() < give_up &&
           !returned.WaitForNotificationWithTimeout(absl::Milliseconds(5))) {
    }
    stop.Notify();
    t.join();
    return exit;
  }
  bool Completed(size_t n) {
    absl::MutexLock lock(&pool_.mu);
    return pool_.completed.size() >= n;
  }

  FakeEvaluator evaluator_;
  StandInPool pool_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(WorkerTest, RegistersLeasesEvaluatesAndReportsWithItsToken) {
  pool_.tasks.push_back(Task("t1"));
  EXPECT_EQ(RunUntil([&] { return Completed(1); }), kExitOk);
  absl::MutexLock lock(&pool_.mu);
  ASSERT_EQ(pool_.registrations.size(), 1u);
  const v1::RegisterWorkerRequest& r = pool_.registrations[0];
  EXPECT_EQ(r.name(), "test-worker");
  EXPECT_EQ(r.device().device().name(), "Fake GPU");
  EXPECT_GT(r.templates_size(), 0);
  EXPECT_EQ(pool_.tokens[0], "Bearer s3cret");
  ASSERT_EQ(pool_.completed.size(), 1u);
  const v1::CompleteTrialRequest& c = pool_.completed[0];
  EXPECT_EQ(c.worker_id(), "w1");
  EXPECT_EQ(c.task().task_id(), "t1");
  EXPECT_EQ(c.status(), v1::TRIAL_STATUS_OK);
  EXPECT_FALSE(c.worker_lost());
  EXPECT_EQ(evaluator_.evaluations, 1);
}

TEST_F(WorkerTest, ARefusedTokenEndsItWithoutRetrying) {
  pool_.register_script.push_back(
      grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "bad token"));
  EXPECT_EQ(RunUntil([] { return false; }), kExitUnauthenticated);
  absl::MutexLock lock(&pool_.mu);
  EXPECT_EQ(pool_.registrations.size(), 1u);
}

TEST_F(WorkerTest, ItWaitsForADaemonThatIsNotThereYet) {
  for (int i = 0; i < 3; ++i) pool_.register_script.push_back(kUnavailable);
  pool_.tasks.push_back(Task("t1"));
  EXPECT_EQ(RunUntil([&] { return Completed(1); }), kExitOk);
  absl::MutexLock lock(&pool_.mu);
  EXPECT_EQ(pool_.registrations.size(), 4u);
  EXPECT_EQ(pool_.completed.size(), 1u);
}

TEST_F(WorkerTest, ADaemonThatForgotItIsJoinedAgain) {
  // The daemon restarted: it no longer knows worker w1.
  pool_.lease_script.push_back(
      grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown worker"));
  pool_.tasks.push_back(Task("t1"));
  EXPECT_EQ(RunUntil([&] { return Completed(1); }), kExitOk);
  absl::MutexLock lock(&pool_.mu);
  ASSERT_EQ(pool_.registrations.size(), 2u);
  EXPECT_EQ(pool_.completed[0].worker_id(), "w2");
}

TEST_F(WorkerTest, AFinishedResultIsKeptUntilTheDaemonTakesIt) {
  for (int i = 0; i < 4; ++i) pool_.complete_script.push_back(kUnavailable);
  pool_.tasks.push_back(Task("t1"));
  EXPECT_EQ(RunUntil([&] { return Completed(1); }), kExitOk);
  absl::MutexLock lock(&pool_.mu);
  EXPECT_EQ(pool_.complete_calls, 5);
  ASSERT_EQ(pool_.completed.size(), 1u);
  EXPECT_EQ(pool_.completed[0].task().task_id(), "t1");
  EXPECT_EQ(evaluator_.evaluations, 1);  // Delivered, not measured again.
}

TEST_F(WorkerTest, ACrashIsReportedAsLostAndEndsTheProcess) {
  evaluator_.crash = true;
  pool_.tasks.push_back(Task("t1"));
  pool_.tasks.push_back(Task("t2"));
  EXPECT_EQ(RunUntil([] { return false; }), kExitContextLost);
  absl::MutexLock lock(&pool_.mu);
  ASSERT_EQ(pool_.completed.size(), 1u);  // t2 is left to a fresh process.
  EXPECT_TRUE(pool_.completed[0].worker_lost());
  EXPECT_EQ(pool_.completed[0].status(), v1::TRIAL_STATUS_CRASHED);
}

TEST_F(WorkerTest, ATrialOfATemplateNotInThisBuildIsLost) {
  v1::TrialTask task = Task("t1");
  task.set_template_hash("not-this-build");
  pool_.tasks.push_back(task);
  EXPECT_EQ(RunUntil([] { return false; }), kExitContextLost);
  absl::MutexLock lock(&pool_.mu);
  ASSERT_EQ(pool_.completed.size(), 1u);
  EXPECT_THAT(pool_.completed[0].error(), HasSubstr("not in this build"));
  EXPECT_EQ(evaluator_.evaluations, 0);
}

TEST_F(WorkerTest, ADaemonThatCannotServeItsDeviceEndsIt) {
  pool_.lease_script.push_back(grpc::Status(
      grpc::StatusCode::FAILED_PRECONDITION, "no template for this device"));
  EXPECT_EQ(RunUntil([] { return false; }), kExitAborted);
}

}  // namespace
}  // namespace evotune
