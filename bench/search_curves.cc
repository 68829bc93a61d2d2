// Best-so-far against trials for the search strategies on recorded
// landscapes, over many seeds: the measurement behind the search's claims.
//
//   search_curves --landscape=tests/data/flash_fwd_landscapes_h100.csv
//     --seeds=25 --curves=curves.csv
// prints, per problem, the median number of trials each strategy needs to
// come within 3% of the exhaustive optimum, and writes every curve as CSV
// (problem,strategy,seed,trial,best_us) for bench/plot_search_curves.py.
// "evolutionary+model" is the evolutionary search screening --prescreen
// candidates per measured config with a cost model trained on the other
// problems of the landscape and of --train_with's (the problem searched is
// never learned from);
// the defaults fitted to the problem are its trusted seeds, as in jobs.
// Model and defaults see the recorded GPU's limits (its multiprocessors, from
// the recording's header), as a job's do there; every landscape given must be
// of one GPU.
// With --explain=PROBLEM it prints how that model ranks the problem's
// configs instead: why screening leads a search well or astray there.
// With --in_turns=CSV (bench/retime_landscape, from this recording) a
// problem's target is instead any config within 3% of the fastest its top
// configs measure when timed together in turns: a recording's 3% differences
// between configs timed minutes apart can be noise.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "kernel_templates/serving_defaults.h"
#include "kernel_templates/template_registry.h"
#include "tuner/evaluator/replay_evaluator.h"
#include "tuner/model/leave_one_out.h"
#include "tuner/search/strategy_registry.h"

ABSL_FLAG(std::string, landscape, "tests/data/flash_fwd_landscapes_h100.csv",
          "recorded landscape (bench/record_landscapes.sh)");
ABSL_FLAG(std::vector<std::string>, train_with, {},
          "more recordings (comma-separated, of any template) whose problems "
          "other than the one searched train the cost model too, as the "
          "daemon's model learns from every template tuned on the device");
ABSL_FLAG(int, seeds, 25, "runs per strategy and problem");
ABSL_FLAG(double, within, 0.03, "target: this close to the optimum");
ABSL_FLAG(int, prescreen, 64,
          "candidates the cost model screens per measured config");
ABSL_FLAG(std::string, curves, "", "write every best-so-far curve here");
ABSL_FLAG(std::string, explain, "",
          "print, for this problem key instead, the cost model's fastest "
          "predicted configs beside their measured times, and the measured "
          "fastest beside their predicted rank");
ABSL_FLAG(bool, skip_known_rejected, true,
          "leave out of every search the configs the template's other "
          "recorded problems of the same head_dim and dtype were rejected "
          "for (spills, registers, shared memory), as jobs leave out those "
          "the store has seen rejected");
ABSL_FLAG(std::string, in_turns, "",
          "CSV of bench/retime_landscape timed from the recording searched: "
          "for a problem it times, a search reaches the target when it "
          "measures a config within --within of the fastest timed in turns "
          "(the recorded times still lead it)");
ABSL_FLAG(double, seed_margin, 0.15,
          "screening: a seed's edge over drawn candidates (the evolutionary "
          "strategy's seed_margin)");

