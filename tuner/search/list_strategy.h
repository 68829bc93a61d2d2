// Strategies that walk a fixed ordering of the feasible configs: random
// (a seeded shuffle) and exhaustive (enumeration order).
#ifndef EVOTUNE_TUNER_SEARCH_LIST_STRATEGY_H_
#define EVOTUNE_TUNER_SEARCH_LIST_STRATEGY_H_

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "tuner/search/search_strategy.h"

namespace evotune {

class ListStrategy : public SearchStrategy {
 public:
  // Proposes `order` front to back, skipping configs already reported.
  explicit ListStrategy(std::vector<Config> order);

  // Uniform random order without replacement, from a seeded generator whose
  // sequence is fixed across platforms (std::shuffle's is not).
  static std::vector<Config> Shuffled(std::vector<Config> configs,
                                      uint64_t seed);

  std::vector<Config> Propose(int n) override;
  void Report(
      const std::vector<std::pair<Config, TrialResult>>& results) override;
  bool Done() const override;

 private:
  void SkipSeen();

  std::vector<Config> order_;
  size_t next_ = 0;
  std::set<std::string> seen_;  // Config keys proposed or reported.
};

}  // namespace evotune

#endif  // EVOTUNE_TUNER_SEARCH_LIST_STRATEGY_H_
