#include "storage/result_store.h"

#include <sqlite3.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <set>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/storage/test_scope.h"

namespace evotune {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class ResultStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("store_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "evotune.db").string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<ResultStore> OpenStore() {
    absl::StatusOr<std::unique_ptr<ResultStore>> store =
        ResultStore::Open(path_);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }

  // Runs SQL on a raw connection of our own.
  void RawExec(const std::string& sql) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
    char* err = nullptr;
    EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK)
        << (err ? err : "");
    sqlite3_free(err);
    sqlite3_close(db);
  }

  static TrialScope Scope(int64_t seq = 512) { return TestScope(seq); }

  static TrialResult Ok(double us) {
    TrialResult r;
    r.median_us = us;
    r.min_us = us * 0.9;
    r.p90_us = us * 1.1;
    r.cv = 0.02;
    return r;
  }

  std::filesystem::path dir_;
  std::string path_;
};

TEST_F(ResultStoreTest, MigratesAnEmptyDatabase) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(*store->SchemaVersion(), kSchemaVersion);
  EXPECT_EQ(*store->CountTrials(), 0);
  store.reset();
  // Opening again is a no-op.
  store = OpenStore();
  EXPECT_EQ(*store->SchemaVersion(), kSchemaVersion);
}

TEST_F(ResultStoreTest, MigratesVersionOneKeepingItsRows) {
  // The schema as version 1 of evotune wrote it, with one trial.
  RawExec(R"sql(
CREATE TABLE devices(id INTEGER PRIMARY KEY, name TEXT NOT NULL,
  cc_major INTEGER NOT NULL, cc_minor INTEGER NOT NULL,
  driver_version TEXT NOT NULL, nvrtc_version TEXT NOT NULL,
  UNIQUE(name, cc_major, cc_minor, driver_version, nvrtc_version));
CREATE TABLE templates(id INTEGER PRIMARY KEY, name TEXT NOT NULL,
  source_hash TEXT NOT NULL, UNIQUE(name, source_hash));
CREATE TABLE problems(id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE,
  batch INTEGER NOT NULL, heads INTEGER NOT NULL, kv_heads INTEGER NOT NULL,
  seq_q INTEGER NOT NULL, seq_k INTEGER NOT NULL, head_dim INTEGER NOT NULL,
  causal INTEGER NOT NULL, dtype TEXT NOT NULL, layout TEXT NOT NULL);
CREATE TABLE trials(id INTEGER PRIMARY KEY, device_id INTEGER NOT NULL,
  template_id INTEGER NOT NULL, problem_id INTEGER NOT NULL,
  config_key TEXT NOT NULL, status INTEGER NOT NULL, median_us REAL NOT NULL,
  min_us REAL NOT NULL, p90_us REAL NOT NULL, error TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  UNIQUE(device_id, template_id, problem_id, config_key));
CREATE TABLE jobs(id TEXT PRIMARY KEY, template_name TEXT NOT NULL,
  template_hash TEXT NOT NULL, problem_key TEXT NOT NULL,
  max_trials INTEGER NOT NULL, max_seconds REAL NOT NULL,
  strategy TEXT NOT NULL, seed INTEGER NOT NULL, device_id INTEGER NOT NULL,
  state INTEGER NOT NULL, error TEXT NOT NULL, trials_done INTEGER NOT NULL,
  elapsed_seconds REAL NOT NULL, created_at INTEGER NOT NULL,
  finished_at INTEGER NOT NULL);
CREATE TABLE job_trials(job_id TEXT NOT NULL, seq INTEGER NOT NULL,
  trial_id INTEGER NOT NULL, cached INTEGER NOT NULL,
  PRIMARY KEY(job_id, seq)) WITHOUT ROWID;
INSERT INTO devices VALUES(1, 'Test GPU', 9, 0, '1.0', '13.0');
INSERT INTO templates VALUES(1, 'naive', 'abc');
INSERT INTO problems VALUES(1, 'b1_h8_kv8_q512_k512_d64_full_fp16_bhsd',
  1, 8, 8, 512, 512, 64, 0, 'fp16', 'bhsd');
INSERT INTO trials VALUES(1, 1, 1, 1, 'A=1', 1, 5.0, 4.5, 5.5, '', 0);
INSERT INTO jobs VALUES('j1', 'naive', 'abc',
  'b1_h8_kv8_q512_k512_d64_full_fp16_bhsd', 10, 60, 'evolutionary', 1, 1, 3,
  '', 1, 1.0, 0, 0);
PRAGMA user_version = 1;
)sql");
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(*store->SchemaVersion(), kSchemaVersion);
  auto top =
      store->TopK(Scope().device, Scope().problem, {{"naive", "abc"}}, 5);
  ASSERT_TRUE(top.ok()) << top.status();
  ASSERT_EQ(top->size(), 1u);
  EXPECT_EQ(ConfigKey((*top)[0].trial.config), "A=1");
  EXPECT_DOUBLE_EQ((*top)[0].trial.result.median_us, 5.0);
  EXPECT_DOUBLE_EQ((*top)[0].trial.result.cv, 0.0);  // New column, default.
  // A job from before strategy options ran with the defaults: none stored.
  absl::StatusOr<JobRecord> job = store->GetJob("j1");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->strategy, "evolutionary");
  EXPECT_EQ(job->strategy_options, "");
  EXPECT_FALSE(job->background);
  // The tuned-problem index was backfilled from the old trials.
  Problem other = Scope().problem;
  other.seq_q = 600;
  auto nearest =
      store->NearestTunedProblem(Scope().device, other, {{"naive", "abc"}});
  ASSERT_TRUE(nearest.ok()) << nearest.status();
  ASSERT_TRUE(nearest->has_value());
  EXPECT_EQ((*nearest)->seq_q, 512);
}

