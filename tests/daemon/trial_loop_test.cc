#include "tuner/daemon/trial_loop.h"

#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernel_templates/template_registry.h"
#include "tuner/common/clock.h"
#include "tuner/evaluator/evaluator.h"

namespace evotune {
namespace {

// A TrialRunner whose trials finish when the test says: Start queues the
// task, Finish answers the oldest with `answer` (ninja's FakeCommandRunner
// in spirit).
class FakeRunner : public TrialRunner {
 public:
  struct Started {
    uint64_t id;
    TrialTask task;
    TrialDone done;
  };
  // What a task gets when it finishes; by default a correct result whose
  // latency is the config's KV_TILE, timed as the task asked.
  std::function<absl::StatusOr<TrialResult>(const TrialTask&)> answer =
      [](const TrialTask& t) -> absl::StatusOr<TrialResult> {
    TrialResult r;
    r.median_us = r.min_us = r.p90_us =
        static_cast<double>(t.config.at("KV_TILE") + t.config.at("WARPS"));
    r.samples = t.quick ? kQuickTimingSamples : kFullTimingSamples;
    return r;
  };
  // Called from Start: finish every task at once (the default).
  bool finish_at_once = true;

  absl::StatusOr<DeviceInfo> FindDevice(const std::string&) override {
    return DeviceInfo{};
  }
  absl::Status CanEvaluate(const DeviceInfo&,
                           const KernelTemplate&) const override {
    return absl::OkStatus();
  }
  int Parallelism(const DeviceInfo&) const override { return 2; }
  uint64_t Start(TrialTask task, TrialDone done) override {
    started.push_back({++ids_, task, done});
    if (finish_at_once) {
      TrialDone d = std::move(started.back().done);
      started.pop_back();
      ++finished;
      quick += task.quick ? 1 : 0;
      d(answer(task));
    }
    return ids_;
  }
  void Withdraw(uint64_t id) override { withdrawn.push_back(id); }

  std::vector<Started> started;  // Not yet finished.
  std::vector<uint64_t> withdrawn;
  int finished = 0;
  int quick = 0;

