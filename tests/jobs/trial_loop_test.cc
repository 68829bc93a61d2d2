#include "tuner/jobs/trial_loop.h"

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
#include "tests/jobs/fake_runner.h"
#include "tuner/common/clock.h"
#include "tuner/evaluator/evaluator.h"
#include "tuner/search/strategy_registry.h"

namespace evotune {
namespace {

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
    hooks.confirm_turns = confirm_turns_;
    hooks.rival_templates = rival_templates_;
    return RunWith(std::move(hooks), cancelled);
  }
  int64_t Events() {
    return static_cast<int64_t>(store_->ListJobEvents("job1", 0, 1000)->size());
  }

  std::filesystem::path dir_;
  std::unique_ptr<ResultStore> store_;
  DeviceInfo device_;
  JobRecord job_;
  FakeRunner runner_{FakeRunner::AsAsked, /*parallelism=*/2};
  int notified_ = 0;
  int confirm_turns_ = 0;
  std::vector<std::pair<std::string, std::string>> rival_templates_;
};

// The latency FakeRunner::AsAsked gives a config.
double Latency(const Config& c) {
  return static_cast<double>(c.at("KV_TILE") + c.at("WARPS"));
}

TEST_F(TrialLoopTest, RunsTheBudgetAndRecordsEveryTrial) {
  job_.max_trials = 20;
  bool cancelled = false;
  ASSERT_TRUE(RunLoop(cancelled).ok());
  EXPECT_FALSE(cancelled);
  EXPECT_EQ(Events(), 20);
  EXPECT_EQ(notified_, 20);
  // Every trial was timed quickly; those that could enter the elite of five
  // again, fully, before they counted.
  EXPECT_EQ(runner_.Quick(), 20);
  EXPECT_GE(runner_.Finished() - runner_.Quick(), 5);
  EXPECT_LT(runner_.Finished(), 40);
  EXPECT_TRUE(runner_.Confirmations().empty());  // Not asked for.
}

// Confirm: the search's five fastest fully timed configs, fastest first,
// timed again together; what that measured replaces their stored results,
// and the job's best follows it.
TEST_F(TrialLoopTest, TheFastestAreTimedAgainTogetherAndTheirTimesReplaced) {
  job_.max_trials = 20;
  confirm_turns_ = 30;
  // In turns, the search's fastest (the task's own config) measures 100 µs
  // slower than it did alone; its rivals as before.
  runner_.set_answer([](const TrialTask& t) -> absl::StatusOr<TrialResult> {
    absl::StatusOr<TrialResult> r = FakeRunner::AsAsked(t);
    if (!t.rivals.empty()) r->median_us += 100;
    return r;
  });
  bool cancelled = false;
  ASSERT_TRUE(RunLoop(cancelled).ok());
  EXPECT_EQ(Events(), 20);
  ASSERT_EQ(runner_.Confirmations().size(), 1u);
  const std::vector<Config> confirmed = runner_.Confirmations()[0];
  ASSERT_EQ(confirmed.size(), static_cast<size_t>(Elite::kSize));
  for (size_t i = 1; i < confirmed.size(); ++i) {
    EXPECT_LE(Latency(confirmed[i - 1]), Latency(confirmed[i]));
  }
  const TrialScope scope{device_, "naive", naive().hash, job_.problem};
  for (size_t i = 0; i < confirmed.size(); ++i) {
    const StoredTrial t = **store_->FindTrial(scope, confirmed[i]);
    EXPECT_EQ(t.result.median_us, Latency(confirmed[i]) + (i == 0 ? 100 : 0));
    EXPECT_EQ(t.result.samples, 30);
    EXPECT_EQ(t.result.timed_against, Elite::kSize - 1);
  }
  const std::vector<JobEvent> events = *store_->ListJobEvents("job1", 0, 100);
  for (const JobEvent& e : events) {
    if (e.trial.result.timed_against == 0) {
      EXPECT_LE(Latency(confirmed[0]), e.trial.result.median_us);
    }
  }
  EXPECT_EQ((*store_->JobBest("job1"))->config, confirmed[1]);
}

