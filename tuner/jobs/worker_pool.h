// WorkerPool: hands trials to GPU worker processes with leases, heartbeats and
// deadlines (the daemon side of proto/evotune/v1/worker.proto).
//
// Workers register with their device and templates, then lease one trial at a
// time. A worker that sends no heartbeat for lease_timeout (it died, or its
// host did) is dropped and its trial goes back to the front of the queue; so
// does the trial of a worker that reports its context lost or whose process
// exits. A trial that has brought down `crashes_to_record` workers is recorded
// as crashed and never handed out again. A trial still running past its
// deadline (deadline_factor x the slowest recent trial on its device, times
// the task's work when it times rivals in turns, plus deadline_slack) is
// recorded as timeout and its worker is killed: through the killer for local
// workers, and by the abort answer to its next heartbeat for every worker.
// Thread-safe.
#ifndef EVOTUNE_TUNER_JOBS_WORKER_POOL_H_
#define EVOTUNE_TUNER_JOBS_WORKER_POOL_H_

#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "tuner/common/clock.h"
#include "tuner/jobs/trial_runner.h"

namespace evotune {

struct WorkerInfo {
  std::string name;  // Unique among live workers; a new one replaces the old.
  DeviceInfo device;
  // (name, source hash) of each template the worker can compile.
  std::vector<std::pair<std::string, std::string>> templates;
  // Upcoming trials it compiles at once; 0: TrialRunner's default.
  int compile_ahead = 0;
};

// A trial as handed to a worker.
struct LeasedTask {
  std::string task_id;
  TrialTask task;
  absl::Duration deadline;  // From the lease.
};

class WorkerPool : public TrialRunner {
 public:
  struct Options {
    absl::Duration heartbeat = absl::Seconds(1);
    absl::Duration lease_timeout = absl::Seconds(5);
    double deadline_factor = 4;
    absl::Duration deadline_slack = absl::Seconds(20);
    // Assumed duration of a trial before any finished on its device and
    // template (it covers a cold compile).
    absl::Duration first_trial_estimate = absl::Seconds(30);
    int crashes_to_record = 2;
    // For this long after construction, FindDevice waits for a first worker
    // (local workers take a moment to start).
    absl::Duration startup_wait = absl::Seconds(20);
    // Heartbeat ages, trial deadlines and durations; tests pass a FakeClock.
    Clock* clock = Clock::Real();
  };

  explicit WorkerPool(Options options);
  ~WorkerPool() override;

  // Fails every outstanding task with UNAVAILABLE and answers waiting Lease
  // calls; later tasks fail at once. Idempotent.
  void Close();

  // TrialRunner.
  absl::StatusOr<DeviceInfo> FindDevice(const std::string& name) override;
  absl::Status CanEvaluate(const DeviceInfo& device,
                           const KernelTemplate& t) const override;
  bool CanRun(const TrialTask& task) const override;
  int Parallelism(const DeviceInfo& device) const override;
  // The sum of its workers' compile_ahead (the default for those that give
  // none).
  int QueuedAhead(const DeviceInfo& device) const override;

  // Most trials a worker is told to compile ahead (its lease's upcoming).
  static constexpr int kMaxCompileAhead = 16;
  uint64_t Start(TrialTask task, TrialDone done) override;
  void Withdraw(uint64_t id) override;

  // Worker side. Every call but Register answers NOT_FOUND for a worker id it
  // does not know (the daemon restarted, or dropped the worker): the worker
  // registers again.
  absl::StatusOr<std::string> Register(WorkerInfo info);
  // Waits up to `wait` for a trial this worker can run; nullopt when none
  // came. `upcoming` gets queued trials for it to compile ahead, none that
  // another worker was given; this worker leases those first, and another
  // takes them only when nothing else is queued for it.
  absl::StatusOr<std::optional<LeasedTask>> Lease(
      const std::string& worker_id, absl::Duration wait,
      std::vector<LeasedTask>* upcoming);
  // Keeps the worker's lease alive; true when the worker must abort (its
  // trial passed the deadline).
  absl::StatusOr<bool> Heartbeat(const std::string& worker_id,
                                 const std::string& task_id);
  // The result of a leased trial; the first result of a trial wins. With
  // `worker_lost` the result counts as one crash and the worker is dropped. A
  // result for a trial leased by an earlier daemon goes to the orphan sink.
  // INVALID_ARGUMENT naming "rivals" when it has results for some of the
  // task's rivals but not all.
  absl::Status Complete(const std::string& worker_id, const LeasedTask& leased,
                        TrialResult result, bool worker_lost);

