#include "tuner/jobs/job_manager.h"

#include <algorithm>
#include <limits>
#include <memory>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "kernel_templates/serving_defaults.h"
#include "tuner/common/log.h"
#include "tuner/evaluator/evaluator.h"
#include "tuner/jobs/trial_loop.h"
#include "tuner/search/strategy_registry.h"

namespace evotune {
namespace {

// Best configs of the nearest tuned problem that seed a search.
constexpr int kTransferredSeeds = 6;

}  // namespace

JobManager::JobManager(ResultStore* store, const TemplateRegistry* templates,
                       TrialRunner* runner, Clock* clock)
    : store_(store), templates_(templates), runner_(runner), clock_(clock) {}

JobManager::~JobManager() { Shutdown(); }

absl::Status JobManager::Start() {
  std::vector<JobRecord> pending;
  for (JobState state : {JobState::kRunning, JobState::kQueued}) {
    absl::StatusOr<std::vector<JobRecord>> jobs = store_->ListJobs(state);
    if (!jobs.ok()) return jobs.status();
    pending.insert(pending.end(), jobs->begin(), jobs->end());
  }
  std::sort(pending.begin(), pending.end(),
            [](const JobRecord& a, const JobRecord& b) {
              return a.created_unix_s < b.created_unix_s;
            });
  {
    absl::MutexLock lock(&mu_);
    for (const JobRecord& job : pending) {
      // One submitted since the server started serving is queued already.
      if (std::find(queue_.begin(), queue_.end(), job.job_id) != queue_.end()) {
        continue;
      }
      LogInfo(absl::StrCat("resuming job ", job.job_id, " at trial ",
                           job.trials_done, " of ", job.max_trials));
      queue_.push_back(job.job_id);
    }
  }
  for (int i = 0; i < kMaxRunningJobs; ++i) {
    threads_.emplace_back([this] { RunLoop(); });
  }
  return absl::OkStatus();
}

void JobManager::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    ++version_;
    changed_.SignalAll();
  }
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

absl::StatusOr<DeviceInfo> JobManager::Device(const std::string& name) const {
  return runner_->FindDevice(name);
}

absl::Status JobManager::CanEvaluate(const DeviceInfo& device,
                                     const KernelTemplate& t) const {
  if (absl::Status s = CheckDevice(t, device.limits); !s.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("template_name: ", s.message()));
  }
  return runner_->CanEvaluate(device, t);
}

