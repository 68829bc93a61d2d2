#include "tuner/search/strategies/evolutionary_strategy.h"

#include <algorithm>
#include <limits>

namespace evotune {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int kChildAttempts = 32;
constexpr int kRepairSteps = 12;
constexpr size_t kMinMeasuredForConcordance = 8;

}  // namespace

EvolutionaryStrategy::EvolutionaryStrategy(SearchInputs inputs, uint64_t seed,
                                           EvolutionOptions options)
    : inputs_(std::move(inputs)),
      options_(options),
      gen_(seed),
      best_(kInf),
      best_at_generation_start_(kInf) {
  for (const Config& c : inputs_.feasible) feasible_keys_.insert(ConfigKey(c));
  // Mutation moves only along values some feasible config takes: a
  // parameter that constraints (or a recording) pin is left alone.
  std::vector<Param> active;
  for (const Param& p : inputs_.space.params()) {
    std::set<int64_t> values;
    for (const Config& c : inputs_.feasible) {
      auto it = c.find(p.name);
      if (it != c.end()) values.insert(it->second);
    }
    if (values.size() > 1) {
      active.push_back({p.name, {values.begin(), values.end()}, p.help});
    }
  }
  active_ = ParamSpace(std::move(active));
  std::set<std::string> queued;
  for (size_t i = 0; i < inputs_.seeds.size(); ++i) {
    const Config& c = inputs_.seeds[i];
    const std::string key = ConfigKey(c);
    if (feasible_keys_.count(key) > 0 && queued.insert(key).second) {
      (i < inputs_.trusted_seeds ? trusted_ : first_generation_).push_back(c);
    }
  }
}

uint64_t EvolutionaryStrategy::Below(uint64_t n) { return gen_() % n; }

double EvolutionaryStrategy::Unit() {
  return static_cast<double>(gen_() >> 11) * 0x1.0p-53;
}

bool EvolutionaryStrategy::Usable(const Config& c) const {
  const std::string key = ConfigKey(c);
  return feasible_keys_.count(key) > 0 && seen_.count(key) == 0;
}

std::optional<Config> EvolutionaryStrategy::RandomUnseen() {
  const size_t n = inputs_.feasible.size();
  if (seen_.size() >= feasible_keys_.size() || n == 0) return std::nullopt;
  // Start at a random point and walk: always terminates, stays uniform
  // enough while most of the space is unseen.
  const size_t start = static_cast<size_t>(Below(n));
  for (size_t i = 0; i < n; ++i) {
    const Config& c = inputs_.feasible[(start + i) % n];
    if (seen_.count(ConfigKey(c)) == 0) return c;
  }
  return std::nullopt;
}

const Config& EvolutionaryStrategy::Tournament() {
  const size_t pool = std::min<size_t>(ranked_.size(), options_.parents);
  size_t winner = static_cast<size_t>(Below(pool));
  for (int i = 1; i < options_.tournament; ++i) {
    winner = std::min(winner, static_cast<size_t>(Below(pool)));
  }
  return ranked_[winner].second;  // Lower index = better fitness.
}

Config EvolutionaryStrategy::Mutate(Config c) {
  for (const Param& p : active_.params()) {
    const int64_t n = static_cast<int64_t>(p.values.size());
    if (n < 2) continue;
    const double r = Unit();
    auto it = std::find(p.values.begin(), p.values.end(), c[p.name]);
    int64_t index = it == p.values.end() ? 0 : it - p.values.begin();
    if (r < options_.reset_prob) {
      index = static_cast<int64_t>(Below(n));
    } else if (r < options_.reset_prob + options_.step_prob) {
      index += Below(2) == 0 ? -1 : 1;
      index = std::clamp<int64_t>(index, 0, n - 1);
    }
    c[p.name] = p.values[index];
  }
  return c;
}

std::optional<Config> EvolutionaryStrategy::Repair(Config c) {
  for (int step = 0; step <= kRepairSteps; ++step) {
    if (Usable(c)) return c;
    // One neighbouring step on a random parameter.
    const std::vector<Param>& params = active_.params();
    if (params.empty()) return std::nullopt;
    const Param& p = params[Below(params.size())];
    const int64_t n = static_cast<int64_t>(p.values.size());
    auto it = std::find(p.values.begin(), p.values.end(), c[p.name]);
    int64_t index = it == p.values.end() ? 0 : it - p.values.begin();
    index = std::clamp<int64_t>(index + (Below(2) == 0 ? -1 : 1), 0, n - 1);
    c[p.name] = p.values[index];
  }
  return std::nullopt;
}

