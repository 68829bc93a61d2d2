#include "tuner/cli/tune_model.h"

#include "gtest/gtest.h"

namespace evotune {
namespace {

TEST(TuneModelTest, TheProgressLineSaysBucketsTrialsGainAndTime) {
  ModelProgress m;
  m.done = 37;
  m.total = 160;
  m.trials = 296;
  m.elapsed = absl::Seconds(130);
  m.budget = absl::Minutes(10);
  EXPECT_EQ(FormatModelProgress(m),
            "tune-model: 37/160 buckets, 296 trials, 2m10s of 10m00s");
  m.predicted_gain = 0.05;
  EXPECT_EQ(FormatModelProgress(m),
            "tune-model: 37/160 buckets, 296 trials, gain - (5.0% "
            "predicted), 2m10s of 10m00s");
  m.measured_gain = 0.041;
  EXPECT_EQ(FormatModelProgress(m),
            "tune-model: 37/160 buckets, 296 trials, gain 4.1% (5.0% "
            "predicted), 2m10s of 10m00s");
  m.predicted_gain = -1;
  m.done = 0;
  m.total = 3;
  m.trials = 0;
  m.elapsed = absl::Seconds(5);
  m.budget = absl::Seconds(30);
  EXPECT_EQ(FormatModelProgress(m),
            "tune-model: 0/3 buckets, 0 trials, gain 4.1%, 5s of 30s");
}

// The plan names how many buckets are searched and, where the cost model
// predicted, how the trials are spent.
TEST(TuneModelTest, ThePlanSaysWhereTheTrialsGo) {
  v1::TuneModelResponse r;
  auto add = [&](uint32_t seq_k, double served, double best, uint32_t n) {
    v1::ModelBucket* b = r.add_buckets();
    b->mutable_problem()->set_batch(1);
    b->mutable_problem()->set_heads(8);
    b->mutable_problem()->set_kv_heads(8);
    b->mutable_problem()->set_seq_q(1);
    b->mutable_problem()->set_seq_k(seq_k);
    b->mutable_problem()->set_head_dim(64);
    b->mutable_problem()->set_dtype(v1::DTYPE_BF16);
    b->set_predicted_served_us(served);
    b->set_predicted_best_us(best);
    b->set_max_trials(n);
  };
  add(128, 0, 0, 0);  // Searched before.
  add(256, 0, 0, 12);
  EXPECT_EQ(FormatModelPlan(r), "2 buckets, 1 to search");
  EXPECT_EQ(PredictedGain(r), -1);
  add(512, 10, 9.9, 2);
  add(1024, 10, 8, 12);
  add(2048, 10, 9, 12);
  // (0.1 + 2 + 1) of 30 predicted us saved.
  EXPECT_NEAR(PredictedGain(r), 3.1 / 30, 1e-12);
  EXPECT_EQ(FormatModelPlan(r),
            "5 buckets, 4 to search; predicted gain 3% or more on 2 (12 "
            "trials each, at most 20% on "
            "b1_h8_kv8_q1_k1024_d64_full_bf16_bhsd), under 3% on 1 (2 trials "
            "each: the served config checked)");
}

}  // namespace
}  // namespace evotune
