// BestAnswers on a real store (a temporary SQLite file) and a stand-in
// runner, without gRPC: the problem's own trials first, then the nearest
// tuned problem's that run on it, then the defaults of the templates that
// suit it best; bad queries name the field; tune on miss starts one search
// per problem however often it is asked.
#include "tuner/serving/best_answers.h"

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/jobs/fake_runner.h"

namespace evotune {
namespace {

using ::testing::StartsWith;

Problem Seed() {
  return *ParseProblemKey("b1_h8_kv8_q512_k512_d64_full_fp16_bhsd");
}

class BestAnswersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (std::filesystem::path(::testing::TempDir()) /
             absl::StrCat("best_answers_", getpid(), ".db"))
                .string();
    std::filesystem::remove(path_);
    store_ = *ResultStore::Open(path_);
    jobs_ = std::make_unique<JobManager>(store_.get(), &registry(), &runner_);
    device_ = *jobs_->Device("");
  }
  void TearDown() override {
    jobs_.reset();
    store_.reset();
    std::filesystem::remove(path_);
  }

  static const TemplateRegistry& registry() {
    return TemplateRegistry::Builtin();
  }

  // A BestAnswers whose tune-on-miss searches are recorded (and fail when
  // submit_fails).
  BestAnswers Answers(bool tune_on_miss) {
    return BestAnswers(
        store_.get(), &registry(), jobs_.get(),
        [this](const std::string& t, const Problem& p,
               const std::string&) -> absl::StatusOr<std::string> {
          submitted_.push_back(absl::StrCat(t, " ", ProblemKey(p)));
          if (submit_fails_) return absl::FailedPreconditionError("no GPU");
          return absl::StrCat("job", submitted_.size());
        },
        tune_on_miss, /*models=*/nullptr, ModelRanking{});
  }

  // naive's first default config measured at `us` for `p` on the device.
  void Store(const Problem& p, double us) {
    const KernelTemplate& naive = *registry().Find("naive");
    TrialResult r;
    r.median_us = r.min_us = r.p90_us = us;
    ASSERT_TRUE(store_
                    ->InsertTrial({device_, naive.name, naive.hash, p},
                                  naive.defaults.front(), r)
                    .ok());
  }

  std::string path_;
  FakeRunner runner_;
  std::unique_ptr<ResultStore> store_;
  std::unique_ptr<JobManager> jobs_;
  DeviceInfo device_;
  std::vector<std::string> submitted_;
  bool submit_fails_ = false;
};

TEST_F(BestAnswersTest, BadQueriesNameTheField) {
  BestAnswers answers = Answers(false);
  BestQuery q;
  q.problem = Seed();
  q.k = 0;
  EXPECT_THAT(std::string(answers.Query(q).status().message()),
              StartsWith("k: "));
  q.k = 1;
  q.template_name = "nope";
  EXPECT_THAT(std::string(answers.Query(q).status().message()),
              StartsWith("template_name: unknown template \"nope\""));
  q.template_name = "";
  q.problem.kv_heads = 3;
  EXPECT_THAT(std::string(answers.Query(q).status().message()),
              StartsWith("problem.kv_heads"));
}

TEST_F(BestAnswersTest, AProblemsOwnTrialsComeFirstFastestFirst) {
  Store(Seed(), 40);
  BestAnswers answers = Answers(true);
  BestQuery q;
  q.problem = Seed();
  q.template_name = "naive";
  absl::StatusOr<BestAnswer> a = answers.Query(q);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->results.size(), 1u);
  EXPECT_EQ(a->results[0].trial.result.median_us, 40);
  EXPECT_FALSE(a->transferred);
  EXPECT_FALSE(a->defaults);
  EXPECT_TRUE(a->tuning_job_id.empty());
  EXPECT_TRUE(submitted_.empty());  // Not a miss.
}

TEST_F(BestAnswersTest, AnUntunedShapeGetsTheNearestTunedProblemsConfigs) {
  Store(Seed(), 40);
  BestAnswers answers = Answers(false);
  BestQuery q;
  q.problem = Seed();
  q.problem.seq_q = q.problem.seq_k = 1000;
  q.template_name = "naive";
  absl::StatusOr<BestAnswer> a = answers.Query(q);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(a->transferred);
  EXPECT_FALSE(a->predicted);  // No cost model.
  EXPECT_EQ(a->source_problem, Seed());
  ASSERT_EQ(a->results.size(), 1u);
  EXPECT_EQ(a->results[0].template_name, "naive");
}

// Another head_dim's configs transfer only at the same width (computed
// as the same multiple of 64): head_dim 32 takes head_dim 64's, 192 gets
// the defaults fitted to it.
TEST_F(BestAnswersTest, ConfigsTransferOnlyWithinAHeadDimsWidth) {
  Store(Seed(), 40);  // head_dim 64.
  BestAnswers answers = Answers(false);
  BestQuery q;
  q.problem = Seed();
  q.problem.head_dim = 32;
  q.template_name = "naive";
  absl::StatusOr<BestAnswer> a = answers.Query(q);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(a->transferred);
  EXPECT_EQ(a->source_problem, Seed());
  q.problem.head_dim = 192;
  a = answers.Query(q);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_FALSE(a->transferred);
  EXPECT_TRUE(a->defaults);
}

TEST_F(BestAnswersTest, NothingTunedGetsTheDefaultsOfTheBestSuitedTemplate) {
  BestAnswers answers = Answers(false);
  BestQuery q;
  q.problem = *ParseProblemKey("b8_h32_kv8_q1_k8192_d128_full_bf16_bhsd");
  absl::StatusOr<BestAnswer> a = answers.Query(q);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(a->defaults);
  ASSERT_FALSE(a->results.empty());
  EXPECT_EQ(a->results[0].template_name, "decode_fwd");
}

TEST_F(BestAnswersTest, AMissStartsOneSearchPerProblemHoweverOftenAsked) {
  BestAnswers answers = Answers(true);
  BestQuery q;
  q.problem = Seed();
  q.template_name = "naive";
  absl::StatusOr<BestAnswer> first = answers.Query(q);
  absl::StatusOr<BestAnswer> again = answers.Query(q);
  ASSERT_TRUE(first.ok() && again.ok());
  EXPECT_EQ(first->tuning_job_id, "job1");
  EXPECT_EQ(again->tuning_job_id, "job1");
  q.problem.causal = true;
  EXPECT_EQ(answers.Query(q)->tuning_job_id, "job2");
  q.problem.seq_q = 77;
  q.tune_on_miss = false;  // Asked not to.
  EXPECT_EQ(answers.Query(q)->tuning_job_id, "");
  EXPECT_EQ(submitted_.size(), 2u);
  EXPECT_EQ(submitted_[0], "naive b1_h8_kv8_q512_k512_d64_full_fp16_bhsd");
}

TEST_F(BestAnswersTest, AProblemThatCannotBeTunedHereIsNotTriedAgain) {
  submit_fails_ = true;
  BestAnswers answers = Answers(true);
  BestQuery q;
  q.problem = Seed();
  q.template_name = "naive";
  EXPECT_EQ(answers.Query(q)->tuning_job_id, "");
  EXPECT_EQ(answers.Query(q)->tuning_job_id, "");
  EXPECT_EQ(submitted_.size(), 1u);
}

}  // namespace
}  // namespace evotune
