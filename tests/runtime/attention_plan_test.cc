#include "evotune/attention_plan.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace evotune {
namespace {

using ::testing::HasSubstr;

// A bucket: 4 sequences of up to 16 queries on up to 1,024 keys, packed.
Problem Bucket() {
  Problem p;
  p.batch = 4;
  p.heads = 32;
  p.kv_heads = 8;
  p.seq_q = 16;
  p.seq_k = 1024;
  p.head_dim = 128;
  p.causal = true;
  p.dtype = DType::kBf16;
  p.layout = Layout::kVarlen;
  return p;
}

TEST(CheckWithinPlanTest, ThePlansProblemAndShorterOnesRun) {
  EXPECT_TRUE(CheckWithinPlan(Bucket(), Bucket()).ok());
  Problem shorter = Bucket();
  shorter.seq_q = 1;
  shorter.seq_k = 513;
  EXPECT_TRUE(CheckWithinPlan(Bucket(), shorter).ok());
}

TEST(CheckWithinPlanTest, AnotherFormOrLongerLengthsNameTheField) {
  struct Case {
    const char* field;
    void (*change)(Problem*);
  };
  const Case cases[] = {
      {"problem.batch", [](Problem* p) { p->batch = 5; }},
      {"problem.heads", [](Problem* p) { p->heads = 16; }},
      {"problem.kv_heads", [](Problem* p) { p->kv_heads = 4; }},
      {"problem.head_dim", [](Problem* p) { p->head_dim = 64; }},
      {"problem.causal", [](Problem* p) { p->causal = false; }},
      {"problem.dtype", [](Problem* p) { p->dtype = DType::kFp16; }},
      {"problem.layout", [](Problem* p) { p->layout = Layout::kDense; }},
      {"problem.seq_q", [](Problem* p) { p->seq_q = 17; }},
      {"problem.seq_k", [](Problem* p) { p->seq_k = 1025; }},
  };
  for (const Case& c : cases) {
    Problem call = Bucket();
    c.change(&call);
    absl::Status s = CheckWithinPlan(Bucket(), call);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_THAT(s.message(), HasSubstr(c.field));
  }
}

}  // namespace
}  // namespace evotune
