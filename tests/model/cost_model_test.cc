#include "tuner/model/cost_model.h"

#include "gtest/gtest.h"

namespace evotune {
namespace {

TEST(CostModelTest, LearnsWhichConfigIsFasterOnAnUnseenProblem) {
  const KernelTemplate& t = *TemplateRegistry::Builtin().Find("decode_fwd");
  DeviceLimits limits;
  limits.smem_per_block_bytes = 227 * 1024;
  limits.compute_capability = 90;
  limits.multiprocessors = 132;
  auto problem = [](int64_t seq_k) {
    Problem p;
    p.heads = 32;
    p.kv_heads = 8;
    p.seq_k = seq_k;
    p.head_dim = 128;
    return p;
  };
  // A made-up law: time grows with the keys and falls with more warps.
  auto law = [](const Config& c, const Problem& p) {
    return p.seq_k / 100.0 / c.at("WARPS") + c.at("STAGES");
  };
  std::vector<CostSample> train;
  for (int64_t seq_k : {1024, 2048, 8192, 16384}) {
    for (const Config& c : FeasibleConfigs(t, problem(seq_k), limits)) {
      train.push_back({&t, c, problem(seq_k), law(c, problem(seq_k))});
    }
  }
  auto features = std::make_shared<FeatureMap>(TemplateRegistry::Builtin());
  absl::StatusOr<std::unique_ptr<CostModel>> model =
      CostModel::Train(features, train, limits);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->trained_samples(), static_cast<int64_t>(train.size()));

  std::vector<CostSample> asked;
  for (const Config& c : FeasibleConfigs(t, problem(4096), limits)) {
    asked.push_back({&t, c, problem(4096)});
  }
  absl::StatusOr<std::vector<double>> us = (*model)->PredictUs(asked);
  ASSERT_TRUE(us.ok()) << us.status();
  ASSERT_EQ(us->size(), asked.size());
  // Trees do not interpolate between the trained lengths: within a factor
  // of 2 of the law; but the order holds: the predicted fastest is truly
  // among the fastest.
  size_t best = 0;
  double true_best = 1e30;
  for (size_t i = 0; i < asked.size(); ++i) {
    const double truth = law(asked[i].config, asked[i].problem);
    EXPECT_GT((*us)[i], truth / 2) << ConfigKey(asked[i].config);
    EXPECT_LT((*us)[i], truth * 2) << ConfigKey(asked[i].config);
    if ((*us)[i] < (*us)[best]) best = i;
    true_best = std::min(true_best, truth);
  }
  EXPECT_LE(law(asked[best].config, asked[best].problem), 1.05 * true_best);

  // The predictor a search screens with says the same, in order.
  std::vector<Config> configs;
  for (const CostSample& a : asked) configs.push_back(a.config);
  const std::function<std::vector<double>(const std::vector<Config>&)> predict =
      ConfigPredictor(*std::move(model), &t, problem(4096));
  EXPECT_EQ(predict(configs), *us);
  EXPECT_TRUE(predict({}).empty());
}

TEST(CostModelTest, NoSamplesIsAnError) {
  auto features = std::make_shared<FeatureMap>(TemplateRegistry::Builtin());
  EXPECT_TRUE(absl::IsInvalidArgument(
      CostModel::Train(features, {}, DeviceLimits{}).status()));
}

}  // namespace
}  // namespace evotune
