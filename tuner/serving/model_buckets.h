// Tuning a model: the buckets of its serving envelope (core/envelope.h) and
// what each still needs given the jobs in the store, so that asking again
// resumes where a run stopped.
#ifndef EVOTUNE_TUNER_SERVING_MODEL_BUCKETS_H_
#define EVOTUNE_TUNER_SERVING_MODEL_BUCKETS_H_

#include <optional>
#include <string>
#include <vector>

#include "core/envelope.h"
#include "core/problem.h"
#include "storage/result_store.h"
#include "tuner/search/strategy_registry.h"

namespace evotune {

// Every layer's attention of a model, and what to tune it for.
struct ModelTuneRequest {
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t head_dim_v = 0;  // Of values, where it differs (0: head_dim).
  DType dtype = DType::kBf16;
  // The kinds of its layers (one for a model whose layers attend alike),
  // each tuned over the whole envelope.
  std::vector<LayerKind> kinds = {LayerKind()};
  Envelope envelope;
  int64_t max_trials = 12;    // Of each bucket's search.
  double max_seconds = 3600;  // Of each bucket's search.
  std::string device;         // Empty: the default one.
  bool dry_run = false;
  // Of each bucket's search (SearchRequest's; empty: kDefaultStrategy).
  std::string strategy;
  StrategyOptions strategy_options;
};

struct ModelBucket {
  Problem problem;
  std::string job_id;             // Its search, if any.
  std::optional<JobState> state;  // That search's.
  bool submitted = false;         // By this request.
  // The cost model's prediction where it made one (else 0): the time of the
  // config served now, and of the fastest a search may find.
  double served_us = 0;
  double best_us = 0;
  int64_t trials = 0;  // The budget of the search this request plans.
};

// Where the cost model predicts a search gains less than kSmallGain
// (core/envelope.h) of the served time, the bucket's search is kCheckTrials
// long: it measures (and so checks) the served config and one more, and the
// budget goes to the buckets with more to gain.
inline constexpr int64_t kCheckTrials = 2;

// The share of the served time the cost model predicts a search saves on
// the bucket; 0 without a prediction.
double PredictedGain(const ModelBucket& bucket);

// INVALID_ARGUMENT naming the field ("heads", "layer_kinds[1].softcap",
// "envelope.max_batch") for a request whose attention, layer kinds (none,
// or two alike) or envelope evotune does not take, or whose buckets are out
// of range.
absl::Status ValidateModelTune(const ModelTuneRequest& request);

// The request's buckets (EnvelopeBuckets of each kind in turn), each with
// the job that decides
// it: a succeeded one (searched before), else the last queued or running
// one listed (being searched); none where only failed or cancelled ones
// are (searched again). Jobs of any template and origin count.
std::vector<ModelBucket> PlanModelBuckets(const ModelTuneRequest& request,
                                          const std::vector<JobRecord>& jobs);

// The searches to submit: the indices of the buckets without a job, in the
// order to search them (those without a prediction first, in the
// envelope's order; then by predicted time saved, most first), each given
// its trials: max_trials, or kCheckTrials (at most max_trials) where its
// PredictedGain is below kSmallGain.
std::vector<size_t> PlanSearches(std::vector<ModelBucket>* buckets,
                                 int64_t max_trials);

}  // namespace evotune

#endif  // EVOTUNE_TUNER_SERVING_MODEL_BUCKETS_H_
