#include "storage/store_rows.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace evotune::store_rows {

std::string TrialColumns(absl::string_view alias) {
  std::vector<std::string> columns;
  for (const char* c :
       {"id", "config_key", "status", "median_us", "min_us", "p90_us", "cv",
        "error", "created_at", "samples", "timed_against"}) {
    columns.push_back(absl::StrCat(alias, c));
  }
  return absl::StrJoin(columns, ", ");
}

std::string DeviceKey(const DeviceInfo& d) {
  return absl::StrCat("d\x1f", d.name, "\x1f", d.cc_major, "\x1f", d.cc_minor,
                      "\x1f", d.driver_version, "\x1f", d.nvrtc_version);
}

int64_t NowUnixSeconds() { return absl::ToUnixSeconds(absl::Now()); }

absl::StatusOr<StoredTrial> ReadTrial(Statement* s, int first) {
  StoredTrial t;
  t.trial_id = s->Int(first);
  absl::StatusOr<Config> config = ParseConfigKey(s->Text(first + 1));
  if (!config.ok()) return config.status();
  t.config = *std::move(config);
  const int status = static_cast<int>(s->Int(first + 2));
  if (!IsValidTrialStatus(status)) {
    return absl::DataLossError(
        absl::StrCat("trial ", t.trial_id, " has unknown status ", status));
  }
  t.result.status = static_cast<TrialStatus>(status);
  t.result.median_us = s->Double(first + 3);
  t.result.min_us = s->Double(first + 4);
  t.result.p90_us = s->Double(first + 5);
  t.result.cv = s->Double(first + 6);
  t.result.error = s->Text(first + 7);
  t.created_unix_s = s->Int(first + 8);
  t.result.samples = static_cast<int>(s->Int(first + 9));
  t.result.timed_against = static_cast<int>(s->Int(first + 10));
  return t;
}

absl::StatusOr<JobRecord> ReadJob(Statement* s) {
  JobRecord j;
  j.job_id = s->Text(0);
  j.template_name = s->Text(1);
  j.template_hash = s->Text(2);
  absl::StatusOr<Problem> p = ParseProblemKey(s->Text(3));
  if (!p.ok()) return absl::DataLossError(p.status().message());
  j.problem = *p;
  j.max_trials = s->Int(4);
  j.max_seconds = s->Double(5);
  j.strategy = s->Text(6);
  j.seed = static_cast<uint64_t>(s->Int(7));
  j.device.name = s->Text(8);
  j.device.cc_major = static_cast<int>(s->Int(9));
  j.device.cc_minor = static_cast<int>(s->Int(10));
  j.device.driver_version = s->Text(11);
  j.device.nvrtc_version = s->Text(12);
  const int state = static_cast<int>(s->Int(13));
  if (state < 1 || state > 5) {
    return absl::DataLossError(
        absl::StrCat("job ", j.job_id, " has unknown state ", state));
  }
  j.state = static_cast<JobState>(state);
  j.error = s->Text(14);
  j.trials_done = s->Int(15);
  j.elapsed_seconds = s->Double(16);
  j.created_unix_s = s->Int(17);
  j.finished_unix_s = s->Int(18);
  j.strategy_options = s->Text(19);
  j.background = s->Int(20) != 0;
  return j;
}

absl::StatusOr<std::optional<StoredTrial>> SelectTrial(
    SqliteDb* db, int64_t device_id, int64_t template_id, int64_t problem_id,
    const std::string& config_key) {
  absl::StatusOr<Statement*> sel = db->Prepare(absl::StrCat(
      "SELECT ", TrialColumns(),
      " FROM trials WHERE device_id = ? AND template_id = ? AND problem_id = "
      "? AND config_key = ?"));
  if (!sel.ok()) return sel.status();
  ScopedReset reset(*sel);
  (*sel)
      ->Bind(1, device_id)
      .Bind(2, template_id)
      .Bind(3, problem_id)
      .Bind(4, config_key);
  absl::StatusOr<bool> row = (*sel)->Step();
  if (!row.ok()) return row.status();
  if (!*row) return std::nullopt;
  absl::StatusOr<StoredTrial> t = ReadTrial(*sel);
  if (!t.ok()) return t.status();
  return std::optional<StoredTrial>(*std::move(t));
}

}  // namespace evotune::store_rows