// Confirm times the problem's fastest of other templates beside the job's
// own (each stored under its template); a template whose fastest is far
// behind stays out.
TEST_F(TrialLoopTest, OtherTemplatesFastestAreTimedWithTheJobs) {
  job_.max_trials = 20;
  confirm_turns_ = 30;
  const TrialScope flash{device_, "flash_fwd", "f1", job_.problem};
  const TrialScope slow{device_, "decode_fwd", "d1", job_.problem};
  rival_templates_ = {{"decode_fwd", "d1"}, {"flash_fwd", "f1"}};
  // Stored as the fake would time them (KV_TILE + WARPS µs): flash's five
  // fastest at 11-15 µs, ahead of naive's fastest, and a sixth at 201;
  // decode's at 1001 µs.
  auto store = [&](const TrialScope& scope, const Config& c) {
    TrialTask t;
    t.config = c;
    ASSERT_TRUE(store_->InsertTrial(scope, c, *FakeRunner::FullyTimed(t)).ok());
  };
  for (int64_t warps = 1; warps <= 5; ++warps) {
    store(flash, {{"KV_TILE", 10}, {"WARPS", warps}});
  }
  store(flash, {{"KV_TILE", 200}, {"WARPS", 1}});
  store(slow, {{"KV_TILE", 1000}, {"WARPS", 1}});
  // In turns, flash's configs measure 100 µs slower.
  runner_.set_answer([](const TrialTask& t) -> absl::StatusOr<TrialResult> {
    absl::StatusOr<TrialResult> r = FakeRunner::AsAsked(t);
    if (t.template_name == "flash_fwd") r->median_us += 100;
    return r;
  });
  bool cancelled = false;
  ASSERT_TRUE(RunLoop(cancelled).ok());
  ASSERT_EQ(runner_.ConfirmedContenders().size(), 1u);
  const std::vector<Contender> confirmed = runner_.ConfirmedContenders()[0];
  ASSERT_EQ(confirmed.size(), static_cast<size_t>(2 * Elite::kSize));
  for (size_t i = 0; i < confirmed.size(); ++i) {
    const Contender& c = confirmed[i];
    EXPECT_EQ(c.template_name, i < Elite::kSize ? "naive" : "flash_fwd");
    const TrialScope scope{device_, c.template_name, c.template_hash,
                           job_.problem};
    const StoredTrial t = **store_->FindTrial(scope, c.config);
    EXPECT_EQ(t.result.timed_against, 2 * Elite::kSize - 1);
    EXPECT_EQ(t.result.median_us,
              Latency(c.config) + (i < Elite::kSize ? 0 : 100));
  }
  // Flash's five fastest, in order; its sixth is not timed.
  for (size_t i = 0; i < Elite::kSize; ++i) {
    EXPECT_EQ(confirmed[Elite::kSize + i].config.at("WARPS"),
              static_cast<int64_t>(i + 1));
  }
  EXPECT_EQ((**store_->FindTrial(flash, {{"KV_TILE", 200}, {"WARPS", 1}}))
                .result.timed_against,
            0);
  // The problem's fastest across templates is naive's now.
  auto top = store_->TopK(device_, job_.problem,
                          {{"naive", naive().hash}, {"flash_fwd", "f1"}}, 1);
  EXPECT_EQ((*top)[0].template_name, "naive");
}

// Without a worker that has every template, the job's own configs are
// confirmed alone rather than waiting for one.
TEST_F(TrialLoopTest, WithoutAWorkerForEveryTemplateTheJobsAloneAreTimed) {
  job_.max_trials = 20;
  confirm_turns_ = 30;
  runner_.set_mixes_templates(false);
  const TrialScope flash{device_, "flash_fwd", "f1", job_.problem};
  rival_templates_ = {{"flash_fwd", "f1"}};
  TrialTask t;
  t.config = {{"KV_TILE", 10}, {"WARPS", 1}};
  ASSERT_TRUE(
      store_->InsertTrial(flash, t.config, *FakeRunner::FullyTimed(t)).ok());
  bool cancelled = false;
  ASSERT_TRUE(RunLoop(cancelled).ok());
  ASSERT_EQ(runner_.ConfirmedContenders().size(), 1u);
  const std::vector<Contender> confirmed = runner_.ConfirmedContenders()[0];
  ASSERT_EQ(confirmed.size(), static_cast<size_t>(Elite::kSize));
  for (const Contender& c : confirmed) EXPECT_EQ(c.template_name, "naive");
  EXPECT_EQ((**store_->FindTrial(flash, t.config)).result.timed_against, 0);
}