namespace evotune {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// A whole run of a strategy: best-so-far after each trial (a strategy that
// stops early keeps its last best), and the trial that first measured a
// target config (the budget + 1 when none did).
struct SearchRun {
  std::vector<double> best;
  size_t to_target = 0;
};
using IsTarget = std::function<bool(const Config&, const TrialResult&)>;

SearchRun Curve(SearchStrategy& s, Evaluator& e, const KernelTemplate& t,
                const Problem& p, size_t budget, const IsTarget& is_target) {
  SearchRun run;
  run.to_target = budget + 1;
  double best = kInf;
  while (run.best.size() < budget && !s.Done()) {
    std::vector<Config> next = s.Propose(4);
    if (next.empty()) break;
    for (const Config& c : next) {
      TrialResult r = *e.Evaluate(t, c, p);
      if (r.status == TrialStatus::kOk) best = std::min(best, r.median_us);
      run.best.push_back(best);
      if (run.to_target > budget && is_target(c, r)) {
        run.to_target = run.best.size();
      }
      s.Report({{c, r}});
    }
  }
  run.best.resize(budget, run.best.empty() ? kInf : run.best.back());
  return run;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2]
                      : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// One variant of a search, run on one recorded problem.
struct Variant {
  const char* name;
  std::string strategy;
  SearchInputs inputs;
  StrategyOptions options;
};

// The median over the seeds of the trials `v` needs to measure a target
// config (the space's size + 1 when it never does): one of `targets` where
// given, else one recorded within --within of `optimum`; every curve to
// `curves_out` when it is open.
double MedianTrialsToTarget(const Variant& v, Evaluator& e,
                            const KernelTemplate& t, const std::string& key,
                            double optimum,
                            const std::set<std::string>* targets,
                            std::ofstream& curves_out) {
  const Problem p = *ParseProblemKey(key);
  const double within = absl::GetFlag(FLAGS_within);
  const IsTarget is_target = [&](const Config& c, const TrialResult& r) {
    if (r.status != TrialStatus::kOk) return false;
    if (targets != nullptr) return targets->count(ConfigKey(c)) > 0;
    return r.median_us <= optimum * (1 + within);
  };
  std::vector<double> to_target;
  for (int seed = 1; seed <= absl::GetFlag(FLAGS_seeds); ++seed) {
    auto s = MakeStrategy(v.strategy, v.inputs, static_cast<uint64_t>(seed),
                          v.options);
    const SearchRun run =
        Curve(**s, e, t, p, v.inputs.feasible.size(), is_target);
    to_target.push_back(static_cast<double>(run.to_target));
    if (curves_out) {
      for (size_t i = 0; i < run.best.size(); ++i) {
        curves_out << key << "," << v.name << "," << seed << "," << i + 1 << ","
                   << run.best[i] << "\n";
      }
    }
  }
  return Median(to_target);
}

// Times per problem key and config from --in_turns, every run's; the file
// must have been timed from the recording named `recording` (the replay's
// device name, which holds the template and its hash).
using TimesInTurns =
    std::map<std::string, std::map<std::string, std::vector<double>>>;
absl::StatusOr<TimesInTurns> ReadInTurns(const std::string& path,
                                         const std::string& recording) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError("--in_turns: cannot read " + path);
  TimesInTurns timed;
  bool same_recording = false;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    same_recording |= line == "# recording: " + recording;
    if (line.empty() || line[0] == '#' || line.rfind("problem_key,", 0) == 0)
      continue;
    // key,"config",recorded_us,status,median_us,...
    const std::vector<std::string> f = absl::StrSplit(line, '"');
    const std::vector<std::string> rest =
        f.size() == 3 ? absl::StrSplit(f[2], ',') : std::vector<std::string>();
    double us = 0;
    if (rest.size() != 7 || !absl::SimpleAtod(rest[3], &us)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--in_turns: ", path, ":", n, ": malformed"));
    }
    if (rest[2] == "ok") {
      timed[f[0].substr(0, f[0].size() - 1)][f[1]].push_back(us);
    }
  }
  if (!same_recording) {
    return absl::InvalidArgumentError(
        absl::StrCat("--in_turns: ", path,
                     " was not timed from the recording searched (no "
                     "\"# recording: ",
                     recording, "\" line)"));
  }
  return timed;
}

// Per problem key, the configs timed within --within of the fastest of them
// in turns (a config timed in several runs by the median of its times); none
// without --in_turns.
absl::StatusOr<std::map<std::string, std::set<std::string>>> InTurnsTargets(
    const std::string& recording) {
  std::map<std::string, std::set<std::string>> targets;
  if (absl::GetFlag(FLAGS_in_turns).empty()) return targets;
  absl::StatusOr<TimesInTurns> timed =
      ReadInTurns(absl::GetFlag(FLAGS_in_turns), recording);
  if (!timed.ok()) return timed.status();
  for (const auto& [key, runs] : *timed) {
    std::map<std::string, double> us;
    double best = kInf;
    for (const auto& [c, times] : runs) {
      us[c] = Median(times);
      best = std::min(best, us[c]);
    }
    for (const auto& [c, t] : us) {
      if (t <= best * (1 + absl::GetFlag(FLAGS_within))) targets[key].insert(c);
    }
  }
  return targets;
}

