// WorkerPool on its own: workers are the test, calling the pool as the gRPC
// adapter would, so leases, heartbeats, requeues and deadlines can be driven
// step by step.
#include "tuner/jobs/worker_pool.h"

#include <atomic>
#include <memory>
#include <optional>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tuner/common/clock.h"

namespace evotune {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

DeviceInfo Gpu(const std::string& name = "Test GPU") {
  DeviceInfo d;
  d.name = name;
  d.cc_major = 9;
  d.driver_version = "1";
  d.nvrtc_version = "1";
  return d;
}

WorkerInfo Info(const std::string& name, const DeviceInfo& device = Gpu()) {
  return WorkerInfo{name, device, {{"naive", "h1"}}};
}

TrialTask Task(int warps, const DeviceInfo& device = Gpu()) {
  TrialTask t;
  t.device = device;
  t.template_name = "naive";
  t.template_hash = "h1";
  t.config = {{"KV_TILE", 64}, {"WARPS", warps}};
  t.problem.heads = t.problem.kv_heads = 8;
  t.problem.seq_q = t.problem.seq_k = 512;
  return t;
}

// Collects what a task's callback receives.
struct Outcome {
  absl::Notification done;
  absl::StatusOr<TrialResult> result;
  TrialDone Callback() {
    return [this](absl::StatusOr<TrialResult> r) {
      result = std::move(r);
      done.Notify();
    };
  }
  bool Wait() { return done.WaitForNotificationWithTimeout(absl::Seconds(5)); }
};

TrialResult Ok(double us) {
  TrialResult r;
  r.median_us = r.min_us = r.p90_us = us;
  r.samples = 15;
  return r;
}

WorkerPool::Options Fast() {
  WorkerPool::Options o;
  o.heartbeat = absl::Milliseconds(20);
  o.lease_timeout = absl::Milliseconds(200);
  o.deadline_slack = absl::Milliseconds(300);
  o.first_trial_estimate = absl::ZeroDuration();
  o.startup_wait = absl::ZeroDuration();
  return o;
}

LeasedTask MustLease(WorkerPool& pool, const std::string& worker) {
  absl::StatusOr<std::optional<LeasedTask>> l =
      pool.Lease(worker, absl::Seconds(2), nullptr);
  EXPECT_TRUE(l.ok()) << l.status();
  EXPECT_TRUE(l->has_value());
  return l->value_or(LeasedTask{});
}

TEST(WorkerPoolTest, LeasesRunAndReportResults) {
  WorkerPool pool(Fast());
  const std::string w = *pool.Register(Info("w0"));
  Outcome a, b;
  pool.Start(Task(4), a.Callback());
  pool.Start(Task(8), b.Callback());
  std::vector<LeasedTask> upcoming;
  absl::StatusOr<std::optional<LeasedTask>> first =
      pool.Lease(w, absl::Seconds(1), &upcoming);
  ASSERT_TRUE(first.ok() && first->has_value());
  EXPECT_EQ((*first)->task.config.at("WARPS"), 4);
  // The next one is offered for compiling ahead.
  ASSERT_EQ(upcoming.size(), 1u);
  EXPECT_EQ(upcoming[0].task.config.at("WARPS"), 8);
  EXPECT_FALSE(*pool.Heartbeat(w, (*first)->task_id));
  ASSERT_TRUE(pool.Complete(w, **first, Ok(7), false).ok());
  ASSERT_TRUE(a.Wait());
  ASSERT_TRUE(a.result.ok());
  EXPECT_EQ(a.result->median_us, 7);
  EXPECT_FALSE(b.done.HasBeenNotified());
  const LeasedTask second = MustLease(pool, w);
  ASSERT_TRUE(pool.Complete(w, second, Ok(9), false).ok());
  ASSERT_TRUE(b.Wait());
  EXPECT_EQ(b.result->median_us, 9);
}

// A job keeps as many trials queued for a device as its workers compile at
// once (4 for a worker that does not say), beside one running on each.
TEST(WorkerPoolTest, QueuedAheadIsWhatTheDevicesWorkersCompileAtOnce) {
  WorkerPool pool(Fast());
  EXPECT_EQ(pool.Parallelism(Gpu()), 1);
  EXPECT_EQ(pool.QueuedAhead(Gpu()), TrialRunner::kQueuedAhead);
  WorkerInfo fast = Info("fast");
  fast.compile_ahead = 12;
  ASSERT_TRUE(pool.Register(fast).ok());
  ASSERT_TRUE(pool.Register(Info("unsaid")).ok());
  WorkerInfo other{"other", Gpu("Other GPU"), {{"naive", "h1"}}};
  other.compile_ahead = 16;
  ASSERT_TRUE(pool.Register(other).ok());
  EXPECT_EQ(pool.Parallelism(Gpu()), 2);
  EXPECT_EQ(pool.QueuedAhead(Gpu()), 12 + TrialRunner::kQueuedAhead);
  EXPECT_EQ(pool.QueuedAhead(Gpu("Other GPU")), 16);
}

// Two workers compile different trials ahead, each leases those it
// compiled, and one takes the other's when nothing else is queued for it.
TEST(WorkerPoolTest, WorkersCompileDifferentTrialsAheadAndLeaseTheirOwn) {
  WorkerPool pool(Fast());
  const std::string a = *pool.Register(Info("a"));
  const std::string b = *pool.Register(Info("b"));
  std::vector<Outcome> outcomes(6);
  for (int i = 0; i < 6; ++i) pool.Start(Task(i + 1), outcomes[i].Callback());
  auto warps = [](const std::vector<LeasedTask>& tasks) {
    std::vector<int64_t> w;
    for (const LeasedTask& t : tasks) w.push_back(t.task.config.at("WARPS"));
    return w;
  };
  std::vector<LeasedTask> ahead_a, ahead_b;
  const LeasedTask first_a = **pool.Lease(a, absl::Seconds(1), &ahead_a);
  EXPECT_EQ(first_a.task.config.at("WARPS"), 1);
  EXPECT_THAT(warps(ahead_a), ElementsAre(2, 3, 4, 5, 6));
  // Nothing unclaimed is left for b: it takes a's first, compiles nothing.
  const LeasedTask first_b = **pool.Lease(b, absl::Seconds(1), &ahead_b);
  EXPECT_EQ(first_b.task.config.at("WARPS"), 2);
  EXPECT_TRUE(ahead_b.empty());
  // Two more trials: b is told to compile them and leases them before a's.
  Outcome late_1, late_2;
  pool.Start(Task(7), late_1.Callback());
  pool.Start(Task(8), late_2.Callback());
  ASSERT_TRUE(pool.Complete(b, first_b, Ok(1), false).ok());
  ahead_b.clear();
  const LeasedTask second_b = **pool.Lease(b, absl::Seconds(1), &ahead_b);
  EXPECT_EQ(second_b.task.config.at("WARPS"), 7);
  EXPECT_THAT(warps(ahead_b), ElementsAre(8));
  ASSERT_TRUE(pool.Complete(b, second_b, Ok(1), false).ok());
  EXPECT_EQ(MustLease(pool, b).task.config.at("WARPS"), 8);
  // a leases what it was told to compile, in order.
  ASSERT_TRUE(pool.Complete(a, first_a, Ok(1), false).ok());
  EXPECT_EQ(MustLease(pool, a).task.config.at("WARPS"), 3);
  pool.Close();
}

TEST(WorkerPoolTest, OnlyMatchingWorkersGetATask) {
  // The trial stays leased until the pool closes, which fails it: its
  // outcome must outlive the pool.
  Outcome o;
  WorkerPool pool(Fast());
  const std::string other =
      *pool.Register(WorkerInfo{"other", Gpu("Other GPU"), {{"naive", "h1"}}});
  const std::string old_hash =
      *pool.Register(WorkerInfo{"old", Gpu(), {{"naive", "h0"}}});
  pool.Start(Task(4), o.Callback());
  for (const std::string& w : {other, old_hash}) {
    absl::StatusOr<std::optional<LeasedTask>> l =
        pool.Lease(w, absl::Milliseconds(50), nullptr);
    ASSERT_TRUE(l.ok());
    EXPECT_FALSE(l->has_value());
  }
  EXPECT_THAT(pool.CanEvaluate(Gpu(), KernelTemplate{}).message(),
              HasSubstr("no worker on Test GPU"));
  const std::string right = *pool.Register(Info("right"));
  EXPECT_EQ(MustLease(pool, right).task.config.at("WARPS"), 4);
  EXPECT_EQ(pool.Parallelism(Gpu()), 2);  // "old" and "right".
}

// A task timing rivals of another template goes only to a worker that has
// every template of it.
TEST(WorkerPoolTest, ATaskWithRivalsOfAnotherTemplateNeedsThemAll) {
  Outcome o;
  WorkerPool pool(Fast());
  const std::string naive_only = *pool.Register(Info("naive only"));
  TrialTask confirm = Task(4);
  confirm.rivals = {{"naive", "h1", Task(2).config},
                    {"flash_fwd", "f1", {{"BLOCK_M", 64}}}};
  confirm.turns = 10;
  EXPECT_FALSE(pool.CanRun(confirm));
  EXPECT_TRUE(pool.CanRun(Task(4)));
  pool.Start(confirm, o.Callback());
  absl::StatusOr<std::optional<LeasedTask>> l =
      pool.Lease(naive_only, absl::Milliseconds(50), nullptr);
  ASSERT_TRUE(l.ok());
  EXPECT_FALSE(l->has_value());
  const std::string both = *pool.Register(
      WorkerInfo{"both", Gpu(), {{"naive", "h1"}, {"flash_fwd", "f1"}}});
  EXPECT_TRUE(pool.CanRun(confirm));
  EXPECT_EQ(MustLease(pool, both).task.rivals, confirm.rivals);
}

TEST(WorkerPoolTest, ASilentWorkerLosesItsTrialToAnother) {
  FakeClock clock;
  WorkerPool::Options options = Fast();
  options.clock = &clock;
  WorkerPool pool(options);
  const std::string dies = *pool.Register(Info("dies"));
  Outcome o;
  pool.Start(Task(4), o.Callback());
  const LeasedTask leased = MustLease(pool, dies);
  // No heartbeat: after the lease timeout the trial goes back to the queue.
  clock.Advance(options.lease_timeout + absl::Milliseconds(1));
  const std::string lives = *pool.Register(Info("lives"));
  const LeasedTask again = MustLease(pool, lives);
  EXPECT_EQ(again.task.config, leased.task.config);
  EXPECT_EQ(pool.Heartbeat(dies, leased.task_id).status().code(),
            absl::StatusCode::kNotFound);  // Dropped: it must register again.
  ASSERT_TRUE(pool.Complete(lives, again, Ok(5), false).ok());
  ASSERT_TRUE(o.Wait());
  ASSERT_TRUE(o.result.ok());
  EXPECT_EQ(o.result->status, TrialStatus::kOk);
}

TEST(WorkerPoolTest, ATrialThatBringsDownTwoWorkersIsRecordedAsCrashed) {
  WorkerPool pool(Fast());
  Outcome o;
  pool.Start(Task(4), o.Callback());
  // First worker: its process exits while it holds the trial.
  const std::string w1 = *pool.Register(Info("local-0#1"));
  MustLease(pool, w1);
  pool.WorkerExited("local-0#1", "killed by signal 9");
  EXPECT_FALSE(o.done.HasBeenNotified());  // Requeued, not yet recorded.
  // Second worker: reports its context lost.
  const std::string w2 = *pool.Register(Info("local-0#2"));
  const LeasedTask leased = MustLease(pool, w2);
  TrialResult lost;
  lost.status = TrialStatus::kCrashed;
  lost.error = "an illegal memory access was encountered";
  ASSERT_TRUE(pool.Complete(w2, leased, lost, /*worker_lost=*/true).ok());
  ASSERT_TRUE(o.Wait());
  ASSERT_TRUE(o.result.ok());
  EXPECT_EQ(o.result->status, TrialStatus::kCrashed);
  EXPECT_THAT(o.result->error, HasSubstr("brought down 2 workers"));
  EXPECT_THAT(o.result->error, HasSubstr("illegal memory access"));
  EXPECT_EQ(pool.workers(), 0);  // Both dropped.
}

TEST(WorkerPoolTest, ATrialPastItsDeadlineTimesOutAndItsWorkerIsKilled) {
  FakeClock clock;
  WorkerPool::Options options = Fast();
  options.clock = &clock;
  WorkerPool pool(options);
  std::vector<std::string> killed;
  absl::Mutex mu;
  pool.SetKiller([&](const std::string& name) {
    absl::MutexLock lock(&mu);
    killed.push_back(name);
  });
  const std::string w = *pool.Register(Info("hangs"));
  Outcome o;
  pool.Start(Task(4), o.Callback());
  const LeasedTask leased = MustLease(pool, w);
  EXPECT_EQ(leased.deadline, absl::Milliseconds(300));  // No history: slack.
  // Heartbeats keep coming (the worker is alive, its kernel is not) while
  // the clock passes the deadline.
  bool aborted = false;
  for (int i = 0; i < 8 && !aborted; ++i) {
    clock.Advance(absl::Milliseconds(50));
    aborted = *pool.Heartbeat(w, leased.task_id);
  }
  // The reaper, ticking in real time, finds it past its deadline.
  for (int i = 0; i < 500 && !aborted; ++i) {
    aborted = *pool.Heartbeat(w, leased.task_id);
    if (!aborted) absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(aborted);
  ASSERT_TRUE(o.Wait());
  EXPECT_EQ(o.result->status, TrialStatus::kTimeout);
  EXPECT_THAT(o.result->error, HasSubstr("deadline"));
  {
    absl::MutexLock lock(&mu);
    EXPECT_EQ(killed, std::vector<std::string>{"hangs"});
  }
  // It may not lease again, and a late result changes nothing.
  EXPECT_EQ(pool.Lease(w, absl::Milliseconds(10), nullptr).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(pool.Complete(w, leased, Ok(1), false).ok());
  EXPECT_EQ(o.result->status, TrialStatus::kTimeout);
}

// A pool on a fake clock (deadline_factor 4) whose worker "w" finished one
// trial in 50 ms.
class WorkerPoolDeadlineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.deadline_factor = 4;
    options_.clock = &clock_;
    pool_ = std::make_unique<WorkerPool>(options_);
    w_ = *pool_->Register(Info("w"));
    pool_->Start(Task(4), first_.Callback());
    const LeasedTask first = MustLease(*pool_, w_);
    clock_.Advance(absl::Milliseconds(50));
    ASSERT_TRUE(pool_->Complete(w_, first, Ok(1), false).ok());
  }

  FakeClock clock_;
  WorkerPool::Options options_ = Fast();
  std::unique_ptr<WorkerPool> pool_;
  std::string w_;
  Outcome first_;
};

TEST_F(WorkerPoolDeadlineTest, DeadlinesFollowTheSlowestRecentTrial) {
  Outcome b;
  pool_->Start(Task(8), b.Callback());
  const LeasedTask second = MustLease(*pool_, w_);
  EXPECT_EQ(second.deadline,
            4 * absl::Milliseconds(50) + options_.deadline_slack);
  ASSERT_TRUE(pool_->Complete(w_, second, Ok(1), false).ok());
}

// A task timing rivals in turns holds several trials' work: its deadline
// grows with it, and its duration counts per trial for the next deadlines.
TEST_F(WorkerPoolDeadlineTest, ATaskWithRivalsGetsADeadlineForItsWork) {
  Outcome b, c;
  TrialTask confirm = Task(8);
  confirm.rivals = {
      {confirm.template_name, confirm.template_hash, Task(2).config},
      {confirm.template_name, confirm.template_hash, Task(1).config}};
  confirm.turns = 2 * kFullTimingSamples;  // Twice a full timing each.
  pool_->Start(confirm, b.Callback());
  const LeasedTask together = MustLease(*pool_, w_);
  EXPECT_EQ(together.task.rivals, confirm.rivals);
  EXPECT_EQ(together.deadline,
            4 * 6 * absl::Milliseconds(50) + options_.deadline_slack);
  // Results for some of its rivals but not all are refused.
  TrialResult partial = Ok(1);
  partial.rival_results = {Ok(2)};
  absl::Status refused = pool_->Complete(w_, together, partial, false);
  EXPECT_TRUE(absl::IsInvalidArgument(refused)) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("rivals"));
  EXPECT_FALSE(b.done.HasBeenNotified());
  clock_.Advance(absl::Milliseconds(6 * 40));
  TrialResult all = Ok(1);
  all.rival_results = {Ok(2), Ok(3)};
  ASSERT_TRUE(pool_->Complete(w_, together, all, false).ok());
  ASSERT_TRUE(b.Wait());
  ASSERT_EQ(b.result->rival_results.size(), 2u);
  EXPECT_EQ(b.result->rival_results[1].median_us, 3);
  // 240 ms for six trials' work: 40 ms a trial, under the 50 ms before.
  pool_->Start(Task(16), c.Callback());
  const LeasedTask next = MustLease(*pool_, w_);
  EXPECT_EQ(next.deadline,
            4 * absl::Milliseconds(50) + options_.deadline_slack);
  ASSERT_TRUE(pool_->Complete(w_, next, Ok(1), false).ok());
}

