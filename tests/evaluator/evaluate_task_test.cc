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
      const std::vector<TemplateConfig>& configs, const Problem& problem,
      int turns) override {
    if (broken_) return absl::InternalError("context lost");
    std::string call = "turns " + std::to_string(turns) + ":";
    std::vector<TrialResult> out;
    for (const TemplateConfig& c : configs) {
      call += " " + c.t->name;
      out.push_back(Answer(c.config, turns));
    }
    calls_.push_back(call);
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

KernelTemplate Template(const std::string& name) {
  KernelTemplate t;
  t.name = name;
  t.hash = name + "-hash";
  return t;
}

TemplateRegistry Templates() {
  return TemplateRegistry({Template("a"), Template("b")});
}

TrialTask Task(int64_t block_m) {
  TrialTask task;
  task.template_name = "a";
  task.template_hash = "a-hash";
  task.config = {{"BLOCK_M", block_m}};
  return task;
}

Contender Rival(const std::string& name, int64_t block_m) {
  return {name, name + "-hash", {{"BLOCK_M", block_m}}};
}

TEST(EvaluateTaskTest, OneConfigIsTimedFullyOrQuickly) {
  FakeEvaluator e;
  const TemplateRegistry t = Templates();
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
  const TemplateRegistry t = Templates();
  TrialTask task = Task(64);
  task.rivals = {Rival("a", 32), Rival("a", 0), Rival("b", 128)};
  task.turns = 30;
  absl::StatusOr<TrialResult> r = EvaluateTask(e, t, task);
  ASSERT_TRUE(r.ok()) << r.status();
  // Each rival with its own template.
  EXPECT_EQ(e.calls_, (std::vector<std::string>{"turns 30: a a a b"}));
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
  const TemplateRegistry t = Templates();
  TrialTask task = Task(64);
  task.rivals = {Rival("a", 32)};
  EXPECT_FALSE(EvaluateTask(e, t, task).ok());
}

TEST(EvaluateTaskTest, ATemplateVersionNotBuiltInFailsTheTaskUnrun) {
  FakeEvaluator e;
  const TemplateRegistry t = Templates();
  TrialTask task = Task(64);
  task.template_hash = "old";
  absl::Status s = EvaluateTask(e, t, task).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_EQ(s.message(), "template a version old is not in this build");
  task = Task(64);
  task.rivals = {Rival("a", 32), {"c", "c-hash", {{"BLOCK_M", 16}}}};
  task.turns = 5;
  s = EvaluateTask(e, t, task).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_EQ(s.message(), "template c version c-hash is not in this build");
  EXPECT_TRUE(e.calls_.empty());
}

}  // namespace
}  // namespace evotune