// The cost model's predictor for `key` with the template of the first
// landscape, trained on every other problem of the landscapes.
absl::StatusOr<LatencyPredictor> ModelLeavingOut(
    const std::vector<RecordedLandscape>& landscapes, const std::string& key,
    const DeviceLimits& limits) {
  auto features = std::make_shared<FeatureMap>(TemplateRegistry::Builtin());
  absl::StatusOr<std::unique_ptr<CostModel>> model =
      CostModel::Train(features, RecordedSamples(landscapes, key), limits, {});
  if (!model.ok()) return model.status();
  return LatencyPredictor(ConfigPredictor(
      *std::move(model), landscapes.front().t, *ParseProblemKey(key)));
}

// --explain: the model's ranking of `key`'s measured configs against the
// measured one.
int Explain(const ReplayEvaluator& replay,
            const std::vector<RecordedLandscape>& landscapes,
            const std::string& key, const DeviceLimits& limits) {
  auto it = replay.landscape().find(key);
  if (it == replay.landscape().end()) {
    std::fprintf(stderr, "--explain: %s is not in the landscape\n",
                 key.c_str());
    return 1;
  }
  absl::StatusOr<LatencyPredictor> predictor =
      ModelLeavingOut(landscapes, key, limits);
  if (!predictor.ok()) {
    std::fprintf(stderr, "%s\n", predictor.status().ToString().c_str());
    return 1;
  }
  std::vector<Config> configs;
  std::vector<double> measured;
  for (const auto& [c, r] : it->second) {
    if (r.status != TrialStatus::kOk) continue;
    configs.push_back(*ParseConfigKey(c));
    measured.push_back(r.median_us);
  }
  const std::vector<double> predicted = (*predictor)(configs);
  const auto ranks = [](const std::vector<double>& v) {
    std::vector<size_t> order(v.size()), rank(v.size());
    for (size_t i = 0; i < v.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return v[a] < v[b]; });
    for (size_t i = 0; i < order.size(); ++i) rank[order[i]] = i + 1;
    return rank;
  };
  const std::vector<size_t> by_model = ranks(predicted);
  const std::vector<size_t> by_time = ranks(measured);
  const double target = *std::min_element(measured.begin(), measured.end()) *
                        (1 + absl::GetFlag(FLAGS_within));
  size_t near = 0, first = configs.size();
  for (size_t i = 0; i < configs.size(); ++i) {
    if (measured[i] > target) continue;
    ++near;
    first = std::min(first, by_model[i]);
  }
  std::printf(
      "%s: %zu configs measured ok, %zu within %.0f%% of the fastest, the "
      "model's first of them its #%zu\n%8s %8s %10s %10s  config\n",
      key.c_str(), configs.size(), near, 100 * absl::GetFlag(FLAGS_within),
      first, "model#", "measured#", "pred us", "meas us");
  // The model's 12 fastest and the measured 12 fastest, in the model's
  // order.
  std::vector<size_t> shown;
  for (size_t i = 0; i < configs.size(); ++i) {
    if (by_model[i] <= 12 || by_time[i] <= 12) shown.push_back(i);
  }
  std::sort(shown.begin(), shown.end(),
            [&](size_t a, size_t b) { return by_model[a] < by_model[b]; });
  for (size_t i : shown) {
    std::printf("%8zu %8zu %10.2f %10.2f  %s\n", by_model[i], by_time[i],
                predicted[i], measured[i], ConfigKey(configs[i]).c_str());
  }
  return 0;
}

// Configs of the first landscape's template rejected for resources on a
// problem other than `key` with its head_dim and dtype.
std::set<std::string> KnownRejected(
    const std::vector<RecordedLandscape>& landscapes, const std::string& key) {
  const Problem p = *ParseProblemKey(key);
  std::set<std::string> rejected;
  for (const auto& [other, results] : landscapes.front().problems) {
    const Problem q = *ParseProblemKey(other);
    if (other == key || q.head_dim != p.head_dim || q.dtype != p.dtype) {
      continue;
    }
    for (const auto& [c, r] : results) {
      if (r.status == TrialStatus::kResourceRejected) {
        rejected.insert(ConfigKey(c));
      }
    }
  }
  return rejected;
}

