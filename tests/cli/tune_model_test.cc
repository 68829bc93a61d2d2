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
  add(512, 10, 9.9, 2);
  add(1024, 10, 8, 12);
  add(2048, 10, 9, 12);
  EXPECT_EQ(FormatModelPlan(r),
            "5 buckets, 4 to search; predicted gain 3% or more on 2 (12 "
            "trials each, at most 20% on "
            "b1_h8_kv8_q1_k1024_d64_full_bf16_bhsd), under 3% on 1 (2 trials "
            "each: the served config checked)");
}

}  // namespace
}  // namespace evotune
