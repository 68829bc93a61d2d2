#include "tuner/search/list_strategy.h"

#include <set>

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

TEST(ListStrategyTest, RandomCoversTheSpaceWithoutRepeats) {
  auto s = MakeStrategy("random", Space(50), 7);
  ASSERT_TRUE(s.ok());
  std::vector<std::string> keys = Drain(**s);
  EXPECT_EQ(keys.size(), 50u);
  EXPECT_EQ(std::set<std::string>(keys.begin(), keys.end()).size(), 50u);
  EXPECT_TRUE((*s)->Propose(1).empty());
}

TEST(ListStrategyTest, SameSeedSameRunOtherSeedOtherRun) {
  auto a = MakeStrategy("random", Space(50), 7);
  auto b = MakeStrategy("random", Space(50), 7);
  auto c = MakeStrategy("random", Space(50), 8);
  EXPECT_EQ(Drain(**a), Drain(**b));
  auto again = MakeStrategy("random", Space(50), 7);
  EXPECT_NE(Drain(**again), Drain(**c));
}

TEST(ListStrategyTest, ReportedConfigsAreNotProposed) {
  auto s = MakeStrategy("exhaustive", Space(5), 0);
  ASSERT_TRUE(s.ok());
  (*s)->Report({{{{"X", 0}}, TrialResult{}}, {{{"X", 3}}, TrialResult{}}});
  EXPECT_EQ(Drain(**s), (std::vector<std::string>{"X=1", "X=2", "X=4"}));
}

TEST(ListStrategyTest, UnknownStrategyNamesTheField) {
  auto s = MakeStrategy("annealing", Space(5), 0);
  EXPECT_TRUE(absl::IsInvalidArgument(s.status()));
  EXPECT_EQ(s.status().message().rfind("strategy:", 0), 0u);
}

}  // namespace
}  // namespace evotune
