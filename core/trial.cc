#include "core/trial.h"

namespace evotune {

absl::string_view TrialStatusName(TrialStatus status) {
  switch (status) {
    case TrialStatus::kOk:
      return "ok";
    case TrialStatus::kCompileError:
      return "compile_error";
    case TrialStatus::kResourceRejected:
      return "resource_rejected";
    case TrialStatus::kIncorrect:
      return "incorrect";
    case TrialStatus::kTimeout:
      return "timeout";
    case TrialStatus::kCrashed:
      return "crashed";
  }
  return "unknown";
}

bool IsValidTrialStatus(int value) { return value >= 1 && value <= 6; }

}  // namespace evotune
