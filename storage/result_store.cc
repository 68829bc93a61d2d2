#include "storage/result_store.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace evotune {
namespace {

// How much of the file a reader connection maps (address space, not memory).
constexpr int64_t kReaderMmapBytes = int64_t{1} << 30;

constexpr char kTrialColumns[] =
    "id, config_key, status, median_us, min_us, p90_us, cv, error, created_at, "
    "samples";

int64_t NowUnixSeconds() { return absl::ToUnixSeconds(absl::Now()); }

// Reads kTrialColumns starting at column `first`.
absl::StatusOr<StoredTrial> ReadTrial(Statement* s, int first = 0) {
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
  return t;
}

std::string DeviceCacheKey(const DeviceInfo& d) {
  return absl::StrCat("d\x1f", d.name, "\x1f", d.cc_major, "\x1f", d.cc_minor,
                      "\x1f", d.driver_version, "\x1f", d.nvrtc_version);
}

}  // namespace

std::string TopKSql(int n_templates) {
  std::vector<std::string> marks(n_templates, "?");
  // The trials_best index yields rows in median_us order for the (device,
  // problem) prefix; the template filter is applied while scanning it.
  return absl::StrCat(
      "SELECT template_id, ", kTrialColumns,
      " FROM trials INDEXED BY trials_best WHERE device_id = ? AND "
      "problem_id = ? AND status = 1 AND template_id IN (",
      absl::StrJoin(marks, ","), ") ORDER BY median_us LIMIT ?");
}

bool IsFinal(JobState state) {
  return state == JobState::kSucceeded || state == JobState::kFailed ||
         state == JobState::kCancelled;
}

