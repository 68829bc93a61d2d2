// The store's SQLite schema, as a list of migrations: a database at any
// earlier version (PRAGMA user_version) is brought to kSchemaVersion in one
// transaction, keeping its rows.
#ifndef EVOTUNE_STORAGE_SCHEMA_H_
#define EVOTUNE_STORAGE_SCHEMA_H_

#include <string>

#include "absl/status/status.h"
#include "storage/sqlite.h"

namespace evotune {

// The schema version that MigrateSchema (and ResultStore::Open) reach.
inline constexpr int kSchemaVersion = 10;

// Migrates `db` to kSchemaVersion; a no-op at that version. A database of a
// newer version is refused with FAILED_PRECONDITION (`path` names it in the
// message); a failed migration is INTERNAL and leaves the database as it
// was.
absl::Status MigrateSchema(SqliteDb* db, const std::string& path);

}  // namespace evotune

#endif  // EVOTUNE_STORAGE_SCHEMA_H_
