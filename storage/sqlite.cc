#include "storage/sqlite.h"

#include "absl/strings/str_cat.h"

namespace evotune {

absl::StatusOr<std::unique_ptr<SqliteDb>> SqliteDb::Open(
    const std::string& path) {
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(
      path.c_str(), &db,
      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
      nullptr);
  if (rc != SQLITE_OK) {
    std::string message = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close(db);
    return absl::UnavailableError(
        absl::StrCat("cannot open database ", path, ": ", message));
  }
  // Concurrent writers from other processes wait instead of failing at once.
  sqlite3_busy_timeout(db, 5000);
  return std::unique_ptr<SqliteDb>(new SqliteDb(db));
}

SqliteDb::~SqliteDb() {
  cache_.clear();  // Statements must be finalized before the connection.
  sqlite3_close(db_);
}

absl::Status SqliteDb::Exec(absl::string_view sql) {
  char* message = nullptr;
  const int rc =
      sqlite3_exec(db_, std::string(sql).c_str(), nullptr, nullptr, &message);
  if (rc != SQLITE_OK) {
    absl::Status s = absl::InternalError(
        absl::StrCat("sqlite: ", message ? message : sqlite3_errstr(rc)));
    sqlite3_free(message);
    return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<Statement*> SqliteDb::Prepare(const std::string& sql) {
  auto it = cache_.find(sql);
  if (it != cache_.end()) {
    it->second->Reset();
    return it->second.get();
  }
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v3(db_, sql.c_str(), -1, SQLITE_PREPARE_PERSISTENT, &stmt,
                         nullptr) != SQLITE_OK) {
    return Error(absl::StrCat("prepare \"", sql, "\""));
  }
  auto owned = std::make_unique<Statement>(this, stmt);
  Statement* raw = owned.get();
  cache_.emplace(sql, std::move(owned));
  return raw;
}

int64_t SqliteDb::LastInsertRowId() const {
  return sqlite3_last_insert_rowid(db_);
}

int SqliteDb::Changes() const { return sqlite3_changes(db_); }

absl::Status SqliteDb::Error(absl::string_view what) const {
  return absl::InternalError(
      absl::StrCat("sqlite: ", what, ": ", sqlite3_errmsg(db_)));
}

Statement::~Statement() { sqlite3_finalize(stmt_); }

Statement& Statement::Bind(int index, int64_t value) {
  sqlite3_bind_int64(stmt_, index, value);
  return *this;
}

Statement& Statement::Bind(int index, double value) {
  sqlite3_bind_double(stmt_, index, value);
  return *this;
}

Statement& Statement::Bind(int index, absl::string_view value) {
  sqlite3_bind_text(stmt_, index, value.data(), static_cast<int>(value.size()),
                    SQLITE_TRANSIENT);
  return *this;
}

Statement& Statement::BindBlob(int index, absl::string_view bytes) {
  sqlite3_bind_blob64(stmt_, index, bytes.data(), bytes.size(),
                      SQLITE_TRANSIENT);
  return *this;
}

absl::StatusOr<bool> Statement::Step() {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return db_->Error(absl::StrCat("step \"", sqlite3_sql(stmt_), "\""));
}

absl::Status Statement::Run() {
  while (true) {
    absl::StatusOr<bool> row = Step();
    if (!row.ok()) {
      Reset();
      return row.status();
    }
    if (!*row) break;
  }
  Reset();
  return absl::OkStatus();
}

void Statement::Reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

int64_t Statement::Int(int column) const {
  return sqlite3_column_int64(stmt_, column);
}

double Statement::Double(int column) const {
  return sqlite3_column_double(stmt_, column);
}

std::string Statement::Text(int column) const {
  const unsigned char* text = sqlite3_column_text(stmt_, column);
  return text ? std::string(reinterpret_cast<const char*>(text),
                            sqlite3_column_bytes(stmt_, column))
              : std::string();
}

std::string Statement::Blob(int column) const {
  const void* bytes = sqlite3_column_blob(stmt_, column);
  return bytes ? std::string(static_cast<const char*>(bytes),
                             sqlite3_column_bytes(stmt_, column))
               : std::string();
}

Transaction::~Transaction() {
  if (open_) db_->Exec("ROLLBACK").IgnoreError();
}

absl::Status Transaction::Begin() {
  if (absl::Status s = db_->Exec("BEGIN IMMEDIATE"); !s.ok()) return s;
  open_ = true;
  return absl::OkStatus();
}

absl::Status Transaction::Commit() {
  if (absl::Status s = db_->Exec("COMMIT"); !s.ok()) return s;
  open_ = false;
  return absl::OkStatus();
}

}  // namespace evotune
