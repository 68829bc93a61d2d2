// `evotune tune-model`'s progress line (the daemon plans and submits the
// buckets: Tuner.TuneModel).
#ifndef EVOTUNE_TUNER_CLI_TUNE_MODEL_H_
#define EVOTUNE_TUNER_CLI_TUNE_MODEL_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "evotune/v1/evotune.pb.h"

namespace evotune {

// Where a tune-model run stands.
struct ModelProgress {
  int done = 0;  // Buckets whose search ended.
  int total = 0;
  int64_t trials = 0;
  absl::Duration elapsed, budget;
  // The share of the served time the cost model predicted the searches
  // save, and what the ended ones saved over their first trials; < 0:
  // none.
  double predicted_gain = -1;
  double measured_gain = -1;
};

// "tune-model: 37/160 buckets, 296 trials, gain 4.1% (5.0% predicted),
// 2m10s of 10m00s" (the gain part where there is one).
std::string FormatModelProgress(const ModelProgress& progress);

// The share of the served time the cost model predicts the planned
// searches of TuneModel's answer save (their summed predicted times); -1
// without predictions.
double PredictedGain(const v1::TuneModelResponse& buckets);

// What tune-model plans, from TuneModel's answer: "160 buckets, 12 to
// search; predicted gain 3% or more on 4 (12 trials each, at most 21% on
// KEY), under 3% on 8 (2 trials each: the served config checked)"; the
// prediction part only where the cost model made one.
std::string FormatModelPlan(const v1::TuneModelResponse& buckets);

}  // namespace evotune

#endif  // EVOTUNE_TUNER_CLI_TUNE_MODEL_H_