std::optional<Config> EvolutionaryStrategy::Child() {
  for (int attempt = 0; attempt < kChildAttempts; ++attempt) {
    const Config& a = Tournament();
    const Config& b = Tournament();
    Config child;
    for (const Param& p : inputs_.space.params()) {
      child[p.name] = Below(2) == 0 ? a.at(p.name) : b.at(p.name);
    }
    if (std::optional<Config> repaired = Repair(Mutate(std::move(child)))) {
      return repaired;
    }
  }
  return std::nullopt;
}

std::optional<Config> EvolutionaryStrategy::NeighbourOfBest() {
  // Half the time the very best, otherwise another good config: the best
  // alone can sit in a basin that its neighbours do not leave.
  const Config& best = Below(2) == 0 ? ranked_.front().second : Tournament();
  std::vector<Config> candidates;
  for (const Param& p : active_.params()) {
    auto it = std::find(p.values.begin(), p.values.end(), best.at(p.name));
    if (it == p.values.end()) continue;
    for (int step : {-1, 1}) {
      const int64_t index = (it - p.values.begin()) + step;
      if (index < 0 || index >= static_cast<int64_t>(p.values.size())) continue;
      Config c = best;
      c[p.name] = p.values[index];
      if (Usable(c)) candidates.push_back(std::move(c));
    }
  }
  if (candidates.empty()) return std::nullopt;
  return candidates[Below(candidates.size())];
}

std::optional<Config> EvolutionaryStrategy::Candidate(bool breeding) {
  std::optional<Config> next;
  if (breeding && Unit() < options_.local_prob) next = NeighbourOfBest();
  if (!next && breeding) next = Child();
  if (!next) next = RandomUnseen();
  return next;
}

bool EvolutionaryStrategy::ModelOrdersMeasurements() {
  // The model is judged on its own picks: the seeds were handed to it (often
  // near-equal configs of a similar problem, which a model trained elsewhere
  // need not order), and a verdict on them would end screening before it
  // picked anything.
  if (!model_trusted_) return false;
  std::vector<size_t> picks;  // Indices into ranked_, best first.
  for (size_t i = 0; i < ranked_.size(); ++i) {
    if (picked_.count(ConfigKey(ranked_[i].second)) > 0) picks.push_back(i);
  }
  const size_t n = picks.size();
  if (n < kMinMeasuredForConcordance || n == concordance_checked_at_) {
    return true;
  }
  concordance_checked_at_ = n;
  std::vector<Config> measured;
  for (size_t i : picks) measured.push_back(ranked_[i].second);
  const std::vector<double> predicted = inputs_.predict_us(measured);
  if (predicted.size() != n) return model_trusted_ = false;
  // A pair is ordered alike when the faster measured is predicted faster.
  // Only pairs with one of the faster half count: screening is for finding
  // the fastest.
  size_t alike = 0, pairs = 0;
  for (size_t i = 0; i < (n + 1) / 2; ++i) {
    for (size_t j = i + 1; j < n; ++j) {
      if (ranked_[picks[i]].first == ranked_[picks[j]].first) continue;
      ++pairs;
      alike += predicted[i] < predicted[j];
    }
  }
  // No pair ordered (every pick failed, or all tie): the model's picks tell
  // nothing apart, so they are not worth screening by either.
  model_trusted_ = pairs > 0 && alike >= options_.min_concordance * pairs;
  return model_trusted_;
}

bool EvolutionaryStrategy::Screening() {
  return options_.prescreen > 1 && inputs_.predict_us &&
         ModelOrdersMeasurements();
}

std::optional<Config> EvolutionaryStrategy::Screened(bool breeding) {
  if (!Screening()) return Candidate(breeding);
  std::vector<Config> drawn;
  std::set<std::string> keys;
  for (const Config& c : first_generation_) {
    if (Usable(c) && keys.insert(ConfigKey(c)).second) drawn.push_back(c);
  }
  const size_t seeds = drawn.size();
  for (int i = 0; i < options_.prescreen; ++i) {
    std::optional<Config> c = Candidate(breeding);
    if (!c) break;
    if (keys.insert(ConfigKey(*c)).second) drawn.push_back(*std::move(c));
  }
  if (drawn.size() < 2) {
    return drawn.empty() ? std::nullopt : std::optional<Config>(drawn[0]);
  }
  std::vector<double> predicted = inputs_.predict_us(drawn);
  if (predicted.size() != drawn.size()) return drawn[0];
  for (size_t i = 0; i < seeds; ++i) predicted[i] *= 1 - options_.seed_margin;
  const size_t best =
      std::min_element(predicted.begin(), predicted.end()) - predicted.begin();
  if (best >= seeds) picked_.insert(ConfigKey(drawn[best]));
  return drawn[best];
}