// The configs of `key` a search tries, as a job's would: feasible,
// recorded and (--skip_known_rejected) not known rejected.
std::vector<Config> SearchableConfigs(
    const ReplayEvaluator& replay,
    const std::vector<RecordedLandscape>& landscapes, const std::string& key,
    const DeviceLimits& limits) {
  const KernelTemplate& t = *landscapes.front().t;
  const Problem p = *ParseProblemKey(key);
  const std::set<std::string> rejected =
      absl::GetFlag(FLAGS_skip_known_rejected) ? KnownRejected(landscapes, key)
                                               : std::set<std::string>();
  std::vector<Config> out;
  for (const Config& c : FeasibleConfigs(t, p, limits)) {
    if (replay.Covers(t, c, p) && rejected.count(ConfigKey(c)) == 0) {
      out.push_back(c);
    }
  }
  return out;
}

// The search variants compared on problem `key`.
absl::StatusOr<std::vector<Variant>> Variants(
    const KernelTemplate& t, const std::vector<Config>& feasible,
    const std::vector<Config>& seeds, size_t trusted,
    const std::vector<RecordedLandscape>& landscapes, const std::string& key,
    const DeviceLimits& limits) {
  absl::StatusOr<LatencyPredictor> predictor =
      ModelLeavingOut(landscapes, key, limits);
  if (!predictor.ok()) return predictor.status();
  const StrategyOptions screened = {
      {"prescreen", absl::GetFlag(FLAGS_prescreen)},
      {"seed_margin", absl::GetFlag(FLAGS_seed_margin)}};
  // The evolutionary search as jobs run it (seeded with the template's
  // defaults for the problem), the same screening with the model, without
  // seeds, and random search.
  return std::vector<Variant>{
      {"evolutionary", "evolutionary", {t.space, feasible, seeds, {}}, {}},
      {"evolutionary+model",
       "evolutionary",
       {t.space, feasible, seeds, *predictor, trusted},
       screened},
      {"evolutionary-unseeded",
       "evolutionary",
       {t.space, feasible, {}, {}},
       {}},
      {"unseeded+model",
       "evolutionary",
       {t.space, feasible, {}, *predictor},
       screened},
      {"random", "random", {t.space, feasible, seeds, {}}, {}}};
}

// The landscape searched, then those of --train_with, all of one GPU.
absl::StatusOr<std::vector<RecordedLandscape>> LoadLandscapes(
    const std::string& path) {
  std::vector<std::string> paths = {path};
  for (const std::string& p : absl::GetFlag(FLAGS_train_with)) {
    paths.push_back(p);
  }
  std::vector<RecordedLandscape> landscapes;
  for (const std::string& p : paths) {
    absl::StatusOr<RecordedLandscape> l =
        LoadRecordedLandscape(p, TemplateRegistry::Builtin());
    if (!l.ok()) return l.status();
    landscapes.push_back(*std::move(l));
  }
  if (absl::StatusOr<DeviceLimits> shared = SharedLimits(landscapes);
      !shared.ok()) {
    return shared.status();
  }
  return landscapes;
}

// Whether a problem's searches meet the bars: the plain search's, and the
// screened search's.
struct Verdict {
  bool pass = false;
  bool screened = false;
};

