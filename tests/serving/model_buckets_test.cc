#include "tuner/serving/model_buckets.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace evotune {
namespace {

using ::testing::HasSubstr;

// Llama 3 8B's attention on an envelope of 4 decode buckets.
ModelTuneRequest Llama3() {
  ModelTuneRequest r;
  r.heads = 32;
  r.kv_heads = 8;
  r.head_dim = 128;
  r.envelope.max_batch = 1;
  r.envelope.max_context = 256;
  r.envelope.prefill_chunk = 0;
  r.envelope.max_prefill_tokens = 1;
  r.envelope.decode_queries = {1};
  return r;
}

JobRecord Job(const std::string& id, const Problem& p, JobState state) {
  JobRecord job;
  job.job_id = id;
  job.problem = p;
  job.state = state;
  return job;
}

// A resumed run: a bucket searched before is done, one being searched is
// followed, one whose search failed or was cancelled (or never ran) is to
// be searched; jobs of other problems do not matter.
TEST(ModelBucketsTest, ARunResumesWhereTheLastOneStopped) {
  const std::vector<ModelBucket> fresh = PlanModelBuckets(Llama3(), {});
  // Decode on 32 .. 256 keys, and prompts of one token (32 at most).
  ASSERT_EQ(fresh.size(), 4u + 1u);
  std::vector<Problem> p;
  for (const ModelBucket& b : fresh) p.push_back(b.problem);
  EXPECT_EQ(ProblemKey(p[0]), "b1_h32_kv8_q1_k32_d128_full_bf16_bhsd");
  const std::vector<JobRecord> jobs = {
      Job("a", p[0], JobState::kCancelled),
      Job("b", p[0], JobState::kSucceeded),
      Job("c", p[0], JobState::kRunning),
      Job("d", p[1], JobState::kQueued),
      Job("e", p[2], JobState::kFailed),
  };
  const std::vector<ModelBucket> plan = PlanModelBuckets(Llama3(), jobs);
  EXPECT_EQ(plan[0].job_id, "b");
  EXPECT_EQ(plan[0].state, JobState::kSucceeded);
  EXPECT_EQ(plan[1].job_id, "d");
  EXPECT_EQ(plan[1].state, JobState::kQueued);
  EXPECT_FALSE(plan[2].state.has_value());
  EXPECT_FALSE(plan[3].state.has_value());
  for (const ModelBucket& b : plan) EXPECT_FALSE(b.submitted);
}

// A model of two kinds of layers: each kind's buckets in turn, apart (a
// job of one kind's bucket does not decide the other's).
TEST(ModelBucketsTest, EachKindOfLayersHasItsBuckets) {
  ModelTuneRequest r = Llama3();
  LayerKind windowed;
  windowed.window_left = 4095;
  r.kinds.push_back(windowed);
  const std::vector<ModelBucket> plain = PlanModelBuckets(Llama3(), {});
  const std::vector<ModelBucket> fresh = PlanModelBuckets(r, {});
  ASSERT_EQ(fresh.size(), 2 * plain.size());
  EXPECT_EQ(ProblemKey(fresh[plain.size()].problem),
            "b1_h32_kv8_q1_k32_d128_full_bf16_bhsd_wl4095");
  const std::vector<ModelBucket> plan =
      PlanModelBuckets(r, {Job("a", plain[0].problem, JobState::kSucceeded)});
  EXPECT_EQ(plan[0].job_id, "a");
  EXPECT_FALSE(plan[plain.size()].state.has_value());
}

// The searches go where the cost model predicts the most time saved, and
// a bucket predicted to gain little gets a check of its served config.
TEST(ModelBucketsTest, TrialsGoWhereTheGainIsPredicted) {
  std::vector<ModelBucket> b = PlanModelBuckets(Llama3(), {});
  ASSERT_EQ(b.size(), 5u);
  b[0].state = JobState::kSucceeded;  // Searched before: not again.
  b[1].served_us = 100;               // Saves 10 us.
  b[1].best_us = 90;
  b[2].served_us = 1000;  // Saves 20 us, 2%.
  b[2].best_us = 980;
  // b[3]: no prediction (first, its gain unknown).
  b[4].served_us = 50;  // Saves 25 us.
  b[4].best_us = 25;
  const std::vector<size_t> order = PlanSearches(&b, 12);
  EXPECT_EQ(order, (std::vector<size_t>{3, 4, 2, 1}));
  EXPECT_EQ(b[0].trials, 0);
  EXPECT_EQ(b[1].trials, 12);
  EXPECT_EQ(b[2].trials, kCheckTrials);
  EXPECT_EQ(b[3].trials, 12);
  EXPECT_EQ(b[4].trials, 12);
  EXPECT_DOUBLE_EQ(PredictedGain(b[4]), 0.5);
  EXPECT_EQ(PredictedGain(b[3]), 0);
  // A budget under the check's is the budget.
  PlanSearches(&b, 1);
  EXPECT_EQ(b[2].trials, 1);
}

TEST(ModelBucketsTest, ARequestOutOfRangeNamesTheField) {
  EXPECT_TRUE(ValidateModelTune(Llama3()).ok());
  struct Case {
    const char* field;
    void (*change)(ModelTuneRequest*);
  };
  const Case cases[] = {
      {"heads: must be in", [](ModelTuneRequest* r) { r->heads = 0; }},
      {"kv_heads: must divide", [](ModelTuneRequest* r) { r->kv_heads = 5; }},
      {"head_dim", [](ModelTuneRequest* r) { r->head_dim = 0; }},
      {"layer_kinds: at least one",
       [](ModelTuneRequest* r) { r->kinds.clear(); }},
      {"layer_kinds[1]: the same as layer_kinds[0] (full attention)",
       [](ModelTuneRequest* r) { r->kinds.push_back(LayerKind()); }},
      {"layer_kinds[0].window_left: must be -1",
       [](ModelTuneRequest* r) { r->kinds[0].window_left = -2; }},
      {"envelope.max_batch",
       [](ModelTuneRequest* r) { r->envelope.max_batch = 0; }},
      {"envelope: bucket b",
       [](ModelTuneRequest* r) {
         r->envelope.max_batch = 4096;
         r->envelope.max_context = 65536;
       }},
  };
  for (const Case& c : cases) {
    ModelTuneRequest r = Llama3();
    c.change(&r);
    absl::Status s = ValidateModelTune(r);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_THAT(s.message(), HasSubstr(c.field));
  }
}

}  // namespace
}  // namespace evotune
