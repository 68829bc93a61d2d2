#include "tuner/serving/tuning_service.h"

#include <algorithm>
#include <tuple>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "kernel_templates/serving_defaults.h"
#include "tuner/search/strategy_registry.h"

namespace evotune {
namespace {

std::string NewJobId() {
  absl::BitGen gen;
  return absl::StrFormat("j%012x",
                         absl::Uniform<uint64_t>(gen) & 0xffffffffffffull);
}

absl::Status ValidateJobId(const std::string& job_id) {
  if (job_id.empty()) {
    return absl::InvalidArgumentError("job_id: required");
  }
  return absl::OkStatus();
}

// A strategy by name (empty: kDefaultStrategy) with options it documents,
// within their ranges; INVALID_ARGUMENT naming `strategy` or the option.
absl::Status ValidateStrategy(const std::string& name,
                              const StrategyOptions& options) {
  const StrategySpec* strategy =
      FindStrategy(name.empty() ? kDefaultStrategy : name);
  if (strategy == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("strategy: unknown strategy \"", name, "\" (one of ",
                     absl::StrJoin(StrategyNames(), ", "), ")"));
  }
  return CompleteStrategyOptions(*strategy, options).status();
}

}  // namespace

TuningService::TuningService(ResultStore* store,
                             const TemplateRegistry* templates,
                             JobManager* jobs, TuneOnMiss tune_on_miss,
                             CostModels* models, ModelRanking ranking)
    : store_(store),
      templates_(templates),
      jobs_(jobs),
      tune_on_miss_(tune_on_miss),
      models_(models),
      best_(
          store, templates, jobs,
          [this](const std::string& template_name, const Problem& problem,
                 const std::string& device) {
            return SubmitTuneOnMiss(template_name, problem, device);
          },
          tune_on_miss.enabled, models, ranking) {}

absl::StatusOr<std::string> TuningService::SubmitTuneOnMiss(
    const std::string& template_name, const Problem& problem,
    const std::string& device) {
  SearchRequest search;
  search.template_name = template_name;
  search.problem = problem;
  search.device = device;
  search.max_trials = tune_on_miss_.max_trials;
  search.max_seconds = 3600;
  search.seed = 1;
  search.background = true;
  absl::StatusOr<JobRecord> job = SubmitSearch(search);
  if (!job.ok()) return job.status();
  return job->job_id;
}

absl::StatusOr<const KernelTemplate*> TuningService::ValidateTemplate(
    const std::string& template_name, const Problem& problem) {
  if (template_name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "template_name: required (one of ", TemplateNames(*templates_), ")"));
  }
  const KernelTemplate* t = templates_->Find(template_name);
  if (t == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("template_name: unknown template \"", template_name,
                     "\" (one of ", TemplateNames(*templates_), ")"));
  }
  if (absl::Status s = ValidateProblem(problem); !s.ok()) return s;
  if (absl::Status s = CheckSupports(*t, problem); !s.ok()) return s;
  return t;
}

absl::StatusOr<DeviceInfo> TuningService::LocalDevice(
    const std::string& device_name) {
  return jobs_->Device(device_name);
}

absl::StatusOr<const KernelTemplate*> TuningService::ChooseTemplate(
    const Problem& problem, const DeviceInfo& device) {
  if (absl::Status s = ValidateProblem(problem); !s.ok()) return s;
  std::vector<const KernelTemplate*> all;
  for (const KernelTemplate& t : templates_->templates()) all.push_back(&t);
  // Ranked as serving ranks them (ties in the registry's order), so that a
  // lower-ranked one tunes where those above cannot.
  std::stable_sort(all.begin(), all.end(),
                   [&](const KernelTemplate* a, const KernelTemplate* b) {
                     return DefaultRank(*a, problem) > DefaultRank(*b, problem);
                   });
  for (const KernelTemplate* t : all) {
    if (CheckSupports(*t, problem).ok() &&
        CheckDevice(*t, device.limits).ok() &&
        jobs_->CanEvaluate(device, *t).ok() &&
        !FeasibleConfigs(*t, problem, device.limits).empty() &&
        !jobs_->SearchableConfigs(*t, problem, device).empty()) {
      return t;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "template_name: no template (", TemplateNames(*templates_), ") serves ",
      ProblemKey(problem), " on ", device.name, "; name one to see why"));
}

