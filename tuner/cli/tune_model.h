// `evotune tune-model`'s progress line (the daemon plans and submits the
// buckets: Tuner.TuneModel).
#ifndef EVOTUNE_TUNER_CLI_TUNE_MODEL_H_
#define EVOTUNE_TUNER_CLI_TUNE_MODEL_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "evotune/v1/evotune.pb.h"

namespace evotune {

// "tune-model: 37/160 buckets, 296 trials, 2m10s of 10m".
std::string FormatModelProgress(int done, int total, int64_t trials,
                                absl::Duration elapsed, absl::Duration budget);

// What tune-model plans, from TuneModel's answer: "160 buckets, 12 to
// search; predicted gain 3% or more on 4 (12 trials each, at most 21% on
// KEY), under 3% on 8 (2 trials each: the served config checked)"; the
// prediction part only where the cost model made one.
std::string FormatModelPlan(const v1::TuneModelResponse& buckets);

}  // namespace evotune

#endif  // EVOTUNE_TUNER_CLI_TUNE_MODEL_H_
