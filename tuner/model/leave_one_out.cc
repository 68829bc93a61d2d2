#include "tuner/model/leave_one_out.h"

#include <algorithm>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "kernel_templates/serving_defaults.h"
#include "tuner/evaluator/replay_evaluator.h"
#include "tuner/model/transfer.h"

namespace evotune {
namespace {

// Recorded results of one problem: template name -> config key -> result.
using Truth = std::map<std::string, std::map<std::string, TrialResult>>;

Truth TruthOf(const std::vector<RecordedLandscape>& landscapes,
              const std::string& problem) {
  Truth truth;
  for (const RecordedLandscape& l : landscapes) {
    auto it = l.problems.find(problem);
    if (it == l.problems.end()) continue;
    for (const auto& [config, result] : it->second) {
      truth[l.t->name][ConfigKey(config)] = result;
    }
  }
  return truth;
}

// `config` of `t` with its recorded time on the problem of `truth`.
Choice Recorded(const Truth& truth, const KernelTemplate& t,
                const Config& config) {
  Choice c{t.name, config};
  auto by_template = truth.find(t.name);
  if (by_template == truth.end()) return c;
  auto r = by_template->second.find(ConfigKey(config));
  if (r != by_template->second.end() && r->second.status == TrialStatus::kOk) {
    c.us = r->second.median_us;
  }
  return c;
}

// The nearest-problem rule on `samples` for `problem`.
Choice Nearest(const std::vector<CostSample>& samples, const Problem& problem,
               const Truth& truth, const DeviceLimits& limits) {
  for (bool same_class : {true, false}) {
    const CostSample* nearest = nullptr;
    for (const CostSample& s : samples) {
      const bool in_class = s.problem.head_dim == problem.head_dim &&
                            HeadDimV(s.problem) == HeadDimV(problem) &&
                            s.problem.dtype == problem.dtype &&
                            s.problem.kv_fp8 == problem.kv_fp8 &&
                            s.problem.q_fp8 == problem.q_fp8 &&
                            SameScoreMods(s.problem, problem);
      if ((same_class && !in_class) ||
          !RunsOn(*s.t, s.config, problem, limits)) {
        continue;
      }
      if (nearest == nullptr ||
          ProblemDistance(s.problem, problem) <
              ProblemDistance(nearest->problem, problem) ||
          (s.problem == nearest->problem && s.median_us < nearest->median_us)) {
        nearest = &s;
      }
    }
    if (nearest != nullptr)
      return Recorded(truth, *nearest->t, nearest->config);
  }
  return {};
}

// The recorded time on the problem of what the daemon answers with when the
// templates that suit it best (TopRanked among `recorded`, those recorded
// for it) have no sample in `serving`: the first of RankedDefaults;
// std::nullopt when the rule does not apply.
std::optional<Choice> DefaultsServed(
    const std::vector<const KernelTemplate*>& recorded,
    const std::vector<CostSample>& serving, const Problem& problem,
    const Truth& truth, const DeviceLimits& limits) {
  for (const KernelTemplate* t : TopRanked(recorded, problem, limits)) {
    for (const CostSample& s : serving) {
      if (s.t == t) return std::nullopt;
    }
  }
  const std::vector<DefaultChoice> d =
      RankedDefaults(recorded, problem, limits, 1);
  if (d.empty()) return Choice{};
  return Recorded(truth, *d.front().t, d.front().config);
}

// Serves problem `key` from `all` (only the templates recorded for it):
// the model's first ranked config and the nearest rule's, with its optimum;
// both the same defaults where the daemon answers with them (as where
// nothing in `all` serves it).
absl::StatusOr<LeftOut> Serve(
    const CostModel& model, const std::vector<CostSample>& all,
    const std::vector<const KernelTemplate*>& recorded, const std::string& key,
    const Truth& truth, const DeviceLimits& limits) {
  const Problem problem = *ParseProblemKey(key);
  std::vector<CostSample> serving;
  for (const CostSample& s : all) {
    if (truth.count(s.t->name) > 0) serving.push_back(s);
  }
  LeftOut row{key};
  for (const auto& [name, results] : truth) {
    for (const auto& [config, r] : results) {
      if (r.status == TrialStatus::kOk && r.median_us < row.optimum.us) {
        row.optimum = {name, *ParseConfigKey(config), r.median_us};
      }
    }
  }
  if (std::optional<Choice> d =
          DefaultsServed(recorded, serving, problem, truth, limits)) {
    row.model = row.nearest = *d;
    return row;
  }
  absl::StatusOr<std::vector<RankedTransfer>> ranked = RankTransfers(
      model, TransferPool(serving, kTransferPoolPerProblem), problem, 1);
  if (!ranked.ok()) return ranked.status();
  row.nearest = Nearest(serving, problem, truth, limits);
  if (!ranked->empty()) {
    const CostSample& served = ranked->front().candidate;
    row.model = Recorded(truth, *served.t, served.config);
  }
  return row;
}

}  // namespace

absl::StatusOr<RecordedLandscape> LoadRecordedLandscape(
    const std::string& path, const TemplateRegistry& templates) {
  absl::StatusOr<std::unique_ptr<ReplayEvaluator>> replay =
      ReplayEvaluator::Load(path);
  if (!replay.ok()) return replay.status();
  RecordedLandscape out;
  out.path = path;
  out.t = templates.Find((*replay)->template_name());
  if (out.t == nullptr) {
    return absl::InvalidArgumentError(path + ": no template named " +
                                      (*replay)->template_name());
  }
  out.limits = (*replay)->device().limits;
  if (out.limits.multiprocessors <= 0) {
    return absl::InvalidArgumentError(
        path +
        ": the header does not give the GPU's multiprocessors (a "
        "\"# multiprocessors: N\" line, as evotune-worker --describe prints "
        "it)");
  }
  for (const auto& [key, results] : (*replay)->landscape()) {
    const Problem p = *ParseProblemKey(key);
    for (const Config& c : FeasibleConfigs(*out.t, p, out.limits)) {
      absl::StatusOr<TrialResult> r = (*replay)->Evaluate(*out.t, c, p);
      if (r.ok()) out.problems[key].push_back({c, *r});
    }
  }
  return out;
}

absl::StatusOr<DeviceLimits> SharedLimits(
    const std::vector<RecordedLandscape>& landscapes) {
  if (landscapes.empty()) {
    return absl::InvalidArgumentError("no recorded landscapes");
  }
  const RecordedLandscape& first = landscapes.front();
  for (const RecordedLandscape& l : landscapes) {
    const DeviceLimits& a = first.limits;
    const DeviceLimits& b = l.limits;
    if (a.compute_capability != b.compute_capability ||
        a.multiprocessors != b.multiprocessors ||
        a.smem_per_block_bytes != b.smem_per_block_bytes ||
        a.max_threads_per_block != b.max_threads_per_block) {
      return absl::InvalidArgumentError(absl::StrCat(
          l.path, " and ", first.path,
          " were recorded on different GPUs (compute capability ",
          b.compute_capability / 10, ".", b.compute_capability % 10, ", ",
          b.multiprocessors, " multiprocessors vs ", a.compute_capability / 10,
          ".", a.compute_capability % 10, ", ", a.multiprocessors, ")"));
    }
  }
  return first.limits;
}

std::vector<CostSample> RecordedSamples(
    const std::vector<RecordedLandscape>& landscapes, const std::string& skip) {
  std::vector<CostSample> samples;
  for (const RecordedLandscape& l : landscapes) {
    for (const auto& [key, results] : l.problems) {
      if (key == skip) continue;
      const Problem p = *ParseProblemKey(key);
      for (const auto& [config, r] : results) {
        if (r.status == TrialStatus::kOk && r.median_us > 0) {
          samples.push_back({l.t, config, p, r.median_us});
        }
      }
    }
  }
  return samples;
}

absl::StatusOr<std::vector<LeftOut>> LeaveOneProblemOut(
    const std::vector<RecordedLandscape>& landscapes,
    const DeviceLimits& limits, const CostModelOptions& options,
    const std::set<std::string>& tuned) {
  std::set<std::string> problems;
  for (const RecordedLandscape& l : landscapes) {
    for (const auto& [key, results] : l.problems) problems.insert(key);
  }
  auto features = std::make_shared<FeatureMap>(TemplateRegistry::Builtin());
  // Serving ranks by predicted latency alone: no order model.
  CostModelOptions latency_only = options;
  latency_only.order_model = false;
  // Trained once when the tuned problems are given.
  std::shared_ptr<CostModel> tuned_model;
  std::vector<CostSample> tuned_samples;
  if (!tuned.empty()) {
    for (CostSample& s : RecordedSamples(landscapes, "")) {
      if (tuned.count(ProblemKey(s.problem)) > 0) {
        tuned_samples.push_back(std::move(s));
      }
    }
    absl::StatusOr<std::unique_ptr<CostModel>> model =
        CostModel::Train(features, tuned_samples, limits, latency_only);
    if (!model.ok()) return model.status();
    tuned_model = *std::move(model);
  }
  std::vector<LeftOut> out;
  for (const std::string& key : problems) {
    if (tuned.count(key) > 0) continue;
    const Truth truth = TruthOf(landscapes, key);
    std::vector<const KernelTemplate*> recorded;
    for (const RecordedLandscape& l : landscapes) {
      if (l.problems.count(key) > 0) recorded.push_back(l.t);
    }
    std::shared_ptr<CostModel> model = tuned_model;
    std::vector<CostSample> all =
        tuned.empty() ? RecordedSamples(landscapes, key) : tuned_samples;
    if (model == nullptr) {
      absl::StatusOr<std::unique_ptr<CostModel>> trained =
          CostModel::Train(features, all, limits, latency_only);
      if (!trained.ok()) return trained.status();
      model = *std::move(trained);
    }
    absl::StatusOr<LeftOut> row =
        Serve(*model, all, recorded, key, truth, limits);
    if (!row.ok()) return row.status();
    out.push_back(*std::move(row));
  }
  return out;
}

}  // namespace evotune
