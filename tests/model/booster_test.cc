#include "tuner/model/booster.h"

#include <cmath>
#include <cstdlib>

#include "gtest/gtest.h"

namespace evotune {
namespace {

// Rows (x, g) for x in 0..9 in each of `groups` groups g; labels by `label`.
BoosterData Grid(int groups, float (*label)(float x, float g)) {
  BoosterData data;
  data.cols = 2;
  for (int g = 0; g < groups; ++g) {
    for (int x = 0; x < 10; ++x) {
      data.values.insert(data.values.end(), {float(x), float(g)});
      data.labels.push_back(label(x, g));
    }
    data.groups.push_back(10);
  }
  return data;
}

// Higher x is better within a group, but the groups' levels differ by far
// more than x moves a label within one.
float Ranked(float x, float g) { return 0.1f * x + 100.0f * g; }

TEST(BoosterTest, RegressionFitsItsLabels) {
  BoosterData data = Grid(4, Ranked);
  data.groups.clear();
  BoosterOptions options;
  options.rounds = 300;
  options.learning_rate = 0.3;
  absl::StatusOr<std::unique_ptr<Booster>> booster =
      Booster::Train(data, options);
  ASSERT_TRUE(booster.ok()) << booster.status();
  EXPECT_EQ((*booster)->trees(), 300);
  absl::StatusOr<std::vector<float>> out = (*booster)->Predict(data.values);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), data.labels.size());
  for (size_t i = 0; i < out->size(); ++i) {
    EXPECT_NEAR((*out)[i], data.labels[i], 0.05) << "row " << i;
  }
  // The first tree alone is far from the labels.
  const std::vector<float> first = *(*booster)->Predict(data.values, 1);
  EXPECT_GT(std::abs(first[39] - data.labels[39]), 50);
  EXPECT_TRUE((*booster)->Predict({}).value().empty());
}

// A ranking objective learns the order within groups whatever their levels:
// on a group never trained, its scores rise with x.
TEST(BoosterTest, RankingLearnsTheOrderWithinGroups) {
  BoosterOptions options;
  options.objective = "rank:pairwise";
  options.rounds = 50;
  absl::StatusOr<std::unique_ptr<Booster>> booster =
      Booster::Train(Grid(4, Ranked), options);
  ASSERT_TRUE(booster.ok()) << booster.status();
  std::vector<float> unseen;
  for (int x = 0; x < 10; ++x) unseen.insert(unseen.end(), {float(x), 7.0f});
  absl::StatusOr<std::vector<float>> scores = (*booster)->Predict(unseen);
  ASSERT_TRUE(scores.ok()) << scores.status();
  ASSERT_EQ(scores->size(), 10u);
  for (size_t x = 1; x < 10; ++x) {
    EXPECT_GT((*scores)[x], (*scores)[x - 1]) << "x " << x;
  }
}

TEST(BoosterTest, DataThatDoesNotAddUpIsRefusedByName) {
  const BoosterOptions options;
  BoosterData data = Grid(2, Ranked);
  data.labels.pop_back();
  absl::Status s = Booster::Train(data, options).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_NE(s.message().find("19 labels for 20 rows"), std::string::npos) << s;

  data = Grid(2, Ranked);
  data.groups = {10, 9};
  s = Booster::Train(data, options).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_NE(s.message().find("groups of 19 rows for 20"), std::string::npos)
      << s;

  BoosterOptions no_rounds;
  no_rounds.rounds = 0;
  s = Booster::Train(Grid(2, Ranked), no_rounds).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_NE(s.message().find("rounds"), std::string::npos) << s;

  EXPECT_TRUE(
      absl::IsInvalidArgument(Booster::Train(BoosterData{}, options).status()));
}

TEST(BoosterTest, AnUnknownObjectiveIsXgboostsError) {
  BoosterOptions options;
  options.objective = "reg:nonsense";
  absl::Status s = Booster::Train(Grid(2, Ranked), options).status();
  EXPECT_TRUE(absl::IsInternal(s)) << s;
  EXPECT_NE(s.message().find("nonsense"), std::string::npos) << s;
}

}  // namespace
}  // namespace evotune