absl::Status TuningService::ValidateSearch(const SearchRequest& r,
                                           const KernelTemplate** t,
                                           DeviceInfo* device_out) {
  absl::StatusOr<const KernelTemplate*> tmpl;
  if (r.template_name.empty()) {
    if (absl::Status s = ValidateProblem(r.problem); !s.ok()) return s;
    absl::StatusOr<DeviceInfo> device = LocalDevice(r.device);
    if (!device.ok()) return device.status();
    tmpl = ChooseTemplate(r.problem, *device);
  } else {
    tmpl = ValidateTemplate(r.template_name, r.problem);
  }
  if (!tmpl.ok()) return tmpl.status();
  *t = *tmpl;
  if (r.max_trials < 1 || r.max_trials > kMaxTrialsLimit) {
    return absl::InvalidArgumentError(
        absl::StrCat("budget.max_trials: must be in [1, ", kMaxTrialsLimit,
                     "], got ", r.max_trials));
  }
  if (!(r.max_seconds > 0) || !std::isfinite(r.max_seconds) ||
      r.max_seconds > kMaxSecondsLimit) {
    return absl::InvalidArgumentError(
        absl::StrCat("budget.max_seconds: must be in (0, ", kMaxSecondsLimit,
                     "], got ", r.max_seconds));
  }
  if (absl::Status s = ValidateStrategy(r.strategy, r.strategy_options);
      !s.ok()) {
    return s;
  }
  absl::StatusOr<DeviceInfo> device = LocalDevice(r.device);
  if (!device.ok()) return device.status();
  if (absl::Status s = jobs_->CanEvaluate(*device, **t); !s.ok()) return s;
  if (FeasibleConfigs(**t, r.problem, device->limits).empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("problem: no config of template ", (*t)->name,
                     " fits this problem on ", device->name));
  }
  if (jobs_->SearchableConfigs(**t, r.problem, *device).empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "problem: this daemon replays a recorded landscape (--simulate) that "
        "holds no trial of ",
        (*t)->name, " for ", ProblemKey(r.problem), "; it holds ",
        absl::StrJoin(jobs_->RecordedProblems(), ", ")));
  }
  *device_out = *device;
  return absl::OkStatus();
}

absl::StatusOr<JobRecord> TuningService::SubmitSearch(
    const SearchRequest& request) {
  const KernelTemplate* t = nullptr;
  DeviceInfo device;
  if (absl::Status s = ValidateSearch(request, &t, &device); !s.ok()) return s;
  JobRecord job;
  job.device = device;
  job.template_name = t->name;
  job.template_hash = t->hash;
  job.problem = request.problem;
  job.max_trials = request.max_trials;
  job.max_seconds = request.max_seconds;
  job.strategy = request.strategy.empty() ? kDefaultStrategy : request.strategy;
  job.strategy_options = FormatStrategyOptions(*CompleteStrategyOptions(
      *FindStrategy(job.strategy), request.strategy_options));
  job.seed = request.seed;
  job.background = request.background;
  // A collision of 48 random bits is unlikely; try again if it happens.
  for (int attempt = 0;; ++attempt) {
    job.job_id = NewJobId();
    absl::StatusOr<JobRecord> created = jobs_->Submit(job);
    if (!absl::IsAlreadyExists(created.status()) || attempt == 3) {
      return created;
    }
  }
}

