#include "tuner/evaluator/evaluate_task.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"

namespace evotune {
namespace {

absl::StatusOr<const KernelTemplate*> Find(const TemplateRegistry& templates,
                                           const std::string& name,
                                           const std::string& hash) {
  const KernelTemplate* t = templates.Find(name);
  if (t == nullptr || t->hash != hash) {
    return absl::FailedPreconditionError(absl::StrCat(
        "template ", name, " version ", hash, " is not in this build"));
  }
  return t;
}

}  // namespace

absl::StatusOr<TrialResult> EvaluateTask(Evaluator& evaluator,
                                         const TemplateRegistry& templates,
                                         const TrialTask& task) {
  std::vector<TemplateConfig> configs;
  for (Contender& c : TaskContenders(task)) {
    absl::StatusOr<const KernelTemplate*> t =
        Find(templates, c.template_name, c.template_hash);
    if (!t.ok()) return t.status();
    configs.push_back({*t, std::move(c.config)});
  }
  if (task.rivals.empty()) {
    const KernelTemplate& t = *configs[0].t;
    return task.quick ? evaluator.QuickEvaluate(t, task.config, task.problem)
                      : evaluator.Evaluate(t, task.config, task.problem);
  }
  absl::StatusOr<std::vector<TrialResult>> results =
      evaluator.TimeInTurns(configs, task.problem, std::max(1, task.turns));
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

void PrefetchTask(Evaluator& evaluator, const TemplateRegistry& templates,
                  const TrialTask& task) {
  for (const Contender& c : TaskContenders(task)) {
    absl::StatusOr<const KernelTemplate*> t =
        Find(templates, c.template_name, c.template_hash);
    if (t.ok()) evaluator.Prefetch(**t, {c.config}, task.problem);
  }
}

}  // namespace evotune