TEST(WorkerPoolTest, AResultLeasedByAnEarlierDaemonIsStoredAsAnOrphan) {
  WorkerPool pool(Fast());
  std::vector<TrialTask> orphans;
  pool.SetOrphanSink([&](const TrialTask& t, const TrialResult& r) {
    EXPECT_EQ(r.median_us, 3);
    orphans.push_back(t);
  });
  LeasedTask old{"0badcafe-t17", Task(16), absl::Seconds(1)};
  ASSERT_TRUE(pool.Complete("0badcafe-w3", old, Ok(3), false).ok());
  ASSERT_EQ(orphans.size(), 1u);
  EXPECT_EQ(orphans[0].config.at("WARPS"), 16);
  // A worker the daemon does not know registers again.
  EXPECT_EQ(
      pool.Lease("0badcafe-w3", absl::ZeroDuration(), nullptr).status().code(),
      absl::StatusCode::kNotFound);
}

// Every callback added hears of each worker that registers, with the
// device and limits it reports (the daemon records them; its supervisor
// resets a restarted worker's backoff).
TEST(WorkerPoolTest, EveryRegisterCallbackGetsTheWorkersDevice) {
  WorkerPool pool(Fast());
  std::vector<std::string> names;
  std::vector<int> multiprocessors;
  pool.AddOnRegister([&](const WorkerInfo& w) { names.push_back(w.name); });
  pool.AddOnRegister([&](const WorkerInfo& w) {
    multiprocessors.push_back(w.device.limits.multiprocessors);
  });
  DeviceInfo gpu = Gpu();
  gpu.limits.multiprocessors = 132;
  ASSERT_TRUE(pool.Register(Info("a", gpu)).ok());
  ASSERT_TRUE(pool.Register(Info("b")).ok());
  EXPECT_THAT(names, ElementsAre("a", "b"));
  EXPECT_THAT(multiprocessors, ElementsAre(132, 0));
}

