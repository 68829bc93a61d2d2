// The cost model on the recorded H100 landscapes, each problem left out in
// turn: a loose bound (bench/transfer_loo prints the real figures).
#include "tuner/model/leave_one_out.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <set>
#include <string>

#include "gtest/gtest.h"
#include "tests/model/h100_testing.h"

namespace evotune {
namespace {

// A recording of tests/data (file name without the folder).
absl::StatusOr<RecordedLandscape> Recording(const std::string& file) {
  return LoadRecordedLandscape(std::string(EVOTUNE_TEST_DATA) + "/" + file,
                               TemplateRegistry::Builtin());
}

// LeaveOneProblemOut with smaller models (300 boosting rounds), to stay
// quick: monotone trees need more of them than 100 (decode-long 2.1x there).
absl::StatusOr<std::vector<LeftOut>> Serve(
    const std::vector<RecordedLandscape>& landscapes,
    const std::set<std::string>& tuned = {}) {
  CostModelOptions options;
  options.booster.rounds = 300;
  return LeaveOneProblemOut(landscapes, H100Limits(), options, tuned);
}

// Every recording gives its GPU's limits in its header: the H100's.
TEST(LeaveOneOutTest, TheRecordingsGiveTheH100sLimits) {
  std::vector<RecordedLandscape> all;
  for (const char* file :
       {"flash_fwd_landscapes_h100.csv", "flash_fwd_sm90_landscapes_h100.csv",
        "flash_fwd_tma_landscapes_h100.csv", "decode_fwd_landscapes_h100.csv",
        "decode_fwd_short_query_landscapes_h100.csv",
        "decode_fwd_spread_landscapes_h100.csv",
        "decode_fwd_causal_spread_landscapes_h100.csv"}) {
    absl::StatusOr<RecordedLandscape> l = Recording(file);
    ASSERT_TRUE(l.ok()) << l.status();
    all.push_back(*std::move(l));
  }
  absl::StatusOr<DeviceLimits> shared = SharedLimits(all);
  ASSERT_TRUE(shared.ok()) << shared.status();
  const DeviceLimits h100 = H100Limits();
  EXPECT_EQ(shared->multiprocessors, h100.multiprocessors);
  EXPECT_EQ(shared->smem_per_block_bytes, h100.smem_per_block_bytes);
  EXPECT_EQ(shared->compute_capability, h100.compute_capability);
  EXPECT_EQ(shared->max_threads_per_block, h100.max_threads_per_block);
}

// A recording that does not say its multiprocessors is refused, and so are
// recordings of two GPUs together, naming both files.
TEST(LeaveOneOutTest, RecordingsMustGiveOneGpusLimits) {
  const std::string dir = ::testing::TempDir();
  const std::string header =
      "# evotune landscape: every feasible naive config per problem\n"
      "# compute capability: 9.0\n";
  const std::string rows =
      "problem,problem_key,config,status,median_us,min_us,p90_us,cv\n"
      "seed,b1_h8_kv8_q512_k512_d64_full_fp16_bhsd,\"KV_TILE=64,WARPS=4\",ok,"
      "9,9,9,0\n";
  std::ofstream(dir + "/unsized.csv") << header << rows;
  absl::StatusOr<RecordedLandscape> unsized =
      LoadRecordedLandscape(dir + "/unsized.csv", TemplateRegistry::Builtin());
  EXPECT_TRUE(absl::IsInvalidArgument(unsized.status()));
  EXPECT_NE(unsized.status().message().find("multiprocessors"),
            std::string::npos)
      << unsized.status();
  std::ofstream(dir + "/l4.csv") << header << "# multiprocessors: 58\n" << rows;
  std::ofstream(dir + "/h100.csv") << header << "# multiprocessors: 132\n"
                                   << rows;
  std::vector<RecordedLandscape> two;
  for (const char* name : {"/h100.csv", "/l4.csv"}) {
    absl::StatusOr<RecordedLandscape> l =
        LoadRecordedLandscape(dir + name, TemplateRegistry::Builtin());
    ASSERT_TRUE(l.ok()) << l.status();
    two.push_back(*std::move(l));
  }
  absl::StatusOr<DeviceLimits> shared = SharedLimits(two);
  EXPECT_TRUE(absl::IsInvalidArgument(shared.status()));
  EXPECT_NE(shared.status().message().find("l4.csv and "), std::string::npos)
      << shared.status();
  two.pop_back();
  ASSERT_TRUE(SharedLimits(two).ok());
  EXPECT_EQ(SharedLimits(two)->multiprocessors, 132);
}

TEST(LeaveOneOutTest, ServedConfigsRunAndComeCloseToTheOptimum) {
  absl::StatusOr<RecordedLandscape> flash =
      Recording("flash_fwd_landscapes_h100.csv");
  ASSERT_TRUE(flash.ok()) << flash.status();
  absl::StatusOr<std::vector<LeftOut>> rows = Serve({*flash});
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 31u);
  std::vector<double> ratios;
  for (const LeftOut& r : *rows) {
    // Never a config that failed there (d64 configs exceed the registers at
    // d128: configs measured at the problem's head_dim come first).
    ASSERT_TRUE(std::isfinite(r.model.us)) << r.problem;
    ratios.push_back(r.model.us / r.optimum.us);
    EXPECT_LE(ratios.back(), 1.4) << r.problem;
  }
  std::sort(ratios.begin(), ratios.end());
  EXPECT_LE(ratios[ratios.size() / 2], 1.10);
}

// The daemon after tuning some problems only: one model trained on them
// serves every other recorded problem, each with a config that runs there.
TEST(LeaveOneOutTest, TunedProblemsServeTheRest) {
  absl::StatusOr<RecordedLandscape> flash =
      Recording("flash_fwd_landscapes_h100.csv");
  ASSERT_TRUE(flash.ok()) << flash.status();
  const std::set<std::string> tuned = {
      "b1_h8_kv8_q512_k512_d64_full_fp16_bhsd",
      "b2_h16_kv16_q4096_k4096_d128_full_bf16_bhsd",
      "b4_h16_kv16_q2048_k2048_d64_causal_bf16_bhsd"};
  absl::StatusOr<std::vector<LeftOut>> rows = Serve({*flash}, tuned);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 28u);
  for (const LeftOut& r : *rows) {
    EXPECT_EQ(tuned.count(r.problem), 0u) << r.problem;
    EXPECT_TRUE(std::isfinite(r.model.us)) << r.problem;
    // Few-query problems lie outside what three prefill problems teach
    // (decode-long: 3x); the decode template serves them (the next test).
    if (ParseProblemKey(r.problem)->seq_q >= 64) {
      EXPECT_LE(r.model.us / r.optimum.us, 2.0) << r.problem;
    }
  }
}

