// naive: scalar attention forward, one warp per query row.
//
// Computes O = softmax(Q K^T * scale) V for the problem described in
// common/attention_params.cuh, with an online softmax in fp32. Each warp owns
// one query row; lane l holds elements l, l+32, ... of q and of the output
// accumulator. K and V rows are staged through shared memory one tile at a
// time, and every score is a warp-shuffle reduction. No tensor cores: this is
// the floor of the search and an independent second opinion for the tests.
//
// Tunables (compile-time macros):
//   WARPS    query rows (warps) per block: more rows share each staged tile.
//   KV_TILE  keys staged in shared memory per step: larger tiles mean fewer
//            barriers but more shared memory (KV_TILE * (HEAD_DIM +
//            HEAD_DIM_V) * 2 B).
// Fixed per problem: HEAD_DIM and HEAD_DIM_V (V's and O's; HEAD_DIM unless
// defined), multiples of 32, EVT_BF16, EVT_WINDOW,
// EVT_SOFTCAP, EVT_SINKS and EVT_ALIBI (a sliding window, logit softcapping,
// attention sinks, ALiBi: attention_params.cuh).
//
// Grid: (ceil(seq_q / WARPS), heads, batch); block: WARPS * 32 threads.
#include "attention_params.cuh"
#include "dtype.cuh"
#include "sequence.cuh"

#ifndef HEAD_DIM_V
#define HEAD_DIM_V HEAD_DIM
#endif
#ifndef EVT_WINDOW
#define EVT_WINDOW 0
#endif
#ifndef EVT_SOFTCAP
#define EVT_SOFTCAP 0
#endif
#ifndef EVT_SINKS
#define EVT_SINKS 0
#endif
#ifndef EVT_ALIBI
#define EVT_ALIBI 0
#endif

extern "C" __global__ void __launch_bounds__(WARPS * 32)
    attention_fwd(const __grid_constant__ AttentionParams p) {
  constexpr int kPerLane = HEAD_DIM / 32;
  constexpr int kPerLaneV = HEAD_DIM_V / 32;
  extern __shared__ evt_elem smem[];
  evt_elem* k_tile = smem;
  evt_elem* v_tile = smem + KV_TILE * HEAD_DIM;

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int b = blockIdx.z;
  const int h = blockIdx.y;
  const int kvh = h / (p.heads / p.kv_heads);
  const int row = blockIdx.x * WARPS + warp;
  const Sequence seq = SequenceOf(p, b);
  const bool active = row < seq.seq_q;

  // Keys this row may see, [row_start, row_end), and those any row of the
  // block may see, [block_start, block_end): a window's bounds (-1 for
  // none), the causal mask's right bound 0.
  const int shift = seq.seq_k - seq.seq_q;
  constexpr int kNoBound = 1 << 30;
  const int left = EVT_WINDOW && p.window_left >= 0 ? p.window_left : kNoBound;
  const int right = p.causal                            ? 0
                    : EVT_WINDOW && p.window_right >= 0 ? p.window_right
                                                        : kNoBound;
  const int first_row = (int)blockIdx.x * WARPS;
  const int last_row = min(seq.seq_q - 1, first_row + WARPS - 1);
  const int row_end = min(seq.seq_k, max(0, row + shift + right + 1));
  const int row_start = max(0, row + shift - left);
  const int block_end =
      first_row < seq.seq_q
          ? min(seq.seq_k, max(0, last_row + shift + right + 1))
          : 0;
  const int block_start = max(0, first_row + shift - left);

  const evt_elem* q =
      static_cast<const evt_elem*>(p.q) + seq.q + h * p.q_head_stride;
  const evt_elem* k =
      static_cast<const evt_elem*>(p.k) + seq.k + kvh * p.k_head_stride;
  const evt_elem* v =
      static_cast<const evt_elem*>(p.v) + seq.v + kvh * p.v_head_stride;

  float q_reg[kPerLane];
  float acc[kPerLaneV] = {};
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    q_reg[i] =
        active ? evt_to_float(q[row * p.q_row_stride + lane + 32 * i]) : 0.f;
  }
#if EVT_ALIBI
  const float alibi_log2 =
      p.alibi_slopes[b * p.alibi_batch_stride + h] * 1.4426950408889634f;
#endif
  float row_max = -__int_as_float(0x7f800000);  // -inf
  float row_sum = 0.f;

  for (int start = block_start; start < block_end; start += KV_TILE) {
    __syncthreads();
    for (int idx = threadIdx.x; idx < KV_TILE * HEAD_DIM; idx += WARPS * 32) {
      const int key = start + idx / HEAD_DIM;
      k_tile[idx] =
          key < seq.seq_k
              ? k[KeyRow(p, b, key, p.k_batch_stride, p.k_row_stride) +
                  idx % HEAD_DIM]
              : evt_elem(0);
    }
    for (int idx = threadIdx.x; idx < KV_TILE * HEAD_DIM_V; idx += WARPS * 32) {
      const int key = start + idx / HEAD_DIM_V;
      v_tile[idx] =
          key < seq.seq_k
              ? v[KeyRow(p, b, key, p.v_batch_stride, p.v_row_stride) +
                  idx % HEAD_DIM_V]
              : evt_elem(0);
    }
    __syncthreads();
    if (!active) continue;
    const int n = min(KV_TILE, row_end - start);
    for (int j = max(0, row_start - start); j < n; ++j) {
      float s = 0.f;
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        s += q_reg[i] * evt_to_float(k_tile[j * HEAD_DIM + lane + 32 * i]);
      }
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) {
        s += __shfl_xor_sync(0xffffffffu, s, offset);
      }
#if EVT_SOFTCAP  // softcap * tanh(s * scale / softcap), exactly.
      const float cap_log2 = p.softcap * 1.4426950408889634f;
      s = tanhf(s * (p.scale_log2 / cap_log2)) * cap_log2;
#else
      s *= p.scale_log2;
#endif
#if EVT_ALIBI  // -slope * |i + shift - j|, in the exp2 domain.
      s -= alibi_log2 * fabsf(static_cast<float>(row + shift - start - j));
#endif
      const float new_max = fmaxf(row_max, s);
      const float correction = exp2f(row_max - new_max);
      const float weight = exp2f(s - new_max);
      row_sum = row_sum * correction + weight;
#pragma unroll
      for (int i = 0; i < kPerLaneV; ++i) {
        acc[i] = acc[i] * correction +
                 weight * evt_to_float(v_tile[j * HEAD_DIM_V + lane + 32 * i]);
      }
      row_max = new_max;
    }
  }

  if (!active) return;
#if EVT_SINKS  // The head's sink logit joins the softmax's sum only.
  const float sink = p.sinks[h] * 1.4426950408889634f;
  const float top = fmaxf(row_max, sink);
  row_sum = row_sum * exp2f(row_max - top) + exp2f(sink - top);
  const float rescale = exp2f(row_max - top);
#pragma unroll
  for (int i = 0; i < kPerLaneV; ++i) acc[i] *= rescale;
#endif
  evt_elem* o = static_cast<evt_elem*>(p.o) + seq.o + h * p.o_head_stride +
                row * p.o_row_stride;
  const float inv = row_sum > 0.f ? 1.f / row_sum : 0.f;
#pragma unroll
  for (int i = 0; i < kPerLaneV; ++i) {
    o[lane + 32 * i] = evt_from_float(acc[i] * inv);
  }
}