TEST_F(ResultStoreTest, RefusesANewerSchema) {
  RawExec("CREATE TABLE x(a); PRAGMA user_version = 99;");
  auto store = ResultStore::Open(path_);
  EXPECT_TRUE(absl::IsFailedPrecondition(store.status()));
  EXPECT_THAT(std::string(store.status().message()), HasSubstr("99"));
}

TEST_F(ResultStoreTest, InsertIsIdempotentOnTheTrialKey) {
  auto store = OpenStore();
  auto first = store->InsertTrial(Scope(), {{"A", 1}}, Ok(5));
  ASSERT_TRUE(first.ok());
  // Same key, different result: the stored row wins and nothing duplicates.
  auto second = store->InsertTrial(Scope(), {{"A", 1}}, Ok(1));
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->trial_id, first->trial_id);
  EXPECT_DOUBLE_EQ(second->result.median_us, 5);
  EXPECT_EQ(*store->CountTrials(), 1);
  // Any field of the key makes a new trial.
  TrialScope other = Scope();
  other.device.driver_version = "2.0";
  ASSERT_TRUE(store->InsertTrial(other, {{"A", 1}}, Ok(5)).ok());
  other = Scope();
  other.template_hash = "def";
  ASSERT_TRUE(store->InsertTrial(other, {{"A", 1}}, Ok(5)).ok());
  ASSERT_TRUE(store->InsertTrial(Scope(1024), {{"A", 1}}, Ok(5)).ok());
  ASSERT_TRUE(store->InsertTrial(Scope(), {{"A", 2}}, Ok(5)).ok());
  EXPECT_EQ(*store->CountTrials(), 5);
  auto found = store->FindTrial(Scope(), {{"A", 2}});
  ASSERT_TRUE(found.ok());
  EXPECT_TRUE(found->has_value());
  EXPECT_FALSE(store->FindTrial(Scope(), {{"A", 3}})->has_value());
}

int OpenFiles() {
  int n = 0;
  for ([[maybe_unused]] const auto& e :
       std::filesystem::directory_iterator("/proc/self/fd")) {
    ++n;
  }
  return n;
}

