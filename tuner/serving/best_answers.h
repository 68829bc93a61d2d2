// BestAnswers: the daemon's answer to "the fastest configs of this problem
// on this GPU" (QueryBest, and the kernel GetKernel compiles). Every valid
// problem gets configs that run on it: its own fastest; else configs tuned
// for other problems, ranked by the device's cost model or taken from the
// nearest tuned problem (transfer); else the defaults of the templates that
// suit it best. A miss may start a background search (tune on miss).
// Thread-safe.
#ifndef EVOTUNE_TUNER_SERVING_BEST_ANSWERS_H_
#define EVOTUNE_TUNER_SERVING_BEST_ANSWERS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "kernel_templates/template_registry.h"
#include "storage/result_store.h"
#include "tuner/common/task_queue.h"
#include "tuner/jobs/cost_models.h"
#include "tuner/jobs/job_manager.h"

namespace evotune {

inline constexpr int kMaxTopK = 100;

struct BestQuery {
  Problem problem;
  std::string device;         // Empty means the daemon's device.
  std::string template_name;  // Empty means every template.
  int k = 1;
  // Start a background search when the problem has no results of its own;
  // unset means the daemon's default (TuneOnMiss::enabled).
  std::optional<bool> tune_on_miss;
  // Wait for the cost model's first ranking of the problem; unset means the
  // daemon's default (ModelRanking::wait).
  std::optional<bool> wait_for_model;
};

// How the cost model's first ranking of a problem meets the query that asks:
// the query waits for it (`wait`), or it runs on one of `threads` background
// threads (at most `max_queued` waiting) while the query is answered with
// the templates' defaults.
struct ModelRanking {
  bool wait = true;
  int threads = 1;
  size_t max_queued = 256;
};

// Tune on miss: a QueryBest whose problem has no results of its own starts
// one background search per (device, template, problem), however many
// queries ask: the template of the answer's first config (or the one asked
// for), the evolutionary strategy, this budget.
struct TuneOnMiss {
  bool enabled = false;
  int64_t max_trials = 40;
};

// The answer to QueryBest: the problem's own fastest configs; else configs
// tuned for other problems that run on it (transferred): ranked by the
// device's cost model when it has one (predicted), else those of the
// nearest tuned problem; else, when nothing tuned on the device runs on
// it, the templates' defaults (not measured).
struct BestAnswer {
  DeviceInfo device;
  bool transferred = false;
  bool predicted = false;
  bool defaults = false;
  // The cost model is ranking the problem; this answer did not wait for it.
  bool ranking = false;
  Problem source_problem;
  std::vector<RankedTrial> results;
  // The background search tuning the problem (tune on miss), if any.
  std::string tuning_job_id;
};

// How many of a transfer source's fastest configs are checked against the
// asked problem (some may not run on it).
inline constexpr int kTransferPool = 50;
// Predicted answers kept (see TuningService::Predict).
inline constexpr size_t kMaxPredictedAnswers = 4096;

// "naive, flash_fwd, ..." for messages naming the registered templates.
std::string TemplateNames(const TemplateRegistry& registry);

class BestAnswers {
 public:
  // Starts the background search of tune on miss: (template, problem,
  // device) to the new job's id, or an error when it cannot run here.
  using SubmitFn = std::function<absl::StatusOr<std::string>(
      const std::string& template_name, const Problem& problem,
      const std::string& device)>;

  // All must outlive it; `models` may be null (no cost model: transfers come
  // from the nearest tuned problem).
  BestAnswers(ResultStore* store, const TemplateRegistry* templates,
              JobManager* jobs, SubmitFn submit, bool tune_on_miss,
              CostModels* models, ModelRanking ranking);

  // The answer for `query` (see BestAnswer). INVALID_ARGUMENT naming the
  // field ("problem.heads", "k", "template_name", "device").
  absl::StatusOr<BestAnswer> Query(const BestQuery& query);

