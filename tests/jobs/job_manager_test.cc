#include "tuner/jobs/job_manager.h"

#include <unistd.h>

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "tests/jobs/fake_runner.h"
#include "tuner/evaluator/evaluator.h"

namespace evotune {
namespace {

class JobManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           absl::StrCat(
               "job_manager_test_", getpid(), "_",
               ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    store_ = *ResultStore::Open((dir_ / "db").string());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  JobRecord NaiveJob(int max_trials) {
    const KernelTemplate& t = *TemplateRegistry::Builtin().Find("naive");
    JobRecord job;
    job.job_id = absl::StrCat("job", ++jobs_);
    job.template_name = t.name;
    job.template_hash = t.hash;
    job.problem.seq_q = job.problem.seq_k = 128;
    job.max_trials = max_trials;
    job.max_seconds = 3600;
    job.strategy = "exhaustive";
    job.device.name = "fake";
    return job;
  }
  // Waits (on the manager's change signal) until `done` holds; false after
  // 10 s.
  bool WaitFor(JobManager& m, const std::function<bool()>& done) {
    for (int i = 0; i < 100 && !done(); ++i) {
      m.WaitForChange(m.version(), absl::Milliseconds(100));
    }
    return done();
  }
  JobState State(const std::string& id) { return store_->GetJob(id)->state; }
  std::vector<JobEvent> Events(const std::string& id) {
    return *store_->ListJobEvents(id, 0, 1000);
  }

  std::filesystem::path dir_;
  std::unique_ptr<ResultStore> store_;
  int jobs_ = 0;
};

TEST_F(JobManagerTest, ASubmittedJobRunsItsBudgetAndSucceeds) {
  FakeRunner runner(FakeRunner::FullyTimed);
  JobManager m(store_.get(), &TemplateRegistry::Builtin(), &runner);
  ASSERT_TRUE(m.Start().ok());
  const std::string id = m.Submit(NaiveJob(8))->job_id;
  ASSERT_TRUE(WaitFor(m, [&] { return IsFinal(State(id)); }));
  EXPECT_EQ(State(id), JobState::kSucceeded);
  EXPECT_EQ(Events(id).size(), 8u);
  EXPECT_EQ(store_->GetJob(id)->trials_done, 8);
}

// A job's confirmation times the problem's fastest of the other templates
// in the build beside its own, at their versions.
TEST_F(JobManagerTest, AJobsConfirmationTimesOtherTemplatesFastest) {
  const KernelTemplate& flash = *TemplateRegistry::Builtin().Find("flash_fwd");
  const Config fast = flash.defaults[0];
  FakeRunner runner([&](const TrialTask& t) -> absl::StatusOr<TrialResult> {
    if (t.template_name == "naive") return FakeRunner::FullyTimed(t);
    TrialResult r;
    r.median_us = r.min_us = r.p90_us = 5;
    r.samples = kFullTimingSamples;
    return r;
  });
  JobManager m(store_.get(), &TemplateRegistry::Builtin(), &runner);
  m.SetConfirmTurns(30);
  const JobRecord job = NaiveJob(8);
  const TrialScope scope{*runner.FindDevice(""), flash.name, flash.hash,
                         job.problem};
  TrialResult stored;
  stored.median_us = stored.min_us = stored.p90_us = 6;
  stored.samples = kFullTimingSamples;
  ASSERT_TRUE(store_->InsertTrial(scope, fast, stored).ok());
  ASSERT_TRUE(m.Start().ok());
  const std::string id = m.Submit(job)->job_id;
  ASSERT_TRUE(WaitFor(m, [&] { return IsFinal(State(id)); }));
  EXPECT_EQ(State(id), JobState::kSucceeded);
  ASSERT_EQ(runner.ConfirmedContenders().size(), 1u);
  const std::vector<Contender> confirmed = runner.ConfirmedContenders()[0];
  EXPECT_EQ(confirmed.front().template_name, "naive");
  const Contender other{flash.name, flash.hash, fast};
  EXPECT_EQ(confirmed.back(), other);
  const StoredTrial after = **store_->FindTrial(scope, fast);
  EXPECT_EQ(after.result.median_us, 5);
  EXPECT_EQ(after.result.timed_against, static_cast<int>(confirmed.size()) - 1);
}

// A job records its device's limits in the store, for a daemon that serves
// the device from the store alone.
TEST_F(JobManagerTest, AJobRecordsItsDevicesLimits) {
  FakeRunner runner(FakeRunner::FullyTimed);
  JobManager m(store_.get(), &TemplateRegistry::Builtin(), &runner);
  ASSERT_TRUE(m.Start().ok());
  const std::string id = m.Submit(NaiveJob(2))->job_id;
  ASSERT_TRUE(WaitFor(m, [&] { return IsFinal(State(id)); }));
  const DeviceInfo device = *runner.FindDevice("");
  absl::StatusOr<DeviceInfo> stored = store_->FindDevice(device.name);
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->limits.smem_per_block_bytes,
            device.limits.smem_per_block_bytes);
  EXPECT_EQ(stored->limits.max_threads_per_block,
            device.limits.max_threads_per_block);
}

// Searches get the device's cost model once it has one: predictions from
// the model trained on the store's trials, and nothing before.
TEST_F(JobManagerTest, SearchesGetTheDevicesCostModel) {
  FakeRunner runner(FakeRunner::FullyTimed);
  JobManager m(store_.get(), &TemplateRegistry::Builtin(), &runner);
  const JobRecord job = NaiveJob(1000);
  const KernelTemplate& t = *TemplateRegistry::Builtin().Find("naive");
  const std::vector<Config> configs =
      m.SearchableConfigs(t, job.problem, job.device);
  EXPECT_FALSE(m.Predictor(t, job.device, job.problem)) << "no models";
  CostModelsOptions options;
  options.min_trials = 4;
  options.model.booster.rounds = 20;
  CostModels models(store_.get(), &TemplateRegistry::Builtin(), options);
  m.UseCostModels(&models);
  EXPECT_FALSE(m.Predictor(t, job.device, job.problem)) << "no model yet";
  ASSERT_TRUE(m.Start().ok());
  const std::string id = m.Submit(job)->job_id;  // Every config, measured.
  ASSERT_TRUE(WaitFor(m, [&] { return IsFinal(State(id)); }));
  ASSERT_TRUE(models.Refresh().ok());
  LatencyPredictor predict = m.Predictor(t, job.device, job.problem);
  ASSERT_TRUE(predict);
  std::vector<CostSample> samples;
  for (const Config& c : configs) samples.push_back({&t, c, job.problem, 0});
  EXPECT_EQ(predict(configs),
            *models.Get(job.device)->model->ScreenUs(samples));
}

// A search does not try again what was rejected for resources at the same
// head_dim and dtype on another problem, unless every config was.
TEST_F(JobManagerTest, ConfigsKnownRejectedAtTheHeadDimAndDtypeAreSkipped) {
  FakeRunner runner(FakeRunner::FullyTimed);
  JobManager m(store_.get(), &TemplateRegistry::Builtin(), &runner);
  const JobRecord job = NaiveJob(1000);
  const KernelTemplate& t = *TemplateRegistry::Builtin().Find("naive");
  const DeviceInfo device = *runner.FindDevice(job.device.name);
  const std::vector<Config> configs =
      m.SearchableConfigs(t, job.problem, device);
  ASSERT_GE(configs.size(), 3u);
  TrialScope other{device, t.name, t.hash, job.problem};
  other.problem.seq_q = other.problem.seq_k = 256;
  TrialResult rejected;
  rejected.status = TrialStatus::kResourceRejected;
  for (size_t i = 0; i + 1 < configs.size(); ++i) {
    ASSERT_TRUE(store_->InsertTrial(other, configs[i], rejected).ok());
  }
  EXPECT_EQ(m.WithoutKnownRejected(t, job.problem, device, configs),
            std::vector<Config>{configs.back()});
  ASSERT_TRUE(m.Start().ok());
  const std::string id = m.Submit(job)->job_id;
  ASSERT_TRUE(WaitFor(m, [&] { return IsFinal(State(id)); }));
  EXPECT_EQ(store_->GetJob(id)->trials_done, 1);

  ASSERT_TRUE(store_->InsertTrial(other, configs.back(), rejected).ok());
  EXPECT_EQ(m.WithoutKnownRejected(t, job.problem, device, configs), configs);
}

TEST_F(JobManagerTest, CancelMidTrialWithdrawsItAndEndsTheJob) {
  FakeRunner runner(FakeRunner::FullyTimed);
  runner.HoldAfter(0);
  JobManager m(store_.get(), &TemplateRegistry::Builtin(), &runner);
  ASSERT_TRUE(m.Start().ok());
  const std::string id = m.Submit(NaiveJob(8))->job_id;
  ASSERT_TRUE(WaitFor(m, [&] { return runner.Held() > 0; }));
  absl::StatusOr<JobRecord> cancelled = m.Cancel(id);
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_EQ(cancelled->state, JobState::kCancelled);
  EXPECT_EQ(State(id), JobState::kCancelled);
  EXPECT_EQ(runner.Held(), 0u);
  EXPECT_GT(runner.Withdrawals(), 0u);
  EXPECT_TRUE(Events(id).empty());
  EXPECT_TRUE(absl::IsFailedPrecondition(m.Cancel(id).status()));
}

// evotuned serves before it starts its job manager: a job submitted in
// between runs once, not once more when Start queues the unfinished jobs.
TEST_F(JobManagerTest, AJobSubmittedBeforeStartRunsOnce) {
  FakeRunner runner(FakeRunner::FullyTimed);
  JobManager m(store_.get(), &TemplateRegistry::Builtin(), &runner);
  const std::string id = m.Submit(NaiveJob(4))->job_id;
  ASSERT_TRUE(m.Start().ok());
  ASSERT_TRUE(WaitFor(m, [&] { return IsFinal(State(id)); }));
  for (int i = 0; i < 5; ++i) {
    m.WaitForChange(m.version(), absl::Milliseconds(50));
  }
  EXPECT_EQ(Events(id).size(), 4u);
  EXPECT_EQ(runner.Ran().size(), 4u);
}

// A background job (tune on miss) waits while a user's job is queued or
// running, and runs once none is.
TEST_F(JobManagerTest, ABackgroundJobWaitsForUsersJobs) {
  FakeRunner runner(FakeRunner::FullyTimed);
  runner.HoldAfter(0);  // The user's job never gets an answer.
  JobManager m(store_.get(), &TemplateRegistry::Builtin(), &runner);
  ASSERT_TRUE(m.Start().ok());
  const std::string user = m.Submit(NaiveJob(4))->job_id;
  ASSERT_TRUE(WaitFor(m, [&] { return runner.Held() > 0; }));
  JobRecord background = NaiveJob(4);
  background.background = true;
  const std::string bg = m.Submit(background)->job_id;
  // Everything started belongs to the user's job; the background job waits.
  for (int i = 0; i < 5; ++i)
    m.WaitForChange(m.version(), absl::Milliseconds(50));
  EXPECT_EQ(State(user), JobState::kRunning);
  EXPECT_EQ(State(bg), JobState::kQueued);
  runner.HoldAfter(1 << 30);
  ASSERT_TRUE(m.Cancel(user).ok());
  ASSERT_TRUE(WaitFor(m, [&] { return IsFinal(State(bg)); }));
  EXPECT_EQ(State(bg), JobState::kSucceeded);
  EXPECT_EQ(Events(bg).size(), 4u);
}

// What the worker pool reports for a trial that took its workers down or
// passed its deadline is a result like any other: recorded, and the search
// goes on.
TEST_F(JobManagerTest, CrashedAndTimedOutTrialsAreRecordedAndTheJobGoesOn) {
  int n = 0;
  FakeRunner runner([&n](const TrialTask& t) -> absl::StatusOr<TrialResult> {
    TrialResult r;
    switch (n++) {
      case 0:
        r.status = TrialStatus::kCrashed;
        r.error = "brought down 2 workers";
        return r;
      case 1:
        r.status = TrialStatus::kTimeout;
        r.error = "no result within the deadline";
        return r;
      default:
        return FakeRunner::FullyTimed(t);
    }
  });
  JobManager m(store_.get(), &TemplateRegistry::Builtin(), &runner);
  ASSERT_TRUE(m.Start().ok());
  const std::string id = m.Submit(NaiveJob(6))->job_id;
  ASSERT_TRUE(WaitFor(m, [&] { return IsFinal(State(id)); }));
  EXPECT_EQ(State(id), JobState::kSucceeded);
  const std::vector<JobEvent> events = Events(id);
  ASSERT_EQ(events.size(), 6u);
  EXPECT_EQ(events[0].trial.result.status, TrialStatus::kCrashed);
  EXPECT_EQ(events[1].trial.result.status, TrialStatus::kTimeout);
  EXPECT_EQ(events[5].trial.result.status, TrialStatus::kOk);
}

// A daemon that stops mid-job leaves it queued; the next one resumes it
// from the store: nothing stored is measured again, nothing is lost.
TEST_F(JobManagerTest, AJobResumesAfterARestartWithoutRepeatingTrials) {
  std::string id;
  {
    // Three trials are answered, then the runner stops answering.
    FakeRunner runner(FakeRunner::FullyTimed);
    runner.HoldAfter(3);
    JobManager m(store_.get(), &TemplateRegistry::Builtin(), &runner);
    ASSERT_TRUE(m.Start().ok());
    id = m.Submit(NaiveJob(10))->job_id;
    ASSERT_TRUE(WaitFor(
        m, [&] { return Events(id).size() == 3 && runner.Held() > 0; }));
    m.Shutdown();
  }
  EXPECT_EQ(State(id), JobState::kQueued);
  const std::vector<JobEvent> before = Events(id);
  ASSERT_EQ(before.size(), 3u);
  FakeRunner runner(FakeRunner::FullyTimed);
  JobManager m(store_.get(), &TemplateRegistry::Builtin(), &runner);
  ASSERT_TRUE(m.Start().ok());
  ASSERT_TRUE(WaitFor(m, [&] { return IsFinal(State(id)); }));
  EXPECT_EQ(State(id), JobState::kSucceeded);
  const std::vector<JobEvent> after = Events(id);
  ASSERT_EQ(after.size(), 10u);
  std::set<std::string> stored;
  for (const JobEvent& e : before) stored.insert(ConfigKey(e.trial.config));
  for (const std::string& c : runner.Ran()) {
    EXPECT_EQ(stored.count(c), 0u) << c << " measured again";
  }
  std::set<std::string> all;
  for (const JobEvent& e : after) all.insert(ConfigKey(e.trial.config));
  EXPECT_EQ(all.size(), 10u);
}

}  // namespace
}  // namespace evotune