// However many threads query at once, at most kMaxReaders connections are
// open (each holds file descriptors; a daemon under load ran out of them).
TEST_F(ResultStoreTest, ConcurrentQueriesShareABoundedPoolOfReaders) {
  auto store = OpenStore();
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(store->InsertTrial(Scope(), {{"A", i}}, Ok(5 + i)).ok());
  }
  const int before = OpenFiles();
  std::atomic<bool> done{false};
  std::atomic<int> most{0}, failed{0};
  std::thread sampler([&] {
    while (!done) {
      most = std::max(most.load(), OpenFiles() - before);
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> queries;
  for (int t = 0; t < 4 * ResultStore::kMaxReaders; ++t) {
    queries.emplace_back([&] {
      for (int i = 0; i < 20; ++i) {
        absl::StatusOr<std::vector<StoredTrial>> all =
            store->ListTrials(Scope());
        if (!all.ok() || all->size() != 200) ++failed;
      }
    });
  }
  for (std::thread& t : queries) t.join();
  done = true;
  sampler.join();
  EXPECT_EQ(failed.load(), 0);
  // A WAL connection holds the database and its log (the index is mapped).
  EXPECT_LE(most.load(), 2 * ResultStore::kMaxReaders + 8);
  EXPECT_GT(most.load(), 0);
}

TEST_F(ResultStoreTest, TopKOrdersByMedianAndSkipsFailuresAndOldVersions) {
  auto store = OpenStore();
  std::vector<std::pair<Config, TrialResult>> trials;
  for (int i = 0; i < 20; ++i) {
    trials.push_back({{{"A", i}}, Ok(100.0 - i * 3 + (i % 2) * 7)});
  }
  TrialResult bad;
  bad.status = TrialStatus::kIncorrect;
  trials.push_back({{{"A", 99}}, bad});  // Median 0, must never rank.
  ASSERT_TRUE(store->BulkInsertTrials(Scope(), trials).ok());
  TrialScope old = Scope();
  old.template_hash = "old";
  ASSERT_TRUE(store->InsertTrial(old, {{"A", 1000}}, Ok(0.5)).ok());

  auto top =
      store->TopK(Scope().device, Scope().problem, {{"naive", "abc"}}, 5);
  ASSERT_TRUE(top.ok()) << top.status();
  ASSERT_EQ(top->size(), 5u);
  for (size_t i = 1; i < top->size(); ++i) {
    EXPECT_LE((*top)[i - 1].trial.result.median_us,
              (*top)[i].trial.result.median_us);
  }
  std::vector<double> all;
  for (auto& [c, r] : trials) {
    if (r.status == TrialStatus::kOk) all.push_back(r.median_us);
  }
  std::sort(all.begin(), all.end());
  EXPECT_DOUBLE_EQ((*top)[0].trial.result.median_us, all[0]);
  EXPECT_DOUBLE_EQ((*top)[4].trial.result.median_us, all[4]);
  EXPECT_EQ((*top)[0].template_hash, "abc");
}

TEST_F(ResultStoreTest, TopKIsOneIndexedLookupWithoutTemporaryBTree) {
  auto store = OpenStore();
  ASSERT_TRUE(store->InsertTrial(Scope(), {{"A", 1}}, Ok(5)).ok());
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  // The plan's detail lines, one a line; empty where the statement fails.
  auto plan_of = [db](const std::string& sql) {
    sqlite3_stmt* stmt = nullptr;
    std::string plan;
    const std::string explain = "EXPLAIN QUERY PLAN " + sql;
    if (sqlite3_prepare_v2(db, explain.c_str(), -1, &stmt, nullptr) !=
        SQLITE_OK) {
      ADD_FAILURE() << sqlite3_errmsg(db);
      return plan;
    }
    while (sqlite3_step(stmt) == SQLITE_ROW) {
      plan += reinterpret_cast<const char*>(sqlite3_column_text(stmt, 3));
      plan += "\n";
    }
    sqlite3_finalize(stmt);
    return plan;
  };
  for (int n : {1, 3}) {
    const std::string plan = plan_of(TopKSql(n));
    EXPECT_THAT(plan, HasSubstr("USING INDEX trials_best")) << plan;
    EXPECT_THAT(plan, Not(HasSubstr("TEMP B-TREE"))) << plan;
    EXPECT_THAT(plan, Not(HasSubstr("SCAN trials\n"))) << plan;
    const std::string confirmed = plan_of(ConfirmedSql(n));
    EXPECT_THAT(confirmed, HasSubstr("USING INDEX trials_confirmed"))
        << confirmed;
    EXPECT_THAT(confirmed, Not(HasSubstr("SCAN trials\n"))) << confirmed;
  }
  sqlite3_close(db);
}

TEST_F(ResultStoreTest, NearestTunedProblemMatchesShapeClass) {
  auto store = OpenStore();
  ASSERT_TRUE(store->InsertTrial(Scope(1024), {{"A", 1}}, Ok(5)).ok());
  ASSERT_TRUE(store->InsertTrial(Scope(8192), {{"A", 1}}, Ok(5)).ok());
  TrialScope causal = Scope(600);
  causal.problem.causal = true;
  ASSERT_TRUE(store->InsertTrial(causal, {{"A", 1}}, Ok(5)).ok());
  auto nearest = store->NearestTunedProblem(Scope().device, Scope(600).problem,
                                            {{"naive", "abc"}});
  ASSERT_TRUE(nearest.ok());
  ASSERT_TRUE(nearest->has_value());
  EXPECT_EQ((*nearest)->seq_q, 1024);  // Not the causal one, though closer.
  EXPECT_FALSE((*nearest)->causal);
}

// A device's limits are kept on its row once recorded, so that a daemon
// without the GPU serves it with them; before, they are unknown (compute
// capability 0), and a device the store has no row of gets none.
TEST_F(ResultStoreTest, RecordedDeviceLimitsComeBackWithTheDevice) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  TrialScope scope = Scope();
  scope.device.limits.smem_per_block_bytes = 227 * 1024;
  scope.device.limits.multiprocessors = 132;
  ASSERT_TRUE(store->RecordDeviceLimits(scope.device).ok());
  EXPECT_TRUE(absl::IsNotFound(store->FindDevice("Test GPU").status()));
  ASSERT_TRUE(store->InsertTrial(scope, {{"A", 1}}, Ok(10)).ok());
  absl::StatusOr<DeviceInfo> found = store->FindDevice("Test GPU");
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->limits.compute_capability, 0);
  EXPECT_EQ(found->limits.multiprocessors, 0);

  ASSERT_TRUE(store->RecordDeviceLimits(scope.device).ok());
  found = store->FindDevice("Test GPU");
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_TRUE(found->SameKey(scope.device));
  EXPECT_EQ(found->limits.smem_per_block_bytes, 227 * 1024);
  EXPECT_EQ(found->limits.max_threads_per_block, 1024);
  EXPECT_EQ(found->limits.multiprocessors, 132);
  EXPECT_EQ(found->limits.compute_capability, 90);
  // And after a restart.
  store = OpenStore();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->FindDevice("Test GPU")->limits.multiprocessors, 132);
}

