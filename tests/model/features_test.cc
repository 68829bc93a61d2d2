#include "tuner/model/features.h"

#include <cmath>

#include "core/problem.h"
#include "gtest/gtest.h"
#include "tests/model/h100_testing.h"

namespace evotune {
namespace {

const KernelTemplate& Template(const char* name) {
  return *TemplateRegistry::Builtin().Find(name);
}

Problem Seed() {
  Problem p;
  p.heads = p.kv_heads = 8;
  p.seq_q = p.seq_k = 512;
  return p;
}

float Feature(const FeatureMap& map, const std::vector<float>& row,
              const std::string& name) {
  for (int i = 0; i < map.size(); ++i) {
    if (map.names()[i] == name) return row[i];
  }
  ADD_FAILURE() << "no feature " << name;
  return 0;
}

// The seed problem's row for naive's first feasible config: a template that
// gives neither its tiles nor a KV split.
std::vector<float> NaiveRow(const FeatureMap& map, const DeviceLimits& limits) {
  const KernelTemplate& naive = Template("naive");
  std::vector<float> row;
  map.Append(naive, FeasibleConfigs(naive, Seed(), limits).front(), Seed(),
             limits, &row);
  return row;
}

// flash_fwd with 64 x 64 tiles, four warps, no split.
Config Flash64() {
  return {{"BLOCK_M", 64},   {"BLOCK_N", 64},  {"KV_SPLITS", 1},
          {"MIN_BLOCKS", 1}, {"NUM_WARPS", 4}, {"Q_IN_REGS", 0},
          {"STAGES", 2}};
}

TEST(FeatureMapTest, EveryTemplateFillsTheSameLayout) {
  const FeatureMap map(TemplateRegistry::Builtin());
  const DeviceLimits limits = H100Limits();
  for (const KernelTemplate& t : TemplateRegistry::Builtin().templates()) {
    if (!CheckSupports(t, Seed()).ok()) continue;
    std::vector<Config> configs = FeasibleConfigs(t, Seed(), limits);
    ASSERT_FALSE(configs.empty()) << t.name;
    std::vector<float> row;
    map.Append(t, configs.front(), Seed(), limits, &row);
    ASSERT_EQ(static_cast<int>(row.size()), map.size()) << t.name;
    // Its own parameters are set, the others' are missing.
    for (const auto& [name, value] : configs.front()) {
      EXPECT_EQ(Feature(map, row, name), value) << t.name << " " << name;
    }
    EXPECT_EQ(Feature(map, row, "log2_seq_q"), 9);
  }
  EXPECT_TRUE(std::isnan(Feature(map, NaiveRow(map, limits), "KV_SPLITS")));
}

TEST(FeatureMapTest, WavesNeedTheMultiprocessorCount) {
  const FeatureMap map(TemplateRegistry::Builtin());
  const KernelTemplate& t = Template("flash_fwd");
  DeviceLimits limits;
  limits.smem_per_block_bytes = 227 * 1024;
  const Config c = FeasibleConfigs(t, Seed(), limits).front();
  std::vector<float> unknown, known;
  map.Append(t, c, Seed(), limits, &unknown);
  limits.multiprocessors = 132;
  map.Append(t, c, Seed(), limits, &known);
  EXPECT_TRUE(std::isnan(Feature(map, unknown, "waves")));
  const LaunchGeometry g = t.geometry(c, Seed());
  const double blocks = double(g.grid[0]) * g.grid[1] * g.grid[2];
  EXPECT_FLOAT_EQ(Feature(map, known, "waves"),
                  blocks / (132 * Feature(map, known, "blocks_per_sm")));
}

// 32 queries in 64-row tiles fill half of each; the decode template's
// 16-row tiles pack 4 heads x 4 queries. Templates that do not give their
// tiles (naive) leave the multiprocessor load unknown.
TEST(FeatureMapTest, TileFillAndMultiprocessorLoad) {
  const FeatureMap map(TemplateRegistry::Builtin());
  DeviceLimits limits;
  limits.smem_per_block_bytes = 227 * 1024;
  limits.multiprocessors = 132;
  Problem p = Seed();
  p.seq_q = 32;
  std::vector<float> row;
  map.Append(Template("flash_fwd"), Flash64(), p, limits, &row);
  EXPECT_FLOAT_EQ(Feature(map, row, "row_fill"), 0.5f);
  // 8 blocks of 64 rows x (512 keys + 64) on 132 multiprocessors.
  EXPECT_FLOAT_EQ(Feature(map, row, "sm_imbalance"), 132.0f / 8);
  EXPECT_FLOAT_EQ(Feature(map, row, "log2_sm_flops"),
                  std::log2(4.0 * 64 * 64 * (512 + 64)));
  p.seq_q = 4;
  p.kv_heads = 2;
  row.clear();
  const KernelTemplate& decode = Template("decode_fwd");
  map.Append(decode, FeasibleConfigs(decode, p, limits).front(), p, limits,
             &row);
  EXPECT_FLOAT_EQ(Feature(map, row, "row_fill"), 1.0f);
  row = NaiveRow(map, limits);
  EXPECT_TRUE(std::isnan(Feature(map, row, "row_fill")));
  EXPECT_TRUE(std::isnan(Feature(map, row, "sm_imbalance")));
}

// A tile reads its KV head's keys: 8 tiles of 64 queries in each of 4 query
// heads per KV head read them 32 times; the decode template's 16-row tiles of
// 4 heads x 8 queries twice, in 2 x 4 x 8 blocks before its splits. Naive
// does not give its tiles.
TEST(FeatureMapTest, KvReadsAndTheUnsplitGrid) {
  const FeatureMap map(TemplateRegistry::Builtin());
  const DeviceLimits limits = H100Limits();
  Problem p = Seed();
  p.kv_heads = 2;
  std::vector<float> row;
  map.Append(Template("flash_fwd"), Flash64(), p, limits, &row);
  EXPECT_FLOAT_EQ(Feature(map, row, "log2_kv_passes"), 5.0f);
  EXPECT_FLOAT_EQ(Feature(map, row, "unsplit_per_sm"), 32.0f * 2 / 132);
  p = *ParseProblemKey("b4_h32_kv8_q8_k4096_d128_causal_bf16_bhsd");
  for (const int64_t splits : {1, 2, 4}) {
    const Config decode = {{"KV_SPLITS", splits}, {"Q_IN_REGS", 0},
                           {"ROWS", 16},          {"STAGES", 2},
                           {"TILE_N", 32},        {"WARPS", 4}};
    row.clear();
    map.Append(Template("decode_fwd"), decode, p, limits, &row);
    EXPECT_FLOAT_EQ(Feature(map, row, "log2_kv_passes"), 1.0f) << splits;
    EXPECT_FLOAT_EQ(Feature(map, row, "unsplit_per_sm"), 2.0f * 4 * 8 / 132)
        << splits;
  }
  row = NaiveRow(map, limits);
  EXPECT_TRUE(std::isnan(Feature(map, row, "log2_kv_passes")));
  EXPECT_TRUE(std::isnan(Feature(map, row, "unsplit_per_sm")));
}

// The work a cost model's latency is relative to: the busiest
// multiprocessor's flops, or the problem's spread over the multiprocessors
// where the template does not give its tiles.
TEST(FeatureMapTest, WorkIsTheBusiestMultiprocessorsFlops) {
  const FeatureMap map(TemplateRegistry::Builtin());
  const DeviceLimits limits = H100Limits();
  std::vector<float> row;
  const KernelTemplate& tma = Template("flash_fwd_tma");
  map.Append(tma, FeasibleConfigs(tma, Seed(), limits).front(), Seed(), limits,
             &row);
  ASSERT_FALSE(std::isnan(Feature(map, row, "log2_sm_flops")));
  EXPECT_EQ(map.Log2Work(row.data(), 132), Feature(map, row, "log2_sm_flops"));
  EXPECT_LT(map.Log2Work(row.data(), 132), Feature(map, row, "log2_flops"));
  row = NaiveRow(map, limits);
  ASSERT_TRUE(std::isnan(Feature(map, row, "log2_sm_flops")));
  EXPECT_DOUBLE_EQ(map.Log2Work(row.data(), 128),
                   Feature(map, row, "log2_flops") - 7.0);
  EXPECT_DOUBLE_EQ(map.Log2Work(row.data(), 0),
                   Feature(map, row, "log2_flops"));
}

}  // namespace
}  // namespace evotune
