#include "tuner/cli/tune_model.h"

#include "gtest/gtest.h"

namespace evotune {
namespace {

TEST(TuneModelTest, TheProgressLineSaysBucketsTrialsAndTime) {
  EXPECT_EQ(
      FormatModelProgress(37, 160, 296, absl::Seconds(130), absl::Minutes(10)),
      "tune-model: 37/160 buckets, 296 trials, 2m10s of 10m00s");
  EXPECT_EQ(FormatModelProgress(0, 3, 0, absl::Seconds(5), absl::Seconds(30)),
            "tune-model: 0/3 buckets, 0 trials, 5s of 30s");
}

}  // namespace
}  // namespace evotune