// The tuned problems are read once for every problem asked: an untuned query
// answered by the nearest rule reads no SQL.
TEST_F(ResultStoreTest, NearestTunedProblemIsKeptUntilAProblemIsNewlyTuned) {
  auto store = OpenStore();
  auto nearest = [&](int64_t seq = 600) {
    auto n = store->NearestTunedProblem(Scope().device, Scope(seq).problem,
                                        {{"naive", "abc"}});
    EXPECT_TRUE(n.ok()) << n.status();
    return n.ok() && n->has_value() ? (*n)->seq_q : int64_t{-1};
  };
  EXPECT_EQ(nearest(), -1);
  ASSERT_TRUE(store->InsertTrial(Scope(8192), {{"A", 1}}, Ok(5)).ok());
  EXPECT_EQ(nearest(), 8192);
  ASSERT_TRUE(store->InsertTrial(Scope(4096), {{"A", 1}}, Ok(5)).ok());
  EXPECT_EQ(nearest(), 4096);
  // Kept: rows removed behind the store's back do not change it, for this
  // problem or any other...
  RawExec(
      "DELETE FROM tuned_problems WHERE problem_id IN "
      "(SELECT id FROM problems WHERE seq_q = 4096)");
  EXPECT_EQ(nearest(), 4096);
  EXPECT_EQ(nearest(700), 4096);
  // ...nor does a failed trial, nor more OK trials of a tuned problem (a
  // job's), by any of the store's ways of writing them...
  TrialResult failed;
  failed.status = TrialStatus::kIncorrect;
  ASSERT_TRUE(store->InsertTrial(Scope(512), {{"A", 1}}, failed).ok());
  EXPECT_EQ(nearest(), 4096);
  ASSERT_TRUE(store->InsertTrial(Scope(8192), {{"A", 2}}, Ok(4)).ok());
  ASSERT_TRUE(store->BulkInsertTrials(Scope(8192), {{{{"A", 3}}, Ok(3)}}).ok());
  ASSERT_TRUE(
      store->RecordTimedInTurns({{Scope(8192), {{"A", 3}}, Ok(3)}}).ok());
  EXPECT_EQ(nearest(), 4096);
  // ...the first OK trial of a problem on the device does.
  ASSERT_TRUE(store->InsertTrial(Scope(1024), {{"A", 1}}, Ok(5)).ok());
  EXPECT_EQ(nearest(), 1024);
  RawExec(
      "DELETE FROM tuned_problems WHERE problem_id IN "
      "(SELECT id FROM problems WHERE seq_q = 1024)");
  ASSERT_TRUE(store->BulkInsertTrials(Scope(2048), {{{{"A", 1}}, Ok(5)}}).ok());
  EXPECT_EQ(nearest(), 2048);
}

TEST_F(ResultStoreTest, LoadTunedProblemsKeepsWhatTheNearestRuleSearches) {
  auto store = OpenStore();
  ASSERT_TRUE(store->InsertTrial(Scope(4096), {{"A", 1}}, Ok(5)).ok());
  TrialScope other = Scope(1024);
  other.template_name = "other";
  other.template_hash = "x";
  ASSERT_TRUE(store->InsertTrial(other, {{"A", 1}}, Ok(5)).ok());
  ASSERT_TRUE(
      store->LoadTunedProblems(Scope().device, {{"naive", "abc"}}).ok());
  RawExec("DELETE FROM tuned_problems");
  auto nearest = [&](std::vector<std::pair<std::string, std::string>> t) {
    auto n = store->NearestTunedProblem(Scope().device, Scope(600).problem, t);
    EXPECT_TRUE(n.ok()) << n.status();
    return n.ok() && n->has_value() ? (*n)->seq_q : int64_t{-1};
  };
  EXPECT_EQ(nearest({{"naive", "abc"}}), 4096);
  // Each template version's problems are kept apart: a query over several
  // shares the loaded one's, and reads the others (here, none left).
  EXPECT_EQ(nearest({{"other", "x"}, {"naive", "abc"}}), 4096);
  EXPECT_EQ(nearest({{"other", "x"}}), -1);
}

