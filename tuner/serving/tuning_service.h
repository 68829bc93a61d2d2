// TuningService: the daemon's API logic on internal types. Every request is
// validated before anything is written; errors are INVALID_ARGUMENT with a
// message that starts with the offending field, NOT_FOUND for unknown ids and
// FAILED_PRECONDITION for requests the daemon's state cannot honour.
// The gRPC adapter (grpc_service.h) only converts. Thread-safe.
#ifndef EVOTUNE_TUNER_SERVING_TUNING_SERVICE_H_
#define EVOTUNE_TUNER_SERVING_TUNING_SERVICE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "kernel_templates/template_registry.h"
#include "storage/result_store.h"
#include "tuner/common/task_queue.h"
#include "tuner/jobs/cost_models.h"
#include "tuner/jobs/job_manager.h"
#include "tuner/search/strategy_registry.h"

namespace evotune {

// Upper bounds of a job's budget (inclusive).
inline constexpr int64_t kMaxTrialsLimit = 1000000;
inline constexpr double kMaxSecondsLimit = 30 * 24 * 3600.0;
inline constexpr int kMaxTopK = 100;
inline constexpr char kDefaultStrategy[] = "evolutionary";

struct SearchRequest {
  std::string template_name;
  Problem problem;
  int64_t max_trials = 0;
  double max_seconds = 0;
  std::string strategy;              // Empty means kDefaultStrategy.
  StrategyOptions strategy_options;  // Validated against the strategy.
  uint64_t seed = 0;
  std::string device;       // Empty means the daemon's device.
  bool background = false;  // Started by the daemon (tune on miss).
};

struct JobView {
  JobRecord job;
  std::optional<StoredTrial> best;
};

// One message of a watch stream: event unset for the snapshot and the end.
struct JobUpdateView {
  JobView job;
  std::optional<JobEvent> event;
};

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

struct EvaluateRequest {
  std::string template_name;
  Config config;
  Problem problem;
  std::string device;  // Empty means the daemon's device.
};

struct EvaluateAnswer {
  DeviceInfo device;
  std::string template_hash;
  StoredTrial trial;
  bool cached = false;
  double tflops = 0;  // Set when the trial is OK.
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

class TuningService {
 public:
  // All must outlive the service; `models` may be null (no cost model:
  // transfers come from the nearest tuned problem).
  TuningService(ResultStore* store, const TemplateRegistry* templates,
                JobManager* jobs, TuneOnMiss tune_on_miss = {},
                CostModels* models = nullptr, ModelRanking ranking = {});

  absl::StatusOr<JobRecord> SubmitSearch(const SearchRequest& request);
  absl::StatusOr<JobView> GetJob(const std::string& job_id);
  absl::StatusOr<std::vector<JobView>> ListJobs(std::optional<JobState> state);
  absl::StatusOr<JobView> CancelJob(const std::string& job_id);
  // Every valid problem gets runnable configs (see BestAnswer).
  absl::StatusOr<BestAnswer> QueryBest(const BestQuery& query);
  // A config outside the template's space or breaking its constraints is
  // INVALID_ARGUMENT naming "config"; one that exceeds the device's limits is
  // evaluated and comes back as resource_rejected.
  absl::StatusOr<EvaluateAnswer> EvaluateConfig(const EvaluateRequest& request);
  const TemplateRegistry& templates() const { return *templates_; }

  // Streams a snapshot, then every event with sequence > from_sequence as it
  // happens, then the final job; returns when the job is final and all was
  // sent, when `send` returns false, or when `stop` returns true (checked at
  // least once a second).
  absl::Status WatchJob(const std::string& job_id, uint64_t from_sequence,
                        const std::function<bool(const JobUpdateView&)>& send,
                        const std::function<bool()>& stop);

 private:
  // Whether `config` of that template version runs on `problem` within
  // `limits`.
  bool Runnable(const std::string& template_name,
                const std::string& template_hash, const Config& config,
                const Problem& problem, const DeviceLimits& limits) const;
  // The background search for the answer's problem, started unless one
  // exists; empty when the problem cannot be tuned here.
  std::string TuneOnMissJob(const BestQuery& query, const BestAnswer& answer);
  // QueryBest when the problem has no trial of its own.
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
  absl::Status ValidateSearch(const SearchRequest& request,
                              const KernelTemplate** t, DeviceInfo* device);
  // template_name, the problem and whether the template supports it.
  absl::StatusOr<const KernelTemplate*> ValidateTemplate(
      const std::string& template_name, const Problem& problem);
  // The device named `device_name` (empty: the default one) that trials can
  // run on.
  absl::StatusOr<DeviceInfo> LocalDevice(const std::string& device_name);

  ResultStore* const store_;
  const TemplateRegistry* const templates_;
  JobManager* const jobs_;
  const TuneOnMiss tune_on_miss_;
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

#endif  // EVOTUNE_TUNER_SERVING_TUNING_SERVICE_H_
