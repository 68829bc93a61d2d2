#include "tuner/cli/comparison.h"

#include <cstdio>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace evotune {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// As bench/sdpa_compare.py writes it, columns the message does not know
// (copy_tbps, flash_err, read_floor_us) and a null included.
constexpr char kRun[] = R"({
 "gpu": "NVIDIA H100 80GB HBM3", "torch": "2.11.0", "date": "2026-11-23",
 "commit": "abc1234", "copy_tbps": 2.43,
 "results": [
  {"name": "seed#a", "problem": "b1_h8_kv8_q512_k512_d64_full_fp16_bhsd",
   "config": "BLOCK_N=64,STAGES=2", "template": "flash_fwd", "rel_err": 2e-4,
   "finite": true, "us": 9.0, "flash_us": 10.5, "cudnn_us": 9.5,
   "flash_err": 2e-4, "tflops": 60.0, "read_floor_us": null},
  {"name": "seed#b", "problem": "b1_h8_kv8_q512_k512_d64_full_fp16_bhsd",
   "config": "STAGES=3,BLOCK_N=128", "template": "flash_fwd",
   "rel_err": 2e-4, "finite": true, "us": 8.0, "cudnn_us": 9.5,
   "tflops": 67.0},
  {"name": "long", "problem": "b2_h16_kv16_q4096_k4096_d128_full_bf16_bhsd",
   "config": "BLOCK_N=128", "template": "flash_fwd_tma", "rel_err": 1e-3,
   "finite": true, "us": 430.0, "tflops": 630.0}
 ]})";

v1::Job SeedJob(int block_n, int stages) {
  v1::Job job;
  job.set_template_name("flash_fwd");
  v1::Problem* p = job.mutable_problem();
  p->set_batch(1);
  p->set_heads(8);
  p->set_kv_heads(8);
  p->set_seq_q(512);
  p->set_seq_k(512);
  p->set_head_dim(64);
  p->set_dtype(v1::DTYPE_FP16);
  for (auto [name, value] :
       {std::pair{"BLOCK_N", block_n}, {"STAGES", stages}}) {
    v1::ParamValue* v = job.mutable_best()->mutable_config()->add_params();
    v->set_name(name);
    v->set_value(value);
  }
  return job;
}

TEST(ComparisonTest, ParsesTheScriptsJson) {
  absl::StatusOr<v1::SdpaComparison> run = ParseComparison(kRun, "run.json");
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->gpu(), "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(run->commit(), "abc1234");
  ASSERT_EQ(run->results_size(), 3);
  EXPECT_EQ(run->results(0).template_name(), "flash_fwd");
  EXPECT_DOUBLE_EQ(run->results(0).flash_us(), 10.5);
  // A backend SDPA did not run is absent, not zero.
  EXPECT_FALSE(run->results(1).has_flash_us());
  EXPECT_TRUE(run->results(1).has_cudnn_us());
}

TEST(ComparisonTest, OtherTextIsRefusedNamingTheFile) {
  absl::StatusOr<v1::SdpaComparison> run =
      ParseComparison("us,cudnn_us\n1,2\n", "run.csv");
  EXPECT_EQ(run.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(run.status().message(), HasSubstr("run.csv"));
  EXPECT_EQ(ReadComparison("/nonexistent/run.json").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(ComparisonTest, ReadsAFile) {
  const std::string path = ::testing::TempDir() + "/comparison_test.json";
  std::ofstream(path) << kRun;
  absl::StatusOr<v1::SdpaComparison> run = ReadComparison(path);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->results_size(), 3);
  std::remove(path.c_str());
}

TEST(ComparisonTest, TheJobsRowsComeWithItsWinnerFirst) {
  const v1::SdpaComparison run = *ParseComparison(kRun, "run.json");
  // The winner's config in another order than the file writes it.
  const v1::Job job = SeedJob(128, 3);
  absl::StatusOr<std::vector<v1::SdpaComparisonRow>> rows =
      RowsForJob(run, job, "run.json");
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].name(), "seed#b");
  EXPECT_TRUE(IsJobWinner((*rows)[0], job));
  EXPECT_FALSE(IsJobWinner((*rows)[1], job));
}

TEST(ComparisonTest, WithoutTheWinnerTheFastestComesFirst) {
  const v1::SdpaComparison run = *ParseComparison(kRun, "run.json");
  std::vector<v1::SdpaComparisonRow> rows =
      *RowsForJob(run, SeedJob(32, 1), "run.json");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].name(), "seed#b");  // 8 us before 9 us.
  // The slower one is the winner now: it comes first.
  rows = *RowsForJob(run, SeedJob(64, 2), "run.json");
  EXPECT_EQ(rows[0].name(), "seed#a");
}

TEST(ComparisonTest, AWinnerOfAnotherTemplateIsNotThisJobs) {
  const v1::SdpaComparison run = *ParseComparison(kRun, "run.json");
  v1::Job job = SeedJob(128, 3);
  job.set_template_name("flash_fwd_sm90");
  std::vector<v1::SdpaComparisonRow> rows = *RowsForJob(run, job, "run.json");
  EXPECT_FALSE(IsJobWinner(rows[0], job));
  EXPECT_FALSE(IsJobWinner(rows[1], job));
}

TEST(ComparisonTest, ARunWithoutTheJobsProblemIsAnError) {
  const v1::SdpaComparison run = *ParseComparison(kRun, "run.json");
  v1::Job job = SeedJob(128, 3);
  job.mutable_problem()->set_causal(true);
  absl::StatusOr<std::vector<v1::SdpaComparisonRow>> rows =
      RowsForJob(run, job, "run.json");
  EXPECT_EQ(rows.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(rows.status().message(),
              HasSubstr("b1_h8_kv8_q512_k512_d64_causal_fp16_bhsd"));
  EXPECT_THAT(rows.status().message(),
              HasSubstr("b2_h16_kv16_q4096_k4096_d128_full_bf16_bhsd"));
  EXPECT_THAT(rows.status().message(), HasSubstr("run.json"));
}

}  // namespace
}  // namespace evotune
