// Best-so-far against trials for the search strategies on recorded
// landscapes, over many seeds: the measurement behind the search's claims.
//
//   search_curves --landscape=tests/data/flash_fwd_landscapes_h100.csv
//     --seeds=25 --curves=curves.csv
// prints, per problem, the median number of trials each strategy needs to
// come within 3% of the exhaustive optimum, and writes every curve as CSV
// (problem,strategy,seed,trial,best_us) for bench/plot_search_curves.py.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "kernel_templates/template_registry.h"
#include "tuner/evaluator/replay_evaluator.h"
#include "tuner/search/strategy_registry.h"

ABSL_FLAG(std::string, landscape, "tests/data/flash_fwd_landscapes_h100.csv",
          "recorded landscape (bench/record_landscapes.sh)");
ABSL_FLAG(int, seeds, 25, "runs per strategy and problem");
ABSL_FLAG(double, within, 0.03, "target: this close to the optimum");
ABSL_FLAG(std::string, curves, "", "write every best-so-far curve here");

namespace evotune {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Best-so-far after each trial, for a whole run of the strategy (a strategy
// that stops early keeps its last best).
std::vector<double> Curve(SearchStrategy& s, Evaluator& e,
                          const KernelTemplate& t, const Problem& p,
                          size_t budget) {
  std::vector<double> curve;
  double best = kInf;
  while (curve.size() < budget && !s.Done()) {
    std::vector<Config> next = s.Propose(4);
    if (next.empty()) break;
    for (const Config& c : next) {
      TrialResult r = *e.Evaluate(t, c, p);
      if (r.status == TrialStatus::kOk) best = std::min(best, r.median_us);
      curve.push_back(best);
      s.Report({{c, r}});
    }
  }
  curve.resize(budget, curve.empty() ? kInf : curve.back());
  return curve;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2]
                      : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

int Run() {
  auto replay = ReplayEvaluator::Load(absl::GetFlag(FLAGS_landscape));
  if (!replay.ok()) {
    std::fprintf(stderr, "%s\n", replay.status().ToString().c_str());
    return 1;
  }
  const KernelTemplate& t =
      *TemplateRegistry::Builtin().Find((*replay)->template_name());
  std::ofstream curves_out;
  if (!absl::GetFlag(FLAGS_curves).empty()) {
    curves_out.open(absl::GetFlag(FLAGS_curves));
    curves_out << "problem,strategy,seed,trial,best_us\n";
  }
  const double within = absl::GetFlag(FLAGS_within);
  std::printf(
      "%-44s %9s %7s | trials to within %.0f%% of the optimum (median of %d)\n"
      "%-44s %9s %7s | %12s %9s %8s %10s\n",
      "", "", "", 100 * within, absl::GetFlag(FLAGS_seeds), "problem",
      "optimum", "space", "evolutionary", "unseeded", "random", "evo/random");
  bool all_pass = true;
  for (const auto& [key, results] : (*replay)->landscape()) {
    const Problem p = *ParseProblemKey(key);
    double optimum = kInf;
    for (const auto& [c, r] : results) {
      if (r.status == TrialStatus::kOk)
        optimum = std::min(optimum, r.median_us);
    }
    std::vector<Config> feasible;
    for (const Config& c : FeasibleConfigs(t, p, (*replay)->device().limits)) {
      if ((*replay)->Covers(t, c, p)) feasible.push_back(c);
    }
    // The evolutionary search as jobs run it (seeded with the template's
    // defaults), the same without seeds, and random search.
    double medians[3];
    int column = 0;
    for (const char* variant :
         {"evolutionary", "evolutionary-unseeded", "random"}) {
      const bool unseeded = std::string(variant) == "evolutionary-unseeded";
      const std::string strategy = unseeded ? "evolutionary" : variant;
      std::vector<double> to_target;
      for (int seed = 1; seed <= absl::GetFlag(FLAGS_seeds); ++seed) {
        auto s = MakeStrategy(
            strategy,
            {t.space, feasible, unseeded ? std::vector<Config>{} : t.defaults},
            static_cast<uint64_t>(seed));
        std::vector<double> curve = Curve(**s, **replay, t, p, feasible.size());
        size_t needed = curve.size() + 1;  // Never reached.
        for (size_t i = 0; i < curve.size(); ++i) {
          if (curve[i] <= optimum * (1 + within)) {
            needed = i + 1;
            break;
          }
        }
        to_target.push_back(static_cast<double>(needed));
        if (curves_out) {
          for (size_t i = 0; i < curve.size(); ++i) {
            curves_out << key << "," << variant << "," << seed << "," << i + 1
                       << "," << curve[i] << "\n";
          }
        }
      }
      medians[column++] = Median(to_target);
    }
    const bool pass =
        medians[0] <= 0.15 * feasible.size() && medians[0] <= 0.5 * medians[2];
    all_pass = all_pass && pass;
    std::printf("%-44s %9.2f %7zu | %12.1f %9.1f %8.1f %10.2f %s\n",
                key.c_str(), optimum, feasible.size(), medians[0], medians[1],
                medians[2], medians[0] / medians[2],
                pass ? "" : "  (misses the bar)");
  }
  std::printf(
      "bar: evolutionary median <= 15%% of the space and <= half of "
      "random's: %s\n",
      all_pass ? "met on every landscape" : "NOT met everywhere");
  return 0;
}

}  // namespace
}  // namespace evotune

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return evotune::Run();
}