absl::StatusOr<std::vector<ModelBucket>> TuningService::TuneModel(
    const ModelTuneRequest& request) {
  if (absl::Status s = ValidateModelTune(request); !s.ok()) return s;
  if (absl::Status s =
          ValidateStrategy(request.strategy, request.strategy_options);
      !s.ok()) {
    return s;
  }
  absl::MutexLock lock(&tune_model_mu_);
  absl::StatusOr<std::vector<JobRecord>> jobs = store_->ListJobs(std::nullopt);
  if (!jobs.ok()) return jobs.status();
  std::vector<ModelBucket> buckets = PlanModelBuckets(request, *jobs);
  PredictBuckets(request.device, &buckets);
  const std::vector<size_t> order = PlanSearches(&buckets, request.max_trials);
  if (request.dry_run) return buckets;
  int submitted = 0;
  for (size_t i : order) {
    ModelBucket& b = buckets[i];
    SearchRequest search;  // No template: the one ranked first.
    search.problem = b.problem;
    search.max_trials = b.trials;
    search.max_seconds = request.max_seconds;
    search.device = request.device;
    search.strategy = request.strategy;
    search.strategy_options = request.strategy_options;
    search.seed = 1;
    absl::StatusOr<JobRecord> job = SubmitSearch(search);
    if (!job.ok()) {
      if (submitted == 0) return job.status();
      return absl::Status(
          job.status().code(),
          absl::StrCat(ProblemKey(b.problem), ": ", job.status().message(),
                       " (", submitted, " buckets before it were submitted)"));
    }
    b.job_id = job->job_id;
    b.state = job->state;
    b.submitted = true;
    ++submitted;
  }
  return buckets;
}

void TuningService::PredictBuckets(const std::string& device_name,
                                   std::vector<ModelBucket>* buckets) {
  if (models_ == nullptr) return;
  absl::StatusOr<DeviceInfo> device = LocalDevice(device_name);
  if (!device.ok()) return;
  std::shared_ptr<const ModelSnapshot> snapshot = models_->Get(*device);
  if (snapshot == nullptr) return;
  for (ModelBucket& b : *buckets) {
    if (b.state.has_value()) continue;
    absl::StatusOr<std::pair<double, double>> us =
        PredictBucket(*snapshot->model, b.problem, *device);
    if (us.ok()) std::tie(b.served_us, b.best_us) = *us;
  }
}

absl::StatusOr<std::pair<double, double>> TuningService::PredictBucket(
    const CostModel& model, const Problem& problem, const DeviceInfo& device) {
  BestQuery query;
  query.problem = problem;
  query.device = device.name;
  query.tune_on_miss = false;
  query.wait_for_model = true;
  absl::StatusOr<BestAnswer> answer = best_.Query(query);
  if (!answer.ok()) return answer.status();
  absl::StatusOr<const KernelTemplate*> t = ChooseTemplate(problem, device);
  if (!t.ok()) return t.status();
  const KernelTemplate* served =
      answer->results.empty()
          ? nullptr
          : templates_->Find(answer->results.front().template_name);
  if (served == nullptr) {
    return absl::NotFoundError("no config is served for the bucket");
  }
  std::vector<CostSample> samples = {
      {served, answer->results.front().trial.config, problem}};
  const std::vector<Config> configs =
      jobs_->SearchableConfigs(**t, problem, device);
  const size_t step = std::max<size_t>(1, configs.size() / kGainSample);
  for (size_t i = 0; i < configs.size(); i += step) {
    samples.push_back({*t, configs[i], problem});
  }
  absl::StatusOr<std::vector<double>> us = model.PredictUs(samples);
  if (!us.ok()) return us.status();
  return std::pair<double, double>{us->front(),
                                   *std::min_element(us->begin(), us->end())};
}

absl::StatusOr<JobView> TuningService::GetJob(const std::string& job_id) {
  if (absl::Status s = ValidateJobId(job_id); !s.ok()) return s;
  absl::StatusOr<JobRecord> job = store_->GetJob(job_id);
  if (!job.ok()) return job.status();
  absl::StatusOr<std::optional<StoredTrial>> best = store_->JobBest(job_id);
  if (!best.ok()) return best.status();
  return JobView{*std::move(job), *std::move(best)};
}

absl::StatusOr<std::vector<JobView>> TuningService::ListJobs(
    std::optional<JobState> state) {
  absl::StatusOr<std::vector<JobRecord>> jobs = store_->ListJobs(state);
  if (!jobs.ok()) return jobs.status();
  std::vector<JobView> out;
  for (JobRecord& job : *jobs) {
    absl::StatusOr<std::optional<StoredTrial>> best =
        store_->JobBest(job.job_id);
    if (!best.ok()) return best.status();
    out.push_back({std::move(job), *std::move(best)});
  }
  return out;
}

