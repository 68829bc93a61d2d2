#include "storage/schema.h"

#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/sqlite.h"

namespace evotune {
namespace {

class SchemaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ =
        (std::filesystem::path(::testing::TempDir()) /
         absl::StrCat(
             "schema_test_", getpid(), "_",
             ::testing::UnitTest::GetInstance()->current_test_info()->name(),
             ".db"))
            .string();
    std::filesystem::remove(path_);
    db_ = *SqliteDb::Open(path_);
  }
  void TearDown() override {
    db_.reset();
    std::filesystem::remove(path_);
  }
  int64_t Query(const std::string& sql) {
    Statement* s = *db_->Prepare(sql);
    EXPECT_TRUE(*s->Step());
    const int64_t v = s->Int(0);
    s->Reset();
    return v;
  }

  std::string path_;
  std::unique_ptr<SqliteDb> db_;
};

TEST_F(SchemaTest, AnEmptyDatabaseGetsEveryTable) {
  ASSERT_TRUE(MigrateSchema(db_.get(), path_).ok());
  EXPECT_EQ(Query("PRAGMA user_version"), kSchemaVersion);
  for (const char* table : {"devices", "templates", "problems", "trials",
                            "jobs", "job_trials", "tuned_problems"}) {
    EXPECT_EQ(Query(absl::StrCat("SELECT COUNT(*) FROM sqlite_master WHERE "
                                 "type = 'table' AND name = '",
                                 table, "'")),
              1)
        << table;
  }
  // The latest columns are there.
  EXPECT_EQ(Query("SELECT COUNT(*) FROM pragma_table_info('trials') WHERE "
                  "name IN ('cv', 'samples')"),
            2);
  EXPECT_EQ(Query("SELECT COUNT(*) FROM pragma_table_info('jobs') WHERE "
                  "name IN ('strategy_options', 'background')"),
            2);
  EXPECT_EQ(Query("SELECT COUNT(*) FROM pragma_table_info('devices') WHERE "
                  "name IN ('smem_per_block_bytes', 'max_threads_per_block', "
                  "'multiprocessors')"),
            3);
}

TEST_F(SchemaTest, MigratingAgainChangesNothing) {
  ASSERT_TRUE(MigrateSchema(db_.get(), path_).ok());
  ASSERT_TRUE(db_->Exec("INSERT INTO templates(name, source_hash) VALUES "
                        "('naive', 'abc')")
                  .ok());
  ASSERT_TRUE(MigrateSchema(db_.get(), path_).ok());
  EXPECT_EQ(Query("SELECT COUNT(*) FROM templates"), 1);
  EXPECT_EQ(Query("PRAGMA user_version"), kSchemaVersion);
}

TEST_F(SchemaTest, ANewerDatabaseIsRefusedUntouched) {
  ASSERT_TRUE(
      db_->Exec(absl::StrCat("PRAGMA user_version = ", kSchemaVersion + 1))
          .ok());
  absl::Status s = MigrateSchema(db_.get(), path_);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(s.message(), ::testing::HasSubstr(path_));
  EXPECT_EQ(Query("SELECT COUNT(*) FROM sqlite_master"), 0);
}

TEST_F(SchemaTest, AFailedMigrationLeavesTheDatabaseAsItWas) {
  // A table in the way of the first migration.
  ASSERT_TRUE(db_->Exec("CREATE TABLE jobs(x INTEGER)").ok());
  absl::Status s = MigrateSchema(db_.get(), path_);
  EXPECT_TRUE(absl::IsInternal(s)) << s;
  EXPECT_THAT(s.message(), ::testing::HasSubstr("migrating schema 0 -> 1"));
  EXPECT_EQ(Query("PRAGMA user_version"), 0);
  EXPECT_EQ(Query("SELECT COUNT(*) FROM sqlite_master WHERE name = 'devices'"),
            0);
}

}  // namespace
}  // namespace evotune
