#include "tuner/cli/tune_model.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace evotune {

std::string FormatModelProgress(int done, int total, int64_t trials,
                                absl::Duration elapsed, absl::Duration budget) {
  auto clock = [](absl::Duration d) {
    const int64_t s = absl::ToInt64Seconds(d);
    return s >= 60 ? absl::StrFormat("%dm%02ds", s / 60, s % 60)
                   : absl::StrFormat("%ds", s);
  };
  return absl::StrCat("tune-model: ", done, "/", total, " buckets, ", trials,
                      " trials, ", clock(elapsed), " of ", clock(budget));
}

}  // namespace evotune
