#include "tuner/serving/tuning_service.h"

#include <algorithm>
#include <cmath>
#include <iterator>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "kernel_templates/serving_defaults.h"
#include "tuner/search/strategy_registry.h"

namespace evotune {
namespace {

std::string TemplateNames(const TemplateRegistry& registry) {
  std::vector<std::string> names;
  for (const KernelTemplate& t : registry.templates()) names.push_back(t.name);
  return absl::StrJoin(names, ", ");
}

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
      ranking_(ranking) {
  if (models_ != nullptr) {
    rankings_ = std::make_unique<TaskQueue>(std::max(1, ranking_.threads),
                                            ranking_.max_queued);
  }
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

absl::Status TuningService::ValidateSearch(const SearchRequest& r,
                                           const KernelTemplate** t,
                                           DeviceInfo* device_out) {
  absl::StatusOr<const KernelTemplate*> tmpl =
      ValidateTemplate(r.template_name, r.problem);
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
  const StrategySpec* strategy =
      FindStrategy(r.strategy.empty() ? kDefaultStrategy : r.strategy);
  if (strategy == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("strategy: unknown strategy \"", r.strategy, "\" (one of ",
                     absl::StrJoin(StrategyNames(), ", "), ")"));
  }
  absl::StatusOr<StrategyOptions> options =
      CompleteStrategyOptions(*strategy, r.strategy_options);
  if (!options.ok()) return options.status();
  absl::StatusOr<DeviceInfo> device = LocalDevice(r.device);
  if (!device.ok()) return device.status();
  if (absl::Status s = jobs_->CanEvaluate(*device, **t); !s.ok()) return s;
  if (FeasibleConfigs(**t, r.problem, device->limits).empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("problem: no config of template ", r.template_name,
                     " fits this problem on ", device->name));
  }
  if (jobs_->SearchableConfigs(**t, r.problem, *device).empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "problem: this daemon replays a recorded landscape (--simulate) that "
        "holds no trial of ",
        r.template_name, " for ", ProblemKey(r.problem), "; it holds ",
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

absl::StatusOr<BestAnswer> TuningService::QueryBest(const BestQuery& query) {
  if (absl::Status s = ValidateProblem(query.problem); !s.ok()) return s;
  if (query.k < 1 || query.k > kMaxTopK) {
    return absl::InvalidArgumentError(
        absl::StrCat("k: must be in [1, ", kMaxTopK, "], got ", query.k));
  }
  std::vector<std::pair<std::string, std::string>> templates;
  if (!query.template_name.empty()) {
    const KernelTemplate* t = templates_->Find(query.template_name);
    if (t == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "template_name: unknown template \"", query.template_name,
          "\" (one of ", TemplateNames(*templates_), ")"));
    }
    templates.push_back({t->name, t->hash});
  } else {
    templates = templates_->Versions();
  }

  BestAnswer answer;
  absl::StatusOr<DeviceInfo> local = jobs_->Device(query.device);
  if (local.ok()) {
    answer.device = *local;
  } else if (query.device.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("device: required, since this daemon has no device (",
                     local.status().message(), ")"));
  } else {
    absl::StatusOr<DeviceInfo> found = store_->FindDevice(query.device);
    if (!found.ok()) return found.status();
    answer.device = *found;
  }

  absl::StatusOr<std::vector<RankedTrial>> top =
      store_->TopK(answer.device, query.problem, templates, query.k);
  if (!top.ok()) return top.status();
  answer.source_problem = query.problem;
  if (!top->empty()) {
    answer.results = *std::move(top);
    return answer;
  }
  absl::StatusOr<BestAnswer> transfer =
      Transfer(query, templates, std::move(answer));
  if (transfer.ok() && query.tune_on_miss.value_or(tune_on_miss_.enabled)) {
    transfer->tuning_job_id = TuneOnMissJob(query, *transfer);
  }
  return transfer;
}

std::string TuningService::TuneOnMissJob(const BestQuery& query,
                                         const BestAnswer& answer) {
  SearchRequest search;
  search.template_name = !query.template_name.empty() ? query.template_name
                         : answer.results.empty()
                             ? ""
                             : answer.results.front().template_name;
  search.problem = query.problem;
  search.device = query.device;
  search.max_trials = tune_on_miss_.max_trials;
  search.max_seconds = 3600;
  search.seed = 1;
  search.background = true;
  const std::string key =
      absl::StrCat(answer.device.name, "\x1f", search.template_name, "\x1f",
                   ProblemKey(query.problem));
  absl::MutexLock lock(&tuning_mu_);
  if (auto it = tuning_jobs_.find(key); it != tuning_jobs_.end()) {
    return it->second;
  }
  // One started before a restart, or a search that cannot run here.
  absl::StatusOr<std::vector<JobRecord>> jobs = store_->ListJobs(std::nullopt);
  if (!jobs.ok()) return "";
  for (const JobRecord& j : *jobs) {
    if (j.background && j.template_name == search.template_name &&
        j.problem == query.problem && j.device.SameKey(answer.device)) {
      return tuning_jobs_[key] = j.job_id;
    }
  }
  // Not tunable here (no GPU, a replay without the problem, ...): remembered
  // as such, so that further queries do not try again.
  absl::StatusOr<JobRecord> job = SubmitSearch(search);
  return tuning_jobs_[key] = job.ok() ? job->job_id : "";
}

