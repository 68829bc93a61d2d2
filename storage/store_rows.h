// The row formats ResultStore's statements share: the columns a trial and a
// job are read from, and their decoding. Internal to storage/.
#ifndef EVOTUNE_STORAGE_STORE_ROWS_H_
#define EVOTUNE_STORAGE_STORE_ROWS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "storage/result_store.h"
#include "storage/sqlite.h"

namespace evotune::store_rows {

// A trial's columns, in the order ReadTrial reads them, each prefixed with
// `alias` (e.g. "t." in a join; empty for the trials table alone).
std::string TrialColumns(absl::string_view alias = "");

// Every job column (joined with its device), in the order ReadJob reads
// them; a statement appends its WHERE and ORDER BY.
inline constexpr char kJobSelect[] =
    "SELECT j.id, j.template_name, j.template_hash, j.problem_key, "
    "j.max_trials, j.max_seconds, j.strategy, j.seed, d.name, d.cc_major, "
    "d.cc_minor, d.driver_version, d.nvrtc_version, j.state, j.error, "
    "j.trials_done, j.elapsed_seconds, j.created_at, j.finished_at, "
    "j.strategy_options, j.background "
    "FROM jobs j JOIN devices d ON d.id = j.device_id ";

int64_t NowUnixSeconds();

// What names a device in keys kept in memory (its row id, cached answers).
std::string DeviceKey(const DeviceInfo& d);

// Reads TrialColumns() starting at column `first`. DATA_LOSS for a status the
// store does not know.
absl::StatusOr<StoredTrial> ReadTrial(Statement* s, int first = 0);

// Reads kJobSelect's columns. DATA_LOSS for a state or problem key the store
// does not know.
absl::StatusOr<JobRecord> ReadJob(Statement* s);

// The trial stored under the key (ids of its key rows and the config key);
// std::nullopt when there is none.
absl::StatusOr<std::optional<StoredTrial>> SelectTrial(
    SqliteDb* db, int64_t device_id, int64_t template_id, int64_t problem_id,
    const std::string& config_key);

// Steps `s` to its end, `read` (Statement* -> absl::StatusOr<T>) turning
// each row into an element.
template <typename T, typename Read>
absl::StatusOr<std::vector<T>> ReadRows(Statement* s, const Read& read) {
  std::vector<T> out;
  while (true) {
    absl::StatusOr<bool> more = s->Step();
    if (!more.ok()) return more.status();
    if (!*more) return out;
    absl::StatusOr<T> row = read(s);
    if (!row.ok()) return row.status();
    out.push_back(*std::move(row));
  }
}

}  // namespace evotune::store_rows

#endif  // EVOTUNE_STORAGE_STORE_ROWS_H_
