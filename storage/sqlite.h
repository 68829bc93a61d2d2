// A thin RAII wrapper of the SQLite C API whose errors are absl::Status with
// SQLite's message attached. The only SQLite code outside it is result_store.
#ifndef EVOTUNE_STORAGE_SQLITE_H_
#define EVOTUNE_STORAGE_SQLITE_H_

#include <sqlite3.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace evotune {

class Statement;

// One connection. Not thread-safe: use it from one thread at a time.
class SqliteDb {
 public:
  static absl::StatusOr<std::unique_ptr<SqliteDb>> Open(
      const std::string& path);
  ~SqliteDb();
  SqliteDb(const SqliteDb&) = delete;
  SqliteDb& operator=(const SqliteDb&) = delete;

  // Runs one or more statements that return no rows.
  absl::Status Exec(absl::string_view sql);

  // A prepared statement cached on this connection and reset for reuse; the
  // reference stays valid as long as the connection.
  absl::StatusOr<Statement*> Prepare(const std::string& sql);

  int64_t LastInsertRowId() const;
  int Changes() const;
  absl::Status Error(absl::string_view what) const;
  sqlite3* raw() { return db_; }

 private:
  explicit SqliteDb(sqlite3* db) : db_(db) {}
  sqlite3* db_;
  std::map<std::string, std::unique_ptr<Statement>> cache_;
};

class Statement {
 public:
  Statement(SqliteDb* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}
  ~Statement();
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  // Bind by 1-based index. Text is copied.
  Statement& Bind(int index, int64_t value);
  Statement& Bind(int index, double value);
  Statement& Bind(int index, absl::string_view value);
  Statement& BindBlob(int index, absl::string_view bytes);

  // Steps once: true when a row is available, false when done.
  absl::StatusOr<bool> Step();
  // Steps to the end, for statements that return no rows.
  absl::Status Run();
  void Reset();

  int64_t Int(int column) const;
  double Double(int column) const;
  std::string Text(int column) const;
  std::string Blob(int column) const;

 private:
  SqliteDb* db_;
  sqlite3_stmt* stmt_;
};

// Resets the statement when it goes out of scope, so that a cached statement
// holds no read snapshot or lock after use.
class ScopedReset {
 public:
  explicit ScopedReset(Statement* s) : s_(s) {}
  ~ScopedReset() { s_->Reset(); }

 private:
  Statement* s_;
};

// BEGIN IMMEDIATE ... COMMIT; rolls back unless Commit() was called.
class Transaction {
 public:
  explicit Transaction(SqliteDb* db) : db_(db) {}
  ~Transaction();
  absl::Status Begin();
  absl::Status Commit();

 private:
  SqliteDb* db_;
  bool open_ = false;
};

}  // namespace evotune

#endif  // EVOTUNE_STORAGE_SQLITE_H_
