// "random": the feasible configs in a seeded uniform order, without
// replacement.
#ifndef EVOTUNE_TUNER_SEARCH_STRATEGIES_RANDOM_STRATEGY_H_
#define EVOTUNE_TUNER_SEARCH_STRATEGIES_RANDOM_STRATEGY_H_

#include "tuner/search/strategy_registry.h"

namespace evotune {

StrategySpec EVOTUNE_STRATEGY_SPEC(random)();

}  // namespace evotune

#endif  // EVOTUNE_TUNER_SEARCH_STRATEGIES_RANDOM_STRATEGY_H_
