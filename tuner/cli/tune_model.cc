#include "tuner/cli/tune_model.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/envelope.h"
#include "tuner/wire/message_convert.h"

namespace evotune {

std::string FormatModelProgress(const ModelProgress& m) {
  auto clock = [](absl::Duration d) {
    const int64_t s = absl::ToInt64Seconds(d);
    return s >= 60 ? absl::StrFormat("%dm%02ds", s / 60, s % 60)
                   : absl::StrFormat("%ds", s);
  };
  std::string gain;
  if (m.measured_gain >= 0 || m.predicted_gain >= 0) {
    gain = m.measured_gain >= 0
               ? absl::StrFormat(", gain %.1f%%", 100 * m.measured_gain)
               : ", gain -";
    if (m.predicted_gain >= 0) {
      absl::StrAppendFormat(&gain, " (%.1f%% predicted)",
                            100 * m.predicted_gain);
    }
  }
  return absl::StrCat("tune-model: ", m.done, "/", m.total, " buckets, ",
                      m.trials, " trials", gain, ", ", clock(m.elapsed), " of ",
                      clock(m.budget));
}

double PredictedGain(const v1::TuneModelResponse& buckets) {
  double served = 0, best = 0;
  for (const v1::ModelBucket& b : buckets.buckets()) {
    if (b.max_trials() == 0 || b.predicted_served_us() <= 0 ||
        b.predicted_best_us() <= 0) {
      continue;
    }
    served += b.predicted_served_us();
    best += std::min(b.predicted_best_us(), b.predicted_served_us());
  }
  return served > 0 ? GainShare(served, best) : -1;
}

std::string FormatModelPlan(const v1::TuneModelResponse& buckets) {
  int planned = 0, worth = 0, small = 0;
  uint32_t worth_trials = 0, small_trials = 0;
  double most = 0;
  std::string most_key;
  for (const v1::ModelBucket& b : buckets.buckets()) {
    if (b.max_trials() == 0) continue;  // Searched before, or being.
    ++planned;
    if (b.predicted_served_us() <= 0 || b.predicted_best_us() <= 0) continue;
    const double gain =
        GainShare(b.predicted_served_us(), b.predicted_best_us());
    if (gain < kSmallGain) {
      ++small;
      small_trials = b.max_trials();
      continue;
    }
    ++worth;
    worth_trials = b.max_trials();
    absl::StatusOr<Problem> p = ProblemFromProto(b.problem());
    if (gain > most && p.ok()) {
      most = gain;
      most_key = ProblemKey(*p);
    }
  }
  std::string out =
      absl::StrCat(buckets.buckets_size(), " buckets, ", planned, " to search");
  if (worth + small == 0) return out;
  absl::StrAppend(&out, "; predicted gain 3% or more on ", worth);
  if (worth > 0) {
    absl::StrAppendFormat(&out, " (%d trials each, at most %.0f%% on %s)",
                          worth_trials, 100 * most, most_key);
  }
  absl::StrAppend(&out, ", under 3% on ", small);
  if (small > 0) {
    absl::StrAppend(&out, " (", small_trials,
                    " trials each: the served config checked)");
  }
  return out;
}

}  // namespace evotune
