#include "tuner/model/features.h"

#include <cmath>

#include "gtest/gtest.h"

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

TEST(FeatureMapTest, EveryTemplateFillsTheSameLayout) {
  const FeatureMap map(TemplateRegistry::Builtin());
  DeviceLimits limits;
  limits.smem_per_block_bytes = 227 * 1024;
  limits.compute_capability = 90;
  limits.multiprocessors = 132;
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
  std::vector<float> naive;
  map.Append(Template("naive"),
             FeasibleConfigs(Template("naive"), Seed(), limits).front(), Seed(),
             limits, &naive);
  EXPECT_TRUE(std::isnan(Feature(map, naive, "KV_SPLITS")));
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

}  // namespace
}  // namespace evotune
