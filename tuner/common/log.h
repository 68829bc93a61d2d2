// Minimal timestamped logging to stderr (one line per call, thread-safe).
#ifndef EVOTUNE_TUNER_COMMON_LOG_H_
#define EVOTUNE_TUNER_COMMON_LOG_H_

#include "absl/strings/string_view.h"

namespace evotune {

void LogInfo(absl::string_view message);
void LogError(absl::string_view message);

}  // namespace evotune

#endif  // EVOTUNE_TUNER_COMMON_LOG_H_
