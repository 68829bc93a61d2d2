// The store's durability promise under power loss: through PowerCutVfs,
// power is cut at hundreds of random points of a workload of trial and job
// writes; after each cut the database must pass PRAGMA integrity_check, every
// write the store acknowledged (returned OK for) must be there with its
// values, and the job must be consistent and resumable.
#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "storage/result_store.h"
#include "tests/storage/power_cut_vfs.h"
#include "tests/storage/test_scope.h"

namespace evotune {
namespace {

constexpr int kWrites = 24;

TrialScope Scope() { return TestScope(); }

JobRecord Job() {
  JobRecord job;
  job.job_id = "j1";
  job.template_name = "naive";
  job.template_hash = "abc";
  job.problem = Scope().problem;
  job.max_trials = kWrites;
  job.strategy = "random";
  job.device = Scope().device;
  job.state = JobState::kRunning;
  return job;
}

Config ConfigOf(int i) { return {{"KV_TILE", 16 + i}, {"WARPS", i % 4 + 1}}; }

TrialResult ResultOf(int i) {
  TrialResult r;
  r.median_us = 100.0 + i;
  r.min_us = 90.0 + i;
  r.p90_us = 110.0 + i;
  r.samples = 15;
  return r;
}

// What the store said OK to.
struct Acknowledged {
  bool job = false;
  std::vector<int> appended;  // Job trials.
  std::vector<int> inserted;  // Trials outside the job.
};

// Opens the store, creates the job and writes trials, alternately into the
// job and outside it, until a write fails.
Acknowledged RunWorkload(const std::string& path) {
  Acknowledged acked;
  absl::StatusOr<std::unique_ptr<ResultStore>> store = ResultStore::Open(path);
  if (!store.ok()) return acked;
  acked.job = (*store)->CreateJob(Job()).ok();
  if (!acked.job) return acked;
  for (int i = 0; i < kWrites; ++i) {
    const bool ok =
        i % 2 == 0
            ? (*store)
                  ->AppendJobTrial(Job(), ConfigOf(i), ResultOf(i), false, i)
                  .ok()
            : (*store)->InsertTrial(Scope(), ConfigOf(i), ResultOf(i)).ok();
    if (!ok) break;
    (i % 2 == 0 ? acked.appended : acked.inserted).push_back(i);
  }
  return acked;
}

std::string IntegrityCheck(const std::string& path) {
  sqlite3* db = nullptr;
  std::string result = "cannot open";
  if (sqlite3_open(path.c_str(), &db) == SQLITE_OK) {
    sqlite3_stmt* st = nullptr;
    sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, nullptr);
    result = sqlite3_step(st) == SQLITE_ROW
                 ? reinterpret_cast<const char*>(sqlite3_column_text(st, 0))
                 : sqlite3_errmsg(db);
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
  return result;
}

// After the cut: everything acknowledged is there, the job is consistent.
void CheckAfterCut(const std::string& path, const Acknowledged& acked,
                   const std::string& what) {
  EXPECT_EQ(IntegrityCheck(path), "ok") << what;
  absl::StatusOr<std::unique_ptr<ResultStore>> store = ResultStore::Open(path);
  ASSERT_TRUE(store.ok()) << what << ": " << store.status();
  for (int i : acked.inserted) {
    absl::StatusOr<std::optional<StoredTrial>> t =
        (*store)->FindTrial(Scope(), ConfigOf(i));
    ASSERT_TRUE(t.ok() && t->has_value()) << what << ": trial " << i;
    EXPECT_EQ((*t)->result.median_us, ResultOf(i).median_us) << what;
    EXPECT_EQ((*t)->result.p90_us, ResultOf(i).p90_us) << what;
  }
  if (!acked.job) return;
  absl::StatusOr<JobRecord> job = (*store)->GetJob("j1");
  ASSERT_TRUE(job.ok()) << what << ": " << job.status();
  EXPECT_FALSE(IsFinal(job->state)) << what;  // Resumed at the next start.
  absl::StatusOr<std::vector<JobEvent>> events =
      (*store)->ListJobEvents("j1", 0, 1000);
  ASSERT_TRUE(events.ok()) << what;
  // Events are numbered 1..n without gaps, n is the job's count, and every
  // acknowledged append is among them (one more may have landed
  // unacknowledged).
  EXPECT_EQ(static_cast<int64_t>(events->size()), job->trials_done) << what;
  EXPECT_GE(events->size(), acked.appended.size()) << what;
  for (size_t e = 0; e < events->size(); ++e) {
    EXPECT_EQ((*events)[e].sequence, static_cast<int64_t>(e + 1)) << what;
  }
  for (size_t a = 0; a < acked.appended.size() && a < events->size(); ++a) {
    EXPECT_EQ((*events)[a].trial.config, ConfigOf(acked.appended[a])) << what;
    EXPECT_EQ((*events)[a].trial.result.median_us,
              ResultOf(acked.appended[a]).median_us)
        << what;
  }
}

TEST(PowerCutTest, AcknowledgedWritesSurviveAPowerCutAtAnyPoint) {
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) /
      ("power_cut_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  PowerCutVfs vfs;

  // A run without a cut counts the workload's writes, truncates and syncs.
  vfs.Arm(0);
  const Acknowledged all = RunWorkload((dir / "full.db").string());
  ASSERT_EQ(all.appended.size() + all.inserted.size(), size_t{kWrites});
  const int64_t operations = vfs.operations();
  ASSERT_GT(operations, kWrites);

  std::mt19937 gen(20261123);
  std::uniform_int_distribution<int64_t> point(1, operations);
  constexpr int kCuts = 300;
  int cut = 0;
  for (int i = 0; i < kCuts; ++i) {
    const std::string path =
        (dir / ("cut" + std::to_string(i) + ".db")).string();
    const int64_t at = point(gen);
    vfs.Arm(at);
    const Acknowledged acked = RunWorkload(path);
    cut += vfs.cut();
    vfs.Arm(0);  // Power is back.
    CheckAfterCut(path, acked, "cut at operation " + std::to_string(at));
    if (HasFatalFailure()) break;
  }
  EXPECT_EQ(cut, kCuts);  // Every cut point fell inside the workload.
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace evotune
