#include "tuner/evaluator/replay_evaluator.h"

#include <fstream>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernel_templates/template_registry.h"

namespace evotune {
namespace {

using ::testing::HasSubstr;

const char kLandscape[] = EVOTUNE_TEST_DATA "/flash_fwd_landscapes_h100.csv";

TEST(ReplayEvaluatorTest, AnswersFromTheRecording) {
  auto replay = ReplayEvaluator::Load(kLandscape);
  ASSERT_TRUE(replay.ok()) << replay.status();
  const ReplayEvaluator& r = **replay;
  EXPECT_EQ(r.template_name(), "flash_fwd");
  EXPECT_THAT(r.device().name, HasSubstr("replay of NVIDIA H100"));
  // The recorded GPU's limits, as its workers reported them to the daemon.
  EXPECT_EQ(r.device().limits.multiprocessors, 132);
  EXPECT_EQ(r.device().limits.smem_per_block_bytes, 232448);
  EXPECT_EQ(r.device().limits.compute_capability, 90);
  ASSERT_EQ(r.landscape().size(), 31u);
  const KernelTemplate& t = *TemplateRegistry::Builtin().Find("flash_fwd");
  for (const auto& [key, results] : r.landscape()) {
    EXPECT_EQ(results.size(), 432u) << key;
    Problem p = *ParseProblemKey(key);
    // Every recorded config is reachable from today's space (parameters
    // added since the recording match at their first value).
    int covered = 0;
    for (const Config& c : FeasibleConfigs(t, p, r.device().limits)) {
      covered += r.Covers(t, c, p);
    }
    EXPECT_EQ(covered, static_cast<int>(results.size())) << key;
    const auto& [config_key, recorded] = *results.begin();
    absl::StatusOr<TrialResult> got =
        (*replay)->Evaluate(t, *ParseConfigKey(config_key), p);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(got->status, recorded.status);
    EXPECT_DOUBLE_EQ(got->median_us, recorded.median_us);
  }
}

// The exhaustive decode_fwd recording of the suite's decode problems covers
// today's space for each of them on the H100 it was made on: every config
// feasible there was measured.
TEST(ReplayEvaluatorTest, TheDecodeRecordingCoversItsSpace) {
  auto replay = ReplayEvaluator::Load(EVOTUNE_TEST_DATA
                                      "/decode_fwd_landscapes_h100.csv");
  ASSERT_TRUE(replay.ok()) << replay.status();
  const ReplayEvaluator& r = **replay;
  EXPECT_EQ(r.template_name(), "decode_fwd");
  // decode-gqa, decode-long, decode-d64 and spec-decode.
  ASSERT_EQ(r.landscape().size(), 4u);
  EXPECT_EQ(r.RecordedProblems().size(), 4u);
  const KernelTemplate& t = *TemplateRegistry::Builtin().Find("decode_fwd");
  const DeviceLimits h100{232448, 1024, 90};
  for (const auto& [key, results] : r.landscape()) {
    const Problem p = *ParseProblemKey(key);
    EXPECT_LE(p.seq_q, 8) << key;
    const std::vector<Config> feasible = FeasibleConfigs(t, p, h100);
    EXPECT_EQ(feasible.size(), results.size()) << key;
    for (const Config& c : feasible) {
      EXPECT_TRUE(r.Covers(t, c, p)) << key << " " << ConfigKey(c);
    }
  }
}

// The flash_fwd_tma recording: 30 problems (the suite's and a spread of
// batch, heads, GQA ratio, lengths from 1 to 32768, head_dim, causal and
// dtype), every config feasible on its H100 measured, replayed as that GPU
// (compute capability 9.0, which the template needs).
// A recording of many problems holds every config the template's space
// accepts on the H100 for each, over both head_dims and many query lengths.
void ExpectCoversItsSpace(const std::string& file, const std::string& name,
                          size_t problems, size_t min_configs) {
  auto replay = ReplayEvaluator::Load(std::string(EVOTUNE_TEST_DATA) + file);
  ASSERT_TRUE(replay.ok()) << replay.status();
  const ReplayEvaluator& r = **replay;
  EXPECT_EQ(r.template_name(), name);
  EXPECT_EQ(r.device().cc_major, 9);
  EXPECT_EQ(r.device().cc_minor, 0);
  ASSERT_EQ(r.landscape().size(), problems);
  const KernelTemplate& t = *TemplateRegistry::Builtin().Find(name);
  EXPECT_TRUE(CheckDevice(t, r.device().limits).ok());
  const DeviceLimits h100{232448, 1024, 90};
  std::set<int64_t> head_dims, seq_qs;
  for (const auto& [key, results] : r.landscape()) {
    const Problem p = *ParseProblemKey(key);
    head_dims.insert(p.head_dim);
    seq_qs.insert(p.seq_q);
    EXPECT_EQ(FeasibleConfigs(t, p, h100).size(), results.size()) << key;
    EXPECT_GE(results.size(), min_configs) << key;
  }
  EXPECT_EQ(head_dims, (std::set<int64_t>{64, 128}));
  EXPECT_GE(seq_qs.size(), 15u);
}

TEST(ReplayEvaluatorTest, TheFlashFwdTmaRecordingCoversItsSpace) {
  ExpectCoversItsSpace("/flash_fwd_tma_landscapes_h100.csv", "flash_fwd_tma",
                       30, 100);
}

TEST(ReplayEvaluatorTest, TheFlashFwdSm90RecordingCoversItsSpace) {
  ExpectCoversItsSpace("/flash_fwd_sm90_landscapes_h100.csv", "flash_fwd_sm90",
                       31, 54);
}

TEST(ReplayEvaluatorTest, RefusesWhatWasNotRecorded) {
  auto replay = ReplayEvaluator::Load(kLandscape);
  ASSERT_TRUE(replay.ok());
  const KernelTemplate& flash = *TemplateRegistry::Builtin().Find("flash_fwd");
  const KernelTemplate& naive = *TemplateRegistry::Builtin().Find("naive");
  Problem seed;
  seed.heads = seed.kv_heads = 8;
  seed.seq_q = seed.seq_k = 512;
  Problem other = seed;
  other.seq_q = 333;
  EXPECT_TRUE(absl::IsFailedPrecondition(
      (*replay)->Evaluate(flash, flash.defaults[0], other).status()));
  EXPECT_TRUE(absl::IsFailedPrecondition(
      (*replay)->Evaluate(naive, naive.defaults[0], seed).status()));
  Config unknown = flash.defaults[0];
  unknown["BLOCK_M"] = 999;
  absl::StatusOr<TrialResult> r = (*replay)->Evaluate(flash, unknown, seed);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, TrialStatus::kResourceRejected);
}

// Timing in turns is answered config by config from the recording, in the
// order asked (the Evaluator's default); an unrecorded problem is an error.
TEST(ReplayEvaluatorTest, TimesInTurnsAsRecorded) {
  auto replay = ReplayEvaluator::Load(kLandscape);
  ASSERT_TRUE(replay.ok());
  const KernelTemplate& t = *TemplateRegistry::Builtin().Find("flash_fwd");
  Problem seed;
  seed.heads = seed.kv_heads = 8;
  seed.seq_q = seed.seq_k = 512;
  std::vector<Config> configs =
      FeasibleConfigs(t, seed, (*replay)->device().limits);
  ASSERT_GT(configs.size(), 3u);
  configs.resize(3);
  configs.insert(configs.begin() + 1, t.defaults[0]);
  configs[1]["BLOCK_M"] = 999;
  absl::StatusOr<std::vector<TrialResult>> got =
      (*replay)->TimeInTurns(OfTemplate(t, configs), seed, 10);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), configs.size());
  EXPECT_EQ((*got)[1].status, TrialStatus::kResourceRejected);
  for (size_t i : {0, 2, 3}) {
    absl::StatusOr<TrialResult> one = (*replay)->Evaluate(t, configs[i], seed);
    ASSERT_TRUE(one.ok());
    EXPECT_EQ((*got)[i].status, one->status) << i;
    EXPECT_DOUBLE_EQ((*got)[i].median_us, one->median_us) << i;
  }
  Problem other = seed;
  other.seq_q = 333;
  EXPECT_TRUE(absl::IsFailedPrecondition(
      (*replay)->TimeInTurns(OfTemplate(t, configs), other, 10).status()));
}

