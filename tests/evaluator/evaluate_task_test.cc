#include "tuner/evaluator/evaluate_task.h"

#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace evotune {
namespace {

// Answers by the config's BLOCK_M: 0 is incorrect, others take that many µs;
// records what it was asked.
class FakeEvaluator : public Evaluator {
 public:
  const DeviceInfo& device() const override { return device_; }
  absl::StatusOr<TrialResult> Evaluate(const KernelTemplate& t,
                                       const Config& config,
                                       const Problem& problem) override {
    calls_.push_back("full");
    return Answer(config, kFullTimingSamples);
  }
  absl::StatusOr<TrialResult> QuickEvaluate(const KernelTemplate& t,
                                            const Config& config,
                                            const Problem& problem) override {
    calls_.push_back("quick");
    return Answer(config, kQuickTimingSamples);
  }
  absl::StatusOr<std::vector<TrialResult>> TimeInTurns(
      const KernelTemplate& t, const std::vector<Config>& configs,
      const Problem& problem, int turns) override {
    if (broken_) return absl::InternalError("context lost");
    calls_.push_back("turns " + std::to_string(configs.size()) + "x" +
                     std::to_string(turns));
    std::vector<TrialResult> out;
    for (const Config& c : configs) out.push_back(Answer(c, turns));
    return out;
  }

  std::vector<std::string> calls_;
  bool broken_ = false;

 private:
  static TrialResult Answer(const Config& c, int samples) {
    TrialResult r;
    const int64_t m = c.at("BLOCK_M");
    if (m == 0) {
      r.status = TrialStatus::kIncorrect;
      r.error = "max abs error 1.0";
      return r;
    }
    r.median_us = r.min_us = r.p90_us = static_cast<double>(m);
    r.samples = samples;
    return r;
  }
  DeviceInfo device_;
};

TrialTask Task(int64_t block_m) {
  TrialTask task;
  task.config = {{"BLOCK_M", block_m}};
  return task;
}

TEST(EvaluateTaskTest, OneConfigIsTimedFullyOrQuickly) {
  FakeEvaluator e;
  KernelTemplate t;
  TrialTask task = Task(64);
  absl::StatusOr<TrialResult> full = EvaluateTask(e, t, task);
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(full->samples, kFullTimingSamples);
  task.quick = true;
  absl::StatusOr<TrialResult> quick = EvaluateTask(e, t, task);
  ASSERT_TRUE(quick.ok()) << quick.status();
  EXPECT_EQ(quick->samples, kQuickTimingSamples);
  EXPECT_EQ(e.calls_, (std::vector<std::string>{"full", "quick"}));
  EXPECT_EQ(full->timed_against, 0);
  EXPECT_TRUE(full->rival_results.empty());
}

TEST(EvaluateTaskTest, RivalsAreTimedInTurnsWithTheConfig) {
  FakeEvaluator e;
  KernelTemplate t;
  TrialTask task = Task(64);
  task.rivals = {{{"BLOCK_M", 32}}, {{"BLOCK_M", 0}}, {{"BLOCK_M", 128}}};
  task.turns = 30;
  absl::StatusOr<TrialResult> r = EvaluateTask(e, t, task);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(e.calls_, (std::vector<std::string>{"turns 4x30"}));
  EXPECT_EQ(r->median_us, 64);
  EXPECT_EQ(r->samples, 30);
  ASSERT_EQ(r->rival_results.size(), 3u);
  EXPECT_EQ(r->rival_results[0].median_us, 32);
  EXPECT_EQ(r->rival_results[1].status, TrialStatus::kIncorrect);
  EXPECT_EQ(r->rival_results[2].median_us, 128);
  // Three configs passed the gates and were timed: each against two others.
  EXPECT_EQ(r->timed_against, 2);
  EXPECT_EQ(r->rival_results[0].timed_against, 2);
  EXPECT_EQ(r->rival_results[1].timed_against, 0);
  EXPECT_EQ(r->rival_results[2].timed_against, 2);
}

TEST(EvaluateTaskTest, AnEvaluatorThatCannotWorkFailsTheTask) {
  FakeEvaluator e;
  e.broken_ = true;
  KernelTemplate t;
  TrialTask task = Task(64);
  task.rivals = {{{"BLOCK_M", 32}}};
  EXPECT_FALSE(EvaluateTask(e, t, task).ok());
}

}  // namespace
}  // namespace evotune