absl::StatusOr<JobRecord> JobManager::Submit(JobRecord job) {
  job.state = JobState::kQueued;
  job.created_unix_s = absl::ToUnixSeconds(clock_->Now());
  if (absl::Status s = store_->CreateJob(job); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  queue_.push_back(job.job_id);
  ++version_;
  changed_.SignalAll();
  return job;
}

absl::StatusOr<JobRecord> JobManager::Cancel(const std::string& job_id) {
  {
    absl::MutexLock lock(&mu_);
    if (auto it = running_.find(job_id); it != running_.end()) {
      it->second = true;
      ++version_;
      changed_.SignalAll();
      // The job's thread stops at once and marks the job, unless it had
      // finished its trials already: then the job ended on its own.
      while (running_.count(job_id) != 0) changed_.Wait(&mu_);
      absl::StatusOr<JobRecord> job = store_->GetJob(job_id);
      if (!job.ok()) return job.status();
      if (job->state != JobState::kCancelled && IsFinal(job->state)) {
        return absl::FailedPreconditionError(absl::StrCat(
            "job_id: job ", job_id, " already ", JobStateName(job->state)));
      }
    } else {
      // Read under the lock: no job thread can start or finish it meanwhile.
      absl::StatusOr<JobRecord> job = store_->GetJob(job_id);
      if (!job.ok()) return job.status();
      if (IsFinal(job->state)) {
        return absl::FailedPreconditionError(absl::StrCat(
            "job_id: job ", job_id, " already ", JobStateName(job->state)));
      }
      queue_.erase(std::remove(queue_.begin(), queue_.end(), job_id),
                   queue_.end());
      if (absl::Status s =
              store_->SetJobState(job_id, JobState::kCancelled, "");
          !s.ok()) {
        return s;
      }
      ++version_;
      changed_.SignalAll();
    }
  }
  return store_->GetJob(job_id);
}

absl::StatusOr<StoredTrial> JobManager::EvaluateOne(const DeviceInfo& device,
                                                    const KernelTemplate& t,
                                                    const Config& config,
                                                    const Problem& problem,
                                                    bool* cached) {
  const TrialScope scope{device, t.name, t.hash, problem};
  absl::StatusOr<std::optional<StoredTrial>> stored =
      store_->FindTrial(scope, config);
  if (!stored.ok()) return stored.status();
  *cached = stored->has_value();
  if (*cached) return **stored;
  auto measured = std::make_shared<absl::StatusOr<TrialResult>>();
  auto done = std::make_shared<absl::Notification>();
  runner_->Start(TrialTask{device, t.name, t.hash, config, problem, false},
                 [measured, done](absl::StatusOr<TrialResult> r) {
                   *measured = std::move(r);
                   done->Notify();
                 });
  done->WaitForNotification();
  if (!measured->ok()) return measured->status();
  return store_->InsertTrial(scope, config, **measured);
}

void JobManager::AddSeeds(const KernelTemplate& t, const DeviceInfo& device,
                          const Problem& problem, SearchInputs* inputs) {
  std::vector<Config>& seeds = inputs->seeds;
  const std::vector<std::pair<std::string, std::string>> versions = {
      {t.name, t.hash}};
  // The best configs of the nearest problem already tuned on this device.
  absl::StatusOr<std::optional<Problem>> nearest =
      store_->NearestTunedProblem(device, problem, versions);
  if (nearest.ok() && nearest->has_value()) {
    absl::StatusOr<std::vector<RankedTrial>> top =
        store_->TopK(device, **nearest, versions, kTransferredSeeds);
    if (top.ok()) {
      for (const RankedTrial& r : *top) seeds.push_back(r.trial.config);
    }
  }
  size_t fitted = 0;
  std::vector<Config> defaults =
      DefaultConfigs(t, problem, device.limits, &fitted);
  inputs->trusted_seeds = seeds.size() + fitted;
  for (Config& c : defaults) seeds.push_back(std::move(c));
}

uint64_t JobManager::version() const {
  absl::MutexLock lock(&mu_);
  return version_;
}

void JobManager::WaitForChange(uint64_t seen, absl::Duration timeout) const {
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock lock(&mu_);
  while (version_ == seen && !stopping_) {
    if (changed_.WaitWithDeadline(&mu_, deadline)) break;
  }
}

void JobManager::Notify() {
  absl::MutexLock lock(&mu_);
  ++version_;
  changed_.SignalAll();
}

bool JobManager::ShouldStop(const std::string& job_id, bool* cancelled) const {
  absl::MutexLock lock(&mu_);
  auto it = running_.find(job_id);
  *cancelled = it != running_.end() && it->second;
  return stopping_ || *cancelled;
}

std::optional<std::pair<std::string, DeviceInfo>> JobManager::TakeRunnable() {
  std::deque<std::string> queued;
  {
    absl::MutexLock lock(&mu_);
    queued = queue_;
  }
  // Users' jobs first; background ones only while no user's job is queued
  // or running.
  std::vector<std::pair<std::string, JobRecord>> background;
  bool user_queued = false;
  for (const std::string& id : queued) {
    absl::StatusOr<JobRecord> job = store_->GetJob(id);
    if (!job.ok()) continue;
    if (job->background) {
      background.push_back({id, *std::move(job)});
      continue;
    }
    user_queued = true;
    if (auto taken = Take(id, *job, false)) return taken;
  }
  {
    absl::MutexLock lock(&mu_);
    if (user_queued || running_.size() > running_background_.size()) {
      return std::nullopt;
    }
  }
  for (const auto& [id, job] : background) {
    if (auto taken = Take(id, job, true)) return taken;
  }
  return std::nullopt;
}

std::optional<std::pair<std::string, DeviceInfo>> JobManager::Take(
    const std::string& id, const JobRecord& job, bool background) {
  absl::StatusOr<DeviceInfo> device = runner_->FindDevice(job.device.name);
  if (!device.ok() || !device->SameKey(job.device)) return std::nullopt;
  absl::MutexLock lock(&mu_);
  auto it = std::find(queue_.begin(), queue_.end(), id);
  if (it == queue_.end()) return std::nullopt;  // Taken or cancelled.
  queue_.erase(it);
  running_[id] = false;
  if (background) running_background_.insert(id);
  return std::make_pair(id, *device);
}

void JobManager::RunLoop() {
  while (true) {
    uint64_t seen;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !queue_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      seen = version_;
    }
    std::optional<std::pair<std::string, DeviceInfo>> next = TakeRunnable();
    if (!next.has_value()) {
      // No worker for any queued job's device yet: look again on a change or
      // in a second (workers register without bumping the version).
      WaitForChange(seen, absl::Seconds(1));
      continue;
    }
    RunJob(next->first, next->second);
    absl::MutexLock lock(&mu_);
    running_.erase(next->first);
    running_background_.erase(next->first);
    ++version_;
    changed_.SignalAll();
  }
}

