#include "tuner/model/transfer.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernel_templates/serving_defaults.h"

namespace evotune {
namespace {

// Trees of the coarse pass that shortlists transfer candidates.
constexpr int kShortlistTrees = 60;

// The parameter of templates that split a row block's keys over blocks.
constexpr char kSplitParam[] = "KV_SPLITS";

// A config as compiled: template, config, head dims and dtype. The configs
// of a template that fits every form (KernelTemplate::fits_every_form) are
// one whatever the form they ran at.
using CompiledKey =
    std::tuple<std::string, std::string, int64_t, int64_t, std::string>;

CompiledKey Compiled(const CostSample& s, const Config& config) {
  if (s.t->fits_every_form) return {s.t->name, ConfigKey(config), 0, 0, ""};
  return {s.t->name, ConfigKey(config), s.problem.head_dim, HeadDimV(s.problem),
          DTypesName(s.problem)};
}

// `s`'s config with each other split count its template offers.
std::vector<Config> SplitVariants(const CostSample& s) {
  std::vector<Config> out;
  const Param* splits = s.t->space.Find(kSplitParam);
  auto own = s.config.find(kSplitParam);
  if (splits == nullptr || own == s.config.end()) return out;
  for (int64_t v : splits->values) {
    if (v == own->second) continue;
    out.push_back(s.config);
    out.back()[kSplitParam] = v;
  }
  return out;
}

}  // namespace

std::vector<TransferCandidate> TransferPool(
    const std::vector<CostSample>& samples, size_t per_problem) {
  std::map<std::pair<std::string, std::string>, std::vector<const CostSample*>>
      groups;
  std::map<CompiledKey, const CostSample*> measured;
  for (const CostSample& s : samples) {
    groups[{s.t->name, ProblemKey(s.problem)}].push_back(&s);
    measured.insert({Compiled(s, s.config), &s});
  }
  std::vector<TransferCandidate> pool;
  std::set<CompiledKey> seen;
  // A config recurs across problems; RankTransfers needs only its first
  // source of each compiled form (the kinship it ranks by), so the pool,
  // walked per query, grows with the configs, not the problems.
  auto add = [&](const CostSample& s) {
    if (seen.insert(Compiled(s, s.config)).second) pool.push_back(s);
  };
  for (auto& [key, group] : groups) {
    std::sort(group.begin(), group.end(),
              [](const CostSample* a, const CostSample* b) {
                return a->median_us < b->median_us;
              });
    if (group.size() > per_problem) group.resize(per_problem);
    for (const CostSample* s : group) {
      add(*s);
      // The split count fits the grid to the multiprocessors: the one tuned
      // for this problem's size is rarely what another size needs, while
      // the rest of the config carries over. Its variants come along where
      // they ran as this config was compiled (register use, which no check
      // foresees, changes with the split count too).
      for (const Config& variant : SplitVariants(*s)) {
        auto it = measured.find(Compiled(*s, variant));
        if (it != measured.end()) add(*it->second);
      }
    }
  }
  return pool;
}

namespace {

// How closely `source` compiled the kernel `problem` needs: 2 for the same
// head_dim and dtype, 1 for the same head_dim. A config that ran at one
// head_dim may exceed the registers at another, unless its template's
// configs fit every form.
int Kinship(const KernelTemplate& t, const Problem& source,
            const Problem& problem) {
  if (t.fits_every_form) return 2;
  if (source.head_dim != problem.head_dim ||
      HeadDimV(source) != HeadDimV(problem)) {
    return 0;
  }
  return DTypesName(source) == DTypesName(problem) ? 2 : 1;
}

// The pool's distinct configs that run on `problem`, each with its source
// problem, of the closest kinship that has any.
std::vector<TransferCandidate> Runnable(
    const std::vector<TransferCandidate>& pool, const Problem& problem,
    const DeviceLimits& limits) {
  for (int kinship : {2, 1, 0}) {
    std::vector<TransferCandidate> runnable;
    std::set<std::string> seen;
    for (const TransferCandidate& c : pool) {
      if (Kinship(*c.t, c.problem, problem) < kinship ||
          !RunsOn(*c.t, c.config, problem, limits) ||
          !seen.insert(absl::StrCat(c.t->name, "/", ConfigKey(c.config)))
               .second) {
        continue;
      }
      runnable.push_back(c);
    }
    if (!runnable.empty()) return runnable;
  }
  return {};
}

// Keeps the candidates the model's first trees rank among the best
// 8k (at least 64): ranking every runnable config with the whole model cost
// milliseconds per untuned problem.
absl::Status Shortlist(const CostModel& model, const Problem& problem, size_t k,
                       std::vector<TransferCandidate>* candidates) {
  const size_t keep = std::max<size_t>(64, 8 * k);
  if (candidates->size() <= keep) return absl::OkStatus();
  absl::StatusOr<std::vector<double>> coarse =
      model.PredictUsOn(problem, *candidates, kShortlistTrees);
  if (!coarse.ok()) return coarse.status();
  std::vector<size_t> order(candidates->size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return (*coarse)[a] < (*coarse)[b];
  });
  order.resize(keep);
  std::sort(order.begin(), order.end());  // The pool's order, for ties.
  std::vector<TransferCandidate> kept;
  for (size_t i : order) kept.push_back((*candidates)[i]);
  *candidates = std::move(kept);
  return absl::OkStatus();
}

// The distinct templates of `candidates`, in order.
std::vector<const KernelTemplate*> TemplatesOf(
    const std::vector<TransferCandidate>& candidates) {
  std::vector<const KernelTemplate*> out;
  for (const TransferCandidate& c : candidates) {
    if (std::find(out.begin(), out.end(), c.t) == out.end()) out.push_back(c.t);
  }
  return out;
}

// The first of the templates among `templates` that rank highest for
// `problem` (KernelTemplate::default_rank) when `t` ranks below them, else
// nullptr.
const KernelTemplate* Outranking(
    const std::vector<const KernelTemplate*>& templates,
    const KernelTemplate& t, const Problem& problem,
    const DeviceLimits& limits) {
  const std::vector<const KernelTemplate*> top =
      TopRanked(templates, problem, limits);
  if (top.empty() || std::find(top.begin(), top.end(), &t) != top.end()) {
    return nullptr;
  }
  return top.front();
}

// The blocks of the config's launch for the problem.
int64_t Blocks(const KernelTemplate& t, const Config& c, const Problem& p) {
  const LaunchGeometry g = t.geometry(c, p);
  return g.grid[0] * g.grid[1] * g.grid[2];
}

// Whether `candidate` leaves most of the GPU idle on the problem where
// `fitted` has at least twice its blocks (a split count tuned for a larger
// grid, say): the model, trained mostly on full grids, is not trusted there.
bool Starves(const TransferCandidate& candidate,
             const TransferCandidate& fitted, const Problem& problem,
             const DeviceLimits& limits) {
  const int64_t sms = limits.multiprocessors > 0 ? limits.multiprocessors : 128;
  const int64_t blocks = Blocks(*candidate.t, candidate.config, problem);
  return 2 * blocks < sms &&
         Blocks(*fitted.t, fitted.config, problem) >= 2 * blocks;
}

// Puts the first config that the first candidate's template fits to
// `problem` and that runs there first in `ranked` (sorted, not empty) when
// the model predicts it within kFittedMargin of that candidate, or that
// candidate starves the GPU (Starves). Where a template of `templates`
// outranks that candidate's, its fitted config instead, within
// kOutrankedMargin.
absl::Status PreferFitted(const CostModel& model, const Problem& problem,
                          const std::vector<const KernelTemplate*>& templates,
                          std::vector<RankedTransfer>* ranked) {
  const KernelTemplate* above = Outranking(
      templates, *ranked->front().candidate.t, problem, model.limits());
  const KernelTemplate& t = above ? *above : *ranked->front().candidate.t;
  const double margin = above ? kOutrankedMargin : kFittedMargin;
  if (!t.fitted_defaults) return absl::OkStatus();
  const std::vector<Config> configs =
      t.fitted_defaults(problem, model.limits());
  auto runs = std::find_if(
      configs.begin(), configs.end(),
      [&](const Config& c) { return RunsOn(t, c, problem, model.limits()); });
  if (runs == configs.end()) return absl::OkStatus();
  const TransferCandidate fitted{&t, *runs, problem, 0};
  absl::StatusOr<std::vector<double>> us = model.PredictUsOn(problem, {fitted});
  if (!us.ok()) return us.status();
  if ((*us)[0] * (1 - margin) > ranked->front().predicted_us &&
      !Starves(ranked->front().candidate, fitted, problem, model.limits())) {
    return absl::OkStatus();
  }
  ranked->erase(std::remove_if(ranked->begin(), ranked->end(),
                               [&](const RankedTransfer& r) {
                                 return r.candidate.t == &t &&
                                        r.candidate.config == fitted.config;
                               }),
                ranked->end());
  ranked->insert(ranked->begin(), {fitted, (*us)[0], true});
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<RankedTransfer>> RankTransfers(
    const CostModel& model, const std::vector<TransferCandidate>& pool,
    const Problem& problem, size_t k) {
  std::vector<TransferCandidate> runnable =
      Runnable(pool, problem, model.limits());
  // Ranks compare every template tuned on the device, also those whose
  // configs ran only at another head_dim or dtype (not runnable here): a
  // decode template tuned at head_dim 64 still outranks a prefill one for
  // a head_dim 128 decode.
  const std::vector<const KernelTemplate*> templates = TemplatesOf(pool);
  if (absl::Status s = Shortlist(model, problem, k, &runnable); !s.ok()) {
    return s;
  }
  absl::StatusOr<std::vector<double>> us = model.PredictUsOn(problem, runnable);
  if (!us.ok()) return us.status();
  std::vector<RankedTransfer> ranked;
  for (size_t i = 0; i < runnable.size(); ++i) {
    ranked.push_back({runnable[i], (*us)[i]});
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const RankedTransfer& a, const RankedTransfer& b) {
                     return a.predicted_us < b.predicted_us;
                   });
  if (!ranked.empty()) {
    if (absl::Status s = PreferFitted(model, problem, templates, &ranked);
        !s.ok()) {
      return s;
    }
  }
  if (ranked.size() > k) ranked.resize(k);
  return ranked;
}

}  // namespace evotune
