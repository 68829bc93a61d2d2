#include "tuner/serving/recent_problems.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace evotune {
namespace {

Problem Decode(int64_t keys) {
  return *ParseProblemKey("b8_h32_kv8_q1_k" + std::to_string(keys) +
                          "_d128_full_bf16_bhsd");
}

std::vector<int64_t> Keys(const std::vector<Problem>& problems) {
  std::vector<int64_t> out;
  for (const Problem& p : problems) out.push_back(p.seq_k);
  return out;
}

TEST(RecentProblemsTest, MostRecentlyServedFirstPerDevice) {
  RecentProblems recent;
  recent.Add("H200", Decode(512));
  recent.Add("H100", Decode(1024));
  recent.Add("H200", Decode(768));
  recent.Add("H200", Decode(512));  // Served again: first now, once.
  EXPECT_EQ(Keys(recent.Recent("H200", 10)), (std::vector<int64_t>{512, 768}));
  EXPECT_EQ(Keys(recent.Recent("H100", 10)), (std::vector<int64_t>{1024}));
  EXPECT_EQ(Keys(recent.Recent("H200", 1)), (std::vector<int64_t>{512}));
  EXPECT_TRUE(recent.Recent("L4", 10).empty());
  EXPECT_TRUE(recent.Recent("H200", 0).empty());
}

TEST(RecentProblemsTest, TheLeastRecentlyServedFallOutFirst) {
  RecentProblems recent(/*capacity=*/3);
  recent.Add("H200", Decode(1));
  recent.Add("H200", Decode(2));
  recent.Add("H200", Decode(3));
  recent.Add("H200", Decode(1));  // 2 is now the least recent.
  recent.Add("H200", Decode(4));
  EXPECT_EQ(Keys(recent.Recent("H200", 10)), (std::vector<int64_t>{4, 1, 3}));
}

TEST(RecentProblemsTest, KeepsNothingWithoutCapacity) {
  RecentProblems recent(/*capacity=*/0);
  recent.Add("H200", Decode(1));
  EXPECT_TRUE(recent.Recent("H200", 10).empty());
}

}  // namespace
}  // namespace evotune
