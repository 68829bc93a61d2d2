#include "tuner/model/cost_model.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <thread>

#include "gtest/gtest.h"
#include "tests/model/h100_testing.h"

namespace evotune {
namespace {

const KernelTemplate& Decode() {
  return *TemplateRegistry::Builtin().Find("decode_fwd");
}

Problem DecodeProblem(int64_t seq_k) {
  Problem p;
  p.heads = 32;
  p.kv_heads = 8;
  p.seq_k = seq_k;
  p.head_dim = 128;
  return p;
}

// A made-up law: time grows with the keys and falls with more warps.
double Law(const Config& c, const Problem& p) {
  return p.seq_k / 100.0 / c.at("WARPS") + c.at("STAGES");
}

// A model of Law trained on four key lengths.
std::unique_ptr<CostModel> TrainOnLaw(const CostModelOptions& options) {
  std::vector<CostSample> train;
  for (int64_t seq_k : {1024, 2048, 8192, 16384}) {
    const Problem p = DecodeProblem(seq_k);
    for (const Config& c : FeasibleConfigs(Decode(), p, H100Limits())) {
      train.push_back({&Decode(), c, p, Law(c, p)});
    }
  }
  auto features = std::make_shared<FeatureMap>(TemplateRegistry::Builtin());
  absl::StatusOr<std::unique_ptr<CostModel>> model =
      CostModel::Train(features, train, H100Limits(), options);
  EXPECT_TRUE(model.ok()) << model.status();
  if (model.ok()) {
    EXPECT_EQ((*model)->trained_samples(), static_cast<int64_t>(train.size()));
  }
  return model.ok() ? *std::move(model) : nullptr;
}

// Every feasible config on the 4096-key problem, never trained on.
std::vector<CostSample> Unseen() {
  std::vector<CostSample> asked;
  for (const Config& c :
       FeasibleConfigs(Decode(), DecodeProblem(4096), H100Limits())) {
    asked.push_back({&Decode(), c, DecodeProblem(4096)});
  }
  return asked;
}

TEST(CostModelTest, LearnsWhichConfigIsFasterOnAnUnseenProblem) {
  const KernelTemplate& t = Decode();
  std::unique_ptr<CostModel> model = TrainOnLaw({});
  ASSERT_NE(model, nullptr);
  const std::vector<CostSample> asked = Unseen();
  absl::StatusOr<std::vector<double>> us = model->PredictUs(asked);
  ASSERT_TRUE(us.ok()) << us.status();
  ASSERT_EQ(us->size(), asked.size());
  // Trees do not interpolate between the trained lengths: within a factor
  // of 2 of the law; but the order holds: the predicted fastest is truly
  // among the fastest.
  size_t best = 0;
  double true_best = 1e30;
  for (size_t i = 0; i < asked.size(); ++i) {
    const double truth = Law(asked[i].config, asked[i].problem);
    EXPECT_GT((*us)[i], truth / 2) << ConfigKey(asked[i].config);
    EXPECT_LT((*us)[i], truth * 2) << ConfigKey(asked[i].config);
    if ((*us)[i] < (*us)[best]) best = i;
    true_best = std::min(true_best, truth);
  }
  EXPECT_LE(Law(asked[best].config, asked[best].problem), 1.05 * true_best);

  // The predictor a search screens with gives the screen's estimates, in
  // order.
  std::vector<Config> configs;
  for (const CostSample& a : asked) configs.push_back(a.config);
  const std::shared_ptr<const CostModel> shared = std::move(model);
  const std::function<std::vector<double>(const std::vector<Config>&)> predict =
      ConfigPredictor(shared, &t, DecodeProblem(4096));
  const std::vector<double> screened = predict(configs);
  EXPECT_EQ(screened, *shared->ScreenUs(asked));
  EXPECT_NE(screened, *us) << "the order model corrects the latencies";
  EXPECT_TRUE(predict({}).empty());
}

// Trees cannot extrapolate, but latency relative to the busiest
// multiprocessor's work carries over: on four times the longest trained
// keys, the predictions follow the law (a tree fitted to the latencies
// themselves would predict at most those of 16384 keys, a quarter).
TEST(CostModelTest, ExtrapolatesToMoreKeysThanTrained) {
  std::unique_ptr<CostModel> model = TrainOnLaw({});
  ASSERT_NE(model, nullptr);
  const Problem longer = DecodeProblem(65536);
  std::vector<CostSample> asked;
  for (const Config& c : FeasibleConfigs(Decode(), longer, H100Limits())) {
    asked.push_back({&Decode(), c, longer});
  }
  absl::StatusOr<std::vector<double>> us = model->PredictUs(asked);
  ASSERT_TRUE(us.ok()) << us.status();
  for (size_t i = 0; i < asked.size(); ++i) {
    const double truth = Law(asked[i].config, longer);
    EXPECT_GT((*us)[i], truth / 1.5) << ConfigKey(asked[i].config);
    EXPECT_LT((*us)[i], truth * 1.5) << ConfigKey(asked[i].config);
  }
}

// Copies of the model predict at once from many threads, each exactly as
// the trained one.
TEST(CostModelTest, ThreadsPredictAtOnceAndAlike) {
  CostModelOptions options;
  options.booster.predictors = 4;
  std::unique_ptr<CostModel> model = TrainOnLaw(options);
  ASSERT_NE(model, nullptr);
  const std::vector<CostSample> asked = Unseen();
  const std::vector<double> expected = *model->PredictUs(asked);
  std::atomic<int> differ{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 12; ++i) {
    threads.emplace_back([&] {
      for (int j = 0; j < 40; ++j) {
        absl::StatusOr<std::vector<double>> us = model->PredictUs(asked);
        if (!us.ok() || *us != expected) ++differ;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(differ.load(), 0);
}

// The first trees alone give a coarser estimate; asking for more trees than
// the model has gives the whole model's.
TEST(CostModelTest, PredictsWithTheFirstTreesOnly) {
  CostModelOptions options;
  options.booster.rounds = 40;
  std::unique_ptr<CostModel> model = TrainOnLaw(options);
  ASSERT_NE(model, nullptr);
  const std::vector<CostSample> asked = Unseen();
  const std::vector<double> all = *model->PredictUs(asked);
  EXPECT_EQ(*model->PredictUs(asked, 40), all);
  EXPECT_EQ(*model->PredictUs(asked, 1000), all);
  const std::vector<double> coarse = *model->PredictUs(asked, 5);
  ASSERT_EQ(coarse.size(), all.size());
  EXPECT_NE(coarse, all);
}

// The screen's estimates are the latency model's, each scaled by the order
// model's standardised score: over the candidates the scaling averages out
// (in logs), and with a large weight the order model alone decides, and it
// has learnt the law's order: its fastest is truly among the fastest.
TEST(CostModelTest, TheScreenCorrectsLatenciesByTheOrderModel) {
  const std::vector<CostSample> asked = Unseen();
  for (double weight : {0.1, 10.0}) {
    CostModelOptions options;
    options.order_weight = weight;
    std::unique_ptr<CostModel> model = TrainOnLaw(options);
    ASSERT_NE(model, nullptr);
    const std::vector<double> us = *model->PredictUs(asked);
    const std::vector<double> screened = *model->ScreenUs(asked);
    ASSERT_EQ(screened.size(), us.size());
    double log_ratios = 0, true_best = 1e30;
    size_t best = 0;
    for (size_t i = 0; i < us.size(); ++i) {
      log_ratios += std::log(screened[i] / us[i]);
      if (screened[i] < screened[best]) best = i;
      true_best = std::min(true_best, Law(asked[i].config, asked[i].problem));
    }
    EXPECT_NEAR(log_ratios, 0, 1e-6 * us.size()) << weight;
    EXPECT_LE(Law(asked[best].config, asked[best].problem), 1.05 * true_best)
        << weight;
    // One candidate has nothing to be ranked against.
    EXPECT_EQ(*model->ScreenUs({asked[best]}),
              *model->PredictUs({asked[best]}));
  }
}

// Without the order model (or with no weight) the screen is the latency
// model.
TEST(CostModelTest, WithoutTheOrderModelTheScreenIsTheLatencyModel) {
  const std::vector<CostSample> asked = Unseen();
  CostModelOptions options;
  options.order_model = false;
  std::unique_ptr<CostModel> model = TrainOnLaw(options);
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(*model->ScreenUs(asked), *model->PredictUs(asked));
  options = {};
  options.order_weight = 0;
  model = TrainOnLaw(options);
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(*model->ScreenUs(asked), *model->PredictUs(asked));
}

TEST(CostModelTest, NoSamplesIsAnError) {
  auto features = std::make_shared<FeatureMap>(TemplateRegistry::Builtin());
  EXPECT_TRUE(absl::IsInvalidArgument(
      CostModel::Train(features, {}, DeviceLimits{}).status()));
}

}  // namespace
}  // namespace evotune