// Whether a device has tuned problems of some templates: only OK trials of
// those template versions on that device count.
TEST_F(ResultStoreTest, TopKIsKeptUntilTheStoreWritesATrial) {
  auto store = OpenStore();
  const DeviceInfo device = Scope().device;
  auto best = [&] {
    auto top = store->TopK(device, Scope().problem, {{"naive", "abc"}}, 1);
    EXPECT_TRUE(top.ok()) << top.status();
    return top.ok() && !top->empty() ? (*top)[0].trial.result.median_us : -1.0;
  };
  EXPECT_EQ(best(), -1.0);  // Nothing yet, and that answer is kept too.
  ASSERT_TRUE(store->InsertTrial(Scope(), {{"A", 1}}, Ok(50)).ok());
  EXPECT_EQ(best(), 50);
  // Kept: rows removed behind the store's back do not change the answer...
  RawExec("DELETE FROM trials");
  EXPECT_EQ(best(), 50);
  // ...until the store writes trials, by any of its three ways.
  ASSERT_TRUE(store->InsertTrial(Scope(), {{"A", 2}}, Ok(40)).ok());
  EXPECT_EQ(best(), 40);
  ASSERT_TRUE(store->BulkInsertTrials(Scope(), {{{{"A", 3}}, Ok(30)}}).ok());
  EXPECT_EQ(best(), 30);
  JobRecord job;
  job.job_id = "j1";
  job.template_name = "naive";
  job.template_hash = "abc";
  job.problem = Scope().problem;
  job.max_trials = 10;
  job.max_seconds = 60;
  job.strategy = "random";
  job.device = device;
  ASSERT_TRUE(store->CreateJob(job).ok());
  ASSERT_TRUE(store->AppendJobTrial(job, {{"A", 4}}, Ok(20), false, 1).ok());
  EXPECT_EQ(best(), 20);
  // Only writes of the problem on the device make its answers stale.
  RawExec("DELETE FROM job_trials; DELETE FROM trials");
  ASSERT_TRUE(store->InsertTrial(Scope(1024), {{"A", 6}}, Ok(5)).ok());
  EXPECT_EQ(best(), 20);
  ASSERT_TRUE(store->InsertTrial(Scope(), {{"A", 7}}, Ok(60)).ok());
  EXPECT_EQ(best(), 60);
  // A failed write changes nothing and answers stay right.
  EXPECT_FALSE(
      store->AppendJobTrial(JobRecord{}, {{"A", 5}}, Ok(1), false, 1).ok());
  EXPECT_EQ(best(), 60);
}

// Configs timed again together in turns: their results replace the stored
// ones (latencies; a failure's status and error), the best follow them at
// once, and a config without a trial gets one.
TEST_F(ResultStoreTest, ResultsTimedInTurnsReplaceTheStoredOnes) {
  auto store = OpenStore();
  ASSERT_TRUE(store
                  ->BulkInsertTrials(Scope(), {{{{"A", 1}}, Ok(10)},
                                               {{{"A", 2}}, Ok(11)},
                                               {{{"A", 3}}, Ok(12)}})
                  .ok());
  auto best = [&] {
    auto top =
        store->TopK(Scope().device, Scope().problem, {{"naive", "abc"}}, 5);
    std::vector<std::string> keys;
    for (const RankedTrial& t : *top) keys.push_back(ConfigKey(t.trial.config));
    return keys;
  };
  EXPECT_EQ(best(), (std::vector<std::string>{"A=1", "A=2", "A=3"}));
  auto in_turns = [](double us) {
    TrialResult r = Ok(us);
    r.samples = 30;
    r.timed_against = 3;
    return r;
  };
  TrialResult wrong;
  wrong.status = TrialStatus::kIncorrect;
  wrong.error = "max abs error 0.5";
  ASSERT_TRUE(store
                  ->RecordTimedInTurns({{Scope(), {{"A", 1}}, in_turns(10.4)},
                                        {Scope(), {{"A", 2}}, wrong},
                                        {Scope(), {{"A", 3}}, in_turns(10.2)},
                                        {Scope(), {{"A", 4}}, in_turns(10.3)}})
                  .ok());
  EXPECT_EQ(best(), (std::vector<std::string>{"A=3", "A=4", "A=1"}));
  const StoredTrial first = **store->FindTrial(Scope(), {{"A", 1}});
  EXPECT_EQ(first.result.median_us, 10.4);
  EXPECT_EQ(first.result.samples, 30);
  EXPECT_EQ(first.result.timed_against, 3);
  const StoredTrial second = **store->FindTrial(Scope(), {{"A", 2}});
  EXPECT_EQ(second.result.status, TrialStatus::kIncorrect);
  EXPECT_EQ(second.result.error, "max abs error 0.5");
  EXPECT_EQ(second.result.median_us, 0);
  EXPECT_EQ(*store->CountTrials(), 4);
  // Reopened, the same.
  store.reset();
  store = OpenStore();
  EXPECT_EQ(best(), (std::vector<std::string>{"A=3", "A=4", "A=1"}));
}