  // Supervisor side: the local worker process `name` exited.
  void WorkerExited(const std::string& name, const std::string& reason);
  // Called (outside any lock) with the name of a worker to kill.
  void SetKiller(std::function<void(const std::string&)> killer);
  // Called with results of trials leased before this daemon started.
  void SetOrphanSink(
      std::function<void(const TrialTask&, const TrialResult&)> sink);
  // Adds a callback called (outside any lock) with each worker that
  // registers: its name, device and the limits it reports.
  void AddOnRegister(std::function<void(const WorkerInfo&)> on_register);
  // Why no worker will come (e.g. "no CUDA device: ..."): FindDevice stops
  // waiting and says so.
  void SetNoWorkerReason(std::string reason);

  const Options& options() const { return options_; }
  // Live workers.
  int workers() const;

 private:
  struct Worker {
    WorkerInfo info;
    absl::Time last_seen;
    int leasing = 0;  // Lease calls in progress: alive meanwhile.
    uint64_t task = 0;
    bool aborted = false;  // Its trial timed out: it must exit.
  };
  struct Task {
    TrialTask task;
    TrialDone done;
    std::string worker_id;  // Empty while queued.
    // The worker told to compile it ahead: it leases it first, and no other
    // worker is told to compile it too.
    std::string prefetched_by;
    absl::Time leased_at = absl::InfinitePast();
    absl::Duration deadline = absl::ZeroDuration();
    int crashes = 0;
  };
  using Finished =
      std::vector<std::pair<TrialDone, absl::StatusOr<TrialResult>>>;

  void Reap();
  bool Matches(const Worker& w, const TrialTask& t) const;
  // Whether `worker_id` may be told to compile `t` ahead: no live worker
  // other than it was.
  bool ClaimableBy(const Task& t, const std::string& worker_id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The queued trial `worker_id` leases next: the first it was told to
  // compile ahead, else the first no other worker was, else the first it can
  // run; queue_.end() when none.
  std::deque<uint64_t>::iterator Pick(const std::string& worker_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  LeasedTask ToLeased(uint64_t id, const Task& t) const;
  absl::Duration DeadlineFor(const TrialTask& t) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RecordDuration(const TrialTask& t, absl::Duration d)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the worker; its trial counts a crash. `worker_id` is taken by
  // value: callers pass keys of workers_, which this erases.
  void DropWorker(std::string worker_id, const std::string& reason,
                  Finished* finished) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CountCrash(uint64_t id, const std::string& reason, Finished* finished)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Finish(uint64_t id, absl::StatusOr<TrialResult> result,
              Finished* finished) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::optional<uint64_t> ParseTaskId(const std::string& task_id) const;

  const Options options_;
  const std::string instance_;  // Prefix of this daemon's task and worker ids.
  const absl::Time created_;
  mutable absl::Mutex mu_;
  std::map<std::string, Worker> workers_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> worker_order_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, Task> tasks_ ABSL_GUARDED_BY(mu_);
  std::deque<uint64_t> queue_ ABSL_GUARDED_BY(mu_);
  // Recent trial durations by device.
  std::map<std::string, std::deque<absl::Duration>> durations_
      ABSL_GUARDED_BY(mu_);
  uint64_t next_task_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t next_worker_ ABSL_GUARDED_BY(mu_) = 1;
  std::string no_worker_reason_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void(const std::string&)> killer_ ABSL_GUARDED_BY(mu_);
  std::function<void(const TrialTask&, const TrialResult&)> orphan_sink_
      ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void(const WorkerInfo&)>> on_register_
      ABSL_GUARDED_BY(mu_);
  std::thread reaper_;
};

}  // namespace evotune

#endif  // EVOTUNE_TUNER_JOBS_WORKER_POOL_H_
