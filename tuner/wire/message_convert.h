// Conversions between evotune.v1 messages and the internal types that the
// daemon and the workers share: problems, devices, configs, trial tasks and
// results.
#ifndef EVOTUNE_TUNER_WIRE_MESSAGE_CONVERT_H_
#define EVOTUNE_TUNER_WIRE_MESSAGE_CONVERT_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/config.h"
#include "core/problem.h"
#include "core/trial.h"
#include "core/trial_task.h"
#include "evotune/v1/evotune.pb.h"
#include "evotune/v1/worker.pb.h"
#include "kernel_templates/kernel_template.h"

namespace evotune {

// INVALID_ARGUMENT naming "<prefix>.dtype" when the dtype is unspecified;
// kv_heads 0 becomes heads. Ranges are checked later by ValidateProblem.
absl::StatusOr<Problem> ProblemFromProto(const v1::Problem& p,
                                         absl::string_view prefix = "problem");
v1::Problem ProblemToProto(const Problem& p);
// INVALID_ARGUMENT naming `field` for a layout this build does not know.
absl::StatusOr<Layout> LayoutFromProto(v1::Layout layout,
                                       absl::string_view field);
v1::Layout LayoutToProto(Layout layout);
v1::Device DeviceToProto(const DeviceInfo& d);
// The device key only; limits stay at their defaults.
DeviceInfo DeviceKeyFromProto(const v1::Device& d);
// INVALID_ARGUMENT naming the field when the name or a limit is missing, or
// the multiprocessors are past any GPU's (0: unknown).
absl::StatusOr<DeviceInfo> DeviceFromProto(const v1::WorkerDevice& d);
v1::WorkerDevice WorkerDeviceToProto(const DeviceInfo& d);
v1::Config ConfigToProto(const Config& c);
// INVALID_ARGUMENT naming "config" when a parameter is given twice.
absl::StatusOr<Config> ConfigFromProto(const v1::Config& c);
v1::Latency LatencyToProto(const TrialResult& r);
v1::LaunchGeometry GeometryToProto(const LaunchGeometry& g);
LaunchGeometry GeometryFromProto(const v1::LaunchGeometry& g);
// Most turns a task may ask for (kMaxRivals, in trial_task.h, bounds its
// rivals).
inline constexpr int kMaxTurns = 1000;
v1::TrialTask TaskToProto(const std::string& task_id, const TrialTask& t,
                          absl::Duration deadline);
// INVALID_ARGUMENT naming the field for a bad config, more than kMaxRivals
// rivals, a rival without a template, or rivals with turns outside
// 1..kMaxTurns.
absl::StatusOr<TrialTask> TaskFromProto(const v1::TrialTask& t);
v1::RivalResult RivalToProto(const TrialResult& r);
// Sets `out`'s status, latency (when ok), error and rivals from `r`.
void SetResult(const TrialResult& r, v1::CompleteTrialRequest* out);
// The result with its rivals' (TrialResult::rival_results); INVALID_ARGUMENT
// naming the field for an unknown status or an ok one without a latency.
absl::StatusOr<TrialResult> ResultFromProto(const v1::CompleteTrialRequest& r);

}  // namespace evotune

#endif  // EVOTUNE_TUNER_WIRE_MESSAGE_CONVERT_H_