// Configs of two templates timed together: each result is stored under its
// own template, and the problem's ranking across templates follows them.
TEST_F(ResultStoreTest, ResultsTimedInTurnsAcrossTemplatesKeepTheirTemplates) {
  auto store = OpenStore();
  TrialScope flash = Scope();
  flash.template_name = "flash";
  flash.template_hash = "f1";
  ASSERT_TRUE(store->InsertTrial(Scope(), {{"A", 1}}, Ok(10)).ok());
  ASSERT_TRUE(store->InsertTrial(flash, {{"B", 1}}, Ok(9)).ok());
  const std::vector<std::pair<std::string, std::string>> both = {
      {"naive", "abc"}, {"flash", "f1"}};
  auto first = [&] {
    auto top = store->TopK(Scope().device, Scope().problem, both, 2);
    return (*top)[0].template_name;
  };
  EXPECT_EQ(first(), "flash");
  TrialResult naive_r = Ok(9.5), flash_r = Ok(9.8);
  naive_r.timed_against = flash_r.timed_against = 1;
  ASSERT_TRUE(store
                  ->RecordTimedInTurns({{Scope(), {{"A", 1}}, naive_r},
                                        {flash, {{"B", 1}}, flash_r}})
                  .ok());
  EXPECT_EQ(first(), "naive");
  EXPECT_EQ((**store->FindTrial(Scope(), {{"A", 1}})).result.median_us, 9.5);
  EXPECT_EQ((**store->FindTrial(flash, {{"B", 1}})).result.median_us, 9.8);
  EXPECT_EQ((**store->FindTrial(flash, {{"B", 1}})).result.timed_against, 1);
  EXPECT_FALSE(store->FindTrial(flash, {{"A", 1}})->has_value());
  EXPECT_EQ(*store->CountTrials(), 2);
}

// The configs a confirmation passed over (stored by then, timed alone) rank
// after the confirmed ones of their template, however fast their own time;
// a config stored later, and another template's, rank by their times.
TEST_F(ResultStoreTest, ConfigsPassedOverForConfirmedOnesRankAfterThem) {
  auto store = OpenStore();
  TrialScope flash = Scope();
  flash.template_name = "flash";
  flash.template_hash = "f1";
  ASSERT_TRUE(store
                  ->BulkInsertTrials(Scope(), {{{{"A", 1}}, Ok(100)},
                                               {{{"A", 2}}, Ok(101)},
                                               {{{"A", 3}}, Ok(102)},
                                               {{{"A", 4}}, Ok(120)}})
                  .ok());
  auto best = [&](int k) {
    auto top = store->TopK(Scope().device, Scope().problem,
                           {{"naive", "abc"}, {"flash", "f1"}}, k);
    EXPECT_TRUE(top.ok()) << top.status();
    std::vector<std::string> keys;
    for (const RankedTrial& t : *top) keys.push_back(ConfigKey(t.trial.config));
    return keys;
  };
  TrialResult a1 = Ok(110), a2 = Ok(108);
  a1.timed_against = a2.timed_against = 1;
  ASSERT_TRUE(store
                  ->RecordTimedInTurns(
                      {{Scope(), {{"A", 1}}, a1}, {Scope(), {{"A", 2}}, a2}})
                  .ok());
  // A=3 (102, passed over) after A=1 (110); A=4 (120) by its time.
  EXPECT_EQ(best(1), (std::vector<std::string>{"A=2"}));
  EXPECT_EQ(best(5), (std::vector<std::string>{"A=2", "A=1", "A=3", "A=4"}));
  ASSERT_TRUE(store->InsertTrial(Scope(), {{"A", 5}}, Ok(105)).ok());
  ASSERT_TRUE(store->InsertTrial(flash, {{"B", 1}}, Ok(104)).ok());
  EXPECT_EQ(best(3), (std::vector<std::string>{"B=1", "A=5", "A=2"}));
  EXPECT_EQ(best(10), (std::vector<std::string>{"B=1", "A=5", "A=2", "A=1",
                                                "A=3", "A=4"}));
  // Reopened, the same.
  store.reset();
  store = OpenStore();
  EXPECT_EQ(best(10), (std::vector<std::string>{"B=1", "A=5", "A=2", "A=1",
                                                "A=3", "A=4"}));
}

