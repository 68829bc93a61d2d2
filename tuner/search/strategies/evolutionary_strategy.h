// EvolutionaryStrategy: a steady-state genetic search over a template's
// parameter space.
//
//   - The first generation is the seeds (best configs of similar problems,
//     the template's defaults), then random feasible configs.
//   - Each child takes every parameter from one of two parents (uniform
//     crossover); parents win a tournament among the best `parents`
//     evaluated configs (elitism: the best are never lost), failures rank
//     last.
//   - Mutation steps a parameter to a neighbouring value (parameters are
//     ordered) or, more rarely, resets it to a random value.
//   - A share of the children are untried neighbours of the best config
//     (one parameter one step away): a local search that makes sure the
//     best point's surroundings are seen early.
//   - A child outside the feasible set, or already seen, is repaired by
//     neighbouring steps and otherwise replaced by a random unseen feasible
//     config: nothing infeasible or repeated is ever proposed.
//   - With a cost model at hand and `prescreen` > 1, each config after the
//     trusted seeds is the one predicted fastest of `prescreen` candidates
//     drawn as above and the seeds not yet run (the others stay unseen): the
//     model filters, the GPU measures. A seed's prediction counts
//     `seed_margin` faster than it is (the defaults are proven on many
//     problems, the model errs by about that much).
//     The model is trusted only while it orders its own picks as measured:
//     once 8 drawn candidates it chose ran, screening stops for good when
//     fewer than `min_concordance` of their pairs (each with one of the
//     faster half; failures slowest) are ordered alike by prediction and
//     measurement (a model learned on unlike problems can mislead). Seeds
//     do not count: a verdict on them would be given before the model
//     picked anything.
//   - Done when every feasible config was seen, or when `patience`
//     generations in a row improved the best latency by less than
//     `min_gain`.
// Deterministic under a seed: its random draws come from std::mt19937_64,
// whose sequence the standard fixes, without library distributions.
#ifndef EVOTUNE_TUNER_SEARCH_STRATEGIES_EVOLUTIONARY_STRATEGY_H_
#define EVOTUNE_TUNER_SEARCH_STRATEGIES_EVOLUTIONARY_STRATEGY_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "tuner/search/search_strategy.h"
#include "tuner/search/strategy_registry.h"

namespace evotune {

struct EvolutionOptions {
  int population = 8;        // Configs per generation.
  int parents = 6;           // Breeding pool: the best evaluated configs.
  int tournament = 2;        // Contestants per parent choice.
  double step_prob = 0.35;   // Per parameter: move to a neighbouring value.
  double reset_prob = 0.08;  // Per parameter: draw a random value.
  double local_prob = 0.65;  // Per child: a neighbour of the best instead.
  int patience = 8;          // Generations without gain before Done().
  double min_gain = 0.002;   // Relative improvement that counts as gain.
  int prescreen = 1;         // Candidates per proposal, with a model.
  double min_concordance = 0.65;  // Pairs the model must order right.
  double seed_margin = 0.15;      // A seed's edge over drawn candidates.
};

class EvolutionaryStrategy : public SearchStrategy {
 public:
  EvolutionaryStrategy(SearchInputs inputs, uint64_t seed,
                       EvolutionOptions options);

  std::vector<Config> Propose(int n) override;
  void Report(
      const std::vector<std::pair<Config, TrialResult>>& results) override;
  bool Done() const override;

  int generation() const { return generation_; }

 private:
  uint64_t Below(uint64_t n);          // Uniform in [0, n).
  double Unit();                       // Uniform in [0, 1).
  bool Usable(const Config& c) const;  // Feasible and not seen.
  std::optional<Config> RandomUnseen();
  std::optional<Config> Candidate(bool breeding);
  std::optional<Config> NextSeed(std::deque<Config>& seeds);
  bool Screening();  // Whether proposals are screened by the model now.
  std::optional<Config> Screened(bool breeding);
  bool ModelOrdersMeasurements();
  std::optional<Config> Child();
  std::optional<Config> NeighbourOfBest();
  std::optional<Config> Repair(Config c);
  const Config& Tournament();
  Config Mutate(Config c);

  const SearchInputs inputs_;
  const EvolutionOptions options_;
  ParamSpace active_;  // Parameters with more than one feasible value.
  std::mt19937_64 gen_;
  std::set<std::string> feasible_keys_;
  std::set<std::string> seen_;           // Proposed or reported.
  std::deque<Config> trusted_;           // Seeds measured as they are.
  std::deque<Config> first_generation_;  // The other seeds.
  // Evaluated configs by fitness (median latency; failures +inf), best first.
  std::vector<std::pair<double, Config>> ranked_;
  int reported_this_generation_ = 0;
  int generation_ = 0;
  int stalled_ = 0;
  bool model_trusted_ = true;
  std::set<std::string> picked_;       // Drawn candidates the model chose.
  size_t concordance_checked_at_ = 0;  // Picks measured when last checked.
  double best_ = 0;
  double best_at_generation_start_ = 0;
};

// "evolutionary": EvolutionaryStrategy, every EvolutionOptions field an
// option.
StrategySpec EVOTUNE_STRATEGY_SPEC(evolutionary)();

}  // namespace evotune

#endif  // EVOTUNE_TUNER_SEARCH_STRATEGIES_EVOLUTIONARY_STRATEGY_H_