TEST_F(TrialLoopTest, AConfigWrongInTurnsIsRecordedWrong) {
  job_.max_trials = 20;
  confirm_turns_ = 30;
  runner_.set_answer([](const TrialTask& t) -> absl::StatusOr<TrialResult> {
    absl::StatusOr<TrialResult> r = FakeRunner::AsAsked(t);
    if (t.rivals.empty()) return r;
    for (const Contender& c : t.rivals) {
      TrialTask alone = t;
      alone.config = c.config;
      r->rival_results.push_back(*FakeRunner::AsAsked(alone));
    }
    r->rival_results[0].status = TrialStatus::kIncorrect;
    r->rival_results[0].error = "max abs error 0.5 on new inputs";
    return r;
  });
  bool cancelled = false;
  ASSERT_TRUE(RunLoop(cancelled).ok());
  ASSERT_EQ(runner_.Confirmations().size(), 1u);
  const Config wrong = runner_.Confirmations()[0][1];
  const StoredTrial t = **store_->FindTrial(
      {device_, "naive", naive().hash, job_.problem}, wrong);
  EXPECT_EQ(t.result.status, TrialStatus::kIncorrect);
  EXPECT_EQ(t.result.error, "max abs error 0.5 on new inputs");
  EXPECT_EQ((*store_->JobBest("job1"))->config, runner_.Confirmations()[0][0]);
}

TEST_F(TrialLoopTest, AConfirmationThatFailsLeavesTheSearchsTimes) {
  job_.max_trials = 20;
  confirm_turns_ = 30;
  runner_.set_answer([](const TrialTask& t) -> absl::StatusOr<TrialResult> {
    if (t.rivals.empty()) return FakeRunner::AsAsked(t);
    TrialResult r;  // As a task that brought its workers down is recorded.
    r.status = TrialStatus::kCrashed;
    r.error = "brought down 2 workers";
    return r;
  });
  bool cancelled = false;
  ASSERT_TRUE(RunLoop(cancelled).ok());
  EXPECT_EQ(runner_.Confirmations().size(), 1u);
  const std::vector<JobEvent> events = *store_->ListJobEvents("job1", 0, 100);
  for (const JobEvent& e : events) {
    EXPECT_EQ(e.trial.result.timed_against, 0);
    EXPECT_EQ(e.trial.result.median_us, Latency(e.trial.config))
        << ConfigKey(e.trial.config);
  }
  EXPECT_EQ((*store_->JobBest("job1"))->config, runner_.Confirmations()[0][0]);
}

TEST_F(TrialLoopTest, StoredResultsJoinTheJobWithoutRunning) {
  bool cancelled = false;
  ASSERT_TRUE(RunLoop(cancelled).ok());
  const int ran = runner_.Finished();
  // A second job of the same scope finds every config in the store.
  job_.job_id = "job2";
  ASSERT_TRUE(store_->CreateJob(job_).ok());
  ASSERT_TRUE(RunLoop(cancelled).ok());
  EXPECT_EQ(runner_.Finished(), ran);
  const std::vector<JobEvent> events = *store_->ListJobEvents("job2", 0, 100);
  ASSERT_EQ(events.size(), 10u);
  for (const JobEvent& e : events) EXPECT_TRUE(e.cached);
}

