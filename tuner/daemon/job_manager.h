// JobManager: runs search jobs one at a time against the evaluator, storing
// every trial as it finishes.
//
// A job's progress lives in the store only: after a crash or kill -9, Start()
// picks up every unfinished job, reports its stored trials to a fresh
// strategy and goes on, so no stored trial is lost or measured again.
// Thread-safe.
#ifndef EVOTUNE_TUNER_DAEMON_JOB_MANAGER_H_
#define EVOTUNE_TUNER_DAEMON_JOB_MANAGER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kernel_templates/template_registry.h"
#include "storage/result_store.h"
#include "tuner/evaluator/evaluator.h"

namespace evotune {

class JobManager {
 public:
  // `evaluator` may be null when the daemon has no usable device; then
  // `no_device` says why and Submit refuses. store and templates must outlive
  // the manager.
  JobManager(ResultStore* store, const TemplateRegistry* templates,
             std::unique_ptr<Evaluator> evaluator, absl::Status no_device);
  ~JobManager();

  // Queues the unfinished jobs of the store (oldest first) and starts the
  // runner thread.
  absl::Status Start();
  // Stops after the trial in progress; a running job goes back to queued and
  // resumes at the next Start(). Idempotent.
  void Shutdown();

  // The device jobs run on; FAILED_PRECONDITION "no CUDA device: ..." when
  // there is none.
  absl::StatusOr<DeviceInfo> Device() const;
  // Whether the evaluator can run template `t` (see Evaluator::CanEvaluate).
  absl::Status CanEvaluate(const KernelTemplate& t) const;

  // Stores a new queued job (fields already validated) and queues it.
  absl::StatusOr<JobRecord> Submit(JobRecord job);

  // Cancels a queued or running job and returns it once it is final.
  // FAILED_PRECONDITION when it already finished, NOT_FOUND when unknown.
  absl::StatusOr<JobRecord> Cancel(const std::string& job_id);

  // Evaluates one config outside any job (the store answers if it already
  // holds the result) and stores it. Waits for the trial a running job is
  // measuring. `cached` says whether the store answered.
  absl::StatusOr<StoredTrial> EvaluateOne(const KernelTemplate& t,
                                          const Config& config,
                                          const Problem& problem, bool* cached);

  // A counter that grows whenever a job changes (new trial, new state).
  uint64_t version() const;
  // Blocks until version() != seen or the timeout passes.
  void WaitForChange(uint64_t seen, absl::Duration timeout) const;

 private:
  void RunLoop();
  // Runs one job to a final state, or until shutdown.
  void RunJob(const std::string& job_id);
  absl::Status RunTrials(JobRecord& job, bool& cancelled);
  void Notify();
  // Configs a search tries first: the best of the nearest problem tuned on
  // this device, then the template's defaults.
  std::vector<Config> SeedConfigs(const KernelTemplate& t,
                                  const Problem& problem);

  ResultStore* const store_;
  const TemplateRegistry* const templates_;
  const std::unique_ptr<Evaluator> evaluator_;
  const absl::Status no_device_;

  // Serializes use of the evaluator (one GPU, not thread-safe).
  absl::Mutex evaluator_mu_;
  mutable absl::Mutex mu_;
  std::deque<std::string> queue_ ABSL_GUARDED_BY(mu_);
  std::string running_ ABSL_GUARDED_BY(mu_);
  bool cancel_running_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  mutable absl::CondVar changed_;
  std::thread runner_;
};

}  // namespace evotune

#endif  // EVOTUNE_TUNER_DAEMON_JOB_MANAGER_H_