TEST(WorkerPoolTest, WithdrawTakesBackOnlyQueuedTrials) {
  WorkerPool pool(Fast());
  const std::string w = *pool.Register(Info("w"));
  Outcome running, queued;
  const uint64_t r = pool.Start(Task(4), running.Callback());
  const uint64_t q = pool.Start(Task(8), queued.Callback());
  const LeasedTask leased = MustLease(pool, w);
  pool.Withdraw(q);
  ASSERT_TRUE(queued.Wait());
  EXPECT_EQ(queued.result.status().code(), absl::StatusCode::kCancelled);
  pool.Withdraw(r);  // Already leased: it finishes normally.
  EXPECT_FALSE(running.done.HasBeenNotified());
  ASSERT_TRUE(pool.Complete(w, leased, Ok(2), false).ok());
  ASSERT_TRUE(running.Wait());
  EXPECT_TRUE(running.result.ok());
}

TEST(WorkerPoolTest, FindDeviceNamesWhatIsConnected) {
  WorkerPool pool(Fast());
  pool.SetNoWorkerReason("no CUDA device: none in this test");
  EXPECT_EQ(pool.FindDevice("").status().message(),
            "no CUDA device: none in this test");
  (void)pool.Register(Info("w", Gpu("NVIDIA H100")));
  EXPECT_EQ(pool.FindDevice("")->name, "NVIDIA H100");
  EXPECT_EQ(pool.FindDevice("NVIDIA H100")->name, "NVIDIA H100");
  absl::Status other = pool.FindDevice("NVIDIA L4").status();
  EXPECT_EQ(other.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(other.message(), HasSubstr("device: no worker serves"));
}

TEST(WorkerPoolTest, FindDeviceWaitsForAStartingWorker) {
  WorkerPool::Options options = Fast();
  options.startup_wait = absl::Seconds(5);
  WorkerPool pool(options);
  std::thread late([&] {
    absl::SleepFor(absl::Milliseconds(100));
    (void)pool.Register(Info("late"));
  });
  EXPECT_TRUE(pool.FindDevice("").ok());
  late.join();
}

TEST(WorkerPoolTest, CloseFailsOutstandingTrialsAndWakesLeases) {
  auto pool = std::make_unique<WorkerPool>(Fast());
  const std::string w = *pool->Register(Info("w"));
  std::thread leaser([&] {
    absl::StatusOr<std::optional<LeasedTask>> l =
        pool->Lease(w, absl::Seconds(30), nullptr);
    EXPECT_TRUE(l.ok() && !l->has_value());
  });
  absl::SleepFor(absl::Milliseconds(50));
  const absl::Time start = absl::Now();
  pool->Close();
  leaser.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  Outcome late;
  pool->Start(Task(4), late.Callback());
  ASSERT_TRUE(late.Wait());
  EXPECT_EQ(late.result.status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace evotune
