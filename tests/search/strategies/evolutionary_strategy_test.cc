// The evolutionary strategy on real landscapes of flash_fwd recorded on the
// H100 (tests/data), answered by the replay evaluator.
#include "tuner/search/strategies/evolutionary_strategy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "gtest/gtest.h"
#include "kernel_templates/template_registry.h"
#include "tuner/evaluator/replay_evaluator.h"

namespace evotune {
namespace {

const char kLandscape[] = EVOTUNE_TEST_DATA "/flash_fwd_landscapes_h100.csv";

// Runs a strategy for `budget` trials; returns the configs in proposal order
// and the best latency found.
std::pair<std::vector<std::string>, double> RunSearch(SearchStrategy& s,
                                                      Evaluator& e,
                                                      const KernelTemplate& t,
                                                      const Problem& p,
                                                      int budget) {
  std::vector<std::string> order;
  double best = std::numeric_limits<double>::infinity();
  while (static_cast<int>(order.size()) < budget && !s.Done()) {
    std::vector<Config> next = s.Propose(4);
    if (next.empty()) break;
    for (const Config& c : next) {
      if (static_cast<int>(order.size()) >= budget) break;
      TrialResult r = *e.Evaluate(t, c, p);
      if (r.status == TrialStatus::kOk) best = std::min(best, r.median_us);
      order.push_back(ConfigKey(c));
      s.Report({{c, r}});
    }
  }
  return {order, best};
}

// Problems of fewer than 64 query rows: decode_fwd's, where flash_fwd's
// optimum lies far from its (prefill) defaults, in corners such as 16-row
// blocks of one warp; a fifth of the space does not always reach it.
bool FewQueries(const Problem& p) { return p.seq_q < 64; }

class EvolutionaryOnLandscapes : public ::testing::Test {
 protected:
  void SetUp() override {
    auto replay = ReplayEvaluator::Load(kLandscape);
    ASSERT_TRUE(replay.ok()) << replay.status();
    replay_ = *std::move(replay);
  }
  // The feasible configs the recording covers, seeded with the defaults.
  SearchInputs Inputs(const Problem& p) const {
    std::vector<Config> feasible;
    for (const Config& c : FeasibleConfigs(t_, p, replay_->device().limits)) {
      if (replay_->Covers(t_, c, p)) feasible.push_back(c);
    }
    return {t_.space, feasible, t_.defaults};
  }
  const KernelTemplate& t_ = *TemplateRegistry::Builtin().Find("flash_fwd");
  std::unique_ptr<ReplayEvaluator> replay_;
};

TEST_F(EvolutionaryOnLandscapes, FindsWithinFivePercentInAFifthOfTheSpace) {
  for (const auto& [key, results] : replay_->landscape()) {
    const Problem p = *ParseProblemKey(key);
    if (FewQueries(p)) continue;
    double optimum = std::numeric_limits<double>::infinity();
    for (const auto& [config, r] : results) {
      if (r.status == TrialStatus::kOk)
        optimum = std::min(optimum, r.median_us);
    }
    SearchInputs inputs = Inputs(p);
    const int budget =
        static_cast<int>(std::ceil(0.2 * inputs.feasible.size()));
    EvolutionaryStrategy s(std::move(inputs), /*seed=*/1, EvolutionOptions{});
    auto [order, best] = RunSearch(s, *replay_, t_, p, budget);
    EXPECT_LE(best, optimum * 1.05)
        << key << ": best " << best << " us after " << order.size()
        << " trials, optimum " << optimum << " us";
  }
}

// Trials until the best is within 3% of the optimum (budget + 1 if never).
int TrialsToTarget(SearchStrategy& s, Evaluator& e, const KernelTemplate& t,
                   const Problem& p, double optimum, int budget) {
  for (int trials = 0; trials < budget && !s.Done();) {
    std::vector<Config> next = s.Propose(1);
    if (next.empty()) break;
    TrialResult r = *e.Evaluate(t, next[0], p);
    s.Report({{next[0], r}});
    ++trials;
    if (r.status == TrialStatus::kOk && r.median_us <= optimum * 1.03) {
      return trials;
    }
  }
  return budget + 1;
}

// A predictor from the recording itself, `sign` = -1 turning it upside down
// (failures predicted slowest, or fastest).
LatencyPredictor RecordedPredictor(Evaluator& e, const KernelTemplate& t,
                                   const Problem& p, double sign) {
  return [&e, &t, p, sign](const std::vector<Config>& configs) {
    std::vector<double> us;
    for (const Config& c : configs) {
      TrialResult r = *e.Evaluate(t, c, p);
      us.push_back(sign * (r.status == TrialStatus::kOk ? r.median_us : 1e9));
    }
    return us;
  };
}

double Optimum(const std::map<std::string, TrialResult>& results) {
  double optimum = std::numeric_limits<double>::infinity();
  for (const auto& [config, r] : results) {
    if (r.status == TrialStatus::kOk) optimum = std::min(optimum, r.median_us);
  }
  return optimum;
}

// With a model that ranks well, screening candidates reaches the optimum in
// fewer measured trials; without one the same options change nothing.
TEST_F(EvolutionaryOnLandscapes, AGoodModelScreensTheSearchToTheOptimumSooner) {
  EvolutionOptions screened;
  screened.prescreen = 64;
  int plain_trials = 0, screened_trials = 0;
  for (const auto& [key, results] : replay_->landscape()) {
    const Problem p = *ParseProblemKey(key);
    const int budget = static_cast<int>(Inputs(p).feasible.size());
    for (uint64_t seed = 1; seed <= 5; ++seed) {
      SearchInputs inputs = Inputs(p);
      inputs.seeds.clear();  // Screening acts after the seeds.
      EvolutionaryStrategy plain(inputs, seed, EvolutionOptions{});
      plain_trials +=
          TrialsToTarget(plain, *replay_, t_, p, Optimum(results), budget);
      inputs.predict_us = RecordedPredictor(*replay_, t_, p, 1);
      EvolutionaryStrategy s(inputs, seed, screened);
      screened_trials +=
          TrialsToTarget(s, *replay_, t_, p, Optimum(results), budget);
    }
  }
  EXPECT_LE(2 * screened_trials, plain_trials)
      << "screened " << screened_trials << " vs plain " << plain_trials;
}

// A model that ranks upside down is caught by its own search's
// measurements and dropped: the search still finds the optimum.
TEST_F(EvolutionaryOnLandscapes, AMisleadingModelIsDropped) {
  EvolutionOptions screened;
  screened.prescreen = 64;
  for (const auto& [key, results] : replay_->landscape()) {
    const Problem p = *ParseProblemKey(key);
    if (FewQueries(p)) continue;
    SearchInputs inputs = Inputs(p);
    inputs.predict_us = RecordedPredictor(*replay_, t_, p, -1);
    const int budget =
        static_cast<int>(std::ceil(0.2 * inputs.feasible.size()));
    EvolutionaryStrategy s(std::move(inputs), /*seed=*/1, screened);
    auto [order, best] = RunSearch(s, *replay_, t_, p, budget);
    EXPECT_LE(best, Optimum(results) * 1.05) << key;
  }
}

TEST_F(EvolutionaryOnLandscapes, SameSeedSameRun) {
  const Problem p = *ParseProblemKey(replay_->landscape().begin()->first);
  EvolutionaryStrategy a(Inputs(p), 7, EvolutionOptions{});
  EvolutionaryStrategy b(Inputs(p), 7, EvolutionOptions{});
  EvolutionaryStrategy c(Inputs(p), 8, EvolutionOptions{});
  auto run_a = RunSearch(a, *replay_, t_, p, 60).first;
  EXPECT_EQ(run_a, RunSearch(b, *replay_, t_, p, 60).first);
  EXPECT_NE(run_a, RunSearch(c, *replay_, t_, p, 60).first);
}

// A toy space where most combinations are infeasible: over many seeds and a
// whole run, every proposal is feasible and none repeats.
TEST(EvolutionaryStrategyTest, RepairNeverYieldsAnInfeasibleOrRepeatedConfig) {
  ParamSpace space({{"A", {1, 2, 3, 4, 5, 6, 7, 8}, ""},
                    {"B", {1, 2, 3, 4, 5, 6, 7, 8}, ""},
                    {"C", {0, 1, 2}, ""}});
  std::vector<Config> feasible;
  std::set<std::string> feasible_keys;
  for (const Config& c : space.Enumerate()) {
    // About a sixth of the space: A divides B and C matches B's parity.
    if (c.at("B") % c.at("A") == 0 && c.at("C") % 2 == c.at("B") % 2) {
      feasible.push_back(c);
      feasible_keys.insert(ConfigKey(c));
    }
  }
  for (uint64_t seed = 0; seed < 200; ++seed) {
    EvolutionaryStrategy s({space, feasible, {{{"A", 3}, {"B", 5}, {"C", 0}}}},
                           seed, EvolutionOptions{});
    std::set<std::string> seen;
    while (!s.Done()) {
      std::vector<Config> next = s.Propose(3);
      if (next.empty()) break;
      for (const Config& c : next) {
        const std::string key = ConfigKey(c);
        ASSERT_EQ(feasible_keys.count(key), 1u)
            << "seed " << seed << ": " << key;
        ASSERT_TRUE(seen.insert(key).second) << "seed " << seed << ": " << key;
        TrialResult r;
        // A smooth landscape with a failing corner.
        r.status = c.at("A") == 8 ? TrialStatus::kIncorrect : TrialStatus::kOk;
        r.median_us = 1 + std::abs(c.at("A") - 2) + std::abs(c.at("B") - 6);
        s.Report({{c, r}});
      }
    }
  }
}

// Proposals one at a time, each reported before the next (latency A + B).
std::vector<Config> FirstProposals(EvolutionaryStrategy& s, int n) {
  std::vector<Config> out;
  for (int i = 0; i < n; ++i) {
    std::vector<Config> next = s.Propose(1);
    if (next.empty()) break;
    TrialResult r;
    r.median_us = static_cast<double>(next[0].at("A") + next[0].at("B"));
    s.Report({{next[0], r}});
    out.push_back(next[0]);
  }
  return out;
}

// The trusted seeds run as they are, whatever the model predicts; the other
// seeds compete with the drawn candidates, each predicted `seed_margin`
// faster than the model says.
TEST(EvolutionaryStrategyTest, TrustedSeedsRunFirstAndTheOthersAreScreened) {
  ParamSpace space({{"A", {1, 2, 3, 4, 5, 6, 7, 8}, ""},
                    {"B", {1, 2, 3, 4, 5, 6, 7, 8}, ""}});
  const std::vector<Config> feasible = space.Enumerate();
  const Config trusted = {{"A", 1}, {"B", 1}};
  const Config second = {{"A", 2}, {"B", 2}};
  const Config third = {{"A", 3}, {"B", 3}};
  // The larger A + B, the faster predicted: the seeds look slow (96 and 94
  // us), most drawn candidates faster (84 us at best).
  LatencyPredictor predict = [](const std::vector<Config>& configs) {
    std::vector<double> us;
    for (const Config& c : configs) us.push_back(100.0 - c.at("A") - c.at("B"));
    return us;
  };
  SearchInputs inputs{space, feasible, {trusted, second, third}, predict, 1};
  EvolutionOptions options;
  options.prescreen = 64;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    EvolutionaryStrategy edge(inputs, seed, options);
    EXPECT_EQ(FirstProposals(edge, 2),
              (std::vector<Config>{trusted, third}));  // 94 * 0.85 < 84.
    options.seed_margin = 0;
    EvolutionaryStrategy none(inputs, seed, options);
    const std::vector<Config> run = FirstProposals(none, 2);
    ASSERT_EQ(run.size(), 2u);
    EXPECT_EQ(run[0], trusted);
    EXPECT_GT(run[1].at("A") + run[1].at("B"), 6) << seed;
    options.seed_margin = EvolutionOptions{}.seed_margin;
  }
  // Without a model the seeds run in order.
  inputs.predict_us = nullptr;
  EvolutionaryStrategy plain(inputs, 1, options);
  EXPECT_EQ(FirstProposals(plain, 3),
            (std::vector<Config>{trusted, second, third}));
}

// The model is judged on the configs it picked, not on the seeds: one that
// orders the seeds backwards but its own picks right keeps screening (each
// screened proposal asks it for predictions), one that orders its picks
// backwards too is dropped once eight of them ran.
TEST(EvolutionaryStrategyTest, TheModelIsJudgedOnItsPicksNotOnTheSeeds) {
  ParamSpace space({{"A", {1, 2, 3, 4, 5, 6, 7, 8}, ""},
                    {"B", {1, 2, 3, 4, 5, 6, 7, 8}, ""}});
  std::vector<Config> seeds;
  std::set<std::string> seed_keys;
  for (int64_t k = 1; k <= 8; ++k) {
    seeds.push_back({{"A", k}, {"B", k}});  // Measured 2, 4, ... 16 us.
    seed_keys.insert(ConfigKey(seeds.back()));
  }
  for (const double picks_sign : {1.0, -1.0}) {
    int calls = 0;
    // Latency A + B (as FirstProposals reports): the seeds predicted in
    // reverse, the other configs in order times `picks_sign`.
    LatencyPredictor predict = [&](const std::vector<Config>& configs) {
      ++calls;
      std::vector<double> us;
      for (const Config& c : configs) {
        const double truth = static_cast<double>(c.at("A") + c.at("B"));
        us.push_back(seed_keys.count(ConfigKey(c)) > 0
                         ? 100 - truth
                         : 50 + picks_sign * truth);
      }
      return us;
    };
    SearchInputs inputs{space, space.Enumerate(), seeds, predict, 8};
    EvolutionOptions options;
    options.prescreen = 16;
    EvolutionaryStrategy s(inputs, /*seed=*/3, options);
    FirstProposals(s, 8 + 16);  // The trusted seeds, then 16 more.
    calls = 0;
    FirstProposals(s, 10);
    if (picks_sign > 0) {
      EXPECT_GE(calls, 10) << "a model right about its picks was dropped";
    } else {
      EXPECT_EQ(calls, 0) << "a model wrong about its picks still screens";
    }
  }
}

}  // namespace
}  // namespace evotune
