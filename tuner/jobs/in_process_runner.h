// InProcessRunner: runs trials on an Evaluator inside the daemon, one at a
// time on its own thread. For evaluators that run no kernels (the replay of a
// recorded landscape, the synthetic stand-in in tests): a kernel that faults
// would take the daemon with it, so GPU trials go to workers (WorkerPool).
#ifndef EVOTUNE_TUNER_JOBS_IN_PROCESS_RUNNER_H_
#define EVOTUNE_TUNER_JOBS_IN_PROCESS_RUNNER_H_

#include <deque>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "kernel_templates/template_registry.h"
#include "tuner/evaluator/evaluator.h"
#include "tuner/jobs/trial_runner.h"

namespace evotune {

class InProcessRunner : public TrialRunner {
 public:
  // `templates` must outlive the runner.
  InProcessRunner(std::unique_ptr<Evaluator> evaluator,
                  const TemplateRegistry* templates);
  // Fails what is still queued with UNAVAILABLE after the running trial.
  ~InProcessRunner() override;

  absl::StatusOr<DeviceInfo> FindDevice(const std::string& name) override;
  absl::Status CanEvaluate(const DeviceInfo& device,
                           const KernelTemplate& t) const override;
  bool Covers(const KernelTemplate& t, const Config& config,
              const Problem& problem) const override;
  std::vector<std::string> RecordedProblems() const override {
    return evaluator_->RecordedProblems();
  }
  int Parallelism(const DeviceInfo& device) const override { return 1; }
  uint64_t Start(TrialTask task, TrialDone done) override;
  void Withdraw(uint64_t id) override;

 private:
  struct Queued {
    uint64_t id;
    TrialTask task;
    TrialDone done;
  };
  void Loop();
  absl::StatusOr<TrialResult> Run(const TrialTask& task);

  const std::unique_ptr<Evaluator> evaluator_;
  const TemplateRegistry* const templates_;
  absl::Mutex mu_;
  std::deque<Queued> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace evotune

#endif  // EVOTUNE_TUNER_JOBS_IN_PROCESS_RUNNER_H_
