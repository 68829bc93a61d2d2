// The daemon's tuning stack over the synthetic evaluator, for tests of the
// gRPC edge: a store in `dir`, an in-process runner, the job manager and the
// tuning service (jobs start with `jobs.Start()`).
#ifndef EVOTUNE_TESTS_DAEMON_SYNTHETIC_TUNER_H_
#define EVOTUNE_TESTS_DAEMON_SYNTHETIC_TUNER_H_

#include <filesystem>
#include <memory>

#include "kernel_templates/template_registry.h"
#include "storage/result_store.h"
#include "tuner/evaluator/synthetic_evaluator.h"
#include "tuner/jobs/in_process_runner.h"
#include "tuner/jobs/job_manager.h"
#include "tuner/serving/tuning_service.h"

namespace evotune {

struct SyntheticTuner {
  explicit SyntheticTuner(const std::filesystem::path& dir,
                          SyntheticEvaluator::Options options = {})
      : store(*ResultStore::Open((dir / "evotune.db").string())),
        runner(std::make_unique<InProcessRunner>(
            std::make_unique<SyntheticEvaluator>(std::move(options)),
            &TemplateRegistry::Builtin())),
        jobs(store.get(), &TemplateRegistry::Builtin(), runner.get()),
        service(store.get(), &TemplateRegistry::Builtin(), &jobs) {}

  std::unique_ptr<ResultStore> store;
  std::unique_ptr<TrialRunner> runner;
  JobManager jobs;
  TuningService service;
};

}  // namespace evotune

#endif  // EVOTUNE_TESTS_DAEMON_SYNTHETIC_TUNER_H_
