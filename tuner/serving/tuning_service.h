// TuningService: the daemon's API logic on internal types: jobs (submit,
// watch, cancel), single evaluations, and best answers (QueryBest, which
// BestAnswers gives). Every request is validated before anything is written;
// errors are INVALID_ARGUMENT with a message that starts with the offending
// field, NOT_FOUND for unknown ids and FAILED_PRECONDITION for requests the
// daemon's state cannot honour. The gRPC adapter (grpc_service.h) only
// converts. Thread-safe.
#ifndef EVOTUNE_TUNER_SERVING_TUNING_SERVICE_H_
#define EVOTUNE_TUNER_SERVING_TUNING_SERVICE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "kernel_templates/template_registry.h"
#include "storage/result_store.h"
#include "tuner/jobs/cost_models.h"
#include "tuner/jobs/job_manager.h"
#include "tuner/search/strategy_registry.h"
#include "tuner/serving/best_answers.h"
#include "tuner/serving/model_buckets.h"

namespace evotune {

// Upper bounds of a job's budget (inclusive).
inline constexpr int64_t kMaxTrialsLimit = 1000000;
inline constexpr double kMaxSecondsLimit = 30 * 24 * 3600.0;
inline constexpr char kDefaultStrategy[] = "evolutionary";
// The configs of a bucket's template the cost model predicts, at most, to
// judge what a search may gain there (TuningService::TuneModel).
inline constexpr size_t kGainSample = 256;

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
  // Every valid problem gets runnable configs (see BestAnswer and
  // BestAnswers::Query).
  absl::StatusOr<BestAnswer> QueryBest(const BestQuery& query) {
    return best_.Query(query);
  }
  // A config outside the template's space or breaking its constraints is
  // INVALID_ARGUMENT naming "config"; one that exceeds the device's limits is
  // evaluated and comes back as resource_rejected.
  absl::StatusOr<EvaluateAnswer> EvaluateConfig(const EvaluateRequest& request);
  const TemplateRegistry& templates() const { return *templates_; }

  // One search per bucket of a model's envelope that needs one (the
  // template ranked first for it), or none in a dry run; the buckets with
  // their jobs (tuner/serving/model_buckets.h). Where the device has a cost
  // model, each bucket's predicted gain orders the searches and sets their
  // trials (PlanSearches). Errors: ValidateModelTune's, and SubmitSearch's
  // of the first bucket (nothing submitted then).
  absl::StatusOr<std::vector<ModelBucket>> TuneModel(
      const ModelTuneRequest& request);

  // The cost model's time of the config served now for `problem` (as
  // QueryBest answers) and of the fastest of at most kGainSample configs a
  // search of it may try (evenly spaced in the searchable ones of the
  // template a search would tune): what TuneModel plans by.
  absl::StatusOr<std::pair<double, double>> PredictBucket(
      const CostModel& model, const Problem& problem, const DeviceInfo& device);

  // Streams a snapshot, then every event with sequence > from_sequence as it
  // happens, then the final job; returns when the job is final and all was
  // sent, when `send` returns false, or when `stop` returns true (checked at
  // least once a second).
  absl::Status WatchJob(const std::string& job_id, uint64_t from_sequence,
                        const std::function<bool(const JobUpdateView&)>& send,
                        const std::function<bool()>& stop);

 private:
  // The background search of tune on miss (BestAnswers::SubmitFn).
  absl::StatusOr<std::string> SubmitTuneOnMiss(const std::string& template_name,
                                               const Problem& problem,
                                               const std::string& device);
  absl::Status ValidateSearch(const SearchRequest& request,
                              const KernelTemplate** t, DeviceInfo* device);
  // template_name, the problem and whether the template supports it.
  absl::StatusOr<const KernelTemplate*> ValidateTemplate(
      const std::string& template_name, const Problem& problem);
  // The template a search that names none tunes: of those ranked first for
  // the problem (as the daemon serves what nothing tuned), the first the
  // device can evaluate with a config that fits; INVALID_ARGUMENT naming
  // template_name where none can.
  absl::StatusOr<const KernelTemplate*> ChooseTemplate(
      const Problem& problem, const DeviceInfo& device);
  // The device named `device_name` (empty: the default one) that trials can
  // run on.
  absl::StatusOr<DeviceInfo> LocalDevice(const std::string& device_name);
  // Sets each bucket without a job's served_us and best_us where the
  // device has a cost model (PredictBucket).
  void PredictBuckets(const std::string& device_name,
                      std::vector<ModelBucket>* buckets);
  // TuneModel plans and submits under it, so that two calls at once (a
  // run and its resumption) never submit a bucket twice.
  absl::Mutex tune_model_mu_;
  ResultStore* const store_;
  const TemplateRegistry* const templates_;
  JobManager* const jobs_;
  const TuneOnMiss tune_on_miss_;
  CostModels* const models_;
  BestAnswers best_;
};

}  // namespace evotune

#endif  // EVOTUNE_TUNER_SERVING_TUNING_SERVICE_H_
