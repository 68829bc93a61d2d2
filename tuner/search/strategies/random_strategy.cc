#include "tuner/search/strategies/random_strategy.h"

#include "tuner/search/list_strategy.h"

namespace evotune {

StrategySpec EVOTUNE_STRATEGY_SPEC(random)() {
  return {"random",
          "feasible configs drawn uniformly without replacement (a baseline)",
          {},
          [](SearchInputs inputs, uint64_t seed, const StrategyOptions&) {
            return std::unique_ptr<SearchStrategy>(new ListStrategy(
                ListStrategy::Shuffled(std::move(inputs.feasible), seed)));
          }};
}

}  // namespace evotune
