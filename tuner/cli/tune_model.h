// `evotune tune-model`'s progress line (the daemon plans and submits the
// buckets: Tuner.TuneModel).
#ifndef EVOTUNE_TUNER_CLI_TUNE_MODEL_H_
#define EVOTUNE_TUNER_CLI_TUNE_MODEL_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"

namespace evotune {

// "tune-model: 37/160 buckets, 296 trials, 2m10s of 10m".
std::string FormatModelProgress(int done, int total, int64_t trials,
                                absl::Duration elapsed, absl::Duration budget);

}  // namespace evotune

#endif  // EVOTUNE_TUNER_CLI_TUNE_MODEL_H_
