// K and V stored as float8 e4m3 (an FP8 KV cache) in the mma.sync
// templates (sm_89 and newer): conversions of e4m3 pairs to the 16-bit MMA
// types, and FP8 attention's probabilities rounded to e4m3 with the sums
// of what was rounded, in PTX so that the templates need no toolkit header.
//
// e4m3 values are exact in fp16, so a tile dequantized in registers (one
// conversion instruction a pair) feeds fp16 MMAs and reads half the bytes;
// bf16 queries meet it in fp16 too, scaled by a power of two into fp16's
// range (which keeps more of their bits than bf16 has).
// The descale factors are applied outside the hot loop: K's folds into the
// softmax scale, V's into the output.
#ifndef EVOTUNE_KERNEL_TEMPLATES_COMMON_FP8_CUH_
#define EVOTUNE_KERNEL_TEMPLATES_COMMON_FP8_CUH_

#include "attention_params.cuh"
#include "dtype.cuh"

// EVT_KV_FP8, a compile define: 1 where K and V are e4m3 (one byte per
// element), 0 where they have the problem's 16-bit dtype.
#ifndef EVT_KV_FP8
#define EVT_KV_FP8 0
#endif
constexpr bool kKvFp8 = EVT_KV_FP8 != 0;
// EVT_Q_FP8, a compile define: 1 where Q, K and V are all e4m3 (FP8
// attention, with EVT_KV_FP8), O the problem's 16-bit dtype.
#ifndef EVT_Q_FP8
#define EVT_Q_FP8 0
#endif
constexpr bool kQFp8 = EVT_Q_FP8 != 0;

// Raw storage of one element of K or V.
#if EVT_KV_FP8
typedef unsigned char evt_kv;
#else
typedef evt_elem evt_kv;
#endif

namespace fp8 {

// Two e4m3 (half kHalf of x: bytes 2 kHalf and 2 kHalf + 1) as fp16x2, the
// first in the low half.
template <int kHalf>
__device__ __forceinline__ unsigned ToHalf2(unsigned x) {
  unsigned d;
#if __CUDA_ARCH__ >= 890
  if (kHalf == 0) {
    asm("{\n.reg .b16 lo, hi;\nmov.b32 {lo, hi}, %1;\n"
        "cvt.rn.f16x2.e4m3x2 %0, lo;\n}\n"
        : "=r"(d)
        : "r"(x));
  } else {
    asm("{\n.reg .b16 lo, hi;\nmov.b32 {lo, hi}, %1;\n"
        "cvt.rn.f16x2.e4m3x2 %0, hi;\n}\n"
        : "=r"(d)
        : "r"(x));
  }
#else
  d = 0;  // Unreachable: FP8 problems need compute capability 8.9.
#endif
  return d;
}

// Bytes p and p + 1 of a and of b, interleaved: a[p], b[p], a[p+1],
// b[p+1] (p a compile-time byte index, 0 to 2).
template <int kP>
__device__ __forceinline__ unsigned Interleave(unsigned a, unsigned b) {
  constexpr unsigned kSel = kP | (4 + kP) << 4 | (kP + 1) << 8 | (5 + kP) << 12;
  unsigned d;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "n"(kSel));
  return d;
}

