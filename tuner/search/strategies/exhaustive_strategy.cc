#include "tuner/search/strategies/exhaustive_strategy.h"

#include "tuner/search/list_strategy.h"

namespace evotune {

StrategySpec EVOTUNE_STRATEGY_SPEC(exhaustive)() {
  return {"exhaustive",
          "every feasible config in enumeration order (a whole landscape)",
          {},
          [](SearchInputs inputs, uint64_t, const StrategyOptions&) {
            return std::unique_ptr<SearchStrategy>(
                new ListStrategy(std::move(inputs.feasible)));
          }};
}

}  // namespace evotune
