#include "tuner/daemon/job_manager.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tuner/common/log.h"
#include "tuner/search/search_strategy.h"

namespace evotune {
namespace {

// Configs proposed ahead of the one being evaluated.
constexpr int kLookahead = 8;
// Best configs of the nearest tuned problem that seed a search.
constexpr int kTransferredSeeds = 6;

// Multi-fidelity: every correct candidate is timed quickly; only one that
// could enter the job's elite (its kEliteSize fastest fully timed configs,
// with a margin for the quick timing's noise) is timed fully.
constexpr int kEliteSize = 5;
constexpr double kEliteMargin = 1.10;

class Elite {
 public:
  bool Admits(double median_us) const {
    return static_cast<int>(fastest_.size()) < kEliteSize ||
           median_us <= fastest_.back() * kEliteMargin;
  }
  void Add(const TrialResult& r) {
    // Rows from before timing fidelity was recorded count as full.
    if (r.status != TrialStatus::kOk ||
        (r.samples != 0 && r.samples < kFullTimingSamples)) {
      return;
    }
    fastest_.insert(
        std::upper_bound(fastest_.begin(), fastest_.end(), r.median_us),
        r.median_us);
    if (static_cast<int>(fastest_.size()) > kEliteSize) fastest_.pop_back();
  }

 private:
  std::vector<double> fastest_;  // Ascending, at most kEliteSize.
};

}  // namespace

JobManager::JobManager(ResultStore* store, const TemplateRegistry* templates,
                       std::unique_ptr<Evaluator> evaluator,
                       absl::Status no_device)
    : store_(store),
      templates_(templates),
      evaluator_(std::move(evaluator)),
      no_device_(std::move(no_device)) {}

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
      LogInfo(absl::StrCat("resuming job ", job.job_id, " at trial ",
                           job.trials_done, " of ", job.max_trials));
      queue_.push_back(job.job_id);
    }
  }
  runner_ = std::thread([this] { RunLoop(); });
  return absl::OkStatus();
}

void JobManager::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    ++version_;
    changed_.SignalAll();
  }
  if (runner_.joinable()) runner_.join();
}

absl::StatusOr<DeviceInfo> JobManager::Device() const {
  if (evaluator_ == nullptr) {
    return absl::FailedPreconditionError(no_device_.message());
  }
  return evaluator_->device();
}

absl::Status JobManager::CanEvaluate(const KernelTemplate& t) const {
  if (evaluator_ == nullptr) {
    return absl::FailedPreconditionError(no_device_.message());
  }
  return evaluator_->CanEvaluate(t);
}