absl::StatusOr<JobView> TuningService::CancelJob(const std::string& job_id) {
  if (absl::Status s = ValidateJobId(job_id); !s.ok()) return s;
  absl::StatusOr<JobRecord> job = jobs_->Cancel(job_id);
  if (!job.ok()) return job.status();
  return GetJob(job_id);
}

absl::StatusOr<EvaluateAnswer> TuningService::EvaluateConfig(
    const EvaluateRequest& request) {
  absl::StatusOr<const KernelTemplate*> t =
      ValidateTemplate(request.template_name, request.problem);
  if (!t.ok()) return t.status();
  absl::StatusOr<DeviceInfo> device = LocalDevice(request.device);
  if (!device.ok()) return device.status();
  if (absl::Status s = jobs_->CanEvaluate(*device, **t); !s.ok()) return s;
  absl::Status fits =
      CheckConfig(**t, request.config, request.problem, device->limits);
  if (absl::IsInvalidArgument(fits)) {
    return absl::InvalidArgumentError(absl::StrCat("config: ", fits.message()));
  }
  EvaluateAnswer answer;
  absl::StatusOr<StoredTrial> trial = jobs_->EvaluateOne(
      *device, **t, request.config, request.problem, &answer.cached);
  if (!trial.ok()) return trial.status();
  answer.device = *device;
  answer.template_hash = (*t)->hash;
  answer.trial = *std::move(trial);
  if (answer.trial.result.status == TrialStatus::kOk &&
      answer.trial.result.median_us > 0) {
    answer.tflops =
        ProblemFlops(request.problem) / (answer.trial.result.median_us * 1e6);
  }
  return answer;
}

absl::Status TuningService::WatchJob(
    const std::string& job_id, uint64_t from_sequence,
    const std::function<bool(const JobUpdateView&)>& send,
    const std::function<bool()>& stop) {
  absl::StatusOr<JobView> view = GetJob(job_id);
  if (!view.ok()) return view.status();
  if (!send({*view, std::nullopt})) return absl::OkStatus();

  // Best so far as of the events the client already has.
  std::optional<StoredTrial> best;
  auto consider = [&best](const StoredTrial& t) {
    if (t.result.status == TrialStatus::kOk &&
        (!best || t.result.median_us < best->result.median_us)) {
      best = t;
    }
  };
  int64_t last = static_cast<int64_t>(from_sequence);
  if (last > 0) {
    absl::StatusOr<std::vector<JobEvent>> seen = store_->ListJobEvents(
        job_id, 0, static_cast<int>(std::min<int64_t>(last, kMaxTrialsLimit)));
    if (!seen.ok()) return seen.status();
    for (const JobEvent& e : *seen) consider(e.trial);
  }

  while (!stop()) {
    const uint64_t version = jobs_->version();
    // Read the state before the events: a job is marked final only after its
    // last event is stored, so a final state here means no event is missed.
    absl::StatusOr<JobRecord> job = store_->GetJob(job_id);
    if (!job.ok()) return job.status();
    absl::StatusOr<std::vector<JobEvent>> events =
        store_->ListJobEvents(job_id, last, 256);
    if (!events.ok()) return events.status();
    for (const JobEvent& e : *events) {
      consider(e.trial);
      JobUpdateView update{{*job, best}, e};
      update.job.job.trials_done = e.sequence;
      if (!send(update)) return absl::OkStatus();
      last = e.sequence;
    }
    if (!events->empty()) continue;
    if (IsFinal(job->state)) {
      // As stored: the job's fastest may have been timed again together.
      absl::StatusOr<std::optional<StoredTrial>> stored =
          store_->JobBest(job_id);
      if (!stored.ok()) return stored.status();
      send({{*job, *std::move(stored)}, std::nullopt});
      return absl::OkStatus();
    }
    jobs_->WaitForChange(version, absl::Seconds(1));
  }
  return absl::OkStatus();
}

}  // namespace evotune