TEST_F(ResultStoreTest, KeyRowsOfARolledBackWriteAreForgotten) {
  auto store = OpenStore();
  JobRecord job;  // Never created: appending to it fails after the trial's
  job.job_id = "missing";  // device, template and problem rows were made.
  job.template_name = "naive";
  job.template_hash = "abc";
  job.problem = Scope(2048).problem;
  job.device = Scope(2048).device;
  EXPECT_TRUE(absl::IsNotFound(
      store->AppendJobTrial(job, {{"A", 1}}, Ok(9), false, 0).status()));
  auto top = store->TopK(job.device, job.problem, {{"naive", "abc"}}, 1);
  ASSERT_TRUE(top.ok()) << top.status();
  EXPECT_TRUE(top->empty());
  // The rows were rolled back: a later write creates them again.
  ASSERT_TRUE(store->InsertTrial(Scope(2048), {{"A", 1}}, Ok(9)).ok());
  top = store->TopK(job.device, job.problem, {{"naive", "abc"}}, 1);
  ASSERT_TRUE(top.ok()) << top.status();
  ASSERT_EQ(top->size(), 1u);
  // And a store opened later knows every row without asking.
  store.reset();
  store = OpenStore();
  top = store->TopK(job.device, job.problem, {{"naive", "abc"}}, 1);
  ASSERT_TRUE(top.ok()) << top.status();
  EXPECT_EQ(top->size(), 1u);
  EXPECT_TRUE(*store->HasTunedProblem(job.device, {{"naive", "abc"}}));
}

TEST_F(ResultStoreTest, HasTunedProblemCountsOkTrialsOfTheTemplates) {
  auto store = OpenStore();
  const DeviceInfo device = Scope().device;
  EXPECT_FALSE(*store->HasTunedProblem(device, {{"naive", "abc"}}));
  TrialResult failed;
  failed.status = TrialStatus::kIncorrect;
  ASSERT_TRUE(store->InsertTrial(Scope(1024), {{"A", 1}}, failed).ok());
  EXPECT_FALSE(*store->HasTunedProblem(device, {{"naive", "abc"}}));
  ASSERT_TRUE(store->InsertTrial(Scope(1024), {{"A", 2}}, Ok(5)).ok());
  EXPECT_TRUE(*store->HasTunedProblem(device, {{"naive", "abc"}}));
  EXPECT_TRUE(
      *store->HasTunedProblem(device, {{"other", "x"}, {"naive", "abc"}}));
  EXPECT_FALSE(*store->HasTunedProblem(device, {{"naive", "older"}}));
  EXPECT_FALSE(*store->HasTunedProblem(device, {}));
  DeviceInfo other = device;
  other.name = "another GPU";
  EXPECT_FALSE(*store->HasTunedProblem(other, {{"naive", "abc"}}));
}

// Rejections for resources are fixed by the config, head_dim and dtype
// compiled in: any problem of the same head_dim and dtype reveals them,
// other head_dims, dtypes, template versions and devices do not, and other
// failures are no rejections.
TEST_F(ResultStoreTest,
       RejectedConfigsComeFromProblemsOfTheSameHeadDimAndDtype) {
  auto store = OpenStore();
  TrialResult rejected;
  rejected.status = TrialStatus::kResourceRejected;
  TrialResult incorrect;
  incorrect.status = TrialStatus::kIncorrect;
  const TrialScope asked = Scope(100);
  EXPECT_TRUE(
      store->RejectedConfigs(asked.device, "naive", "abc", asked.problem)
          ->empty())
      << "nothing stored";
  ASSERT_TRUE(store->InsertTrial(Scope(1024), {{"A", 1}}, rejected).ok());
  ASSERT_TRUE(store->InsertTrial(Scope(2048), {{"A", 2}}, rejected).ok());
  ASSERT_TRUE(store->InsertTrial(Scope(2048), {{"A", 3}}, incorrect).ok());
  ASSERT_TRUE(store->InsertTrial(Scope(2048), {{"A", 4}}, Ok(5)).ok());
  TrialScope d128 = Scope(1024);
  d128.problem.head_dim = 128;
  ASSERT_TRUE(store->InsertTrial(d128, {{"A", 5}}, rejected).ok());
  TrialScope bf16 = Scope(1024);
  bf16.problem.dtype = DType::kBf16;
  ASSERT_TRUE(store->InsertTrial(bf16, {{"A", 6}}, rejected).ok());
  TrialScope older = Scope(1024);
  older.template_hash = "older";
  ASSERT_TRUE(store->InsertTrial(older, {{"A", 7}}, rejected).ok());
  TrialScope elsewhere = Scope(1024);
  elsewhere.device.name = "another GPU";
  ASSERT_TRUE(store->InsertTrial(elsewhere, {{"A", 8}}, rejected).ok());

  absl::StatusOr<std::set<std::string>> got =
      store->RejectedConfigs(asked.device, "naive", "abc", asked.problem);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, (std::set<std::string>{ConfigKey({{"A", 1}}),
                                         ConfigKey({{"A", 2}})}));
  EXPECT_EQ(*store->RejectedConfigs(asked.device, "naive", "abc", d128.problem),
            std::set<std::string>{ConfigKey({{"A", 5}})});
  EXPECT_TRUE(
      store->RejectedConfigs(asked.device, "other", "abc", asked.problem)
          ->empty());
}

