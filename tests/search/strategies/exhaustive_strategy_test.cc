#include "tuner/search/strategies/exhaustive_strategy.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/search/strategy_testing.h"

namespace evotune {
namespace {

TEST(ExhaustiveStrategyTest, ProposesEveryConfigInOrder) {
  const StrategySpec spec = EVOTUNE_STRATEGY_SPEC(exhaustive)();
  EXPECT_EQ(spec.name, "exhaustive");
  std::unique_ptr<SearchStrategy> s = spec.make(LineSpace(4), 0, {});
  EXPECT_EQ(Drain(*s), (std::vector<std::string>{"X=0", "X=1", "X=2", "X=3"}));
  EXPECT_TRUE(s->Propose(1).empty());
}

TEST(ExhaustiveStrategyTest, ReportedConfigsAreNotProposed) {
  std::unique_ptr<SearchStrategy> s =
      EVOTUNE_STRATEGY_SPEC(exhaustive)().make(LineSpace(5), 0, {});
  s->Report({{{{"X", 0}}, TrialResult{}}, {{{"X", 3}}, TrialResult{}}});
  EXPECT_EQ(Drain(*s), (std::vector<std::string>{"X=1", "X=2", "X=4"}));
}

}  // namespace
}  // namespace evotune
