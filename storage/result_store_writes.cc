// ResultStore's writes: trials (alone, in bulk, or appended to a job) and job
// records. Each runs on the writer connection in one transaction.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "storage/result_store.h"
#include "storage/store_rows.h"

namespace evotune {

using store_rows::NowUnixSeconds;
using store_rows::SelectTrial;

absl::StatusOr<StoredTrial> ResultStore::InsertTrial(
    const TrialScope& scope, const Config& config, const TrialResult& result) {
  absl::MutexLock lock(&writer_mu_);
  CreatedIds created(this);
  Transaction txn(writer_.get());
  if (absl::Status s = txn.Begin(); !s.ok()) return s;
  bool newly_tuned = false;
  absl::StatusOr<StoredTrial> t =
      InsertTrialLocked(scope, config, result, &newly_tuned);
  if (!t.ok()) return t.status();
  if (absl::Status s = txn.Commit(); !s.ok()) return s;
  created.Committed();
  TrialsChanged(scope.device, scope.problem, newly_tuned);
  return t;
}

absl::StatusOr<StoredTrial> ResultStore::InsertTrialLocked(
    const TrialScope& scope, const Config& config, const TrialResult& r,
    bool* newly_tuned) {
  SqliteDb* db = writer_.get();
  absl::StatusOr<int64_t> device_id = DeviceId(db, scope.device, true);
  if (!device_id.ok()) return device_id.status();
  absl::StatusOr<int64_t> template_id =
      TemplateId(db, scope.template_name, scope.template_hash, true);
  if (!template_id.ok()) return template_id.status();
  absl::StatusOr<int64_t> problem_id = ProblemId(db, scope.problem, true);
  if (!problem_id.ok()) return problem_id.status();
  const std::string config_key = ConfigKey(config);

  absl::StatusOr<Statement*> ins = db->Prepare(
      "INSERT OR IGNORE INTO trials(device_id, template_id, problem_id, "
      "config_key, status, median_us, min_us, p90_us, cv, error, created_at, "
      "samples, timed_against) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  if (!ins.ok()) return ins.status();
  const bool ok = r.status == TrialStatus::kOk;
  (*ins)
      ->Bind(1, *device_id)
      .Bind(2, *template_id)
      .Bind(3, *problem_id)
      .Bind(4, config_key)
      .Bind(5, int64_t{static_cast<int>(r.status)})
      .Bind(6, ok ? r.median_us : 0.0)
      .Bind(7, ok ? r.min_us : 0.0)
      .Bind(8, ok ? r.p90_us : 0.0)
      .Bind(9, ok ? r.cv : 0.0)
      .Bind(10, r.error)
      .Bind(11, NowUnixSeconds())
      .Bind(12, int64_t{ok ? r.samples : 0})
      .Bind(13, int64_t{ok ? r.timed_against : 0});
  if (absl::Status s = (*ins)->Run(); !s.ok()) return s;
  if (ok) {
    absl::StatusOr<Statement*> tuned = db->Prepare(
        "INSERT OR IGNORE INTO tuned_problems(device_id, template_id, "
        "problem_id) VALUES(?, ?, ?)");
    if (!tuned.ok()) return tuned.status();
    (*tuned)->Bind(1, *device_id).Bind(2, *template_id).Bind(3, *problem_id);
    if (absl::Status s = (*tuned)->Run(); !s.ok()) return s;
    if (db->Changes() > 0) *newly_tuned = true;
  }

  absl::StatusOr<std::optional<StoredTrial>> stored =
      SelectTrial(db, *device_id, *template_id, *problem_id, config_key);
  if (!stored.ok()) return stored.status();
  if (!stored->has_value()) {
    return absl::InternalError("inserted trial not found");
  }
  return **std::move(stored);
}

absl::Status ResultStore::BulkInsertTrials(
    const TrialScope& scope,
    const std::vector<std::pair<Config, TrialResult>>& trials) {
  absl::MutexLock lock(&writer_mu_);
  CreatedIds created(this);
  Transaction txn(writer_.get());
  if (absl::Status s = txn.Begin(); !s.ok()) return s;
  bool newly_tuned = false;
  for (const auto& [config, result] : trials) {
    absl::StatusOr<StoredTrial> t =
        InsertTrialLocked(scope, config, result, &newly_tuned);
    if (!t.ok()) return t.status();
  }
  if (absl::Status s = txn.Commit(); !s.ok()) return s;
  created.Committed();
  TrialsChanged(scope.device, scope.problem, newly_tuned);
  return absl::OkStatus();
}

absl::Status ResultStore::RecordTimedInTurns(
    const std::vector<TimedTrial>& results) {
  absl::MutexLock lock(&writer_mu_);
  CreatedIds created(this);
  SqliteDb* db = writer_.get();
  Transaction txn(db);
  if (absl::Status s = txn.Begin(); !s.ok()) return s;
  std::vector<bool> newly_tuned;
  for (const auto& [scope, config, r] : results) {
    bool tuned = false;
    absl::StatusOr<StoredTrial> t = InsertTrialLocked(scope, config, r, &tuned);
    newly_tuned.push_back(tuned);
    if (!t.ok()) return t.status();
    absl::StatusOr<Statement*> upd = db->Prepare(
        "UPDATE trials SET status = ?, median_us = ?, min_us = ?, p90_us = ?, "
        "cv = ?, samples = ?, timed_against = ?, error = ?, "
        "confirmed_through = (SELECT MAX(id) FROM trials) WHERE id = ?");
    if (!upd.ok()) return upd.status();
    const bool ok = r.status == TrialStatus::kOk;
    (*upd)
        ->Bind(1, int64_t{static_cast<int>(r.status)})
        .Bind(2, ok ? r.median_us : 0.0)
        .Bind(3, ok ? r.min_us : 0.0)
        .Bind(4, ok ? r.p90_us : 0.0)
        .Bind(5, ok ? r.cv : 0.0)
        .Bind(6, int64_t{ok ? r.samples : 0})
        .Bind(7, int64_t{ok ? r.timed_against : 0})
        .Bind(8, r.error)
        .Bind(9, t->trial_id);
    if (absl::Status s = (*upd)->Run(); !s.ok()) return s;
  }
  if (absl::Status s = txn.Commit(); !s.ok()) return s;
  created.Committed();
  for (size_t i = 0; i < results.size(); ++i) {
    TrialsChanged(results[i].scope.device, results[i].scope.problem,
                  newly_tuned[i]);
  }
  return absl::OkStatus();
}

absl::Status ResultStore::CreateJob(const JobRecord& job) {
  absl::MutexLock lock(&writer_mu_);
  CreatedIds created(this);
  SqliteDb* db = writer_.get();
  Transaction txn(db);
  if (absl::Status s = txn.Begin(); !s.ok()) return s;
  absl::StatusOr<int64_t> device_id = DeviceId(db, job.device, true);
  if (!device_id.ok()) return device_id.status();
  absl::StatusOr<Statement*> ins = db->Prepare(
      "INSERT OR IGNORE INTO jobs(id, template_name, template_hash, "
      "problem_key, max_trials, max_seconds, strategy, seed, device_id, "
      "state, error, trials_done, elapsed_seconds, created_at, finished_at, "
      "strategy_options, background) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
      "0, "
      "0, ?, 0, ?, ?)");
  if (!ins.ok()) return ins.status();
  (*ins)
      ->Bind(1, job.job_id)
      .Bind(2, job.template_name)
      .Bind(3, job.template_hash)
      .Bind(4, ProblemKey(job.problem))
      .Bind(5, job.max_trials)
      .Bind(6, job.max_seconds)
      .Bind(7, job.strategy)
      .Bind(8, static_cast<int64_t>(job.seed))
      .Bind(9, *device_id)
      .Bind(10, int64_t{static_cast<int>(job.state)})
      .Bind(11, job.error)
      .Bind(12, job.created_unix_s ? job.created_unix_s : NowUnixSeconds())
      .Bind(13, job.strategy_options)
      .Bind(14, int64_t{job.background});
  if (absl::Status s = (*ins)->Run(); !s.ok()) return s;
  if (db->Changes() == 0) {
    return absl::AlreadyExistsError(
        absl::StrCat("job ", job.job_id, " already exists"));
  }
  if (absl::Status s = txn.Commit(); !s.ok()) return s;
  created.Committed();
  return absl::OkStatus();
}

absl::Status ResultStore::SetJobState(const std::string& job_id, JobState state,
                                      const std::string& error) {
  absl::MutexLock lock(&writer_mu_);
  absl::StatusOr<Statement*> upd = writer_->Prepare(
      "UPDATE jobs SET state = ?, error = ?, finished_at = ? WHERE id = ?");
  if (!upd.ok()) return upd.status();
  (*upd)
      ->Bind(1, int64_t{static_cast<int>(state)})
      .Bind(2, error)
      .Bind(3, IsFinal(state) ? NowUnixSeconds() : int64_t{0})
      .Bind(4, job_id);
  if (absl::Status s = (*upd)->Run(); !s.ok()) return s;
  if (writer_->Changes() == 0) {
    return absl::NotFoundError(absl::StrCat("job_id: no job ", job_id));
  }
  return absl::OkStatus();
}

absl::Status ResultStore::RecordDeviceLimits(const DeviceInfo& device) {
  absl::MutexLock lock(&writer_mu_);
  absl::StatusOr<int64_t> device_id = DeviceId(writer_.get(), device, false);
  if (absl::IsNotFound(device_id.status())) return absl::OkStatus();
  if (!device_id.ok()) return device_id.status();
  absl::StatusOr<Statement*> upd = writer_->Prepare(
      "UPDATE devices SET smem_per_block_bytes = ?, max_threads_per_block = "
      "?, multiprocessors = ? WHERE id = ?");
  if (!upd.ok()) return upd.status();
  (*upd)
      ->Bind(1, std::max<int64_t>(0, device.limits.smem_per_block_bytes))
      .Bind(2, int64_t{std::max(0, device.limits.max_threads_per_block)})
      .Bind(3, int64_t{std::max(0, device.limits.multiprocessors)})
      .Bind(4, *device_id);
  return (*upd)->Run();
}

absl::StatusOr<JobEvent> ResultStore::AppendJobTrial(const JobRecord& job,
                                                     const Config& config,
                                                     const TrialResult& result,
                                                     bool cached,
                                                     double elapsed_seconds) {
  absl::MutexLock lock(&writer_mu_);
  CreatedIds created(this);
  SqliteDb* db = writer_.get();
  Transaction txn(db);
  if (absl::Status s = txn.Begin(); !s.ok()) return s;
  bool newly_tuned = false;
  absl::StatusOr<StoredTrial> trial = InsertTrialLocked(
      {job.device, job.template_name, job.template_hash, job.problem}, config,
      result, &newly_tuned);
  if (!trial.ok()) return trial.status();

  absl::StatusOr<Statement*> sel =
      db->Prepare("SELECT trials_done FROM jobs WHERE id = ?");
  if (!sel.ok()) return sel.status();
  int64_t done = 0;
  {
    ScopedReset reset(*sel);
    (*sel)->Bind(1, job.job_id);
    absl::StatusOr<bool> row = (*sel)->Step();
    if (!row.ok()) return row.status();
    if (!*row) return absl::NotFoundError(absl::StrCat("no job ", job.job_id));
    done = (*sel)->Int(0);
  }
  JobEvent event{done + 1, *std::move(trial), cached};
  absl::StatusOr<Statement*> ins = db->Prepare(
      "INSERT INTO job_trials(job_id, seq, trial_id, cached) "
      "VALUES(?, ?, ?, ?)");
  if (!ins.ok()) return ins.status();
  (*ins)
      ->Bind(1, job.job_id)
      .Bind(2, event.sequence)
      .Bind(3, event.trial.trial_id)
      .Bind(4, int64_t{cached});
  if (absl::Status s = (*ins)->Run(); !s.ok()) return s;
  absl::StatusOr<Statement*> upd = db->Prepare(
      "UPDATE jobs SET trials_done = ?, elapsed_seconds = ? WHERE id = ?");
  if (!upd.ok()) return upd.status();
  (*upd)->Bind(1, event.sequence).Bind(2, elapsed_seconds).Bind(3, job.job_id);
  if (absl::Status s = (*upd)->Run(); !s.ok()) return s;
  if (absl::Status s = txn.Commit(); !s.ok()) return s;
  created.Committed();
  TrialsChanged(job.device, job.problem, newly_tuned);
  return event;
}

}  // namespace evotune
