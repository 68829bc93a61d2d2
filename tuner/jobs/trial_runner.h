// TrialRunner: where a job's trials run. evotuned hands them to GPU worker
// processes (WorkerPool); simulations and tests run an Evaluator in process
// (InProcessRunner).
#ifndef EVOTUNE_TUNER_JOBS_TRIAL_RUNNER_H_
#define EVOTUNE_TUNER_JOBS_TRIAL_RUNNER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/trial_task.h"
#include "kernel_templates/kernel_template.h"

namespace evotune {

// Called exactly once per started task, on any thread: the result (a bad
// candidate is an OK result with its status), or CANCELLED when the task was
// withdrawn before it ran, or UNAVAILABLE when the runner shut down.
using TrialDone = std::function<void(absl::StatusOr<TrialResult>)>;

class TrialRunner {
 public:
  virtual ~TrialRunner() = default;

  // The device trials can run on now: the one named `name`, or with an empty
  // name the default one. FAILED_PRECONDITION "no CUDA device: ..." when there
  // is none (a runner may wait a little for workers that are starting);
  // INVALID_ARGUMENT naming "device" when no device has that name.
  virtual absl::StatusOr<DeviceInfo> FindDevice(const std::string& name) = 0;

  // OK when `device` can run template `t`; otherwise INVALID_ARGUMENT saying
  // why.
  virtual absl::Status CanEvaluate(const DeviceInfo& device,
                                   const KernelTemplate& t) const = 0;

  // Whether a task as it is, every template of it, can be run now (by one
  // worker: a task that times configs of several templates needs one that
  // has them all). False means it would wait for such a worker.
  virtual bool CanRun(const TrialTask& task) const { return true; }

  // Whether results for `config` can be had (a replay only has what it
  // recorded). Searches draw from the feasible configs covered.
  virtual bool Covers(const KernelTemplate& t, const Config& config,
                      const Problem& problem) const {
    return true;
  }

  // The problems a replay has recordings of (Evaluator::RecordedProblems);
  // empty when trials are measured.
  virtual std::vector<std::string> RecordedProblems() const { return {}; }

  // How many trials on `device` can usefully run at once now (at least 1).
  virtual int Parallelism(const DeviceInfo& device) const = 0;

  // How many more to queue beside those, so that they compile ahead: by
  // default kQueuedAhead per trial running at once.
  static constexpr int kQueuedAhead = 4;
  virtual int QueuedAhead(const DeviceInfo& device) const {
    return kQueuedAhead * Parallelism(device);
  }

  // Queues the task; returns an id for Withdraw.
  virtual uint64_t Start(TrialTask task, TrialDone done) = 0;

  // Takes back a task that has not started running (its callback gets
  // CANCELLED); one already running finishes normally.
  virtual void Withdraw(uint64_t id) = 0;
};

}  // namespace evotune

#endif  // EVOTUNE_TUNER_JOBS_TRIAL_RUNNER_H_
