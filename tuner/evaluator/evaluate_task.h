// EvaluateTask: runs a TrialTask on an Evaluator, as a GPU worker or an
// in-process runner does: one config timed fully or quickly, or a config and
// its rivals timed together in turns.
#ifndef EVOTUNE_TUNER_EVALUATOR_EVALUATE_TASK_H_
#define EVOTUNE_TUNER_EVALUATOR_EVALUATE_TASK_H_

#include "absl/status/statusor.h"
#include "kernel_templates/kernel_template.h"
#include "tuner/evaluator/evaluator.h"
#include "tuner/space/trial_task.h"

namespace evotune {

// The result of task.config; with rivals, theirs in rival_results (in order)
// and, on every config timed, timed_against = how many others were timed
// beside it. A non-OK status when the evaluator cannot work.
absl::StatusOr<TrialResult> EvaluateTask(Evaluator& evaluator,
                                         const KernelTemplate& t,
                                         const TrialTask& task);

}  // namespace evotune

#endif  // EVOTUNE_TUNER_EVALUATOR_EVALUATE_TASK_H_