 private:
  uint64_t ids_ = 0;
};

class TrialLoopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           absl::StrCat(
               "trial_loop_test_", getpid(), "_",
               ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    store_ = *ResultStore::Open((dir_ / "db").string());
    device_.name = "fake";
    job_.job_id = "job1";
    job_.template_name = "naive";
    job_.template_hash = naive().hash;
    job_.problem.seq_q = job_.problem.seq_k = 128;
    job_.max_trials = 10;
    job_.max_seconds = 3600;
    job_.strategy = "exhaustive";
    job_.device = device_;
    ASSERT_TRUE(store_->CreateJob(job_).ok());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static const KernelTemplate& naive() {
    return *TemplateRegistry::Builtin().Find("naive");
  }
  // Runs the job's loop, an exhaustive search of naive, with `hooks`.
  absl::Status RunWith(TrialLoop::Hooks hooks, bool& cancelled) {
    std::unique_ptr<SearchStrategy> strategy = *MakeStrategy(
        job_.strategy,
        SearchInputs{
            naive().space, FeasibleConfigs(naive(), job_.problem, {}), {}},
        1);
    TrialLoop loop(store_.get(), &runner_, std::move(hooks), job_, naive(),
                   device_, std::move(strategy));
    return loop.Run(cancelled);
  }
  // Runs the job's loop; stop_after: should_stop says yes once that many
  // trials are recorded.
  absl::Status RunLoop(bool& cancelled, int stop_after = 1 << 30) {
    TrialLoop::Hooks hooks;
    hooks.should_stop = [&](bool* c) {
      *c = notified_ >= stop_after;
      return *c;
    };
    hooks.notify = [&] { ++notified_; };
    return RunWith(std::move(hooks), cancelled);
  }
  int64_t Events() {
    return static_cast<int64_t>(store_->ListJobEvents("job1", 0, 1000)->size());
  }

  std::filesystem::path dir_;
  std::unique_ptr<ResultStore> store_;
  DeviceInfo device_;
  JobRecord job_;
  FakeRunner runner_;
  int notified_ = 0;
};

TEST_F(TrialLoopTest, RunsTheBudgetAndRecordsEveryTrial) {
  bool cancelled = false;
  ASSERT_TRUE(RunLoop(cancelled).ok());
  EXPECT_FALSE(cancelled);
  EXPECT_EQ(Events(), 10);
  EXPECT_EQ(notified_, 10);
  // Every trial was timed quickly; those that could enter the elite of five
  // again, fully, before they counted.
  EXPECT_EQ(runner_.quick, 10);
  EXPECT_GE(runner_.finished - runner_.quick, 5);
  EXPECT_LT(runner_.finished, 20);
}

TEST_F(TrialLoopTest, StoredResultsJoinTheJobWithoutRunning) {
  bool cancelled = false;
  ASSERT_TRUE(RunLoop(cancelled).ok());
  const int ran = runner_.finished;
  // A second job of the same scope finds every config in the store.
  job_.job_id = "job2";
  ASSERT_TRUE(store_->CreateJob(job_).ok());
  ASSERT_TRUE(RunLoop(cancelled).ok());
  EXPECT_EQ(runner_.finished, ran);
  const std::vector<JobEvent> events = *store_->ListJobEvents("job2", 0, 100);
  ASSERT_EQ(events.size(), 10u);
  for (const JobEvent& e : events) EXPECT_TRUE(e.cached);
}

TEST_F(TrialLoopTest, AResumedJobGoesOnFromItsStoredTrials) {
  bool cancelled = false;
  job_.max_trials = 4;
  ASSERT_TRUE(RunLoop(cancelled).ok());
  ASSERT_EQ(Events(), 4);
  const int ran = runner_.finished;
  job_.max_trials = 10;  // As if the daemon restarted with a larger budget.
  ASSERT_TRUE(RunLoop(cancelled).ok());
  EXPECT_EQ(Events(), 10);
  // The exhaustive strategy knew the first four: none ran again.
  EXPECT_GE(runner_.finished - ran, 6);
  std::set<std::string> configs;
  const std::vector<JobEvent> events = *store_->ListJobEvents("job1", 0, 100);
  for (const JobEvent& e : events) {
    configs.insert(ConfigKey(e.trial.config));
  }
  EXPECT_EQ(configs.size(), 10u);
}

TEST_F(TrialLoopTest, AStopWithdrawsWhatIsInFlight) {
  runner_.finish_at_once = false;
  bool cancelled = false;
  // Nothing finishes; the loop launches Parallelism + kQueuedAhead trials,
  // then should_stop (asked every wait) ends it.
  int asked = 0;
  TrialLoop::Hooks hooks;
  hooks.should_stop = [&](bool* c) {
    *c = ++asked > 2;
    return *c;
  };
  hooks.notify = [] {};
  ASSERT_TRUE(RunWith(std::move(hooks), cancelled).ok());
  EXPECT_TRUE(cancelled);
  const size_t launched = 2 + TrialLoop::kQueuedAhead;
  ASSERT_EQ(runner_.started.size(), launched);
  EXPECT_EQ(runner_.withdrawn.size(), launched);
  EXPECT_EQ(Events(), 0);
  // A trial that was already running finishes after the loop ended: its
  // result is kept, though not as part of the job.
  runner_.started[0].done(runner_.answer(runner_.started[0].task));
  const TrialScope scope{device_, "naive", naive().hash, job_.problem};
  EXPECT_EQ(store_->ListTrials(scope)->size(), 1u);
  EXPECT_EQ(Events(), 0);
}

TEST_F(TrialLoopTest, ARunnerFailureFailsTheJob) {
  runner_.answer = [](const TrialTask&) -> absl::StatusOr<TrialResult> {
    return absl::UnavailableError("the runner shut down");
  };
  bool cancelled = false;
  absl::Status s = RunLoop(cancelled);
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_FALSE(cancelled);
  EXPECT_EQ(Events(), 0);
}

// The budget in seconds is read off the loop's clock: each trial here takes
// 10 s of it, so a 35 s budget ends the search after the trials in flight
// when it ran out, long before the trial budget.
TEST_F(TrialLoopTest, ATimeBudgetEndsTheSearch) {
  FakeClock clock;
  runner_.answer = [&clock, next = runner_.answer](const TrialTask& t) {
    clock.Advance(absl::Seconds(10));
    return next(t);
  };
  job_.max_trials = 100;
  job_.max_seconds = 35;
  TrialLoop::Hooks hooks;
  hooks.should_stop = [](bool* c) { return *c = false; };
  hooks.notify = [] {};
  hooks.clock = &clock;
  bool cancelled = false;
  ASSERT_TRUE(RunWith(std::move(hooks), cancelled).ok());
  EXPECT_LE(Events(), 2 + TrialLoop::kQueuedAhead);
  EXPECT_GE(Events(), 4);
  EXPECT_GE(store_->GetJob("job1")->elapsed_seconds, 35);
}

TEST_F(TrialLoopTest, BadCandidatesAreRecordedNotRetimed) {
  runner_.answer = [](const TrialTask&) -> absl::StatusOr<TrialResult> {
    TrialResult r;
    r.status = TrialStatus::kIncorrect;
    r.error = "wrong output";
    return r;
  };
  bool cancelled = false;
  ASSERT_TRUE(RunLoop(cancelled).ok());
  EXPECT_EQ(Events(), 10);
  EXPECT_EQ(runner_.finished, 10);  // None timed again.
}

}  // namespace
}  // namespace evotune