// Runs every variant on recorded problem `key` (its recorded `results`),
// judged against `targets` where given (--in_turns), and prints its row.
absl::StatusOr<Verdict> SearchProblem(
    ReplayEvaluator& replay, const std::vector<RecordedLandscape>& landscapes,
    const std::string& key, const std::map<std::string, TrialResult>& results,
    const std::set<std::string>* targets, std::ofstream& curves_out) {
  const KernelTemplate& t = *landscapes.front().t;
  const DeviceLimits& limits = landscapes.front().limits;
  const Problem p = *ParseProblemKey(key);
  double optimum = kInf;
  for (const auto& [c, r] : results) {
    if (r.status == TrialStatus::kOk) optimum = std::min(optimum, r.median_us);
  }
  size_t trusted = 0;
  const std::vector<Config> seeds = DefaultConfigs(t, p, limits, &trusted);
  const std::vector<Config> feasible =
      SearchableConfigs(replay, landscapes, key, limits);
  absl::StatusOr<std::vector<Variant>> variants =
      Variants(t, feasible, seeds, trusted, landscapes, key, limits);
  if (!variants.ok()) return variants.status();
  std::vector<double> m;
  for (const Variant& v : *variants) {
    m.push_back(
        MedianTrialsToTarget(v, replay, t, key, optimum, targets, curves_out));
  }
  Verdict verdict;
  verdict.pass = m[0] <= 0.15 * feasible.size() && m[0] <= 0.5 * m[4];
  // Screening can only act after the seeds: judged unseeded, and seeded
  // where the seeds alone do not reach the target.
  verdict.screened =
      feasible.size() < 100 ||
      (m[3] <= 0.5 * m[2] && (m[0] <= seeds.size() || m[1] <= 0.5 * m[0]));
  std::printf(
      "%-44s %9.2f %5zu | %6.1f %7.1f %9.1f %7.1f %7.1f %9.2f %9.2f "
      "%9.2f%s%s\n",
      key.c_str(), optimum, feasible.size(), m[0], m[1], m[2], m[3], m[4],
      m[0] / m[4], m[1] / m[0], m[3] / m[2],
      targets == nullptr ? "" : "  (targets in turns)",
      verdict.pass && verdict.screened ? "" : "  (misses a bar)");
  return verdict;
}

int Run() {
  const std::string path = absl::GetFlag(FLAGS_landscape);
  auto replay = ReplayEvaluator::Load(path);
  if (!replay.ok()) {
    std::fprintf(stderr, "%s\n", replay.status().ToString().c_str());
    return 1;
  }
  absl::StatusOr<std::vector<RecordedLandscape>> landscapes =
      LoadLandscapes(path);
  if (!landscapes.ok()) {
    std::fprintf(stderr, "%s\n", landscapes.status().ToString().c_str());
    return 1;
  }
  const DeviceLimits limits = landscapes->front().limits;
  if (!absl::GetFlag(FLAGS_explain).empty()) {
    return Explain(**replay, *landscapes, absl::GetFlag(FLAGS_explain), limits);
  }
  std::ofstream curves_out;
  if (!absl::GetFlag(FLAGS_curves).empty()) {
    curves_out.open(absl::GetFlag(FLAGS_curves));
    curves_out << "problem,strategy,seed,trial,best_us\n";
  }
  std::printf(
      "%-44s %9s %5s | trials to within %.0f%% of the optimum (median of %d)\n"
      "%-44s %9s %5s | %6s %7s %9s %7s %7s %9s %9s %9s\n",
      "", "", "", 100 * absl::GetFlag(FLAGS_within), absl::GetFlag(FLAGS_seeds),
      "problem", "optimum", "space", "evo", "+model", "unseeded", "+model",
      "random", "evo/random", "model/evo", "(unseeded)");
  absl::StatusOr<std::map<std::string, std::set<std::string>>> in_turns =
      InTurnsTargets((*replay)->device().name);
  if (!in_turns.ok()) {
    std::fprintf(stderr, "%s\n", in_turns.status().ToString().c_str());
    return 1;
  }
  bool all_pass = true;
  bool model_pass = true;
  for (const auto& [key, results] : (*replay)->landscape()) {
    auto targets = in_turns->find(key);
    absl::StatusOr<Verdict> v = SearchProblem(
        **replay, *landscapes, key, results,
        targets == in_turns->end() ? nullptr : &targets->second, curves_out);
    if (!v.ok()) {
      std::fprintf(stderr, "%s\n", v.status().ToString().c_str());
      return 1;
    }
    all_pass = all_pass && v->pass;
    model_pass = model_pass && v->screened;
  }
  std::printf(
      "bar: evolutionary median <= 15%% of the space and <= half of "
      "random's: %s\n"
      "bar: with the model, <= half of evolutionary's trials (spaces >= 100; "
      "seeded only where the seeds miss): %s\n",
      all_pass ? "met on every landscape" : "NOT met everywhere",
      model_pass ? "met on every landscape" : "NOT met everywhere");
  return 0;
}

}  // namespace
}  // namespace evotune

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return evotune::Run();
}
