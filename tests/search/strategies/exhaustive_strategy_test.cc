#include "tuner/search/strategies/exhaustive_strategy.h"

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

TEST(ExhaustiveStrategyTest, ProposesEveryConfigInOrder) {
  const StrategySpec spec = EVOTUNE_STRATEGY_SPEC(exhaustive)();
  EXPECT_EQ(spec.name, "exhaustive");
  std::unique_ptr<SearchStrategy> s = spec.make(Space(4), 0, {});
  EXPECT_EQ(Drain(*s), (std::vector<std::string>{"X=0", "X=1", "X=2", "X=3"}));
  EXPECT_TRUE(s->Propose(1).empty());
}

TEST(ExhaustiveStrategyTest, ReportedConfigsAreNotProposed) {
  std::unique_ptr<SearchStrategy> s =
      EVOTUNE_STRATEGY_SPEC(exhaustive)().make(Space(5), 0, {});
  s->Report({{{{"X", 0}}, TrialResult{}}, {{{"X", 3}}, TrialResult{}}});
  EXPECT_EQ(Drain(*s), (std::vector<std::string>{"X=1", "X=2", "X=4"}));
}

}  // namespace
}  // namespace evotune