// c += a * b for one m16n8k16 tile of fp16 operands (fp32 accumulators),
// whatever the problem's dtype: probabilities and e4m3 values are exact or
// nearly so in fp16.
__device__ __forceinline__ void MmaF16(float* c, const unsigned* a, unsigned b0,
                                       unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats as fp16x2, `lo` in the low half.
__device__ __forceinline__ unsigned PackHalf2(float lo, float hi) {
  unsigned d;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}

// The fp16 A operand (m16 x k16) of keys 16 t .. 16 t + 15 from the
// probabilities `s` of one m-tile (its n8 tiles 2 t and 2 t + 1: the
// accumulator and A layouts coincide), whatever the problem's dtype.
template <int kNTiles>
__device__ __forceinline__ void PackProbsHalf(const float (&s)[kNTiles][4],
                                              int t, unsigned* a) {
  a[0] = PackHalf2(s[2 * t][0], s[2 * t][1]);
  a[1] = PackHalf2(s[2 * t][2], s[2 * t][3]);
  a[2] = PackHalf2(s[2 * t + 1][0], s[2 * t + 1][1]);
  a[3] = PackHalf2(s[2 * t + 1][2], s[2 * t + 1][3]);
}

// Four floats as e4m3 (saturating), the first in the low byte.
__device__ __forceinline__ unsigned PackE4m3(float a, float b, float c,
                                             float d) {
  unsigned x = 0;
#if __CUDA_ARCH__ >= 890
  asm("{\n.reg .b16 lo, hi;\n"
      "cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\n"
      "cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n"
      "mov.b32 %0, {lo, hi};\n}\n"
      : "=r"(x)
      : "f"(a), "f"(b), "f"(c), "f"(d));
#endif
  return x;
}

// The e4m3 A operand (m16 x k32) of keys 32 t .. 32 t + 31 from the
// probabilities `s` of one m-tile (its n8 tiles 4 t .. 4 t + 3), straight
// from the accumulators: the lane holding keys 2 i, 2 i + 1, 2 i + 8 and
// 2 i + 9 (+ 16) of the step holds them as k-positions 4 i .. 4 i + 3
// (+ 16), so B (V transposed) must hold its keys in that order.
// Registers 0 and 2 are row lane / 4's, 1 and 3 row lane / 4 + 8's.
template <int kNTiles>
__device__ __forceinline__ void PackProbsE4m3(const float (&s)[kNTiles][4],
                                              int t, unsigned* a) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int tile = 4 * t + 2 * (i / 2), h = 2 * (i % 2);
    a[i] = PackE4m3(s[tile][h], s[tile][h + 1], s[tile + 1][h],
                    s[tile + 1][h + 1]);
  }
}

__device__ __forceinline__ unsigned AddHalf2(unsigned a, unsigned b) {
  unsigned d;
  asm("add.rn.f16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

// The sum of four e4m3 values, as fp16x2 (two partial sums).
__device__ __forceinline__ unsigned SumE4m3(unsigned x) {
  return AddHalf2(ToHalf2<0>(x), ToHalf2<1>(x));
}

// The two halves of an fp16x2 added in fp32.
__device__ __forceinline__ float HalvesSum(unsigned x) {
  float lo, hi;
  asm("{\n.reg .b16 l, h;\nmov.b32 {l, h}, %2;\n"
      "cvt.f32.f16 %0, l;\ncvt.f32.f16 %1, h;\n}\n"
      : "=f"(lo), "=f"(hi)
      : "r"(x));
  return lo + hi;
}

// The e4m3 A operands of kSteps key steps (PackProbsE4m3) from one m-tile's
// probabilities, what they round to added to its two rows' sums (in fp16
// within the tile: at most 32 values of at most 256 a thread and row), so
// that rounding P scales no row.
template <int kSteps, int kNTiles>
__device__ __forceinline__ void PackProbsE4m3Summed(
    const float (&s)[kNTiles][4], unsigned (&pf)[kSteps][4],
    float (&row_sum)[2]) {
  unsigned sums[2] = {0, 0};  // Rows lane / 4 and + 8 (fp16x2).
#pragma unroll
  for (int t = 0; t < kSteps; ++t) {
    PackProbsE4m3(s, t, pf[t]);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      sums[i % 2] = AddHalf2(sums[i % 2], SumE4m3(pf[t][i]));
    }
  }
  row_sum[0] += HalvesSum(sums[0]);
  row_sum[1] += HalvesSum(sums[1]);
}

// The descale factor of (sequence b, KV head kvh) in `factors`, 1 where
// null.
__device__ __forceinline__ float Descale(const AttentionParams& p,
                                         const float* factors, int b, int kvh) {
  if (factors == nullptr) return 1.f;
  return __ldg(factors + static_cast<long long>(b) * p.descale_batch_stride +
               static_cast<long long>(kvh) * p.descale_head_stride);
}

}  // namespace fp8

#endif  // EVOTUNE_KERNEL_TEMPLATES_COMMON_FP8_CUH_
