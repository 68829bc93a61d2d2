#include "tuner/serving/best_answers.h"

#include <algorithm>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernel_templates/serving_defaults.h"

namespace evotune {

std::string TemplateNames(const TemplateRegistry& registry) {
  std::vector<std::string> names;
  for (const KernelTemplate& t : registry.templates()) names.push_back(t.name);
  return absl::StrJoin(names, ", ");
}

BestAnswers::BestAnswers(ResultStore* store, const TemplateRegistry* templates,
                         JobManager* jobs, SubmitFn submit, bool tune_on_miss,
                         CostModels* models, ModelRanking ranking)
    : store_(store),
      templates_(templates),
      jobs_(jobs),
      submit_(std::move(submit)),
      tune_on_miss_(tune_on_miss),
      models_(models),
      ranking_(ranking) {
  if (models_ != nullptr) {
    rankings_ = std::make_unique<TaskQueue>(std::max(1, ranking_.threads),
                                            ranking_.max_queued);
  }
}

absl::StatusOr<BestAnswer> BestAnswers::Query(const BestQuery& query) {
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
  if (transfer.ok() && query.tune_on_miss.value_or(tune_on_miss_)) {
    transfer->tuning_job_id = TuneOnMissJob(query, *transfer);
  }
  return transfer;
}

std::string BestAnswers::TuneOnMissJob(const BestQuery& query,
                                       const BestAnswer& answer) {
  const std::string template_name =
      !query.template_name.empty() ? query.template_name
      : answer.results.empty()     ? ""
                                   : answer.results.front().template_name;
  const std::string key =
      absl::StrCat(answer.device.name, "\x1f", template_name, "\x1f",
                   ProblemKey(query.problem));
  absl::MutexLock lock(&tuning_mu_);
  if (auto it = tuning_jobs_.find(key); it != tuning_jobs_.end()) {
    return it->second;
  }
  // One started before a restart, or a search that cannot run here.
  absl::StatusOr<std::vector<JobRecord>> jobs = store_->ListJobs(std::nullopt);
  if (!jobs.ok()) return "";
  for (const JobRecord& j : *jobs) {
    if (j.background && j.template_name == template_name &&
        j.problem == query.problem && j.device.SameKey(answer.device)) {
      return tuning_jobs_[key] = j.job_id;
    }
  }
  // Not tunable here (no GPU, a replay without the problem, ...): remembered
  // as such, so that further queries do not try again.
  absl::StatusOr<std::string> job =
      submit_(template_name, query.problem, query.device);
  return tuning_jobs_[key] = job.ok() ? *job : "";
}

bool BestAnswers::Runnable(const std::string& template_name,
                           const std::string& template_hash,
                           const Config& config, const Problem& problem,
                           const DeviceLimits& limits) const {
  const KernelTemplate* t = templates_->Find(template_name);
  return t != nullptr && t->hash == template_hash &&
         RunsOn(*t, config, problem, limits);
}

absl::StatusOr<BestAnswer> BestAnswers::Transfer(
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

absl::StatusOr<bool> BestAnswers::BestSuitedUntuned(
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

absl::StatusOr<bool> BestAnswers::TransferNearest(
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
    // Not from another width of head_dim: its configs were fitted to other
    // registers and shared memory (at 256 they may spill or not fit), where
    // the fitted defaults know the head_dim.
    if (HeadDimIn64s((**nearest).head_dim) !=
            HeadDimIn64s(query.problem.head_dim) ||
        HeadDimIn64s(HeadDimV(**nearest)) !=
            HeadDimIn64s(HeadDimV(query.problem))) {
      continue;
    }
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

std::vector<const KernelTemplate*> BestAnswers::Resolve(
    const std::vector<std::pair<std::string, std::string>>& templates) const {
  std::vector<const KernelTemplate*> out;
  for (const auto& [name, hash] : templates) {
    const KernelTemplate* t = templates_->Find(name);
    if (t != nullptr && t->hash == hash) out.push_back(t);
  }
  return out;
}

std::vector<RankedTrial> BestAnswers::Defaults(
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

void BestAnswers::Rank(const ModelSnapshot& snapshot,
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

void BestAnswers::Publish(const ModelSnapshot& snapshot,
                          const std::vector<std::string>& names,
                          const BestQuery& query, const std::string& key,
                          const std::shared_ptr<Prediction>& p) {
  Rank(snapshot, names, query, p.get());
  if (!p->status.ok()) Forget(key, p);  // The next query ranks again.
  p->done.Notify();
}

void BestAnswers::StartRanking(bool wait,
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

void BestAnswers::Forget(const std::string& key,
                         const std::shared_ptr<Prediction>& p) {
  absl::MutexLock lock(&predicted_mu_);
  if (auto it = predicted_.find(key);
      it != predicted_.end() && it->second == p) {
    predicted_.erase(it);
  }
}

absl::StatusOr<bool> BestAnswers::Predict(
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

}  // namespace evotune
