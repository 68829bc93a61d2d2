#include "tuner/cli/tune_model.h"

#include "gtest/gtest.h"
#include "tuner/wire/message_convert.h"

namespace evotune {
namespace {

Problem Decode(int64_t keys) {
  Problem p;
  p.heads = 32;
  p.kv_heads = 8;
  p.seq_k = keys;
  p.head_dim = 128;
  p.dtype = DType::kBf16;
  return p;
}

v1::Job JobOf(const std::string& id, const Problem& p, v1::JobState state) {
  v1::Job job;
  job.set_job_id(id);
  *job.mutable_problem() = ProblemToProto(p);
  job.set_state(state);
  return job;
}

// A resumed run: a bucket searched before is done, one being searched is
// followed, one whose search failed or was cancelled (or never ran) is
// searched; jobs of other problems do not matter.
TEST(TuneModelTest, ARunResumesWhereTheLastOneStopped) {
  const std::vector<Problem> buckets = {Decode(128), Decode(256), Decode(512),
                                        Decode(1024)};
  const std::vector<v1::Job> jobs = {
      JobOf("a", Decode(128), v1::JOB_STATE_CANCELLED),
      JobOf("b", Decode(128), v1::JOB_STATE_SUCCEEDED),
      JobOf("c", Decode(128), v1::JOB_STATE_RUNNING),
      JobOf("d", Decode(256), v1::JOB_STATE_RUNNING),
      JobOf("e", Decode(512), v1::JOB_STATE_FAILED),
      JobOf("f", Decode(2048), v1::JOB_STATE_SUCCEEDED),
  };
  const std::vector<BucketStep> steps = PlanBuckets(buckets, jobs);
  ASSERT_EQ(steps.size(), 4u);
  EXPECT_EQ(steps[0].kind, BucketStep::kDone);
  EXPECT_EQ(steps[0].job_id, "b");
  EXPECT_EQ(steps[1].kind, BucketStep::kTrack);
  EXPECT_EQ(steps[1].job_id, "d");
  EXPECT_EQ(steps[2].kind, BucketStep::kSubmit);
  EXPECT_EQ(steps[3].kind, BucketStep::kSubmit);
  EXPECT_EQ(ProblemKey(steps[3].problem), ProblemKey(Decode(1024)));
}

TEST(TuneModelTest, TheProgressLineSaysBucketsTrialsAndTime) {
  EXPECT_EQ(
      FormatModelProgress(37, 160, 296, absl::Seconds(130), absl::Minutes(10)),
      "tune-model: 37/160 buckets, 296 trials, 2m10s of 10m00s");
  EXPECT_EQ(FormatModelProgress(0, 3, 0, absl::Seconds(5), absl::Seconds(30)),
            "tune-model: 0/3 buckets, 0 trials, 5s of 30s");
}

}  // namespace
}  // namespace evotune
