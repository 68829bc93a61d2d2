#include "tuner/serving/model_buckets.h"

#include <algorithm>
#include <limits>
#include <map>

#include "absl/strings/str_cat.h"

namespace evotune {
namespace {

std::vector<Problem> Buckets(const ModelTuneRequest& r) {
  std::vector<Problem> out;
  for (const LayerKind& kind : r.kinds) {
    for (Problem& p : EnvelopeBuckets(r.envelope, r.heads, r.kv_heads,
                                      r.head_dim, r.dtype, kind)) {
      p.head_dim_v = r.head_dim_v;
      out.push_back(std::move(p));
    }
  }
  return out;
}

// The kinds: at least one, none twice, each a valid problem's mods.
absl::Status ValidateKinds(const std::vector<LayerKind>& kinds,
                           const Problem& form) {
  if (kinds.empty()) {
    return absl::InvalidArgumentError(
        "layer_kinds: at least one (full attention, for a model without "
        "windows, softcapping, sinks or ALiBi)");
  }
  for (size_t i = 0; i < kinds.size(); ++i) {
    const std::string name = absl::StrCat("layer_kinds[", i, "]");
    Problem p = form;
    p.window_left = kinds[i].window_left;
    p.softcap = kinds[i].softcap;
    p.sinks = kinds[i].sinks;
    p.alibi = kinds[i].alibi;
    if (absl::Status s = ValidateProblem(p, name); !s.ok()) return s;
    for (size_t j = 0; j < i; ++j) {
      if (kinds[j] == kinds[i]) {
        return absl::InvalidArgumentError(
            absl::StrCat(name, ": the same as layer_kinds[", j, "] (",
                         LayerKindName(kinds[i]), ")"));
      }
    }
  }
  return absl::OkStatus();
}

bool HasPrediction(const ModelBucket& b) {
  return b.served_us > 0 && b.best_us > 0;
}

}  // namespace

absl::Status ValidateModelTune(const ModelTuneRequest& r) {
  Problem form;
  form.heads = r.heads;
  form.kv_heads = r.kv_heads;
  form.head_dim = r.head_dim;
  form.head_dim_v = r.head_dim_v;
  form.dtype = r.dtype;
  // "problem.heads: ..." as "heads: ...": the request names no problem.
  if (absl::Status s = ValidateProblem(form, ""); !s.ok()) {
    return absl::InvalidArgumentError(s.message().substr(1));
  }
  if (absl::Status s = ValidateKinds(r.kinds, form); !s.ok()) return s;
  if (absl::Status s = ValidateEnvelope(r.envelope); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("envelope.", s.message()));
  }
  for (const Problem& p : Buckets(r)) {
    if (absl::Status s = ValidateProblem(p); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("envelope: bucket ", ProblemKey(p),
                       " is out of range: ", s.message()));
    }
  }
  return absl::OkStatus();
}

std::vector<ModelBucket> PlanModelBuckets(const ModelTuneRequest& request,
                                          const std::vector<JobRecord>& jobs) {
  std::map<std::string, ModelBucket> known;  // By problem key.
  for (const JobRecord& job : jobs) {
    const bool done = job.state == JobState::kSucceeded;
    if (!done && IsFinal(job.state)) continue;
    ModelBucket& have = known[ProblemKey(job.problem)];
    if (have.state != JobState::kSucceeded) {
      have = {job.problem, job.job_id, job.state, false};
    }
  }
  std::vector<ModelBucket> out;
  for (const Problem& p : Buckets(request)) {
    auto it = known.find(ProblemKey(p));
    out.push_back(it == known.end() ? ModelBucket{p, "", std::nullopt, false}
                                    : it->second);
  }
  return out;
}

double PredictedGain(const ModelBucket& b) {
  return GainShare(b.served_us, b.best_us);
}

std::vector<size_t> PlanSearches(std::vector<ModelBucket>* buckets,
                                 int64_t max_trials) {
  std::vector<size_t> out;
  for (size_t i = 0; i < buckets->size(); ++i) {
    ModelBucket& b = (*buckets)[i];
    if (b.state.has_value()) continue;
    b.trials = HasPrediction(b) && PredictedGain(b) < kSmallGain
                   ? std::min(max_trials, kCheckTrials)
                   : max_trials;
    out.push_back(i);
  }
  // Seconds saved: unpredicted ones first (their gain is unknown).
  auto saved = [&](size_t i) {
    const ModelBucket& b = (*buckets)[i];
    return HasPrediction(b) ? std::max(0.0, b.served_us - b.best_us)
                            : std::numeric_limits<double>::infinity();
  };
  std::stable_sort(out.begin(), out.end(),
                   [&](size_t a, size_t b) { return saved(a) > saved(b); });
  return out;
}

}  // namespace evotune