absl::StatusOr<JobRecord> JobManager::Submit(JobRecord job) {
  absl::StatusOr<DeviceInfo> device = Device();
  if (!device.ok()) return device.status();
  job.device = *device;
  job.state = JobState::kQueued;
  job.created_unix_s = absl::ToUnixSeconds(absl::Now());
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
    if (running_ == job_id) {
      cancel_running_ = true;
      // The runner stops after the trial in progress and marks the job.
      while (running_ == job_id) changed_.Wait(&mu_);
    } else {
      // Read under the lock: the runner cannot start or finish it meanwhile.
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

absl::StatusOr<StoredTrial> JobManager::EvaluateOne(const KernelTemplate& t,
                                                    const Config& config,
                                                    const Problem& problem,
                                                    bool* cached) {
  absl::StatusOr<DeviceInfo> device = Device();
  if (!device.ok()) return device.status();
  const TrialScope scope{*device, t.name, t.hash, problem};
  absl::StatusOr<std::optional<StoredTrial>> stored =
      store_->FindTrial(scope, config);
  if (!stored.ok()) return stored.status();
  *cached = stored->has_value();
  if (*cached) return **stored;
  absl::StatusOr<TrialResult> measured;
  {
    absl::MutexLock gpu(&evaluator_mu_);
    measured = evaluator_->Evaluate(t, config, problem);
  }
  if (!measured.ok()) return measured.status();
  return store_->InsertTrial(scope, config, *measured);
}

std::vector<Config> JobManager::SeedConfigs(const KernelTemplate& t,
                                            const Problem& problem) {
  std::vector<Config> seeds;
  const DeviceInfo& device = evaluator_->device();
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
  seeds.insert(seeds.end(), t.defaults.begin(), t.defaults.end());
  return seeds;
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

void JobManager::RunLoop() {
  while (true) {
    std::string job_id;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !queue_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      job_id = queue_.front();
      queue_.pop_front();
      running_ = job_id;
      cancel_running_ = false;
    }
    RunJob(job_id);
    absl::MutexLock lock(&mu_);
    running_.clear();
    ++version_;
    changed_.SignalAll();
  }
}

void JobManager::RunJob(const std::string& job_id) {
  absl::StatusOr<JobRecord> job = store_->GetJob(job_id);
  if (!job.ok()) {
    LogError(absl::StrCat("job ", job_id, ": ", job.status().ToString()));
    return;
  }
  if (IsFinal(job->state)) return;
  if (evaluator_ == nullptr || !evaluator_->device().SameKey(job->device)) {
    // Left queued: a daemon on the job's device can run it.
    LogError(absl::StrCat("job ", job_id, " is for device \"", job->device.name,
                          "\", not this daemon's; skipped"));
    return;
  }
  if (absl::Status s = store_->SetJobState(job_id, JobState::kRunning, "");
      !s.ok()) {
    LogError(absl::StrCat("job ", job_id, ": ", s.ToString()));
    return;
  }
  Notify();

  bool cancelled = false;
  const absl::Status status = RunTrials(*job, cancelled);
  bool stopping;
  {
    absl::MutexLock lock(&mu_);
    stopping = stopping_;
  }
  JobState final_state = JobState::kSucceeded;
  if (!status.ok()) {
    final_state = JobState::kFailed;
  } else if (cancelled) {
    final_state = JobState::kCancelled;
  } else if (stopping) {
    final_state = JobState::kQueued;  // Resumes at the next start.
  }
  if (absl::Status s =
          store_->SetJobState(job_id, final_state,
                              status.ok() ? "" : std::string(status.message()));
      !s.ok()) {
    LogError(absl::StrCat("job ", job_id, ": ", s.ToString()));
  }
  LogInfo(
      absl::StrCat("job ", job_id, " ", JobStateName(final_state),
                   status.ok() ? "" : absl::StrCat(": ", status.message())));
  Notify();
}

absl::Status JobManager::RunTrials(JobRecord& job, bool& cancelled) {
  const KernelTemplate* t = templates_->Find(job.template_name);
  if (t == nullptr || t->hash != job.template_hash) {
    return absl::FailedPreconditionError(
        absl::StrCat("template ", job.template_name, " version ",
                     job.template_hash, " is not in this build (it has ",
                     t ? t->hash : std::string("no such template"), ")"));
  }
  const DeviceInfo& device = evaluator_->device();
  std::vector<Config> feasible =
      FeasibleConfigs(*t, job.problem, device.limits);
  feasible.erase(std::remove_if(feasible.begin(), feasible.end(),
                                [&](const Config& c) {
                                  return !evaluator_->Covers(*t, c,
                                                             job.problem);
                                }),
                 feasible.end());
  absl::StatusOr<std::unique_ptr<SearchStrategy>> strategy = MakeStrategy(
      job.strategy,
      SearchInputs{t->space, std::move(feasible), SeedConfigs(*t, job.problem)},
      job.seed);
  if (!strategy.ok()) return strategy.status();

  // Resume: the strategy learns what this job already has.
  absl::StatusOr<std::vector<JobEvent>> done =
      store_->ListJobEvents(job.job_id, 0, std::numeric_limits<int>::max());
  if (!done.ok()) return done.status();
  std::vector<std::pair<Config, TrialResult>> known;
  Elite elite;
  for (const JobEvent& e : *done) {
    known.push_back({e.trial.config, e.trial.result});
    elite.Add(e.trial.result);
  }
  (*strategy)->Report(known);
  int64_t trials_done = static_cast<int64_t>(done->size());

  const TrialScope scope{device, job.template_name, job.template_hash,
                         job.problem};
  const absl::Time start = absl::Now();
  const double base_seconds = job.elapsed_seconds;
  auto elapsed = [&] {
    return base_seconds + absl::ToDoubleSeconds(absl::Now() - start);
  };
  std::deque<Config> pending;
  while (trials_done < job.max_trials && elapsed() < job.max_seconds) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return absl::OkStatus();
      if (cancel_running_) {
        cancelled = true;
        return absl::OkStatus();
      }
    }
    if (pending.empty()) {
      // Covered its space, or converged.
      if ((*strategy)->Done()) break;
      // Propose a few ahead, so that the evaluator can compile them while
      // it measures the first.
      const int n = static_cast<int>(
          std::min<int64_t>(kLookahead, job.max_trials - trials_done));
      std::vector<Config> to_measure;
      for (Config& c : (*strategy)->Propose(n)) {
        absl::StatusOr<std::optional<StoredTrial>> known =
            store_->FindTrial(scope, c);
        if (known.ok() && !known->has_value()) to_measure.push_back(c);
        pending.push_back(std::move(c));
      }
      if (pending.empty()) break;  // The strategy has covered its space.
      evaluator_->Prefetch(*t, to_measure, job.problem);
    }
    const Config config = std::move(pending.front());
    pending.pop_front();

    absl::StatusOr<std::optional<StoredTrial>> stored =
        store_->FindTrial(scope, config);
    if (!stored.ok()) return stored.status();
    TrialResult result;
    const bool cached = stored->has_value();
    if (cached) {
      result = (*stored)->result;
    } else {
      absl::StatusOr<TrialResult> measured;
      {
        absl::MutexLock gpu(&evaluator_mu_);
        measured = evaluator_->QuickEvaluate(*t, config, job.problem);
        if (measured.ok() && measured->status == TrialStatus::kOk &&
            elite.Admits(measured->median_us)) {
          measured = evaluator_->Evaluate(*t, config, job.problem);
        }
      }
      if (!measured.ok()) return measured.status();
      result = *std::move(measured);
    }
    absl::StatusOr<JobEvent> event =
        store_->AppendJobTrial(job, config, result, cached, elapsed());
    if (!event.ok()) return event.status();
    (*strategy)->Report({{config, result}});
    elite.Add(result);
    trials_done = event->sequence;
    Notify();
  }
  return absl::OkStatus();
}

}  // namespace evotune