absl::string_view JobStateName(JobState state) {
  switch (state) {
    case JobState::kQueued:
      return "queued";
    case JobState::kRunning:
      return "running";
    case JobState::kSucceeded:
      return "succeeded";
    case JobState::kFailed:
      return "failed";
    case JobState::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

class ResultStore::Reader {
 public:
  Reader(ResultStore* store, std::unique_ptr<SqliteDb> db)
      : store_(store), db_(std::move(db)) {}
  Reader(Reader&&) = default;
  ~Reader() {
    if (db_ == nullptr) return;
    absl::MutexLock lock(&store_->pool_mu_);
    store_->readers_.push_back(std::move(db_));
  }
  SqliteDb* db() { return db_.get(); }

 private:
  ResultStore* store_;
  std::unique_ptr<SqliteDb> db_;
};

absl::StatusOr<std::unique_ptr<ResultStore>> ResultStore::Open(
    const std::string& path) {
  std::unique_ptr<ResultStore> store(new ResultStore(path));
  absl::StatusOr<std::unique_ptr<SqliteDb>> db = SqliteDb::Open(path);
  if (!db.ok()) return db.status();
  {
    absl::MutexLock lock(&store->writer_mu_);
    store->writer_ = *std::move(db);
    if (absl::Status s = store->writer_->Exec(
            "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; "
            "PRAGMA foreign_keys=ON;");
        !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = store->Migrate(); !s.ok()) return s;
  return store;
}

absl::Status ResultStore::Migrate() {
  absl::MutexLock lock(&writer_mu_);
  return MigrateSchema(writer_.get(), path_);
}

absl::StatusOr<ResultStore::Reader> ResultStore::AcquireReader() {
  {
    absl::MutexLock lock(&pool_mu_);
    if (!readers_.empty()) {
      std::unique_ptr<SqliteDb> db = std::move(readers_.back());
      readers_.pop_back();
      return Reader(this, std::move(db));
    }
  }
  absl::StatusOr<std::unique_ptr<SqliteDb>> db = SqliteDb::Open(path_);
  if (!db.ok()) return db.status();
  // Readers map the file: a page missing from the connection's own cache is
  // then a memory access instead of a read() call (TopK in bench/RESULTS.md).
  // The writer keeps plain I/O.
  if (absl::Status s = (*db)->Exec(absl::StrCat(
          "PRAGMA query_only=ON; PRAGMA mmap_size=", kReaderMmapBytes));
      !s.ok()) {
    return s;
  }
  return Reader(this, *std::move(db));
}

absl::StatusOr<int> ResultStore::SchemaVersion() {
  absl::StatusOr<Reader> r = AcquireReader();
  if (!r.ok()) return r.status();
  absl::StatusOr<Statement*> s = r->db()->Prepare("PRAGMA user_version");
  if (!s.ok()) return s.status();
  ScopedReset reset(*s);
  absl::StatusOr<bool> row = (*s)->Step();
  if (!row.ok()) return row.status();
  return static_cast<int>((*s)->Int(0));
}

absl::StatusOr<int64_t> ResultStore::DeviceId(SqliteDb* db, const DeviceInfo& d,
                                              bool create) {
  const std::string key = DeviceCacheKey(d);
  {
    absl::MutexLock lock(&ids_mu_);
    auto it = ids_.find(key);
    if (it != ids_.end()) return it->second;
  }
  if (create) {
    absl::StatusOr<Statement*> ins = db->Prepare(
        "INSERT OR IGNORE INTO devices(name, cc_major, cc_minor, "
        "driver_version, nvrtc_version) VALUES(?, ?, ?, ?, ?)");
    if (!ins.ok()) return ins.status();
    (*ins)
        ->Bind(1, d.name)
        .Bind(2, int64_t{d.cc_major})
        .Bind(3, int64_t{d.cc_minor})
        .Bind(4, d.driver_version)
        .Bind(5, d.nvrtc_version);
    if (absl::Status s = (*ins)->Run(); !s.ok()) return s;
  }
  absl::StatusOr<Statement*> s = db->Prepare(
      "SELECT id FROM devices WHERE name = ? AND cc_major = ? AND cc_minor = "
      "? AND driver_version = ? AND nvrtc_version = ?");
  if (!s.ok()) return s.status();
  ScopedReset reset(*s);
  (*s)->Bind(1, d.name)
      .Bind(2, int64_t{d.cc_major})
      .Bind(3, int64_t{d.cc_minor})
      .Bind(4, d.driver_version)
      .Bind(5, d.nvrtc_version);
  absl::StatusOr<bool> row = (*s)->Step();
  if (!row.ok()) return row.status();
  if (!*row)
    return absl::NotFoundError(absl::StrCat("unknown device ", d.name));
  const int64_t id = (*s)->Int(0);
  absl::MutexLock lock(&ids_mu_);
  ids_[key] = id;
  return id;
}

absl::StatusOr<int64_t> ResultStore::TemplateId(SqliteDb* db,
                                                const std::string& name,
                                                const std::string& hash,
                                                bool create) {
  const std::string key = absl::StrCat("t\x1f", name, "\x1f", hash);
  {
    absl::MutexLock lock(&ids_mu_);
    auto it = ids_.find(key);
    if (it != ids_.end()) return it->second;
  }
  if (create) {
    absl::StatusOr<Statement*> ins = db->Prepare(
        "INSERT OR IGNORE INTO templates(name, source_hash) VALUES(?, ?)");
    if (!ins.ok()) return ins.status();
    (*ins)->Bind(1, name).Bind(2, hash);
    if (absl::Status s = (*ins)->Run(); !s.ok()) return s;
  }
  absl::StatusOr<Statement*> s = db->Prepare(
      "SELECT id FROM templates WHERE name = ? AND source_hash = ?");
  if (!s.ok()) return s.status();
  ScopedReset reset(*s);
  (*s)->Bind(1, name).Bind(2, hash);
  absl::StatusOr<bool> row = (*s)->Step();
  if (!row.ok()) return row.status();
  if (!*row)
    return absl::NotFoundError(absl::StrCat("unknown template ", name));
  const int64_t id = (*s)->Int(0);
  absl::MutexLock lock(&ids_mu_);
  ids_[key] = id;
  return id;
}

absl::StatusOr<int64_t> ResultStore::ProblemId(SqliteDb* db, const Problem& p,
                                               bool create) {
  const std::string problem_key = ProblemKey(p);
  const std::string key = absl::StrCat("p\x1f", problem_key);
  {
    absl::MutexLock lock(&ids_mu_);
    auto it = ids_.find(key);
    if (it != ids_.end()) return it->second;
  }
  if (create) {
    absl::StatusOr<Statement*> ins = db->Prepare(
        "INSERT OR IGNORE INTO problems(key, batch, heads, kv_heads, seq_q, "
        "seq_k, head_dim, causal, dtype, layout) "
        "VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, 'bhsd')");
    if (!ins.ok()) return ins.status();
    (*ins)
        ->Bind(1, problem_key)
        .Bind(2, p.batch)
        .Bind(3, p.heads)
        .Bind(4, p.kv_heads)
        .Bind(5, p.seq_q)
        .Bind(6, p.seq_k)
        .Bind(7, p.head_dim)
        .Bind(8, int64_t{p.causal})
        .Bind(9, DTypeName(p.dtype));
    if (absl::Status s = (*ins)->Run(); !s.ok()) return s;
  }
  absl::StatusOr<Statement*> s =
      db->Prepare("SELECT id FROM problems WHERE key = ?");
  if (!s.ok()) return s.status();
  ScopedReset reset(*s);
  (*s)->Bind(1, problem_key);
  absl::StatusOr<bool> row = (*s)->Step();
  if (!row.ok()) return row.status();
  if (!*row) return absl::NotFoundError("unknown problem");
  const int64_t id = (*s)->Int(0);
  absl::MutexLock lock(&ids_mu_);
  ids_[key] = id;
  return id;
}

absl::StatusOr<StoredTrial> ResultStore::InsertTrial(
    const TrialScope& scope, const Config& config, const TrialResult& result) {
  absl::MutexLock lock(&writer_mu_);
  Transaction txn(writer_.get());
  if (absl::Status s = txn.Begin(); !s.ok()) return s;
  absl::StatusOr<StoredTrial> t = InsertTrialLocked(scope, config, result);
  if (!t.ok()) return t.status();
  if (absl::Status s = txn.Commit(); !s.ok()) return s;
  return t;
}

absl::StatusOr<StoredTrial> ResultStore::InsertTrialLocked(
    const TrialScope& scope, const Config& config, const TrialResult& r) {
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
      "samples) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
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
      .Bind(12, int64_t{ok ? r.samples : 0});
  if (absl::Status s = (*ins)->Run(); !s.ok()) return s;
  if (ok) {
    absl::StatusOr<Statement*> tuned = db->Prepare(
        "INSERT OR IGNORE INTO tuned_problems(device_id, template_id, "
        "problem_id) VALUES(?, ?, ?)");
    if (!tuned.ok()) return tuned.status();
    (*tuned)->Bind(1, *device_id).Bind(2, *template_id).Bind(3, *problem_id);
    if (absl::Status s = (*tuned)->Run(); !s.ok()) return s;
  }

  absl::StatusOr<Statement*> sel = db->Prepare(absl::StrCat(
      "SELECT ", kTrialColumns,
      " FROM trials WHERE device_id = ? AND template_id = ? AND problem_id = "
      "? AND config_key = ?"));
  if (!sel.ok()) return sel.status();
  ScopedReset reset(*sel);
  (*sel)
      ->Bind(1, *device_id)
      .Bind(2, *template_id)
      .Bind(3, *problem_id)
      .Bind(4, config_key);
  absl::StatusOr<bool> row = (*sel)->Step();
  if (!row.ok()) return row.status();
  if (!*row) return absl::InternalError("inserted trial not found");
  return ReadTrial(*sel);
}

absl::StatusOr<std::optional<StoredTrial>> ResultStore::FindTrial(
    const TrialScope& scope, const Config& config) {
  absl::StatusOr<Reader> r = AcquireReader();
  if (!r.ok()) return r.status();
  SqliteDb* db = r->db();
  absl::StatusOr<int64_t> device_id = DeviceId(db, scope.device, false);
  absl::StatusOr<int64_t> template_id =
      TemplateId(db, scope.template_name, scope.template_hash, false);
  absl::StatusOr<int64_t> problem_id = ProblemId(db, scope.problem, false);
  for (const absl::Status& s :
       {device_id.status(), template_id.status(), problem_id.status()}) {
    if (absl::IsNotFound(s)) return std::nullopt;
    if (!s.ok()) return s;
  }
  absl::StatusOr<Statement*> sel = db->Prepare(absl::StrCat(
      "SELECT ", kTrialColumns,
      " FROM trials WHERE device_id = ? AND template_id = ? AND problem_id = "
      "? AND config_key = ?"));
  if (!sel.ok()) return sel.status();
  ScopedReset reset(*sel);
  (*sel)
      ->Bind(1, *device_id)
      .Bind(2, *template_id)
      .Bind(3, *problem_id)
      .Bind(4, ConfigKey(config));
  absl::StatusOr<bool> row = (*sel)->Step();
  if (!row.ok()) return row.status();
  if (!*row) return std::nullopt;
  absl::StatusOr<StoredTrial> t = ReadTrial(*sel);
  if (!t.ok()) return t.status();
  return std::optional<StoredTrial>(*std::move(t));
}

absl::StatusOr<std::vector<StoredTrial>> ResultStore::ListTrials(
    const TrialScope& scope) {
  absl::StatusOr<Reader> r = AcquireReader();
  if (!r.ok()) return r.status();
  SqliteDb* db = r->db();
  std::vector<StoredTrial> out;
  absl::StatusOr<int64_t> device_id = DeviceId(db, scope.device, false);
  absl::StatusOr<int64_t> template_id =
      TemplateId(db, scope.template_name, scope.template_hash, false);
  absl::StatusOr<int64_t> problem_id = ProblemId(db, scope.problem, false);
  for (const absl::Status& s :
       {device_id.status(), template_id.status(), problem_id.status()}) {
    if (absl::IsNotFound(s)) return out;
    if (!s.ok()) return s;
  }
  absl::StatusOr<Statement*> sel = db->Prepare(absl::StrCat(
      "SELECT ", kTrialColumns,
      " FROM trials WHERE device_id = ? AND template_id = ? AND problem_id = "
      "? ORDER BY id"));
  if (!sel.ok()) return sel.status();
  ScopedReset reset(*sel);
  (*sel)->Bind(1, *device_id).Bind(2, *template_id).Bind(3, *problem_id);
  while (true) {
    absl::StatusOr<bool> row = (*sel)->Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    absl::StatusOr<StoredTrial> t = ReadTrial(*sel);
    if (!t.ok()) return t.status();
    out.push_back(*std::move(t));
  }
  return out;
}

absl::StatusOr<std::vector<RankedTrial>> ResultStore::TopK(
    const DeviceInfo& device, const Problem& problem,
    const std::vector<std::pair<std::string, std::string>>& templates, int k) {
  absl::StatusOr<Reader> r = AcquireReader();
  if (!r.ok()) return r.status();
  SqliteDb* db = r->db();
  std::vector<RankedTrial> out;
  absl::StatusOr<int64_t> device_id = DeviceId(db, device, false);
  absl::StatusOr<int64_t> problem_id = ProblemId(db, problem, false);
  for (const absl::Status& s : {device_id.status(), problem_id.status()}) {
    if (absl::IsNotFound(s)) return out;
    if (!s.ok()) return s;
  }
  std::vector<int64_t> template_ids;
  absl::flat_hash_map<int64_t, const std::pair<std::string, std::string>*>
      by_id;
  for (const auto& t : templates) {
    absl::StatusOr<int64_t> id = TemplateId(db, t.first, t.second, false);
    if (absl::IsNotFound(id.status())) continue;
    if (!id.ok()) return id.status();
    template_ids.push_back(*id);
    by_id[*id] = &t;
  }
  if (template_ids.empty()) return out;
  absl::StatusOr<Statement*> sel =
      db->Prepare(TopKSql(static_cast<int>(template_ids.size())));
  if (!sel.ok()) return sel.status();
  ScopedReset reset(*sel);
  int index = 1;
  (*sel)->Bind(index++, *device_id);
  (*sel)->Bind(index++, *problem_id);
  for (int64_t id : template_ids) (*sel)->Bind(index++, id);
  (*sel)->Bind(index, int64_t{k});
  while (true) {
    absl::StatusOr<bool> row = (*sel)->Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    absl::StatusOr<StoredTrial> t = ReadTrial(*sel, 1);
    if (!t.ok()) return t.status();
    const auto* tmpl = by_id[(*sel)->Int(0)];
    out.push_back({tmpl->first, tmpl->second, *std::move(t)});
  }
  return out;
}

absl::StatusOr<std::optional<Problem>> ResultStore::NearestTunedProblem(
    const DeviceInfo& device, const Problem& problem,
    const std::vector<std::pair<std::string, std::string>>& templates) {
  absl::StatusOr<Reader> r = AcquireReader();
  if (!r.ok()) return r.status();
  SqliteDb* db = r->db();
  absl::StatusOr<int64_t> device_id = DeviceId(db, device, false);
  if (absl::IsNotFound(device_id.status())) return std::nullopt;
  if (!device_id.ok()) return device_id.status();
  std::vector<int64_t> template_ids;
  for (const auto& t : templates) {
    absl::StatusOr<int64_t> id = TemplateId(db, t.first, t.second, false);
    if (absl::IsNotFound(id.status())) continue;
    if (!id.ok()) return id.status();
    template_ids.push_back(*id);
  }
  if (template_ids.empty()) return std::nullopt;
  std::vector<std::string> marks(template_ids.size(), "?");
  absl::StatusOr<Statement*> sel = db->Prepare(absl::StrCat(
      "SELECT DISTINCT p.key FROM tuned_problems tp JOIN problems p ON p.id = "
      "tp.problem_id WHERE tp.device_id = ? AND tp.template_id IN (",
      absl::StrJoin(marks, ","),
      ") AND p.head_dim = ? AND p.dtype = ? AND p.causal = ?"));
  if (!sel.ok()) return sel.status();
  ScopedReset reset(*sel);
  int index = 1;
  (*sel)->Bind(index++, *device_id);
  for (int64_t id : template_ids) (*sel)->Bind(index++, id);
  (*sel)->Bind(index++, problem.head_dim);
  (*sel)->Bind(index++, DTypeName(problem.dtype));
  (*sel)->Bind(index, int64_t{problem.causal});
  auto distance = [&](const Problem& p) {
    double d = 0;
    for (auto [a, b] : {std::pair{p.batch, problem.batch},
                        {p.heads, problem.heads},
                        {p.kv_heads, problem.kv_heads},
                        {p.seq_q, problem.seq_q},
                        {p.seq_k, problem.seq_k}}) {
      const double x = std::log2(static_cast<double>(a) / b);
      d += x * x;
    }
    return d;
  };
  std::optional<Problem> best;
  double best_distance = std::numeric_limits<double>::infinity();
  while (true) {
    absl::StatusOr<bool> row = (*sel)->Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    absl::StatusOr<Problem> p = ParseProblemKey((*sel)->Text(0));
    if (!p.ok()) return absl::DataLossError(p.status().message());
    if (*p == problem) continue;
    const double d = distance(*p);
    if (d < best_distance) {
      best = *p;
      best_distance = d;
    }
  }
  return best;
}

absl::StatusOr<DeviceInfo> ResultStore::FindDevice(const std::string& name) {
  absl::StatusOr<Reader> r = AcquireReader();
  if (!r.ok()) return r.status();
  absl::StatusOr<Statement*> sel = r->db()->Prepare(
      "SELECT d.name, d.cc_major, d.cc_minor, d.driver_version, "
      "d.nvrtc_version FROM devices d WHERE d.name = ? ORDER BY (SELECT "
      "MAX(id) FROM trials t WHERE t.device_id = d.id) DESC, d.id DESC "
      "LIMIT 1");
  if (!sel.ok()) return sel.status();
  ScopedReset reset(*sel);
  (*sel)->Bind(1, name);
  absl::StatusOr<bool> row = (*sel)->Step();
  if (!row.ok()) return row.status();
  if (!*row) {
    return absl::NotFoundError(
        absl::StrCat("device: no results for a device named \"", name, "\""));
  }
  DeviceInfo d;
  d.name = (*sel)->Text(0);
  d.cc_major = static_cast<int>((*sel)->Int(1));
  d.cc_minor = static_cast<int>((*sel)->Int(2));
  d.driver_version = (*sel)->Text(3);
  d.nvrtc_version = (*sel)->Text(4);
  return d;
}

absl::StatusOr<int64_t> ResultStore::CountTrials() {
  absl::StatusOr<Reader> r = AcquireReader();
  if (!r.ok()) return r.status();
  absl::StatusOr<Statement*> sel =
      r->db()->Prepare("SELECT COUNT(*) FROM trials");
  if (!sel.ok()) return sel.status();
  ScopedReset reset(*sel);
  absl::StatusOr<bool> row = (*sel)->Step();
  if (!row.ok()) return row.status();
  return (*sel)->Int(0);
}

absl::Status ResultStore::CreateJob(const JobRecord& job) {
  absl::MutexLock lock(&writer_mu_);
  SqliteDb* db = writer_.get();
  Transaction txn(db);
  if (absl::Status s = txn.Begin(); !s.ok()) return s;
  absl::StatusOr<int64_t> device_id = DeviceId(db, job.device, true);
  if (!device_id.ok()) return device_id.status();
  absl::StatusOr<Statement*> ins = db->Prepare(
      "INSERT OR IGNORE INTO jobs(id, template_name, template_hash, "
      "problem_key, max_trials, max_seconds, strategy, seed, device_id, "
      "state, error, trials_done, elapsed_seconds, created_at, finished_at) "
      "VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, 0, ?, 0)");
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
      .Bind(12, job.created_unix_s ? job.created_unix_s : NowUnixSeconds());
  if (absl::Status s = (*ins)->Run(); !s.ok()) return s;
  if (db->Changes() == 0) {
    return absl::AlreadyExistsError(
        absl::StrCat("job ", job.job_id, " already exists"));
  }
  return txn.Commit();
}

namespace {
constexpr char kJobSelect[] =
    "SELECT j.id, j.template_name, j.template_hash, j.problem_key, "
    "j.max_trials, j.max_seconds, j.strategy, j.seed, d.name, d.cc_major, "
    "d.cc_minor, d.driver_version, d.nvrtc_version, j.state, j.error, "
    "j.trials_done, j.elapsed_seconds, j.created_at, j.finished_at "
    "FROM jobs j JOIN devices d ON d.id = j.device_id ";
}  // namespace

absl::StatusOr<JobRecord> ResultStore::ReadJob(Statement* s) {
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
  return j;
}

absl::StatusOr<JobRecord> ResultStore::GetJob(const std::string& job_id) {
  absl::StatusOr<Reader> r = AcquireReader();
  if (!r.ok()) return r.status();
  absl::StatusOr<Statement*> sel =
      r->db()->Prepare(absl::StrCat(kJobSelect, "WHERE j.id = ?"));
  if (!sel.ok()) return sel.status();
  ScopedReset reset(*sel);
  (*sel)->Bind(1, job_id);
  absl::StatusOr<bool> row = (*sel)->Step();
  if (!row.ok()) return row.status();
  if (!*row)
    return absl::NotFoundError(absl::StrCat("job_id: no job ", job_id));
  return ReadJob(*sel);
}

absl::StatusOr<std::vector<JobRecord>> ResultStore::ListJobs(
    std::optional<JobState> state) {
  absl::StatusOr<Reader> r = AcquireReader();
  if (!r.ok()) return r.status();
  absl::StatusOr<Statement*> sel = r->db()->Prepare(
      absl::StrCat(kJobSelect, state ? "WHERE j.state = ? " : "",
                   "ORDER BY j.created_at DESC, j.rowid DESC"));
  if (!sel.ok()) return sel.status();
  ScopedReset reset(*sel);
  if (state) (*sel)->Bind(1, int64_t{static_cast<int>(*state)});
  std::vector<JobRecord> out;
  while (true) {
    absl::StatusOr<bool> row = (*sel)->Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    absl::StatusOr<JobRecord> j = ReadJob(*sel);
    if (!j.ok()) return j.status();
    out.push_back(*std::move(j));
  }
  return out;
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

absl::StatusOr<JobEvent> ResultStore::AppendJobTrial(const JobRecord& job,
                                                     const Config& config,
                                                     const TrialResult& result,
                                                     bool cached,
                                                     double elapsed_seconds) {
  absl::MutexLock lock(&writer_mu_);
  SqliteDb* db = writer_.get();
  Transaction txn(db);
  if (absl::Status s = txn.Begin(); !s.ok()) return s;
  absl::StatusOr<StoredTrial> trial = InsertTrialLocked(
      {job.device, job.template_name, job.template_hash, job.problem}, config,
      result);
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
  return event;
}

absl::StatusOr<std::vector<JobEvent>> ResultStore::ListJobEvents(
    const std::string& job_id, int64_t after, int limit) {
  absl::StatusOr<Reader> r = AcquireReader();
  if (!r.ok()) return r.status();
  absl::StatusOr<Statement*> sel = r->db()->Prepare(absl::StrCat(
      "SELECT jt.seq, jt.cached, t.id, t.config_key, t.status, t.median_us, "
      "t.min_us, t.p90_us, t.cv, t.error, t.created_at, t.samples FROM "
      "job_trials jt "
      "JOIN trials t ON t.id = jt.trial_id WHERE jt.job_id = ? AND jt.seq > ? "
      "ORDER BY jt.seq LIMIT ?"));
  if (!sel.ok()) return sel.status();
  ScopedReset reset(*sel);
  (*sel)->Bind(1, job_id).Bind(2, after).Bind(3, int64_t{limit});
  std::vector<JobEvent> out;
  while (true) {
    absl::StatusOr<bool> row = (*sel)->Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    absl::StatusOr<StoredTrial> t = ReadTrial(*sel, 2);
    if (!t.ok()) return t.status();
    out.push_back({(*sel)->Int(0), *std::move(t), (*sel)->Int(1) != 0});
  }
  return out;
}

absl::StatusOr<std::optional<StoredTrial>> ResultStore::JobBest(
    const std::string& job_id) {
  absl::StatusOr<Reader> r = AcquireReader();
  if (!r.ok()) return r.status();
  absl::StatusOr<Statement*> sel = r->db()->Prepare(absl::StrCat(
      "SELECT t.id, t.config_key, t.status, t.median_us, t.min_us, t.p90_us, "
      "t.cv, t.error, t.created_at, t.samples FROM job_trials jt JOIN trials t "
      "ON t.id = "
      "jt.trial_id WHERE jt.job_id = ? AND t.status = 1 ORDER BY t.median_us "
      "LIMIT 1"));
  if (!sel.ok()) return sel.status();
  ScopedReset reset(*sel);
  (*sel)->Bind(1, job_id);
  absl::StatusOr<bool> row = (*sel)->Step();
  if (!row.ok()) return row.status();
  if (!*row) return std::optional<StoredTrial>();
  absl::StatusOr<StoredTrial> t = ReadTrial(*sel);
  if (!t.ok()) return t.status();
  return std::optional<StoredTrial>(*std::move(t));
}

absl::Status ResultStore::BulkInsertTrials(
    const TrialScope& scope,
    const std::vector<std::pair<Config, TrialResult>>& trials) {
  absl::MutexLock lock(&writer_mu_);
  Transaction txn(writer_.get());
  if (absl::Status s = txn.Begin(); !s.ok()) return s;
  for (const auto& [config, result] : trials) {
    absl::StatusOr<StoredTrial> t = InsertTrialLocked(scope, config, result);
    if (!t.ok()) return t.status();
  }
  return txn.Commit();
}

}  // namespace evotune