bool TuningService::Runnable(const std::string& template_name,
                             const std::string& template_hash,
                             const Config& config, const Problem& problem,
                             const DeviceLimits& limits) const {
  const KernelTemplate* t = templates_->Find(template_name);
  return t != nullptr && t->hash == template_hash &&
         RunsOn(*t, config, problem, limits);
}

absl::StatusOr<BestAnswer> TuningService::Transfer(
    const BestQuery& query,
    const std::vector<std::pair<std::string, std::string>>& templates,
    BestAnswer answer) {
  const DeviceLimits limits = ServingLimits(answer.device);
  absl::StatusOr<bool> untuned =
      BestSuitedUntuned(query, templates, answer.device, limits);
  if (!untuned.ok()) return untuned.status();
  if (!*untuned) {
    absl::StatusOr<bool> predicted = Predict(query, templates, &answer);
    if (!predicted.ok()) return predicted.status();
    if (*predicted) return answer;
    // A query that does not wait for the model's ranking gets the defaults
    // at once; without a model (none trained yet, or too few trials) the
    // nearest tuned problem answers, a search in memory.
    if (!answer.ranking) {
      absl::StatusOr<bool> nearest =
          TransferNearest(query, templates, limits, &answer);
      if (!nearest.ok()) return nearest.status();
      if (*nearest) return answer;
    }
  }
  answer.defaults = true;
  answer.results = Defaults(query, templates, limits);
  return answer;
}

absl::StatusOr<bool> TuningService::BestSuitedUntuned(
    const BestQuery& query,
    const std::vector<std::pair<std::string, std::string>>& templates,
    const DeviceInfo& device, const DeviceLimits& limits) const {
  std::vector<std::pair<std::string, std::string>> top;
  for (const KernelTemplate* t :
       TopRanked(Resolve(templates), query.problem, limits)) {
    top.push_back({t->name, t->hash});
  }
  if (top.empty()) return false;
  absl::StatusOr<bool> tuned = store_->HasTunedProblem(device, top);
  if (!tuned.ok()) return tuned.status();
  return !*tuned;
}

absl::StatusOr<bool> TuningService::TransferNearest(
    const BestQuery& query,
    const std::vector<std::pair<std::string, std::string>>& templates,
    const DeviceLimits& limits, BestAnswer* answer) {
  const size_t k = static_cast<size_t>(query.k);
  for (bool same_class : {true, false}) {
    absl::StatusOr<std::optional<Problem>> nearest =
        store_->NearestTunedProblem(answer->device, query.problem, templates,
                                    same_class);
    if (!nearest.ok()) return nearest.status();
    if (!nearest->has_value()) continue;
    absl::StatusOr<std::vector<RankedTrial>> top = store_->TopK(
        answer->device, **nearest, templates, std::max(query.k, kTransferPool));
    if (!top.ok()) return top.status();
    for (RankedTrial& r : *top) {
      if (answer->results.size() < k &&
          Runnable(r.template_name, r.template_hash, r.trial.config,
                   query.problem, limits)) {
        answer->results.push_back(std::move(r));
      }
    }
    if (!answer->results.empty()) {
      answer->transferred = true;
      answer->source_problem = **nearest;
      return true;
    }
  }
  return false;
}

std::vector<const KernelTemplate*> TuningService::Resolve(
    const std::vector<std::pair<std::string, std::string>>& templates) const {
  std::vector<const KernelTemplate*> out;
  for (const auto& [name, hash] : templates) {
    const KernelTemplate* t = templates_->Find(name);
    if (t != nullptr && t->hash == hash) out.push_back(t);
  }
  return out;
}

std::vector<RankedTrial> TuningService::Defaults(
    const BestQuery& query,
    const std::vector<std::pair<std::string, std::string>>& templates,
    const DeviceLimits& limits) const {
  std::vector<RankedTrial> out;
  for (DefaultChoice& d :
       RankedDefaults(Resolve(templates), query.problem, limits,
                      static_cast<size_t>(query.k))) {
    out.push_back({d.t->name, d.t->hash, StoredTrial{0, d.config, {}, 0}});
  }
  return out;
}

