#include "tuner/evaluator/random_inputs.h"

#include <set>

#include "gtest/gtest.h"
#include "tuner/evaluator/nvrtc_compiler.h"
#include "tuner/evaluator/reference.h"

namespace evotune {
namespace {

TEST(RandomInputsTest, ValuesAreDeterministicSpreadAndInRange) {
  for (DType dtype : {DType::kFp16, DType::kBf16}) {
    for (float offset : {0.f, 0.5f}) {
      std::set<uint16_t> distinct;
      double sum = 0;
      for (uint64_t i = 0; i < 10000; ++i) {
        const uint16_t bits = RandomInputBits(7, i, offset, dtype);
        EXPECT_EQ(bits, RandomInputBits(7, i, offset, dtype));
        const float x = HalfBitsToFloat(bits, dtype);
        ASSERT_GE(x, offset - 1.f);
        ASSERT_LE(x, offset + 1.f);
        distinct.insert(bits);
        sum += x;
      }
      EXPECT_GT(distinct.size(), 1000u);
      EXPECT_NEAR(sum / 10000, offset, 0.05);
    }
  }
  int same = 0;
  for (uint64_t i = 0; i < 1000; ++i) {
    same += RandomInputBits(1, i, 0, DType::kFp16) ==
            RandomInputBits(2, i, 0, DType::kFp16);
  }
  EXPECT_LT(same, 50);  // Seeds give independent tensors.
}

TEST(RandomInputsTest, FillKernelCompilesForEveryTarget) {
  for (const char* arch : {"sm_80", "sm_89", "sm_90"}) {
    absl::StatusOr<std::string> cubin =
        CompileSource(kRandomFillSource, "random_fill.cu", arch);
    ASSERT_TRUE(cubin.ok()) << arch << ": " << cubin.status();
    EXPECT_FALSE(cubin->empty());
  }
}

}  // namespace
}  // namespace evotune
