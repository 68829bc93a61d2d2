#include "core/batch_lengths.h"

#include <algorithm>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace evotune {
namespace {

using ::testing::ElementsAre;

Problem Bucket(Layout layout, bool causal) {
  Problem p;
  p.batch = 64;
  p.heads = 8;
  p.kv_heads = 2;
  p.seq_q = 512;
  p.seq_k = 4096;
  p.causal = causal;
  p.layout = layout;
  return p;
}

TEST(BatchLengthsTest, DenseIsEverySequenceAtTheProblemsLengths) {
  Problem p = Bucket(Layout::kDense, false);
  p.batch = 3;
  const BatchLengths l = RepresentativeLengths(p);
  EXPECT_THAT(l.q, ElementsAre(512, 512, 512));
  EXPECT_THAT(l.k, ElementsAre(4096, 4096, 4096));
}

TEST(BatchLengthsTest, VarlenMixesLengthsWithinTheBucket) {
  for (bool causal : {false, true}) {
    const Problem p = Bucket(Layout::kVarlen, causal);
    const BatchLengths l = RepresentativeLengths(p);
    ASSERT_EQ(l.q.size(), 64u);
    ASSERT_EQ(l.k.size(), 64u);
    EXPECT_EQ(l.q[0], 512);  // The bucket's maxima are measured.
    EXPECT_EQ(l.k[0], 4096);
    for (size_t b = 0; b < l.q.size(); ++b) {
      EXPECT_GE(l.q[b], 1);
      EXPECT_LE(l.q[b], 512);
      EXPECT_GE(l.k[b], 1);
      EXPECT_LE(l.k[b], 4096);
      if (causal) EXPECT_GE(l.k[b], l.q[b]) << b;
    }
    // Mixed: short and long sequences both (log-uniform).
    EXPECT_LT(*std::min_element(l.k.begin(), l.k.end()), 256);
    EXPECT_LT(*std::min_element(l.q.begin(), l.q.end()), 64);
  }
}

TEST(BatchLengthsTest, KvCacheKeepsTheQueriesAndVariesTheKeys) {
  Problem p = Bucket(Layout::kKvCache, true);
  p.seq_q = 4;
  const BatchLengths l = RepresentativeLengths(p);
  EXPECT_TRUE(
      std::all_of(l.q.begin(), l.q.end(), [](int64_t n) { return n == 4; }));
  EXPECT_EQ(l.k[0], 4096);
  EXPECT_NE(std::count(l.k.begin(), l.k.end(), 4096), 64);
}

TEST(BatchLengthsTest, TheDrawIsAFunctionOfTheProblem) {
  const Problem p = Bucket(Layout::kVarlen, true);
  EXPECT_EQ(RepresentativeLengths(p).k, RepresentativeLengths(p).k);
  Problem other = p;
  other.seq_k = 2048;
  EXPECT_NE(RepresentativeLengths(p).k, RepresentativeLengths(other).k);
}

TEST(BatchLengthsTest, CumulativeOffsetsStartAtZero) {
  EXPECT_THAT(BatchLengths::Cumulative({3, 0, 5}), ElementsAre(0, 3, 3, 8));
  BatchLengths l{{3, 0, 5}, {1, 2, 3}};
  EXPECT_EQ(l.TotalQ(), 8);
  EXPECT_EQ(l.TotalK(), 6);
}

}  // namespace
}  // namespace evotune