// A recording made before headers gave the limits: the multiprocessors are
// unknown and the shared memory limit admits every recorded config.
TEST(ReplayEvaluatorTest, ARecordingWithoutLimitsAdmitsWhatItHolds) {
  const std::string path = ::testing::TempDir() + "/old_landscape.csv";
  std::ofstream(path) << "# evotune landscape: every feasible naive x\n"
                         "# compute capability: 8.9\n"
                         "problem,problem_key,config,status,median_us,min_us,"
                         "p90_us,cv\n"
                         "seed,b1_h8_kv8_q512_k512_d64_full_fp16_bhsd,"
                         "\"KV_TILE=64,WARPS=4\",ok,9,9,9,0\n";
  auto replay = ReplayEvaluator::Load(path);
  ASSERT_TRUE(replay.ok()) << replay.status();
  EXPECT_EQ((*replay)->device().limits.compute_capability, 89);
  EXPECT_EQ((*replay)->device().limits.multiprocessors, 0);
  EXPECT_GE((*replay)->device().limits.smem_per_block_bytes, int64_t{1} << 30);
}

TEST(ReplayEvaluatorTest, MalformedFilesNameTheLine) {
  const std::string path = ::testing::TempDir() + "/bad_landscape.csv";
  std::ofstream(path) << "# evotune landscape: every feasible flash_fwd x\n"
                         "problem,problem_key,config,status,median_us,min_us,"
                         "p90_us,cv\n"
                         "seed,b1_h8_kv8_q512_k512_d64_full_fp16_bhsd,\"A=1\","
                         "ok,abc,1,1,0\n";
  auto replay = ReplayEvaluator::Load(path);
  EXPECT_TRUE(absl::IsInvalidArgument(replay.status()));
  EXPECT_THAT(std::string(replay.status().message()), HasSubstr(":3:"));
  std::ofstream(path) << "# evotune landscape: every feasible flash_fwd x\n"
                         "# multiprocessors: lots\n";
  replay = ReplayEvaluator::Load(path);
  EXPECT_TRUE(absl::IsInvalidArgument(replay.status()));
  EXPECT_THAT(std::string(replay.status().message()),
              HasSubstr(":2: multiprocessors"));
  EXPECT_TRUE(absl::IsNotFound(ReplayEvaluator::Load("/nonexistent").status()));
}

}  // namespace
}  // namespace evotune
