#include "tuner/evaluator/reference.h"

#include <cmath>
#include <random>

#include "gtest/gtest.h"

namespace evotune {
namespace {

TEST(HalfConversionTest, RoundTripsEveryFiniteHalfAndBf16) {
  for (DType dtype : {DType::kFp16, DType::kBf16}) {
    for (uint32_t bits = 0; bits < 0x10000; ++bits) {
      const float f = HalfBitsToFloat(static_cast<uint16_t>(bits), dtype);
      if (!std::isfinite(f)) continue;
      const uint16_t back = FloatToHalfBits(f, dtype);
      // +0 and -0 are both fine for zero.
      if (f == 0) continue;
      ASSERT_EQ(back, bits) << "dtype " << static_cast<int>(dtype);
    }
  }
  EXPECT_FLOAT_EQ(HalfBitsToFloat(0x3c00, DType::kFp16), 1.0f);
  EXPECT_FLOAT_EQ(HalfBitsToFloat(0x3f80, DType::kBf16), 1.0f);
  // Round to nearest even: 1 + 2^-11 is halfway between two halves.
  EXPECT_EQ(FloatToHalfBits(1.0f + std::ldexp(1.0f, -11), DType::kFp16),
            0x3c00);
  EXPECT_EQ(FloatToHalfBits(1e6f, DType::kFp16), 0x7c00);  // Overflow.
}

TEST(HalfConversionTest, E4m3RoundTripsEveryFiniteCodeAndSaturates) {
  for (uint16_t bits = 0; bits < 0x100; ++bits) {
    const float f = HalfBitsToFloat(bits, DType::kE4m3);
    if ((bits & 0x7f) == 0x7f) {  // The two NaNs.
      EXPECT_TRUE(std::isnan(f)) << bits;
      continue;
    }
    if (f == 0) continue;
    ASSERT_EQ(FloatToHalfBits(f, DType::kE4m3), bits) << bits;
  }
  EXPECT_EQ(HalfBitsToFloat(0x38, DType::kE4m3), 1.0f);    // 2^0.
  EXPECT_EQ(HalfBitsToFloat(0x7e, DType::kE4m3), 448.0f);  // Largest.
  EXPECT_EQ(HalfBitsToFloat(0x01, DType::kE4m3), std::ldexp(1.0f, -9));
  // Halfway between 1 and 1.125 rounds to even (1); past 448 saturates.
  EXPECT_EQ(FloatToHalfBits(1.0625f, DType::kE4m3), 0x38);
  EXPECT_EQ(FloatToHalfBits(1.0626f, DType::kE4m3), 0x39);
  EXPECT_EQ(FloatToHalfBits(1e6f, DType::kE4m3), 0x7e);
  EXPECT_EQ(FloatToHalfBits(-1e6f, DType::kE4m3), 0xfe);
  // Subnormals: steps of 2^-9, the smallest normal 2^-6 reached by rounding.
  EXPECT_EQ(FloatToHalfBits(std::ldexp(3.0f, -9), DType::kE4m3), 0x03);
  EXPECT_EQ(FloatToHalfBits(std::ldexp(7.6f, -9), DType::kE4m3), 0x08);
}

Problem Tiny(int64_t seq_q, int64_t seq_k, bool causal) {
  Problem p;
  p.batch = 1;
  p.heads = 2;
  p.kv_heads = 1;
  p.seq_q = seq_q;
  p.seq_k = seq_k;
  p.head_dim = 4;
  p.causal = causal;
  return p;
}

TEST(ReferenceTest, OneKeyReturnsItsValueRow) {
  Problem p = Tiny(3, 1, false);
  std::vector<float> q(2 * 3 * 4, 0.3f), k(4, -1.f), v = {1, 2, 3, 4};
  std::vector<float> out = ReferenceRows(p, q, k, v, {{0, 1, 2}});
  EXPECT_EQ(out, (std::vector<float>{1, 2, 3, 4}));
}

TEST(ReferenceTest, MatchesAHandComputedSoftmax) {
  Problem p = Tiny(1, 2, false);
  // Scores: q.k0 = 2, q.k1 = 0; scale 1/sqrt(4) = 0.5 -> weights e^1, e^0.
  std::vector<float> q = {1, 1, 0, 0, 0, 0, 0, 0};
  std::vector<float> k = {1, 1, 0, 0, 0, 0, 0, 0};
  std::vector<float> v = {1, 0, 0, 0, 0, 1, 0, 0};
  std::vector<float> out = ReferenceRows(p, q, k, v, {{0, 0, 0}});
  const double w0 = std::exp(1.0) / (std::exp(1.0) + 1.0);
  EXPECT_NEAR(out[0], w0, 1e-6);
  EXPECT_NEAR(out[1], 1 - w0, 1e-6);
}

TEST(ReferenceTest, CausalIsBottomRightAlignedAndEmptyRowsAreZero) {
  Problem p = Tiny(3, 2, true);
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> q(2 * 3 * 4), k(2 * 4), v(2 * 4);
  for (auto* t : {&q, &k, &v}) {
    for (float& x : *t) x = u(gen);
  }
  // Row 0 sees no key (0 + 2 - 3 + 1 = 0), row 1 sees key 0, row 2 both.
  std::vector<float> out = ReferenceRows(p, q, k, v, {{0, 0, 0}, {0, 0, 1}});
  for (int c = 0; c < 4; ++c) {
    EXPECT_EQ(out[c], 0.f);
    EXPECT_FLOAT_EQ(out[4 + c], v[c]);
  }
}

TEST(ReferenceTest, AWindowKeepsTheKeysAroundTheDiagonal) {
  Problem p = Tiny(1, 5, false);  // Row 0's diagonal key is key 4.
  std::vector<float> q(2 * 4, 0.f), k(5 * 4, 0.f), v(5 * 4);
  for (int j = 0; j < 5; ++j) v[j * 4] = static_cast<float>(j);
  // Equal scores: the output is the mean of the visible keys' values.
  p.window_left = 1;
  EXPECT_FLOAT_EQ(ReferenceRows(p, q, k, v, {{0, 0, 0}})[0], 3.5f);
  p.window_left = 0;
  EXPECT_FLOAT_EQ(ReferenceRows(p, q, k, v, {{0, 0, 0}})[0], 4.f);
  p.seq_q = 3;  // Row 0's diagonal is key 2: keys 1..3 with one each side.
  q.resize(2 * 3 * 4);
  p.window_left = p.window_right = 1;
  EXPECT_FLOAT_EQ(ReferenceRows(p, q, k, v, {{0, 0, 0}})[0], 2.f);
  p.causal = true;
  p.window_right = -1;
  EXPECT_FLOAT_EQ(ReferenceRows(p, q, k, v, {{0, 0, 0}})[0], 1.5f);
}

TEST(ReferenceTest, SoftcapBoundsTheScores) {
  Problem p = Tiny(1, 2, false);
  // Scores 2 * 0.5 = 1 and 0; capped at 0.5: 0.5 tanh(2) and 0.
  std::vector<float> q = {1, 1, 0, 0, 0, 0, 0, 0};
  std::vector<float> k = {1, 1, 0, 0, 0, 0, 0, 0};
  std::vector<float> v = {1, 0, 0, 0, 0, 1, 0, 0};
  p.softcap = 0.5f;
  std::vector<float> out = ReferenceRows(p, q, k, v, {{0, 0, 0}});
  const double e = std::exp(0.5 * std::tanh(2.0));
  EXPECT_NEAR(out[0], e / (e + 1), 1e-6);
}

TEST(ReferenceTest, ASinkJoinsTheSumOnly) {
  Problem p = Tiny(1, 2, false);
  p.sinks = true;
  // Scores 1 and 0 (as above) and a sink of 0.5 for head 0.
  std::vector<float> q = {1, 1, 0, 0, 0, 0, 0, 0};
  std::vector<float> k = {1, 1, 0, 0, 0, 0, 0, 0};
  std::vector<float> v = {1, 0, 0, 0, 0, 1, 0, 0};
  std::vector<float> out =
      ReferenceRows(p, q, k, v, {{0, 0, 0}, {0, 1, 0}}, {0.5f, -100.f});
  const double sum = std::exp(1.0) + 1.0 + std::exp(0.5);
  EXPECT_NEAR(out[0], std::exp(1.0) / sum, 1e-6);
  EXPECT_NEAR(out[1], 1.0 / sum, 1e-6);
  // Head 1's sink is far below: the plain softmax (q row of zeros there).
  EXPECT_NEAR(out[4], 0.5, 1e-6);
}

TEST(ReferenceTest, AlibiBiasesByDistanceFromTheDiagonal) {
  Problem p = Tiny(1, 2, false);
  p.alibi = true;
  // One query, two keys: the diagonal is key 1, key 0 one away. Scores 1
  // and 0 for head 0 (slope 0.5), 0 and 0 for head 1 (slope 2).
  std::vector<float> q = {1, 1, 0, 0, 0, 0, 0, 0};
  std::vector<float> k = {1, 1, 0, 0, 0, 0, 0, 0};
  std::vector<float> v = {1, 0, 0, 0, 0, 1, 0, 0};
  std::vector<float> out =
      ReferenceRows(p, q, k, v, {{0, 0, 0}, {0, 1, 0}}, {}, {0.5f, 2.f});
  const double w0 = std::exp(0.5) / (std::exp(0.5) + 1);
  EXPECT_NEAR(out[0], w0, 1e-6);
  EXPECT_NEAR(out[1], 1 - w0, 1e-6);
  const double w1 = std::exp(-2.0) / (std::exp(-2.0) + 1);
  EXPECT_NEAR(out[4], w1, 1e-6);
  // After softcapping: 0.5 tanh(2) - 0.5 for head 0's key 0.
  p.softcap = 0.5f;
  out = ReferenceRows(p, q, k, v, {{0, 0, 0}}, {}, {0.5f, 2.f});
  const double e = std::exp(0.5 * std::tanh(2.0) - 0.5);
  EXPECT_NEAR(out[0], e / (e + 1), 1e-6);
}

TEST(CompareRowsTest, NaNFailsAndErrorsAreMeasured) {
  EXPECT_TRUE(std::isinf(CompareRows({NAN, 1}, {1, 1}).max_abs));
  ErrorStats e = CompareRows({1.5f, 0}, {1, 0});
  EXPECT_DOUBLE_EQ(e.max_abs, 0.5);
  EXPECT_DOUBLE_EQ(e.rel_l2, 0.5);
}

}  // namespace
}  // namespace evotune
