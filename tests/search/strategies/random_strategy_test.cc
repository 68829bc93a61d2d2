#include "tuner/search/strategies/random_strategy.h"

#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace evotune {
namespace {

SearchInputs Space(int n) {
  SearchInputs inputs;
  std::vector<int64_t> values;
  for (int i = 0; i < n; ++i) {
    inputs.feasible.push_back({{"X", i}});
    values.push_back(i);
  }
  inputs.space = ParamSpace({{"X", values, ""}});
  return inputs;
}

std::vector<std::string> Drain(SearchStrategy& s) {
  std::vector<std::string> keys;
  while (!s.Done()) {
    std::vector<Config> next = s.Propose(3);
    EXPECT_FALSE(next.empty());
    for (const Config& c : next) keys.push_back(ConfigKey(c));
  }
  return keys;
}

std::vector<std::string> RunWithSeed(uint64_t seed) {
  return Drain(*EVOTUNE_STRATEGY_SPEC(random)().make(Space(50), seed, {}));
}

TEST(RandomStrategyTest, CoversTheSpaceWithoutRepeats) {
  std::vector<std::string> keys = RunWithSeed(7);
  EXPECT_EQ(keys.size(), 50u);
  EXPECT_EQ(std::set<std::string>(keys.begin(), keys.end()).size(), 50u);
  // Not the enumeration order.
  std::vector<std::string> in_order;
  for (int i = 0; i < 50; ++i) in_order.push_back("X=" + std::to_string(i));
  EXPECT_NE(keys, in_order);
}

TEST(RandomStrategyTest, SameSeedSameRunOtherSeedOtherRun) {
  EXPECT_EQ(RunWithSeed(7), RunWithSeed(7));
  EXPECT_NE(RunWithSeed(7), RunWithSeed(8));
}

}  // namespace
}  // namespace evotune
