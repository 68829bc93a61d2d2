// ResultStore: opening and migrating the database, the reader pool, and the
// ids of key rows (devices, templates, problems). Trial and job writes are in
// result_store_writes.cc, every query in result_store_queries.cc.
#include "storage/result_store.h"

#include <functional>

#include "absl/strings/str_cat.h"
#include "storage/store_rows.h"

namespace evotune {
namespace {

// How much of the file a reader connection maps (address space, not memory).
constexpr int64_t kReaderMmapBytes = int64_t{1} << 30;

// Keys of template and problem rows in ids_.
std::string TemplateKey(const std::string& name, const std::string& hash) {
  return absl::StrCat("t\x1f", name, "\x1f", hash);
}
std::string ProblemCacheKey(const std::string& problem_key) {
  return absl::StrCat("p\x1f", problem_key);
}

// Runs `each` on every row of `s`.
absl::Status ForEachRow(Statement* s,
                        const std::function<void(Statement*)>& each) {
  ScopedReset reset(s);
  for (;;) {
    absl::StatusOr<bool> row = s->Step();
    if (!row.ok()) return row.status();
    if (!*row) return absl::OkStatus();
    each(s);
  }
}

}  // namespace

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
  if (absl::Status s = store->LoadIds(); !s.ok()) return s;
  return store;
}

absl::Status ResultStore::LoadIds() {
  absl::MutexLock writer(&writer_mu_);
  absl::MutexLock lock(&ids_mu_);
  SqliteDb* db = writer_.get();
  absl::StatusOr<Statement*> devices = db->Prepare(
      "SELECT id, name, cc_major, cc_minor, driver_version, "
      "nvrtc_version FROM devices");
  if (!devices.ok()) return devices.status();
  absl::Status s = ForEachRow(*devices, [&](Statement* row) {
    DeviceInfo d;
    d.name = row->Text(1);
    d.cc_major = static_cast<int>(row->Int(2));
    d.cc_minor = static_cast<int>(row->Int(3));
    d.driver_version = row->Text(4);
    d.nvrtc_version = row->Text(5);
    ids_[store_rows::DeviceKey(d)] = row->Int(0);
  });
  if (!s.ok()) return s;
  absl::StatusOr<Statement*> templates =
      db->Prepare("SELECT id, name, source_hash FROM templates");
  if (!templates.ok()) return templates.status();
  s = ForEachRow(*templates, [&](Statement* row) {
    ids_[TemplateKey(row->Text(1), row->Text(2))] = row->Int(0);
  });
  if (!s.ok()) return s;
  absl::StatusOr<Statement*> problems =
      db->Prepare("SELECT id, key FROM problems");
  if (!problems.ok()) return problems.status();
  return ForEachRow(*problems, [&](Statement* row) {
    ids_[ProblemCacheKey(row->Text(1))] = row->Int(0);
  });
}

int64_t ResultStore::Created(const std::string& key, int64_t id) {
  absl::MutexLock lock(&ids_mu_);
  ids_[key] = id;
  created_.push_back(key);
  return id;
}

ResultStore::CreatedIds::~CreatedIds() {
  absl::MutexLock lock(&store_->ids_mu_);
  if (!committed_) {
    // Their rows were rolled back with the transaction.
    for (const std::string& key : store_->created_) store_->ids_.erase(key);
  }
  store_->created_.clear();
}

absl::Status ResultStore::Migrate() {
  absl::MutexLock lock(&writer_mu_);
  return MigrateSchema(writer_.get(), path_);
}

absl::StatusOr<ResultStore::Reader> ResultStore::AcquireReader() {
  {
    absl::MutexLock lock(&pool_mu_);
    // A condition variable wakes one waiter per returned reader (an Await
    // condition would be evaluated for every waiter at each return, which
    // collapses with thousands of waiting requests).
    while (readers_.empty() && open_readers_ >= kMaxReaders) {
      reader_free_.Wait(&pool_mu_);
    }
    if (!readers_.empty()) {
      std::unique_ptr<SqliteDb> db = std::move(readers_.back());
      readers_.pop_back();
      return Reader(this, std::move(db));
    }
    ++open_readers_;
  }
  absl::StatusOr<std::unique_ptr<SqliteDb>> db = OpenReader();
  if (!db.ok()) {
    absl::MutexLock lock(&pool_mu_);
    --open_readers_;
    reader_free_.Signal();
    return db.status();
  }
  return Reader(this, *std::move(db));
}

absl::StatusOr<std::unique_ptr<SqliteDb>> ResultStore::OpenReader() {
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
  return db;
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
  const std::string key = store_rows::DeviceKey(d);
  {
    absl::MutexLock lock(&ids_mu_);
    auto it = ids_.find(key);
    if (it != ids_.end()) return it->second;
  }
  // Every row is known (LoadIds, and each row this store creates).
  if (!create) {
    return absl::NotFoundError(absl::StrCat("unknown device ", d.name));
  }
  {
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
  if (!*row) return absl::InternalError("created device not found");
  return Created(key, (*s)->Int(0));
}

absl::StatusOr<std::vector<int64_t>> ResultStore::TemplateIds(
    SqliteDb* db,
    const std::vector<std::pair<std::string, std::string>>& templates) {
  std::vector<int64_t> ids;
  for (const auto& [name, hash] : templates) {
    absl::StatusOr<int64_t> id = TemplateId(db, name, hash, false);
    if (!id.ok() && !absl::IsNotFound(id.status())) return id.status();
    ids.push_back(id.ok() ? *id : 0);
  }
  return ids;
}

absl::StatusOr<int64_t> ResultStore::TemplateId(SqliteDb* db,
                                                const std::string& name,
                                                const std::string& hash,
                                                bool create) {
  const std::string key = TemplateKey(name, hash);
  {
    absl::MutexLock lock(&ids_mu_);
    auto it = ids_.find(key);
    if (it != ids_.end()) return it->second;
  }
  if (!create) {
    return absl::NotFoundError(absl::StrCat("unknown template ", name));
  }
  {
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
  if (!*row) return absl::InternalError("created template not found");
  return Created(key, (*s)->Int(0));
}

absl::StatusOr<int64_t> ResultStore::ProblemId(SqliteDb* db, const Problem& p,
                                               bool create) {
  const std::string problem_key = ProblemKey(p);
  const std::string key = ProblemCacheKey(problem_key);
  {
    absl::MutexLock lock(&ids_mu_);
    auto it = ids_.find(key);
    if (it != ids_.end()) return it->second;
  }
  if (!create) return absl::NotFoundError("unknown problem");
  {
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
        .Bind(9, DTypesName(p));
    if (absl::Status s = (*ins)->Run(); !s.ok()) return s;
  }
  absl::StatusOr<Statement*> s =
      db->Prepare("SELECT id FROM problems WHERE key = ?");
  if (!s.ok()) return s.status();
  ScopedReset reset(*s);
  (*s)->Bind(1, problem_key);
  absl::StatusOr<bool> row = (*s)->Step();
  if (!row.ok()) return row.status();
  if (!*row) return absl::InternalError("created problem not found");
  return Created(key, (*s)->Int(0));
}

}  // namespace evotune
