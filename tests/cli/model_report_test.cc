#include "tuner/cli/model_report.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cli/html_testing.h"

namespace evotune {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

v1::TrialEvent Ok(double us) {
  v1::TrialEvent e;
  e.mutable_trial()->set_status(v1::TRIAL_STATUS_OK);
  e.mutable_trial()->mutable_latency()->set_median_us(us);
  v1::ParamValue* p = e.mutable_trial()->mutable_config()->add_params();
  p->set_name("BLOCK_N");
  p->set_value(static_cast<int64_t>(us));
  return e;
}

// A decode bucket on `keys` keys whose search went from `first` to `best`
// (no search where both are 0).
BucketSearch Bucket(int keys, double first, double best, double seconds) {
  BucketSearch b;
  b.problem.set_batch(1);
  b.problem.set_heads(8);
  b.problem.set_kv_heads(8);
  b.problem.set_seq_q(1);
  b.problem.set_seq_k(keys);
  b.problem.set_head_dim(64);
  b.problem.set_dtype(v1::DTYPE_BF16);
  if (first == 0) return b;
  b.job.set_job_id(absl::StrCat("j", keys));
  b.job.set_template_name("decode_fwd");
  b.job.set_state(v1::JOB_STATE_SUCCEEDED);
  b.job.set_trials_done(2);
  b.job.set_elapsed_seconds(seconds);
  b.events = {v1::TrialEvent(), Ok(first), Ok(best)};  // A failure first.
  b.events[0].mutable_trial()->set_status(v1::TRIAL_STATUS_INCORRECT);
  *b.job.mutable_best() = b.events[2].trial();
  return b;
}

class ModelReportTest : public ::testing::Test {
 protected:
  std::vector<BucketSearch> buckets_ = {
      Bucket(128, 10, 8, 6), Bucket(256, 10, 9.9, 2), Bucket(512, 0, 0, 0)};
};

TEST_F(ModelReportTest, IsOneSelfContainedPageOfEveryBucket) {
  const std::string html = ModelReportHtml("tune-model <llama>", buckets_);
  EXPECT_THAT(html, HasSubstr("<title>evotune model report</title>"));
  EXPECT_THAT(html, HasSubstr("tune-model &lt;llama&gt;"));
  EXPECT_THAT(html, Not(HasSubstr("<script")));
  // Nothing fetched: the only address is the SVG namespace of each plot.
  EXPECT_EQ(Count(html, "http"),
            Count(html, "xmlns=\"http://www.w3.org/2000/svg\""));
  EXPECT_EQ(Count(html, "<svg "), 2);
  EXPECT_THAT(html, HasSubstr("bucket 3; the tallest bar 6.0 s"));
  EXPECT_EQ(Count(html, "<tr><td>b1_h8_kv8_q1_k"), 3);
  EXPECT_THAT(html, HasSubstr("not searched"));
  // Two plots, a bar per bucket each; the 20% gain green, 1% grey.
  EXPECT_EQ(Count(html, "<rect "), 6);
  EXPECT_EQ(Count(html, "class=\"gain\""), 2);
  EXPECT_THAT(html, HasSubstr("decode_fwd BLOCK_N=8"));
  EXPECT_THAT(html, HasSubstr("<td>20.0%</td>"));
  EXPECT_THAT(html, HasSubstr("<td>10.00 us</td>"));  // The first OK trial.
}

TEST_F(ModelReportTest, TheFirstTimeIsTheFirstCorrectTrials) {
  EXPECT_EQ(FirstOkUs(buckets_[0].events), 10);
  EXPECT_EQ(FirstOkUs({}), std::nullopt);
  EXPECT_EQ(FirstOkUs({buckets_[0].events[0]}), std::nullopt);
}

TEST_F(ModelReportTest, TheSummarySaysWhatTheBudgetBought) {
  const std::string html = ModelReportHtml("m", buckets_);
  EXPECT_THAT(html, HasSubstr("<dd>3, 2 searched</dd>"));
  EXPECT_THAT(html, HasSubstr("<dd>4 trials, 0:08 of searching</dd>"));
  // (20 - 17.9) / 20 of the first trials' time; one bucket 3% or more.
  EXPECT_THAT(html, HasSubstr("10.5% of the first trials' summed time; 3% "
                              "or more on 1 buckets"));
}

TEST_F(ModelReportTest, AComparisonRunGivesSdpasTimeWhereItTimedTheBucket) {
  v1::SdpaComparison run;
  run.set_gpu("NVIDIA H200");
  v1::SdpaComparisonRow* row = run.add_results();
  row->set_problem("b1_h8_kv8_q1_k128_d64_full_bf16_bhsd");
  row->set_template_name("decode_fwd");
  row->set_us(8.5);
  row->set_flash_us(20);
  row->set_cudnn_us(17);
  const std::string html = ModelReportHtml("m", buckets_, &run);
  EXPECT_THAT(html, HasSubstr("NVIDIA H200"));
  EXPECT_THAT(html,
              HasSubstr("<td>8.50 us</td><td>17.00 us</td><td>2.00x</td>"));
  EXPECT_EQ(Count(html, "<td>-</td><td>-</td><td>-</td>"), 2);
}

}  // namespace
}  // namespace evotune
