#include "tuner/search/strategies/random_strategy.h"

#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/search/strategy_testing.h"

namespace evotune {
namespace {

std::vector<std::string> RunWithSeed(uint64_t seed) {
  return Drain(*EVOTUNE_STRATEGY_SPEC(random)().make(LineSpace(50), seed, {}));
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