std::optional<Config> EvolutionaryStrategy::NextSeed(
    std::deque<Config>& seeds) {
  while (!seeds.empty()) {
    Config c = std::move(seeds.front());
    seeds.pop_front();
    if (Usable(c)) return c;
  }
  return std::nullopt;
}

std::vector<Config> EvolutionaryStrategy::Propose(int n) {
  std::vector<Config> out;
  while (static_cast<int>(out.size()) < n) {
    std::optional<Config> next = NextSeed(trusted_);
    if (!next && !Screening()) next = NextSeed(first_generation_);
    const bool breeding =
        ranked_.size() >= 2 && ranked_[1].first < kInf &&
        seen_.size() >= static_cast<size_t>(options_.population);
    if (!next) next = Screened(breeding);
    if (!next) break;
    seen_.insert(ConfigKey(*next));
    out.push_back(*std::move(next));
  }
  return out;
}

void EvolutionaryStrategy::Report(
    const std::vector<std::pair<Config, TrialResult>>& results) {
  for (const auto& [config, result] : results) {
    seen_.insert(ConfigKey(config));
    const double fitness =
        result.status == TrialStatus::kOk ? result.median_us : kInf;
    auto at =
        std::upper_bound(ranked_.begin(), ranked_.end(), fitness,
                         [](double f, const std::pair<double, Config>& e) {
                           return f < e.first;
                         });
    ranked_.insert(at, {fitness, config});
    best_ = std::min(best_, fitness);
    if (++reported_this_generation_ >= options_.population) {
      reported_this_generation_ = 0;
      ++generation_;
      const bool gained =
          best_ < best_at_generation_start_ * (1.0 - options_.min_gain);
      stalled_ = gained ? 0 : stalled_ + 1;
      best_at_generation_start_ = best_;
    }
  }
}

bool EvolutionaryStrategy::Done() const {
  return seen_.size() >= feasible_keys_.size() || stalled_ >= options_.patience;
}

StrategySpec EVOTUNE_STRATEGY_SPEC(evolutionary)() {
  const EvolutionOptions d;
  return {"evolutionary",
          "a genetic search seeded with the best configs of the nearest tuned "
          "problem and the template's defaults; stops after `patience` "
          "generations without gain (the default)",
          {{"population", 1, 256, double(d.population), true,
            "configs per generation"},
           {"parents", 1, 256, double(d.parents), true,
            "breeding pool: the best evaluated configs"},
           {"tournament", 1, 16, double(d.tournament), true,
            "contestants per parent choice"},
           {"step_prob", 0, 1, d.step_prob, false,
            "per parameter: move to a neighbouring value"},
           {"reset_prob", 0, 1, d.reset_prob, false,
            "per parameter: draw a random value"},
           {"local_prob", 0, 1, d.local_prob, false,
            "per child: an untried neighbour of the best instead"},
           {"patience", 1, 1000, double(d.patience), true,
            "generations without gain before it stops"},
           {"min_gain", 0, 1, d.min_gain, false,
            "relative improvement that counts as gain"},
           {"prescreen", 1, 1024, double(d.prescreen), true,
            "with the device's cost model: candidates drawn per config "
            "measured, the predicted fastest measured (1: no screening)"},
           {"min_concordance", 0, 1, d.min_concordance, false,
            "screening stops when the model orders fewer of the pairs of "
            "its measured picks right"},
           {"seed_margin", 0, 0.9, d.seed_margin, false,
            "screening: how much faster than a seed not yet run a drawn "
            "candidate must be predicted to be measured before it"}},
          [](SearchInputs inputs, uint64_t seed, const StrategyOptions& o) {
            EvolutionOptions e;
            e.population = static_cast<int>(o.at("population"));
            e.parents = static_cast<int>(o.at("parents"));
            e.tournament = static_cast<int>(o.at("tournament"));
            e.step_prob = o.at("step_prob");
            e.reset_prob = o.at("reset_prob");
            e.local_prob = o.at("local_prob");
            e.patience = static_cast<int>(o.at("patience"));
            e.min_gain = o.at("min_gain");
            e.prescreen = static_cast<int>(o.at("prescreen"));
            e.min_concordance = o.at("min_concordance");
            e.seed_margin = o.at("seed_margin");
            return std::unique_ptr<SearchStrategy>(
                new EvolutionaryStrategy(std::move(inputs), seed, e));
          }};
}

}  // namespace evotune