void JobManager::RunJob(const std::string& job_id, const DeviceInfo& device) {
  absl::StatusOr<JobRecord> job = store_->GetJob(job_id);
  if (!job.ok()) {
    LogError(absl::StrCat("job ", job_id, ": ", job.status().ToString()));
    return;
  }
  if (IsFinal(job->state)) return;
  if (absl::Status s = store_->SetJobState(job_id, JobState::kRunning, "");
      !s.ok()) {
    LogError(absl::StrCat("job ", job_id, ": ", s.ToString()));
    return;
  }
  Notify();
  // So that a daemon without this GPU serves it with its limits.
  if (absl::Status s = store_->RecordDeviceLimits(device); !s.ok()) {
    LogError(absl::StrCat("recording the limits of ", device.name, ": ",
                          s.ToString()));
  }

  bool cancelled = false;
  const absl::Status status = RunTrials(*job, device, cancelled);
  bool stopping;
  {
    absl::MutexLock lock(&mu_);
    stopping = stopping_;
  }
  JobState final_state = JobState::kSucceeded;
  if (cancelled) {
    final_state = JobState::kCancelled;
  } else if (stopping) {
    final_state = JobState::kQueued;  // Resumes at the next start.
  } else if (!status.ok()) {
    final_state = JobState::kFailed;
  }
  const bool failed = final_state == JobState::kFailed;
  if (absl::Status s = store_->SetJobState(
          job_id, final_state, failed ? std::string(status.message()) : "");
      !s.ok()) {
    LogError(absl::StrCat("job ", job_id, ": ", s.ToString()));
  }
  LogInfo(absl::StrCat("job ", job_id, " ", JobStateName(final_state),
                       failed ? absl::StrCat(": ", status.message()) : ""));
  Notify();
}

std::vector<Config> JobManager::SearchableConfigs(
    const KernelTemplate& t, const Problem& problem,
    const DeviceInfo& device) const {
  std::vector<Config> configs = FeasibleConfigs(t, problem, device.limits);
  configs.erase(std::remove_if(configs.begin(), configs.end(),
                               [&](const Config& c) {
                                 return !runner_->Covers(t, c, problem);
                               }),
                configs.end());
  return configs;
}

std::vector<Config> JobManager::WithoutKnownRejected(
    const KernelTemplate& t, const Problem& problem, const DeviceInfo& device,
    std::vector<Config> configs) const {
  absl::StatusOr<std::set<std::string>> rejected =
      store_->RejectedConfigs(device, t.name, t.hash, problem);
  if (!rejected.ok()) {
    LogError(absl::StrCat("known rejections: ", rejected.status().ToString()));
    return configs;
  }
  std::vector<Config> kept;
  for (Config& c : configs) {
    if (rejected->count(ConfigKey(c)) == 0) kept.push_back(std::move(c));
  }
  // Every config known rejected: the search tries them again rather than
  // nothing.
  return kept.empty() ? configs : kept;
}

LatencyPredictor JobManager::Predictor(const KernelTemplate& t,
                                       const DeviceInfo& device,
                                       const Problem& problem) {
  std::shared_ptr<const ModelSnapshot> snapshot =
      models_ != nullptr ? models_->Get(device) : nullptr;
  if (snapshot == nullptr) return {};
  // The snapshot owns the model: the predictor keeps it alive.
  return ConfigPredictor(
      std::shared_ptr<const CostModel>(snapshot, snapshot->model.get()), &t,
      problem);
}

absl::Status JobManager::RunTrials(const JobRecord& job,
                                   const DeviceInfo& device, bool& cancelled) {
  const KernelTemplate* t = templates_->Find(job.template_name);
  if (t == nullptr || t->hash != job.template_hash) {
    return absl::FailedPreconditionError(
        absl::StrCat("template ", job.template_name, " version ",
                     job.template_hash, " is not in this build (it has ",
                     t ? t->hash : std::string("no such template"), ")"));
  }
  absl::StatusOr<StrategyOptions> options =
      ParseStrategyOptions(job.strategy_options);
  if (!options.ok()) return options.status();
  SearchInputs inputs{
      t->space,
      WithoutKnownRejected(*t, job.problem, device,
                           SearchableConfigs(*t, job.problem, device)),
      {},
      Predictor(*t, device, job.problem)};
  AddSeeds(*t, device, job.problem, &inputs);
  absl::StatusOr<std::unique_ptr<SearchStrategy>> strategy =
      MakeStrategy(job.strategy, std::move(inputs), job.seed, *options);
  if (!strategy.ok()) return strategy.status();
  TrialLoop::Hooks hooks;
  hooks.should_stop = [this, &job](bool* cancelled) {
    return ShouldStop(job.job_id, cancelled);
  };
  hooks.notify = [this] { Notify(); };
  hooks.clock = clock_;
  hooks.confirm_turns = confirm_turns_;
  for (const KernelTemplate& other : templates_->templates()) {
    if (other.name != t->name && runner_->CanEvaluate(device, other).ok()) {
      hooks.rival_templates.push_back({other.name, other.hash});
    }
  }
  TrialLoop loop(store_, runner_, std::move(hooks), job, *t, device,
                 *std::move(strategy));
  return loop.Run(cancelled);
}

}  // namespace evotune