TEST_F(TrialLoopTest, AResumedJobGoesOnFromItsStoredTrials) {
  bool cancelled = false;
  job_.max_trials = 4;
  ASSERT_TRUE(RunLoop(cancelled).ok());
  ASSERT_EQ(Events(), 4);
  const int ran = runner_.Finished();
  job_.max_trials = 10;  // As if the daemon restarted with a larger budget.
  ASSERT_TRUE(RunLoop(cancelled).ok());
  EXPECT_EQ(Events(), 10);
  // The exhaustive strategy knew the first four: none ran again.
  EXPECT_GE(runner_.Finished() - ran, 6);
  std::set<std::string> configs;
  const std::vector<JobEvent> events = *store_->ListJobEvents("job1", 0, 100);
  for (const JobEvent& e : events) {
    configs.insert(ConfigKey(e.trial.config));
  }
  EXPECT_EQ(configs.size(), 10u);
}

TEST_F(TrialLoopTest, AStopWithdrawsWhatIsInFlight) {
  runner_.HoldAfter(0);
  bool cancelled = false;
  // Nothing finishes; the loop launches Parallelism x (1 + kQueuedAhead)
  // trials,
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
  const size_t launched = 2 * (1 + TrialRunner::kQueuedAhead);
  ASSERT_EQ(runner_.Held(), 0u);  // Each withdrawn before it ran.
  EXPECT_EQ(runner_.Withdrawals(), launched);
  EXPECT_EQ(Events(), 0);
  const TrialScope scope{device_, "naive", naive().hash, job_.problem};
  EXPECT_EQ(store_->ListTrials(scope)->size(), 0u);
}

TEST_F(TrialLoopTest, ATrialRunningAtAStopIsKeptButNotPartOfTheJob) {
  runner_.HoldAfter(0);
  bool cancelled = false;
  int asked = 0;
  TrialLoop::Hooks hooks;
  hooks.should_stop = [&](bool* c) {
    runner_.MarkHeldRunning();  // Everything launched is on the GPU now.
    *c = ++asked > 2;
    return *c;
  };
  hooks.notify = [] {};
  ASSERT_TRUE(RunWith(std::move(hooks), cancelled).ok());
  const size_t launched = 2 * (1 + TrialRunner::kQueuedAhead);
  ASSERT_EQ(runner_.Held(), launched);  // Withdraw left them running.
  // One finishes after the loop ended: its result is kept, though not as
  // part of the job.
  ASSERT_TRUE(runner_.FinishOldest());
  const TrialScope scope{device_, "naive", naive().hash, job_.problem};
  EXPECT_EQ(store_->ListTrials(scope)->size(), 1u);
  EXPECT_EQ(Events(), 0);
}

TEST_F(TrialLoopTest, ARunnerFailureFailsTheJob) {
  runner_.set_answer([](const TrialTask&) -> absl::StatusOr<TrialResult> {
    return absl::UnavailableError("the runner shut down");
  });
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
  runner_.set_answer([&clock](const TrialTask& t) {
    clock.Advance(absl::Seconds(10));
    return FakeRunner::AsAsked(t);
  });
  job_.max_trials = 100;
  job_.max_seconds = 35;
  TrialLoop::Hooks hooks;
  hooks.should_stop = [](bool* c) { return *c = false; };
  hooks.notify = [] {};
  hooks.clock = &clock;
  bool cancelled = false;
  ASSERT_TRUE(RunWith(std::move(hooks), cancelled).ok());
  EXPECT_LE(Events(), 2 * (1 + TrialRunner::kQueuedAhead));
  EXPECT_GE(Events(), 4);
  EXPECT_GE(store_->GetJob("job1")->elapsed_seconds, 35);
}

TEST_F(TrialLoopTest, BadCandidatesAreRecordedNotRetimed) {
  confirm_turns_ = 30;
  runner_.set_answer([](const TrialTask&) -> absl::StatusOr<TrialResult> {
    TrialResult r;
    r.status = TrialStatus::kIncorrect;
    r.error = "wrong output";
    return r;
  });
  bool cancelled = false;
  ASSERT_TRUE(RunLoop(cancelled).ok());
  EXPECT_EQ(Events(), 10);
  EXPECT_EQ(runner_.Finished(), 10);             // None timed again...
  EXPECT_TRUE(runner_.Confirmations().empty());  // ...nor together.
}

}  // namespace
}  // namespace evotune