TEST_F(ResultStoreTest, JobEventsAreSequencedAndAtomic) {
  auto store = OpenStore();
  JobRecord job;
  job.job_id = "j1";
  job.template_name = "naive";
  job.template_hash = "abc";
  job.problem = Scope().problem;
  job.max_trials = 10;
  job.max_seconds = 60;
  job.strategy = "random";
  job.strategy_options = "patience=3,population=16";
  job.background = true;
  job.device = Scope().device;
  ASSERT_TRUE(store->CreateJob(job).ok());
  EXPECT_TRUE(absl::IsAlreadyExists(store->CreateJob(job)));
  for (int i = 0; i < 3; ++i) {
    auto e = store->AppendJobTrial(job, {{"A", i}}, Ok(10 - i), false, i);
    ASSERT_TRUE(e.ok()) << e.status();
    EXPECT_EQ(e->sequence, i + 1);
  }
  auto events = store->ListJobEvents("j1", 1, 100);
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 2u);
  EXPECT_EQ((*events)[0].sequence, 2);
  auto got = store->GetJob("j1");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->trials_done, 3);
  EXPECT_DOUBLE_EQ(got->elapsed_seconds, 2);
  EXPECT_EQ(got->problem, job.problem);
  EXPECT_EQ(got->strategy_options, "patience=3,population=16");
  EXPECT_TRUE(got->background);
  EXPECT_DOUBLE_EQ((*store->JobBest("j1"))->result.median_us, 8);
  ASSERT_TRUE(store->SetJobState("j1", JobState::kSucceeded, "").ok());
  EXPECT_GT(store->GetJob("j1")->finished_unix_s, 0);
  EXPECT_EQ((*store->ListJobs(JobState::kSucceeded)).size(), 1u);
  EXPECT_EQ((*store->ListJobs(JobState::kQueued)).size(), 0u);
  EXPECT_TRUE(absl::IsNotFound(store->GetJob("nope").status()));
}

TEST_F(ResultStoreTest, ReadersNeverWaitForAnOpenWriteTransaction) {
  auto store = OpenStore();
  ASSERT_TRUE(store->InsertTrial(Scope(), {{"A", 1}}, Ok(5)).ok());
  // Another connection holds the write lock with uncommitted changes.
  sqlite3* writer = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &writer), SQLITE_OK);
  ASSERT_EQ(
      sqlite3_exec(writer, "BEGIN IMMEDIATE; UPDATE trials SET median_us = 1;",
                   nullptr, nullptr, nullptr),
      SQLITE_OK);
  const absl::Time start = absl::Now();
  auto top =
      store->TopK(Scope().device, Scope().problem, {{"naive", "abc"}}, 1);
  ASSERT_TRUE(top.ok()) << top.status();
  // The reader sees the last committed state, not the pending update, and
  // did not sit out the 5 s busy timeout.
  EXPECT_DOUBLE_EQ((*top)[0].trial.result.median_us, 5);
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  sqlite3_exec(writer, "ROLLBACK", nullptr, nullptr, nullptr);
  sqlite3_close(writer);
}

TEST_F(ResultStoreTest, WriterProceedsWhileReadersRead) {
  auto store = OpenStore();
  std::vector<std::pair<Config, TrialResult>> trials;
  for (int i = 0; i < 200; ++i) trials.push_back({{{"A", i}}, Ok(i + 1)});
  ASSERT_TRUE(store->BulkInsertTrials(Scope(), trials).ok());
  std::atomic<bool> stop{false};
  std::atomic<int> reads{0}, read_errors{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t) {
    readers.emplace_back([&] {
      while (!stop) {
        auto top =
            store->TopK(Scope().device, Scope().problem, {{"naive", "abc"}}, 3);
        if (!top.ok() || top->empty() ||
            (*top)[0].trial.result.median_us != 1) {
          ++read_errors;
        }
        ++reads;
      }
    });
  }
  for (int i = 200; i < 300; ++i) {
    ASSERT_TRUE(store->InsertTrial(Scope(), {{"A", i}}, Ok(i + 1)).ok());
  }
  stop = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(read_errors, 0);
  EXPECT_GT(reads, 0);
  EXPECT_EQ(*store->CountTrials(), 300);
}

}  // namespace
}  // namespace evotune
