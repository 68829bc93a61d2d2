// "exhaustive": every feasible config, in enumeration order.
#ifndef EVOTUNE_TUNER_SEARCH_STRATEGIES_EXHAUSTIVE_STRATEGY_H_
#define EVOTUNE_TUNER_SEARCH_STRATEGIES_EXHAUSTIVE_STRATEGY_H_

#include "tuner/search/strategy_registry.h"

namespace evotune {

StrategySpec EVOTUNE_STRATEGY_SPEC(exhaustive)();

}  // namespace evotune

#endif  // EVOTUNE_TUNER_SEARCH_STRATEGIES_EXHAUSTIVE_STRATEGY_H_