 private:
  // Whether `config` of that template version runs on `problem` within
  // `limits`.
  bool Runnable(const std::string& template_name,
                const std::string& template_hash, const Config& config,
                const Problem& problem, const DeviceLimits& limits) const;
  // The background search for the answer's problem, started unless one
  // exists; empty when the problem cannot be tuned here.
  std::string TuneOnMissJob(const BestQuery& query, const BestAnswer& answer);
  // Query when the problem has no trial of its own.
  absl::StatusOr<BestAnswer> Transfer(
      const BestQuery& query,
      const std::vector<std::pair<std::string, std::string>>& templates,
      BestAnswer answer);
  // Whether the templates that suit the problem best (TopRanked) have no
  // tuned problem on the device: their defaults then answer it rather than
  // configs transferred from templates that suit it less (a decode problem
  // where only prefill templates were tuned).
  absl::StatusOr<bool> BestSuitedUntuned(
      const BestQuery& query,
      const std::vector<std::pair<std::string, std::string>>& templates,
      const DeviceInfo& device, const DeviceLimits& limits) const;
  // Fills answer->results with the runnable fastest configs of the nearest
  // tuned problem (same head_dim, dtype and causal flag first); false when
  // none runs on the problem.
  absl::StatusOr<bool> TransferNearest(
      const BestQuery& query,
      const std::vector<std::pair<std::string, std::string>>& templates,
      const DeviceLimits& limits, BestAnswer* answer);
  // The registered templates of these versions.
  std::vector<const KernelTemplate*> Resolve(
      const std::vector<std::pair<std::string, std::string>>& templates) const;
  // The templates' default configs that run on the problem (RankedDefaults).
  std::vector<RankedTrial> Defaults(
      const BestQuery& query,
      const std::vector<std::pair<std::string, std::string>>& templates,
      const DeviceLimits& limits) const;
  // One query's answer from a cost model: set before `done` is notified.
  struct Prediction {
    absl::Notification done;
    bool dropped = false;  // The background queue was full: never ranked.
    absl::Status status;
    std::vector<RankedTrial> results;
    Problem source_problem;
  };
  // Ranks the snapshot's pool configs of the templates `names` for the
  // query's problem into p (all but `done`).
  static void Rank(const ModelSnapshot& snapshot,
                   const std::vector<std::string>& names,
                   const BestQuery& query, Prediction* p);
  // Ranks into p, forgets p's key when that failed, and notifies p's askers.
  void Publish(const ModelSnapshot& snapshot,
               const std::vector<std::string>& names, const BestQuery& query,
               const std::string& key, const std::shared_ptr<Prediction>& p);
  // Publishes p now (wait) or on the background queue; when that is full,
  // forgets p and notifies it as dropped.
  void StartRanking(bool wait, std::shared_ptr<const ModelSnapshot> snapshot,
                    std::vector<std::string> names, const BestQuery& query,
                    const std::string& key, std::shared_ptr<Prediction> p);
  void Forget(const std::string& key, const std::shared_ptr<Prediction>& p);
  // Fills answer->results from the device's cost model; false when it has
  // none or nothing in its pool runs on the problem. Answers are cached per
  // model version.
  absl::StatusOr<bool> Predict(
      const BestQuery& query,
      const std::vector<std::pair<std::string, std::string>>& templates,
      BestAnswer* answer);

  ResultStore* const store_;
  const TemplateRegistry* const templates_;
  JobManager* const jobs_;
  const SubmitFn submit_;
  const bool tune_on_miss_;
  CostModels* const models_;
  absl::Mutex predicted_mu_;
  // Predicted answers by model version and query, each ranked once however
  // many ask at the same time (the first ranks, the others wait for it);
  // cleared when it grows past kMaxPredictedAnswers.
  std::map<std::string, std::shared_ptr<Prediction>> predicted_
      ABSL_GUARDED_BY(predicted_mu_);
  absl::Mutex tuning_mu_;
  // Background jobs by (device, template, problem) key; empty for a problem
  // that could not be tuned here.
  std::map<std::string, std::string> tuning_jobs_ ABSL_GUARDED_BY(tuning_mu_);
  const ModelRanking ranking_;
  // Background rankings (with a cost model); last, so that it finishes them
  // before the members they use go.
  std::unique_ptr<TaskQueue> rankings_;
};

}  // namespace evotune

#endif  // EVOTUNE_TUNER_SERVING_BEST_ANSWERS_H_
