// EvaluateTask: runs a TrialTask on an Evaluator, as a GPU worker or an
// in-process runner does: one config timed fully or quickly, or a config and
// its rivals (of its template or others) timed together in turns.
#ifndef EVOTUNE_TUNER_EVALUATOR_EVALUATE_TASK_H_
#define EVOTUNE_TUNER_EVALUATOR_EVALUATE_TASK_H_

#include "absl/status/statusor.h"
#include "core/trial_task.h"
#include "kernel_templates/template_registry.h"
#include "tuner/evaluator/evaluator.h"

namespace evotune {

// The result of task.config; with rivals, theirs in rival_results (in order)
// and, on every config timed, timed_against = how many others were timed
// beside it. A non-OK status when the evaluator cannot work, or
// FAILED_PRECONDITION when `templates` lacks the task's template version or
// a rival's.
absl::StatusOr<TrialResult> EvaluateTask(Evaluator& evaluator,
                                         const TemplateRegistry& templates,
                                         const TrialTask& task);

// Evaluator::Prefetch for the task's configs (those of templates in
// `templates`), so that their compiles can start before the task runs.
void PrefetchTask(Evaluator& evaluator, const TemplateRegistry& templates,
                  const TrialTask& task);

}  // namespace evotune

#endif  // EVOTUNE_TUNER_EVALUATOR_EVALUATE_TASK_H_