// After tuning prefill problems only (flash_fwd_tma), decode problems are
// answered as the daemon answers them: by the defaults of the decode
// template, which suits them better and was never tuned, fitted to each
// problem. That is every problem of up to 16 queries, and of up to 64 on
// keys at least 64 times as many (MQA with 64 queries on 8192 keys; 17 on
// 4097). On the H100 recordings those come within 15% of each problem's
// optimum (the flash_fwd_tma configs the model would transfer are up to 7x
// slower there), also on the problems recorded for decode_fwd alone,
// several causal queries on grouped KV heads among them.
TEST(LeaveOneOutTest, UntunedDecodeProblemsGetTheDecodeTemplatesDefaults) {
  std::vector<RecordedLandscape> landscapes;
  for (const char* file :
       {"flash_fwd_tma_landscapes_h100.csv", "decode_fwd_landscapes_h100.csv",
        "decode_fwd_short_query_landscapes_h100.csv",
        "decode_fwd_spread_landscapes_h100.csv",
        "decode_fwd_causal_spread_landscapes_h100.csv"}) {
    absl::StatusOr<RecordedLandscape> l = Recording(file);
    ASSERT_TRUE(l.ok()) << l.status();
    landscapes.push_back(*std::move(l));
  }
  const std::set<std::string> tuned = {
      "b1_h8_kv8_q512_k512_d64_full_fp16_bhsd",
      "b2_h16_kv16_q4096_k4096_d128_causal_bf16_bhsd",
      "b1_h32_kv8_q1024_k8192_d128_causal_bf16_bhsd"};
  absl::StatusOr<std::vector<LeftOut>> rows = Serve(landscapes, tuned);
  ASSERT_TRUE(rows.ok()) << rows.status();
  int decode = 0;
  for (const LeftOut& r : *rows) {
    const Problem p = *ParseProblemKey(r.problem);
    if (p.seq_q > 16 && (p.seq_q > 64 || p.seq_k < 64 * p.seq_q)) continue;
    ++decode;
    EXPECT_LE(r.model.us / r.optimum.us, 1.15) << r.problem;
    EXPECT_EQ(r.model.template_name, "decode_fwd") << r.problem;
    EXPECT_EQ(r.nearest.config, r.model.config) << r.problem;
  }
  EXPECT_EQ(decode, 26);
}

// flash_fwd's first fitted config on each recorded problem: within 10% of
// the recorded optimum everywhere (the first of its plain defaults that
// ran is more than 10% off on 15 of the 31, up to 4.4x).
TEST(LeaveOneOutTest, FlashFwdFittedDefaultsComeNearTheOptimum) {
  absl::StatusOr<RecordedLandscape> flash =
      Recording("flash_fwd_landscapes_h100.csv");
  ASSERT_TRUE(flash.ok()) << flash.status();
  ASSERT_EQ(flash->problems.size(), 31u);
  int within_3 = 0;
  for (const auto& [key, results] : flash->problems) {
    const Problem p = *ParseProblemKey(key);
    const Config first = flash->t->fitted_defaults(p, H100Limits()).front();
    double optimum = std::numeric_limits<double>::infinity();
    double fitted = optimum;
    for (const auto& [c, r] : results) {
      if (r.status != TrialStatus::kOk) continue;
      optimum = std::min(optimum, r.median_us);
      if (c == first) fitted = r.median_us;
    }
    EXPECT_LE(fitted / optimum, 1.10) << key;
    within_3 += fitted <= 1.03 * optimum;
  }
  EXPECT_GE(within_3, 27);
}

}  // namespace
}  // namespace evotune
