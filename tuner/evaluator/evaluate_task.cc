#include "tuner/evaluator/evaluate_task.h"

#include <algorithm>
#include <vector>

namespace evotune {

absl::StatusOr<TrialResult> EvaluateTask(Evaluator& evaluator,
                                         const KernelTemplate& t,
                                         const TrialTask& task) {
  if (task.rivals.empty()) {
    return task.quick ? evaluator.QuickEvaluate(t, task.config, task.problem)
                      : evaluator.Evaluate(t, task.config, task.problem);
  }
  const std::vector<Config> configs = TaskConfigs(task);
  absl::StatusOr<std::vector<TrialResult>> results =
      evaluator.TimeInTurns(t, configs, task.problem, std::max(1, task.turns));
  if (!results.ok()) return results.status();
  if (results->size() != configs.size()) {
    return absl::InternalError("timing in turns answered for other configs");
  }
  const int timed = static_cast<int>(std::count_if(
      results->begin(), results->end(),
      [](const TrialResult& r) { return r.status == TrialStatus::kOk; }));
  for (TrialResult& r : *results) {
    if (r.status == TrialStatus::kOk) r.timed_against = timed - 1;
  }
  TrialResult out = std::move(results->front());
  out.rival_results.assign(std::make_move_iterator(results->begin() + 1),
                           std::make_move_iterator(results->end()));
  return out;
}

}  // namespace evotune
