#include "tuner/jobs/cost_models.h"

#include <unistd.h>

#include <filesystem>

#include "gtest/gtest.h"
#include "tests/model/h100_testing.h"

namespace evotune {
namespace {

class CostModelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = std::filesystem::path(::testing::TempDir()) /
            ("cost_models_" + std::to_string(getpid()) + ".db");
    std::filesystem::remove(path_);
    store_ = *ResultStore::Open(path_.string());
    device_.name = "Test GPU";
    device_.limits = H100Limits();
  }
  void TearDown() override { std::filesystem::remove(path_); }

  // n OK trials of naive, on problems of growing key length.
  void Insert(int n, const std::string& hash) {
    const KernelTemplate& t = *TemplateRegistry::Builtin().Find("naive");
    for (int i = 0; i < n; ++i) {
      Problem p;
      p.seq_k = 64 + inserted_++;
      const std::vector<Config> configs = FeasibleConfigs(t, p, device_.limits);
      TrialResult r;
      r.median_us = r.min_us = r.p90_us = p.seq_k;
      ASSERT_TRUE(
          store_->InsertTrial({device_, t.name, hash, p}, configs[0], r).ok());
    }
  }

  std::filesystem::path path_;
  std::unique_ptr<ResultStore> store_;
  DeviceInfo device_;
  int inserted_ = 0;
};

TEST_F(CostModelsTest, TrainsOnceAskedAndEnoughTrialsThenOnGrowth) {
  const std::string hash = TemplateRegistry::Builtin().Find("naive")->hash;
  CostModelsOptions options;
  options.min_trials = 10;
  options.retrain_growth = 0.5;
  options.model.booster.rounds = 5;
  CostModels models(store_.get(), &TemplateRegistry::Builtin(), options);
  Insert(10, hash);
  ASSERT_TRUE(models.Refresh().ok());
  EXPECT_EQ(models.Get(device_), nullptr) << "not asked for before";
  ASSERT_TRUE(models.Refresh().ok());
  std::shared_ptr<const ModelSnapshot> first = models.Get(device_);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->model->trained_samples(), 10);
  // One config, measured on 10 problems of one head_dim and dtype: one
  // candidate.
  EXPECT_EQ(first->pool.size(), 1u);

  // Trials of an older template version, and too few new ones: no change.
  Insert(20, "an older hash");
  Insert(4, hash);
  ASSERT_TRUE(models.Refresh().ok());
  EXPECT_EQ(models.Get(device_), first);
  Insert(1, hash);  // 15 = 10 * (1 + 0.5).
  ASSERT_TRUE(models.Refresh().ok());
  std::shared_ptr<const ModelSnapshot> second = models.Get(device_);
  ASSERT_NE(second, first);
  EXPECT_EQ(second->model->trained_samples(), 15);
  EXPECT_GT(second->version, first->version);
  // A reader keeps its snapshot however often the model is replaced.
  EXPECT_EQ(first->model->trained_samples(), 10);
}

TEST_F(CostModelsTest, TooFewTrialsGiveNoModel) {
  CostModelsOptions options;
  options.min_trials = 10;
  CostModels models(store_.get(), &TemplateRegistry::Builtin(), options);
  Insert(9, TemplateRegistry::Builtin().Find("naive")->hash);
  models.Get(device_);
  ASSERT_TRUE(models.Refresh().ok());
  EXPECT_EQ(models.Get(device_), nullptr);
}

TEST_F(CostModelsTest, TheBackgroundThreadTrains) {
  CostModelsOptions options;
  options.min_trials = 5;
  options.model.booster.rounds = 5;
  options.poll = absl::Milliseconds(10);
  CostModels models(store_.get(), &TemplateRegistry::Builtin(), options);
  Insert(5, TemplateRegistry::Builtin().Find("naive")->hash);
  models.Get(device_);
  models.Start();
  for (int i = 0; i < 1000 && models.Get(device_) == nullptr; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_NE(models.Get(device_), nullptr);
}

}  // namespace
}  // namespace evotune
