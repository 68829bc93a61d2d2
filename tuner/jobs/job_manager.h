// JobManager: runs search jobs, storing every trial as it finishes.
//
// Up to kMaxRunningJobs jobs run at once, each on its own thread; a job keeps
// as many trials in flight as its device has workers (plus a few queued ahead,
// so that workers can compile them early). Trials run through a TrialRunner:
// GPU worker processes in evotuned, an in-process evaluator in simulations and
// tests.
//
// A job's progress lives in the store only: after a crash or kill -9, Start()
// picks up every unfinished job, reports its stored trials to a fresh
// strategy and goes on, so no stored trial is lost or measured again.
// Thread-safe.
#ifndef EVOTUNE_TUNER_JOBS_JOB_MANAGER_H_
#define EVOTUNE_TUNER_JOBS_JOB_MANAGER_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kernel_templates/template_registry.h"
#include "storage/result_store.h"
#include "tuner/common/clock.h"
#include "tuner/jobs/cost_models.h"
#include "tuner/jobs/trial_runner.h"
#include "tuner/search/search_strategy.h"

namespace evotune {

class JobManager {
 public:
  // Jobs that run at once.
  static constexpr int kMaxRunningJobs = 4;

  // store, templates, runner and clock must outlive the manager; the clock
  // times jobs (their budget in seconds, creation times).
  JobManager(ResultStore* store, const TemplateRegistry* templates,
             TrialRunner* runner, Clock* clock = Clock::Real());
  ~JobManager();

  // Searches then get the device's cost model, when it has one, for the
  // strategies that screen with it. `models` must outlive the manager; call
  // before Start().
  void UseCostModels(CostModels* models) { models_ = models; }

  // Samples per config with which a job's fastest configs are timed again
  // together, in turns, once its search ends (TrialLoop's Confirm step); 0:
  // not at all. Call before Start().
  static constexpr int kDefaultConfirmTurns = 2 * kFullTimingSamples;
  void SetConfirmTurns(int turns) { confirm_turns_ = turns; }

  // Queues the unfinished jobs of the store (oldest first) and starts the
  // job threads.
  absl::Status Start();
  // Stops every job at once; trials in flight are abandoned (results that
  // still arrive are stored), a running job goes back to queued and resumes
  // at the next Start(). Idempotent.
  void Shutdown();

  // The configs a search of `t` on `problem` may try on `device`: feasible
  // there and answerable by the runner (a replay answers only what it
  // recorded).
  std::vector<Config> SearchableConfigs(const KernelTemplate& t,
                                        const Problem& problem,
                                        const DeviceInfo& device) const;
  // `configs` less those the store has seen rejected for resources with
  // `t` on `device` at `problem`'s head_dim and dtype (they would be again:
  // ResultStore::RejectedConfigs); all of them when that leaves none.
  std::vector<Config> WithoutKnownRejected(const KernelTemplate& t,
                                           const Problem& problem,
                                           const DeviceInfo& device,
                                           std::vector<Config> configs) const;
  // The predictor a search of `t` on `problem` gets: the device's cost
  // model's (`t` must outlive it), or empty while it has none.
  LatencyPredictor Predictor(const KernelTemplate& t, const DeviceInfo& device,
                             const Problem& problem);
  // What a replaying runner has recordings of (TrialRunner).
  std::vector<std::string> RecordedProblems() const {
    return runner_->RecordedProblems();
  }

  // The device named `name` (empty: the default one); see
  // TrialRunner::FindDevice.
  absl::StatusOr<DeviceInfo> Device(const std::string& name) const;
  // Whether `device` can run template `t`.
  absl::Status CanEvaluate(const DeviceInfo& device,
                           const KernelTemplate& t) const;

  // Stores a new queued job (fields and device already validated) and queues
  // it.
  absl::StatusOr<JobRecord> Submit(JobRecord job);

  // Cancels a queued or running job and returns it once it is final; trials
  // in flight are abandoned (results that still arrive are stored).
  // FAILED_PRECONDITION when it already finished, NOT_FOUND when unknown.
  absl::StatusOr<JobRecord> Cancel(const std::string& job_id);

  // Evaluates one config on `device` outside any job (the store answers if it
  // already holds the result) and stores it. `cached` says whether the store
  // answered.
  absl::StatusOr<StoredTrial> EvaluateOne(const DeviceInfo& device,
                                          const KernelTemplate& t,
                                          const Config& config,
                                          const Problem& problem, bool* cached);

  // A counter that grows whenever a job changes (new trial, new state).
  uint64_t version() const;
  // Blocks until version() != seen or the timeout passes.
  void WaitForChange(uint64_t seen, absl::Duration timeout) const;

 private:
  void RunLoop();
  // The first queued job whose device has a worker, taken off the queue, with
  // that device; nullopt when none can run now. A background job only while
  // no user's job is queued or running.
  std::optional<std::pair<std::string, DeviceInfo>> TakeRunnable();
  // Takes job `id` off the queue if its device has a worker.
  std::optional<std::pair<std::string, DeviceInfo>> Take(const std::string& id,
                                                         const JobRecord& job,
                                                         bool background);
  // Runs one job to a final state, or until shutdown.
  void RunJob(const std::string& job_id, const DeviceInfo& device);
  // The job's trials through a TrialLoop.
  absl::Status RunTrials(const JobRecord& job, const DeviceInfo& device,
                         bool& cancelled);
  // Whether the job must stop now (shutdown or cancel).
  bool ShouldStop(const std::string& job_id, bool* cancelled) const;
  void Notify();
  // Configs a search tries first, into `inputs`: the best of the nearest
  // problem tuned on this device and the template's defaults fitted to the
  // problem (trusted: measured as they are), then its other defaults.
  void AddSeeds(const KernelTemplate& t, const DeviceInfo& device,
                const Problem& problem, SearchInputs* inputs);

  ResultStore* const store_;
  const TemplateRegistry* const templates_;
  TrialRunner* const runner_;
  Clock* const clock_;
  CostModels* models_ = nullptr;
  int confirm_turns_ = kDefaultConfirmTurns;

  mutable absl::Mutex mu_;
  std::deque<std::string> queue_ ABSL_GUARDED_BY(mu_);
  // Running jobs, and whether each was asked to cancel.
  std::map<std::string, bool> running_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> running_background_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  mutable absl::CondVar changed_;
  std::vector<std::thread> threads_;
};

}  // namespace evotune

#endif  // EVOTUNE_TUNER_JOBS_JOB_MANAGER_H_
