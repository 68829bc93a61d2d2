#include "storage/schema.h"

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace evotune {
namespace {

// Each entry migrates from version i to i + 1. Append, never edit: databases
// in the field are at every version.
constexpr const char* kMigrations[] = {
    // 0 -> 1: the tables.
    R"sql(
CREATE TABLE devices(
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  cc_major INTEGER NOT NULL,
  cc_minor INTEGER NOT NULL,
  driver_version TEXT NOT NULL,
  nvrtc_version TEXT NOT NULL,
  UNIQUE(name, cc_major, cc_minor, driver_version, nvrtc_version));
CREATE TABLE templates(
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  source_hash TEXT NOT NULL,
  UNIQUE(name, source_hash));
CREATE TABLE problems(
  id INTEGER PRIMARY KEY,
  key TEXT NOT NULL UNIQUE,
  batch INTEGER NOT NULL,
  heads INTEGER NOT NULL,
  kv_heads INTEGER NOT NULL,
  seq_q INTEGER NOT NULL,
  seq_k INTEGER NOT NULL,
  head_dim INTEGER NOT NULL,
  causal INTEGER NOT NULL,
  dtype TEXT NOT NULL,
  layout TEXT NOT NULL);
CREATE TABLE trials(
  id INTEGER PRIMARY KEY,
  device_id INTEGER NOT NULL REFERENCES devices(id),
  template_id INTEGER NOT NULL REFERENCES templates(id),
  problem_id INTEGER NOT NULL REFERENCES problems(id),
  config_key TEXT NOT NULL,
  status INTEGER NOT NULL,
  median_us REAL NOT NULL,
  min_us REAL NOT NULL,
  p90_us REAL NOT NULL,
  error TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  UNIQUE(device_id, template_id, problem_id, config_key));
CREATE TABLE jobs(
  id TEXT PRIMARY KEY,
  template_name TEXT NOT NULL,
  template_hash TEXT NOT NULL,
  problem_key TEXT NOT NULL,
  max_trials INTEGER NOT NULL,
  max_seconds REAL NOT NULL,
  strategy TEXT NOT NULL,
  seed INTEGER NOT NULL,
  device_id INTEGER NOT NULL REFERENCES devices(id),
  state INTEGER NOT NULL,
  error TEXT NOT NULL,
  trials_done INTEGER NOT NULL,
  elapsed_seconds REAL NOT NULL,
  created_at INTEGER NOT NULL,
  finished_at INTEGER NOT NULL);
CREATE TABLE job_trials(
  job_id TEXT NOT NULL REFERENCES jobs(id),
  seq INTEGER NOT NULL,
  trial_id INTEGER NOT NULL REFERENCES trials(id),
  cached INTEGER NOT NULL,
  PRIMARY KEY(job_id, seq)) WITHOUT ROWID;
)sql",
    // 1 -> 2: timing spread, and the indexes behind QueryBest and ListJobs.
    R"sql(
ALTER TABLE trials ADD COLUMN cv REAL NOT NULL DEFAULT 0;
CREATE INDEX trials_best ON trials(device_id, problem_id, median_us)
  WHERE status = 1;
CREATE INDEX jobs_by_state ON jobs(state, created_at);
)sql",
    // 2 -> 3: which problems have OK results, so that transfer to the
    // nearest tuned problem does not scan trials.
    R"sql(
CREATE TABLE tuned_problems(
  device_id INTEGER NOT NULL REFERENCES devices(id),
  template_id INTEGER NOT NULL REFERENCES templates(id),
  problem_id INTEGER NOT NULL REFERENCES problems(id),
  PRIMARY KEY(device_id, template_id, problem_id)) WITHOUT ROWID;
INSERT OR IGNORE INTO tuned_problems
  SELECT DISTINCT device_id, template_id, problem_id FROM trials
  WHERE status = 1;
)sql",
    // 3 -> 4: how many timing samples stand behind a latency (quick or full
    // timing); 0 for rows from before.
    R"sql(
ALTER TABLE trials ADD COLUMN samples INTEGER NOT NULL DEFAULT 0;
)sql",
    // 4 -> 5: the strategy's options a job runs with (NAME=value,...);
    // empty for jobs from before, which ran with the defaults.
    R"sql(
ALTER TABLE jobs ADD COLUMN strategy_options TEXT NOT NULL DEFAULT '';
)sql",
    // 5 -> 6: jobs the daemon started itself (tune on miss), which yield to
    // jobs users submitted.
    R"sql(
ALTER TABLE jobs ADD COLUMN background INTEGER NOT NULL DEFAULT 0;
)sql",
    // 6 -> 7: kernels compiled for serving (GetKernel), by a key naming
    // everything that changes the binary (CompiledKernelKey).
    R"sql(
CREATE TABLE compiled_kernels(
  key TEXT PRIMARY KEY,
  cubin BLOB NOT NULL,
  ptx TEXT NOT NULL,
  created_at INTEGER NOT NULL);
)sql",
    // 7 -> 8: the limits a device's workers report, so that a daemon that
    // serves the device from the store alone checks and ranks configs as
    // one with the GPU does; 0 (unknown) for devices from before.
    R"sql(
ALTER TABLE devices ADD COLUMN smem_per_block_bytes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE devices ADD COLUMN max_threads_per_block INTEGER NOT NULL DEFAULT 0;
ALTER TABLE devices ADD COLUMN multiprocessors INTEGER NOT NULL DEFAULT 0;
)sql",
    // 8 -> 9: how many other configs a trial's latency was timed in turns
    // with (a search's fastest, confirmed together); 0: timed alone.
    R"sql(
ALTER TABLE trials ADD COLUMN timed_against INTEGER NOT NULL DEFAULT 0;
)sql",
    // 9 -> 10: the newest trial id when a trial was timed in turns, so that
    // TopK ranks the configs passed over for it (stored by then, timed
    // alone) behind it; 0 for rows from before. Its index finds a problem's
    // confirmed trials without scanning the others.
    R"sql(
ALTER TABLE trials ADD COLUMN confirmed_through INTEGER NOT NULL DEFAULT 0;
CREATE INDEX trials_confirmed ON trials(device_id, problem_id, template_id)
  WHERE status = 1 AND timed_against > 0;
)sql",
};
static_assert(sizeof(kMigrations) / sizeof(kMigrations[0]) == kSchemaVersion);

}  // namespace

absl::Status MigrateSchema(SqliteDb* db, const std::string& path) {
  Transaction txn(db);
  if (absl::Status s = txn.Begin(); !s.ok()) return s;
  absl::StatusOr<Statement*> s = db->Prepare("PRAGMA user_version");
  if (!s.ok()) return s.status();
  absl::StatusOr<bool> row = (*s)->Step();
  if (!row.ok()) return row.status();
  const int version = static_cast<int>((*s)->Int(0));
  (*s)->Reset();
  if (version > kSchemaVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "database ", path, " has schema version ", version,
        ", newer than this build's ", kSchemaVersion, "; upgrade evotune"));
  }
  for (int v = version; v < kSchemaVersion; ++v) {
    if (absl::Status st = db->Exec(kMigrations[v]); !st.ok()) {
      return absl::InternalError(absl::StrCat("migrating schema ", v, " -> ",
                                              v + 1, ": ", st.message()));
    }
  }
  if (absl::Status st =
          db->Exec(absl::StrCat("PRAGMA user_version = ", kSchemaVersion));
      !st.ok()) {
    return st;
  }
  return txn.Commit();
}

}  // namespace evotune