void TuningService::Rank(const ModelSnapshot& snapshot,
                         const std::vector<std::string>& names,
                         const BestQuery& query, Prediction* p) {
  auto named = [&](const TransferCandidate& c) {
    return std::find(names.begin(), names.end(), c.t->name) != names.end();
  };
  // The pool is copied only when some of it is not asked for.
  const bool all =
      std::all_of(snapshot.pool.begin(), snapshot.pool.end(), named);
  std::vector<TransferCandidate> some;
  if (!all) {
    std::copy_if(snapshot.pool.begin(), snapshot.pool.end(),
                 std::back_inserter(some), named);
  }
  // One more than asked: a fitted config first may push out the transfer
  // that names the source problem.
  absl::StatusOr<std::vector<RankedTransfer>> ranked = RankTransfers(
      *snapshot.model, all ? snapshot.pool : some, query.problem, query.k + 1);
  if (!ranked.ok()) {
    p->status = ranked.status();
    return;
  }
  bool sourced = false;
  for (const RankedTransfer& r : *ranked) {
    StoredTrial trial;
    trial.config = r.candidate.config;
    trial.result.status = TrialStatus::kOk;
    trial.result.median_us = r.candidate.median_us;
    p->results.push_back({r.candidate.t->name, r.candidate.t->hash, trial,
                          r.predicted_us, r.fitted});
    // The source: the first transferred config's problem.
    if (!r.fitted && !sourced) {
      p->source_problem = r.candidate.problem;
      sourced = true;
    }
  }
  if (p->results.size() > static_cast<size_t>(query.k)) {
    p->results.resize(query.k);
  }
}

void TuningService::Publish(const ModelSnapshot& snapshot,
                            const std::vector<std::string>& names,
                            const BestQuery& query, const std::string& key,
                            const std::shared_ptr<Prediction>& p) {
  Rank(snapshot, names, query, p.get());
  if (!p->status.ok()) Forget(key, p);  // The next query ranks again.
  p->done.Notify();
}

void TuningService::StartRanking(bool wait,
                                 std::shared_ptr<const ModelSnapshot> snapshot,
                                 std::vector<std::string> names,
                                 const BestQuery& query, const std::string& key,
                                 std::shared_ptr<Prediction> p) {
  if (wait) {
    Publish(*snapshot, names, query, key, p);
    return;
  }
  if (rankings_->TrySchedule(
          [this, snapshot, names = std::move(names), query, key, p] {
            Publish(*snapshot, names, query, key, p);
          })) {
    return;
  }
  Forget(key, p);  // A later query tries again.
  p->dropped = true;
  p->done.Notify();
}

void TuningService::Forget(const std::string& key,
                           const std::shared_ptr<Prediction>& p) {
  absl::MutexLock lock(&predicted_mu_);
  if (auto it = predicted_.find(key);
      it != predicted_.end() && it->second == p) {
    predicted_.erase(it);
  }
}

absl::StatusOr<bool> TuningService::Predict(
    const BestQuery& query,
    const std::vector<std::pair<std::string, std::string>>& templates,
    BestAnswer* answer) {
  std::shared_ptr<const ModelSnapshot> snapshot =
      models_ == nullptr ? nullptr : models_->Get(answer->device);
  if (snapshot == nullptr) return false;
  std::vector<std::string> names;
  for (const auto& [name, hash] : templates) names.push_back(name);
  const std::string key =
      absl::StrCat(snapshot->version, "/", ProblemKey(query.problem), "/",
                   query.k, "/", absl::StrJoin(names, ","));
  std::shared_ptr<Prediction> p;
  bool first = false;
  {
    absl::MutexLock lock(&predicted_mu_);
    if (predicted_.size() >= kMaxPredictedAnswers && !predicted_.count(key)) {
      predicted_.clear();  // Those being ranked still reach their askers.
    }
    std::shared_ptr<Prediction>& slot = predicted_[key];
    first = slot == nullptr;
    if (first) slot = std::make_shared<Prediction>();
    p = slot;
  }
  const bool wait = query.wait_for_model.value_or(ranking_.wait);
  if (first) StartRanking(wait, snapshot, std::move(names), query, key, p);
  // The first asker knows without a race: only it sets `dropped`, in
  // StartRanking.
  const bool ready = first ? wait || p->dropped : p->done.HasBeenNotified();
  if (!ready && !wait) {
    answer->ranking = true;
    return false;
  }
  p->done.WaitForNotification();
  if (p->dropped) {  // Nothing ranks it now; a later query queues it again.
    answer->ranking = !wait;  // So the hurried still get the defaults at once.
    return false;
  }
  if (!p->status.ok()) return p->status;
  answer->results = p->results;
  if (!p->results.empty()) answer->source_problem = p->source_problem;
  answer->transferred = answer->predicted = !answer->results.empty();
  return answer->predicted;
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
