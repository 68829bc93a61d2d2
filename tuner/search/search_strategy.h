// SearchStrategy: decides which configs to evaluate next (ask/tell).
//
// No threads, no I/O, no clock: every decision follows from the constructor
// arguments (including the seed) and the reported results, so a strategy is
// deterministic and testable without a GPU. Budgets are enforced by the
// caller; Done() means the strategy itself has nothing more to propose.
#ifndef EVOTUNE_TUNER_SEARCH_SEARCH_STRATEGY_H_
#define EVOTUNE_TUNER_SEARCH_SEARCH_STRATEGY_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "core/config.h"
#include "core/param_space.h"
#include "core/trial.h"

namespace evotune {

class SearchStrategy {
 public:
  virtual ~SearchStrategy() = default;

  // Up to n configs never proposed or reported before; fewer (or none) when
  // the strategy has less to offer.
  virtual std::vector<Config> Propose(int n) = 0;

  // Results of evaluated configs, proposed by this strategy or not (a resumed
  // job reports what the store already holds before proposing again).
  virtual void Report(
      const std::vector<std::pair<Config, TrialResult>>& results) = 0;

  virtual bool Done() const = 0;
};

// A cost model's predicted latency (us, lower is faster) of each config on
// the searched problem, in order; deterministic.
using LatencyPredictor =
    std::function<std::vector<double>(const std::vector<Config>&)>;

// What a strategy searches: the space, its configs that pass every
// constraint on the target device (a strategy never proposes another one),
// configs worth trying first (the best of similar problems, the template's
// defaults), best first, and a cost model's predictor when the device has
// one (empty otherwise; a strategy may ignore it). The first
// `trusted_seeds` seeds (the best of similar problems, defaults fitted to
// the problem) are measured as they are; a strategy that screens by the
// model may screen the others too.
struct SearchInputs {
  ParamSpace space;
  std::vector<Config> feasible;
  std::vector<Config> seeds;
  LatencyPredictor predict_us;
  size_t trusted_seeds = 0;
};

}  // namespace evotune

#endif  // EVOTUNE_TUNER_SEARCH_SEARCH_STRATEGY_H_
