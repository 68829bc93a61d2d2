// Pieces shared by the FlashAttention-style templates (flash_fwd,
// flash_fwd_sm90, flash_fwd_tma): cp.async copies, the online softmax over one
// tile of scores, the causal and tail masks, and the epilogue that normalises
// and stores the output or, with split-KV, combines the splits.
//
// Register tiles follow the accumulator layout of mma m16n8 (and of wgmma
// m64nN, which repeats it per warp): a warp owns kMTiles tiles of 16 rows;
// element [mt][nt][i] of a lane is row 16 * mt + lane / 4 + 8 * (i / 2) of
// the warp's rows and column 8 * nt + 2 * (lane % 4) + i % 2.
#ifndef EVOTUNE_KERNEL_TEMPLATES_COMMON_FLASH_COMMON_CUH_
#define EVOTUNE_KERNEL_TEMPLATES_COMMON_FLASH_COMMON_CUH_

#include "attention_params.cuh"
#include "dtype.cuh"
#include "sequence.cuh"

namespace flash {

// Columns of Q, K, V and O in memory (HEAD_DIM), and those a kernel computes:
// HEAD_DIM rounded up to whole 64-column blocks, 128-byte swizzled rows of
// 16-bit values (the spec's HeadDimIn64s). The columns past HEAD_DIM are
// zero-filled in shared memory (cp.async with no source bytes, the copy
// engine's out-of-bounds fill), which adds nothing to Q K^T and leaves O's
// columns there zero, and the stores leave them out.
constexpr int kHeadDimMem = HEAD_DIM;
constexpr int kHeadDimIn64s = (HEAD_DIM + 63) / 64 * 64;
// The same of V and O: HEAD_DIM_V, defined where the value head dim differs
// from the query/key one (DeepSeek's MLA prefill: 192 and 128).
#ifndef HEAD_DIM_V
#define HEAD_DIM_V HEAD_DIM
#endif
constexpr int kHeadDimVMem = HEAD_DIM_V;
constexpr int kHeadDimVIn64s = (HEAD_DIM_V + 63) / 64 * 64;

__device__ __forceinline__ unsigned SmemAddress(const void* p) {
  unsigned long long a;
  asm("cvta.to.shared.u64 %0, %1;" : "=l"(a) : "l"(p));
  return static_cast<unsigned>(a);
}

__device__ __forceinline__ void CpAsync16(unsigned dst, const void* src,
                                          bool valid) {
  // A source size of 0 fills the 16 bytes with zeros (masked tails).
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst),
               "l"(src), "r"(valid ? 16 : 0));
}

__device__ __forceinline__ void CpAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::);
}

template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// Rows [row0, row0 + kRows) of a [seq][kD] matrix (row stride `stride`) into
// a shared tile with 16-byte cp.async copies, chunk c of row r at element
// offset(r, c); rows at or past `rows` are zero-filled. A kernel that
// computes more columns (kD) than the matrix has (kDMem, padding the head
// dim) gets the rest zero-filled.
template <int kRows, int kD, int kThreads, int kDMem = kD, class Offset>
__device__ __forceinline__ void CopyRows(evt_elem* tile, const evt_elem* g,
                                         long long stride, int row0, int rows,
                                         Offset offset) {
  constexpr int kChunks = kD / 8;
  for (int idx = threadIdx.x; idx < kRows * kChunks; idx += kThreads) {
    const int r = idx / kChunks;
    const int c = idx % kChunks;
    const bool valid = row0 + r < rows && c < kDMem / 8;
    const evt_elem* src = g + (valid ? (row0 + r) * stride : 0) + c * 8;
    CpAsync16(SmemAddress(tile + offset(r, c)), src, valid);
  }
}

// Key rows [row0, row0 + kRows) of sequence b of K or V at `g` (its row 0,
// as Sequence has it; `page_stride` its batch stride) into a tile as
// CopyRows does; in a paged kernel each row comes from its page (KeyRow).
template <int kRows, int kD, int kThreads, int kDMem = kD, class Offset>
__device__ __forceinline__ void CopyKeyRows(evt_elem* tile, const evt_elem* g,
                                            const AttentionParams& p, int b,
                                            long long page_stride,
                                            long long stride, int row0,
                                            int rows, Offset offset) {
  if (kPageSize == 0) {
    CopyRows<kRows, kD, kThreads, kDMem>(tile, g, stride, row0, rows, offset);
    return;
  }
  constexpr int kChunks = kD / 8;
  for (int idx = threadIdx.x; idx < kRows * kChunks; idx += kThreads) {
    const int r = idx / kChunks;
    const int c = idx % kChunks;
    const bool valid = row0 + r < rows && c < kDMem / 8;
    const long long at =
        valid ? KeyRow(p, b, row0 + r, page_stride, stride) : 0;
    CpAsync16(SmemAddress(tile + offset(r, c)), g + at + c * 8, valid);
  }
}

// The four 8x8 matrices of 16-bit elements whose rows lanes 0-7, 8-15,
// 16-23 and 24-31 point at.
__device__ __forceinline__ void LdMatrixX4(unsigned* r, unsigned addr) {
  asm volatile(
      "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
      : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
      : "r"(addr));
}

__device__ __forceinline__ void LdMatrixX4Trans(unsigned* r, unsigned addr) {
  asm volatile(
      "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, "
      "[%4];\n"
      : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
      : "r"(addr));
}

// The XOR a tile of rows of kD 16-bit columns swizzles row `row`'s 16-byte
// chunk index by: row mod 8 in rows of 8 chunks or more; in rows of 4 (64
// bytes: e4m3 rows of head_dim 64), row / 2 mod 4. Either way the eight
// rows of an ldmatrix read (or of any 8 consecutive rows) fall on different
// banks, and the XOR depends on the row mod 8 alone.
template <int kD>
__device__ __forceinline__ int RowSwizzle(int row) {
  static_assert(kD >= 32 && kD % 32 == 0, "rows of 4 chunks or more");
  return kD >= 64 ? row & 7 : (row >> 1) & 3;
}

// In tiles swizzled so (RowSwizzle), the rows a lane hands to ldmatrix are
// all congruent to the lane mod 8, so their swizzled chunk depends on the
// lane and the logical chunk only: the element offset of `chunk` within
// such a row of kD 16-bit columns.
template <int kD = 64>
__device__ __forceinline__ int LaneChunk(int chunk, int lane) {
  return (chunk ^ RowSwizzle<kD>(lane)) << 3;
}

// c += a * b for one m16n8k16 tile (row-major A, column-major B, fp32
// accumulators).
__device__ __forceinline__ void Mma(float* c, const unsigned* a, unsigned b0,
                                    unsigned b1) {
#if EVT_BF16
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
#else
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
#endif
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// c += a * b for one m16n8k32 tile of e4m3 operands (row-major A,
// column-major B, fp32 accumulators; compute capability 8.9 and newer). Its
// fragments hold the same bytes as m16n8k16's of 16-bit elements: a tile of
// e4m3 rows is loaded as one of 16-bit pairs.
__device__ __forceinline__ void MmaE4m3(float* c, const unsigned* a,
                                        unsigned b0, unsigned b1) {
#if __CUDA_ARCH__ >= 890
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// The parts of a lane's ldmatrix addresses that depend on the lane alone,
// in tiles of kD-element rows swizzled by 16-byte chunk XOR row mod 8:
// element offsets of its row in a row-major A operand tile (Q), in a K tile
// (B of Q K^T) and in a V tile (B of P V, transposed), and of its four V
// chunks within a row.
template <int kD>
struct LaneFragments {
  int a_row, k_row, v_row;
  int v_chunk[4];

  __device__ __forceinline__ explicit LaneFragments(int lane) {
    a_row = ((lane % 8) + ((lane / 8) % 2) * 8) * kD;
    k_row = ((lane % 8) + (lane / 16) * 8) * kD;
    v_row = a_row;
#pragma unroll
    for (int d = 0; d < 4; ++d) {
      v_chunk[d] = LaneChunk<kD>(d * 2 + lane / 16, lane);
    }
  }
};

// A-operand fragments of kMTiles 16-row tiles of Q for the first kKSteps
// k-steps, from a swizzled Q tile; q_lane is the lane's row address (shared
// bytes).
template <int kD, int kMTiles, int kKSteps>
__device__ __forceinline__ void LoadQFragments(
    unsigned (&q_frag)[kMTiles][kKSteps][4], unsigned q_lane, int lane) {
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      LdMatrixX4(q_frag[mt][ks],
                 q_lane + 2 * (mt * 16 * kD +
                               LaneChunk<kD>(ks * 2 + lane / 16, lane)));
    }
  }
}

// S = Q K^T for one tile of kN keys: Q from q_frag when kQInRegs, else
// re-read from the Q tile at q_lane; K from the tile at k_lane (the lane's
// row address, shared bytes). The k-step loop is unrolled kUnroll times.
// kD counts 16-bit columns; kE4m3: the rows are e4m3 pairs (2 kD elements
// a row), multiplied by MmaE4m3. kSteps: the k-steps computed, those of
// the columns in memory where the rows are padded (the rest are zeros).
template <int kMTiles, int kN, int kD, bool kQInRegs, int kUnroll, int kQSteps,
          bool kE4m3 = false, int kSteps = kD / 16>
__device__ __forceinline__ void QkTile(
    float (&s)[kMTiles][kN / 8][4],
    const unsigned (&q_frag)[kMTiles][kQSteps][4], unsigned q_lane,
    unsigned k_lane, int lane) {
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int nt = 0; nt < kN / 8; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) s[mt][nt][i] = 0.f;
    }
  }
  static_assert(kSteps <= kD / 16, "kSteps");
#pragma unroll(kUnroll)
  for (int ks = 0; ks < kSteps; ++ks) {
    unsigned qf[kMTiles][4];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
      if constexpr (kQInRegs) {
#pragma unroll
        for (int i = 0; i < 4; ++i) qf[mt][i] = q_frag[mt][ks][i];
      } else {
        LdMatrixX4(qf[mt],
                   q_lane + 2 * (mt * 16 * kD +
                                 LaneChunk<kD>(ks * 2 + lane / 16, lane)));
      }
    }
    const unsigned k_ks =
        k_lane + 2 * LaneChunk<kD>(ks * 2 + (lane / 8) % 2, lane);
#pragma unroll
    for (int kb = 0; kb < kN / 16; ++kb) {
      unsigned kf[4];
      LdMatrixX4(kf, k_ks + 2 * kb * 16 * kD);
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        if constexpr (kE4m3) {
          MmaE4m3(s[mt][2 * kb], qf[mt], kf[0], kf[1]);
          MmaE4m3(s[mt][2 * kb + 1], qf[mt], kf[2], kf[3]);
        } else {
          Mma(s[mt][2 * kb], qf[mt], kf[0], kf[1]);
          Mma(s[mt][2 * kb + 1], qf[mt], kf[2], kf[3]);
        }
      }
    }
  }
}

// Two floats as a pair of 16-bit elements, `lo` in the low half.
__device__ __forceinline__ unsigned Pack(float lo, float hi) {
  unsigned d;
#if EVT_BF16
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(d) : "f"(hi), "f"(lo));
#else
  asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(d) : "f"(hi), "f"(lo));
#endif
  return d;
}

// Sum over the four lanes of a quad, which share an accumulator row.
__device__ __forceinline__ float QuadSum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

__device__ __forceinline__ float Exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float NegInf() { return __int_as_float(0xff800000); }

__device__ __forceinline__ float Tanh(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// EVT_WINDOW, a compile define: 1 where the problem has a sliding window
// (AttentionParams::window_left / window_right are read), else 0.
#ifndef EVT_WINDOW
#define EVT_WINDOW 0
#endif
constexpr bool kWindow = EVT_WINDOW != 0;
// EVT_SOFTCAP: 1 where the problem softcaps its logits (AttentionParams::
// softcap), else 0.
#ifndef EVT_SOFTCAP
#define EVT_SOFTCAP 0
#endif
constexpr bool kSoftcap = EVT_SOFTCAP != 0;

// EVT_SINKS: 1 where each query head's sink logit (AttentionParams::sinks)
// joins its rows' softmax, else 0.
#ifndef EVT_SINKS
#define EVT_SINKS 0
#endif
constexpr bool kSinks = EVT_SINKS != 0;

// EVT_ALIBI: 1 where the scores take ALiBi's bias (AttentionParams::
// alibi_slopes), else 0.
#ifndef EVT_ALIBI
#define EVT_ALIBI 0
#endif
constexpr bool kAlibi = EVT_ALIBI != 0;

// Query head h's sink logit in the exp2 domain of the softmax; -inf without
// sinks. It is a partial softmax state of its own (max the logit, sum 1, no
// output) that every row of the head merges in: CombineSplits takes it as
// one more split, WithSink adds it to a finished row's sum.
__device__ __forceinline__ float SinkLog2(const AttentionParams& p, int h) {
  return kSinks ? __ldg(p.sinks + h) * 1.4426950408889634f : NegInf();
}

// A finished row's sum with its sink's part: the row's probabilities were
// taken against its max `row_max` (exp2 domain; 0 where it saw no key)
// less `shift`. Without sinks, `sum` itself (no instruction).
__device__ __forceinline__ float WithSink(float sum, float sink_log2,
                                          float row_max, float shift = 0.f) {
  if constexpr (!kSinks) return sum;
  const float ref = row_max == NegInf() ? 0.f : row_max;
  return sum + Exp2(sink_log2 - ref + shift);
}

// Past every key from every row: a window side with no bound.
constexpr int kNoBound = 1 << 30;

// A sequence's window: row i sees keys [i + shift - WindowLeft(p), i +
// shift + WindowRight(p)]; the causal mask is a right bound of 0, no bound
// is kNoBound. Read from the launch parameters where used (they live in
// constant memory), so that they hold no register across the key loop.
__device__ __forceinline__ int WindowLeft(const AttentionParams& p) {
  return kWindow && p.window_left >= 0 ? p.window_left : kNoBound;
}
__device__ __forceinline__ int WindowRight(const AttentionParams& p) {
  return p.causal
             ? 0
             : (kWindow && p.window_right >= 0 ? p.window_right : kNoBound);
}

// The factors scores take: softmax(s * scale) is exp2 of s * log2 less a
// row's reference; with softcapping, of tanh(s * pre) * log2.
struct ScoreScales {
  float pre, log2;
};

// The scales of scores for a softmax scale * log2(e) of `scale_log2` (FP8
// descale factors folded in).
__device__ __forceinline__ ScoreScales ScalesOf(const AttentionParams& p,
                                                float scale_log2) {
  if (!kSoftcap) return {1.f, scale_log2};
  const float cap_log2 = p.softcap * 1.4426950408889634f;
  return {scale_log2 / cap_log2, cap_log2};
}

// Query head h of sequence b's ALiBi slope in the units of the scores a
// kernel holds (raw products, or their tanh with softcapping): the logits'
// slope over what the scores are scaled by. 0 without ALiBi.
__device__ __forceinline__ float AlibiSlope(const AttentionParams& p, int b,
                                            int h, const ScoreScales& scales) {
  if constexpr (!kAlibi) return 0.f;
  return __ldg(p.alibi_slopes + b * p.alibi_batch_stride + h) *
         1.4426950408889634f / scales.log2;
}

// ALiBi (EVT_ALIBI) of a tile of scores for keys kv0..: the score of each
// row (mt, half) loses slope[mt][half] * |diag[mt][half] - key|, diag the
// row's diagonal key (its query index + shift). Elements as in MaskTile.
template <int kMTiles, int kNTiles>
__device__ __forceinline__ void AlibiTile(float (&s)[kMTiles][kNTiles][4],
                                          const float (&slope)[kMTiles][2],
                                          const int (&diag)[kMTiles][2],
                                          int kv0, int lane) {
  const int c = kv0 + (lane % 4) * 2;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float d = static_cast<float>(diag[mt][half] - c);
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          s[mt][nt][2 * half + i] -=
              slope[mt][half] * fabsf(d - static_cast<float>(nt * 8 + i));
        }
      }
    }
  }
}

// What one block computes: query block q_block (kM rows from q0, the last
// blocks first: with a causal mask they see the most keys, so the longest
// blocks start first) of head h of sequence b, and of its key tiles (kN keys
// each) the range [block0, block0 + num_blocks) of split `split`.
struct BlockPlan {
  int b, h, q_blocks, q_block, split, q0;
  int seq_q, seq_k;  // Sequence b's lengths.
  int shift;         // seq_k - seq_q. Causal: row i sees keys j <= i + shift.
  int last_row;      // The block's last row with a query.
  int block0, num_blocks;
  const evt_elem* q;  // This head's rows of Q, K, V and O.
  const evt_elem* k;
  const evt_elem* v;
  evt_elem* o;
  int q_start, k_start;  // Rows of Q and of K before the sequence's.
};

// The key tiles (kN keys each) that rows [r0, r1] of w's sequence (r1 at
// most its last) may see: [x, y), x past 0 only with a window; none where
// r0 is past the sequence's rows.
template <int kN>
__device__ __forceinline__ int2 KeyTilesOfRows(const AttentionParams& p,
                                               const BlockPlan& w, int r0,
                                               int r1) {
  int kv_end = r0 < w.seq_q ? w.seq_k : 0;
  if (kWindow) {
    kv_end = min(kv_end, max(0, r1 + w.shift + WindowRight(p) + 1));
  } else if (p.causal) {
    kv_end = min(kv_end, max(0, r1 + w.shift + 1));
  }
  const int end = (kv_end + kN - 1) / kN;
  int first = 0;
  if constexpr (kWindow)
    first = min(max(0, r0 + w.shift - WindowLeft(p)) / kN, end);
  return make_int2(first, end);
}

// The plan of query block q_blocks - 1 - rank (the last blocks first) of
// head h of sequence b, split `split` of kSplits. A block past the
// sequence's queries has no key tiles.
template <int kM, int kN, int kSplits>
__device__ __forceinline__ BlockPlan PlanWork(const AttentionParams& p, int b,
                                              int h, int q_blocks, int rank,
                                              int split) {
  BlockPlan w;
  w.b = b;
  w.h = h;
  const int kvh = w.h / (p.heads / p.kv_heads);
  w.q_blocks = q_blocks;
  w.q_block = w.q_blocks - 1 - rank;
  w.split = split;
  w.q0 = w.q_block * kM;
  const Sequence s = SequenceOf(p, b);
  w.seq_q = s.seq_q;
  w.seq_k = s.seq_k;
  w.shift = s.seq_k - s.seq_q;
  w.q_start = s.q_start;
  w.k_start = s.k_start;
  w.q = static_cast<const evt_elem*>(p.q) + s.q + w.h * p.q_head_stride;
  w.o = static_cast<evt_elem*>(p.o) + s.o + w.h * p.o_head_stride;
  w.k = static_cast<const evt_elem*>(p.k) + s.k + kvh * p.k_head_stride;
  w.v = static_cast<const evt_elem*>(p.v) + s.v + kvh * p.v_head_stride;
  w.last_row = min(w.seq_q - 1, w.q0 + kM - 1);
  const int2 tiles = KeyTilesOfRows<kN>(p, w, w.q0, w.last_row);
  const int first = tiles.x;
  // A contiguous range of the key tiles from `first` per split.
  const int all_blocks = tiles.y - first;
  const int per_split = (all_blocks + kSplits - 1) / kSplits;
  const int begin = w.split * per_split;
  w.block0 = first + begin;
  w.num_blocks = max(0, min(all_blocks, begin + per_split) - begin);
  return w;
}

// Plan w narrowed to its rows [w.q0 + offset, w.q0 + offset + rows) (a
// warpgroup's part of the block): their last row, and of w's key tiles
// those any of them may see (none where the block's rows end before).
template <int kN>
__device__ __forceinline__ BlockPlan NarrowRows(const AttentionParams& p,
                                                BlockPlan w, int offset,
                                                int rows) {
  w.q0 += offset;
  w.last_row = min(w.last_row, w.q0 + rows - 1);
  const int2 tiles = KeyTilesOfRows<kN>(p, w, w.q0, w.last_row);
  const int begin = max(tiles.x, w.block0);
  const int end = min(tiles.y, w.block0 + w.num_blocks);
  w.num_blocks = max(0, end - begin);
  w.block0 = w.num_blocks > 0 ? begin : w.block0;
  return w;
}

// The plan of this block of a grid (q_blocks * kSplits, heads, batch).
template <int kM, int kN, int kSplits>
__device__ __forceinline__ BlockPlan PlanBlock(const AttentionParams& p) {
  return PlanWork<kM, kN, kSplits>(p, blockIdx.z, blockIdx.y,
                                   gridDim.x / kSplits, blockIdx.x / kSplits,
                                   blockIdx.x % kSplits);
}

// Whether key tile kv0.. needs MaskTile for the block's rows: it reaches
// past the sequence's keys, past the right bound of row q0 (the causal
// diagonal), or before the window of the block's last row.
template <int kN>
__device__ __forceinline__ bool TileNeedsMask(const AttentionParams& p,
                                              const BlockPlan& w, int kv0) {
  if constexpr (kWindow) {
    return kv0 + kN > w.seq_k ||
           kv0 + kN - 1 > w.q0 + w.shift + WindowRight(p) ||
           kv0 < w.last_row + w.shift - WindowLeft(p);
  }
  return kv0 + kN > w.seq_k || (p.causal && kv0 + kN - 1 > w.q0 + w.shift);
}

// Sets to -inf the scores of keys past the sequence's seq_k and outside
// each row's window (the causal mask's too), in a tile of scores for keys
// kv0.. and query rows row0.. (the warp's first row).
template <int kMTiles, int kNTiles>
__device__ __forceinline__ void MaskTile(float (&s)[kMTiles][kNTiles][4],
                                         const AttentionParams& p,
                                         const BlockPlan& w, int kv0, int row0,
                                         int lane) {
  // Element (nt, i) of a row holds key kv0 + c + nt * 8 + (i & 1), with
  // c = (lane % 4) * 2: compare the compile-time part against per-row
  // limits, so no per-element index lives in a register.
  const int c = kv0 + (lane % 4) * 2;
  const int key_limit = w.seq_k - c;  // Keys at or past it are masked.
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = row0 + mt * 16 + lane / 4 + half * 8;
      const int limit =
          kWindow    ? min(key_limit, row + w.shift + WindowRight(p) + 1 - c)
          : p.causal ? min(key_limit, row + w.shift + 1 - c)
                     : key_limit;
      // Keys before `start` are masked.
      const int start = row + w.shift - WindowLeft(p) - c;
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          if (nt * 8 + i >= limit || (kWindow && nt * 8 + i < start)) {
            s[mt][nt][2 * half + i] = NegInf();
          }
        }
      }
    }
  }
}

// Logit softcapping (EVT_SOFTCAP) of a tile of raw scores: each becomes
// tanh(s * pre), pre = scale / softcap, and the softmax then scales by
// softcap instead of the softmax scale (SoftcapScales).
template <int kMTiles, int kNTiles>
__device__ __forceinline__ void SoftcapTile(float (&s)[kMTiles][kNTiles][4],
                                            float pre) {
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) s[mt][nt][i] = Tanh(s[mt][nt][i] * pre);
    }
  }
}

// Softcaps and biases with ALiBi (when compiled with them) and masks (where
// the tile needs it) a tile of raw scores for keys kv0.. and query rows
// row0.. .
template <int kN, int kMTiles, int kNTiles>
__device__ __forceinline__ void PrepareScores(float (&s)[kMTiles][kNTiles][4],
                                              const AttentionParams& p,
                                              const BlockPlan& w,
                                              const ScoreScales& scales,
                                              int kv0, int row0, int lane) {
  if constexpr (kSoftcap) SoftcapTile(s, scales.pre);
  if constexpr (kAlibi) {
    const float slope = AlibiSlope(p, w.b, w.h, scales);
    float slopes[kMTiles][2];
    int diag[kMTiles][2];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        slopes[mt][half] = slope;
        diag[mt][half] = row0 + mt * 16 + lane / 4 + half * 8 + w.shift;
      }
    }
    AlibiTile(s, slopes, diag, kv0, lane);
  }
  if (TileNeedsMask<kN>(p, w, kv0)) MaskTile(s, p, w, kv0, row0, lane);
}

// Pairwise (tree) reductions of one half (accumulator elements 2 half and
// 2 half + 1 of every n8 tile: one row) of a row of score tiles: a chain of
// depth log2(2 kNTiles) instead of 2 kNTiles dependent instructions, which
// the compiler may not reorder on its own (float addition is not
// associative). The softmax sits between the GEMMs; its latency is theirs.
template <int kNTiles, typename Op>
__device__ __forceinline__ float ReduceRowHalf(const float (&s)[kNTiles][4],
                                               int half, Op op) {
  float v[kNTiles];
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt) {
    v[nt] = op(s[nt][2 * half], s[nt][2 * half + 1]);
  }
#pragma unroll
  for (int step = 1; step < kNTiles; step *= 2) {
#pragma unroll
    for (int nt = 0; nt + step < kNTiles; nt += 2 * step) {
      v[nt] = op(v[nt], v[nt + step]);
    }
  }
  return v[0];
}

template <int kNTiles>
__device__ __forceinline__ float RowMax(const float (&s)[kNTiles][4],
                                        int half) {
  return ReduceRowHalf(s, half, [](float a, float b) { return fmaxf(a, b); });
}

template <int kNTiles>
__device__ __forceinline__ float RowSum(const float (&s)[kNTiles][4],
                                        int half) {
  return ReduceRowHalf(s, half, [](float a, float b) { return a + b; });
}

// The max of one row half of an m-tile's scores over the whole row (the
// four lanes of a quad share it).
template <int kNTiles>
__device__ __forceinline__ float QuadRowMax(const float (&s)[kNTiles][4],
                                            int half) {
  float mx = RowMax(s, half);
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
  return fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
}

// Turns one row half of an m-tile's scores into probabilities against the
// reference `ref` (exp2 domain, scale * log2(e) folded in); returns the
// lane's part of their sum.
template <int kNTiles>
__device__ __forceinline__ float ExpRowHalf(float (&s)[kNTiles][4], int half,
                                            float scale_log2, float ref) {
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float& x = s[nt][2 * half + i];
      x = Exp2(fmaf(x, scale_log2, -ref));
    }
  }
  return RowSum(s, half);
}

// One step of the online softmax on the scores alone: turns `s` into
// probabilities in place (exp2 domain, scale * log2(e) folded in), updates
// the running max and sum of each row and leaves in `correction` the factor
// the row's output accumulator must be scaled by to match the new max. A
// row that has seen no key keeps a zero reference: its scores are all -inf
// and exp2(-inf) = 0, never NaN. kShift: probabilities taken 2^kShift
// above the row's max; kSum false: their sums left to the caller (who
// sums what it rounds them to).
template <int kShift = 0, bool kSum = true, int kMTiles, int kNTiles>
__device__ __forceinline__ void SoftmaxScores(float (&s)[kMTiles][kNTiles][4],
                                              float (&row_max)[kMTiles][2],
                                              float (&row_sum)[kMTiles][2],
                                              float scale_log2,
                                              float (&correction)[kMTiles][2]) {
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float mx = QuadRowMax(s[mt], half);
      const float new_max = fmaxf(row_max[mt][half], mx * scale_log2);
      const float ref = new_max == NegInf() ? 0.f : new_max;
      correction[mt][half] = Exp2(row_max[mt][half] - ref);
      row_max[mt][half] = new_max;
      const float sum = ExpRowHalf(s[mt], half, scale_log2, ref - kShift);
      row_sum[mt][half] =
          row_sum[mt][half] * correction[mt][half] + (kSum ? sum : 0.f);
    }
  }
}

// Scales each row of the output accumulator `o` by its correction.
template <int kMTiles, int kDTiles>
__device__ __forceinline__ void RescaleRows(
    float (&o)[kMTiles][kDTiles][4], const float (&correction)[kMTiles][2]) {
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) o[mt][dt][i] *= correction[mt][i / 2];
    }
  }
}

// One step of the online softmax: SoftmaxScores, then the output
// accumulator `o` rescaled to the new max (kShift and kSum as there).
template <int kShift = 0, bool kSum = true, int kMTiles, int kNTiles,
          int kDTiles>
__device__ __forceinline__ void SoftmaxTile(float (&s)[kMTiles][kNTiles][4],
                                            float (&o)[kMTiles][kDTiles][4],
                                            float (&row_max)[kMTiles][2],
                                            float (&row_sum)[kMTiles][2],
                                            float scale_log2) {
  float correction[kMTiles][2];
  SoftmaxScores<kShift, kSum>(s, row_max, row_sum, scale_log2, correction);
  RescaleRows(o, correction);
}

// The A operand (m16 x k16, 16-bit) of keys 16 * t .. 16 * t + 15 from the
// probabilities of m-tile mt: the accumulator and A layouts coincide.
template <int kMTiles, int kNTiles>
__device__ __forceinline__ void PackProbs(const float (&s)[kMTiles][kNTiles][4],
                                          int mt, int t, unsigned* a) {
  a[0] = Pack(s[mt][2 * t][0], s[mt][2 * t][1]);
  a[1] = Pack(s[mt][2 * t][2], s[mt][2 * t][3]);
  a[2] = Pack(s[mt][2 * t + 1][0], s[mt][2 * t + 1][1]);
  a[3] = Pack(s[mt][2 * t + 1][2], s[mt][2 * t + 1][3]);
}

// O += P V for one tile of kN keys: P packed from the probabilities in s,
// V through ldmatrix.trans from the tile at v_lane (the lane's row address,
// shared bytes) with the lane's chunk offsets v_chunk. kDOut: the columns
// computed (a multiple of 16), those in memory where rows are padded.
template <int kMTiles, int kN, int kD, int kDOut = kD>
__device__ __forceinline__ void PvTile(float (&o)[kMTiles][kDOut / 8][4],
                                       const float (&s)[kMTiles][kN / 8][4],
                                       unsigned v_lane,
                                       const int (&v_chunk)[4]) {
#pragma unroll
  for (int t = 0; t < kN / 16; ++t) {
    unsigned pf[kMTiles][4];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) PackProbs(s, mt, t, pf[mt]);
#pragma unroll
    for (int dp = 0; dp < kDOut / 16; ++dp) {
      unsigned vf[4];
      // Chunks 8..15 differ from 0..7 by a constant under the swizzle.
      LdMatrixX4Trans(
          vf, v_lane + 2 * (t * 16 * kD + (dp / 4) * 64 + v_chunk[dp % 4]));
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        Mma(o[mt][2 * dp], pf[mt], vf[0], vf[1]);
        Mma(o[mt][2 * dp + 1], pf[mt], vf[2], vf[3]);
      }
    }
  }
}

// Zero output accumulators and the running max (-inf) and sum of each row.
template <int kMTiles, int kDTiles>
__device__ __forceinline__ void InitRows(float (&o)[kMTiles][kDTiles][4],
                                         float (&row_max)[kMTiles][2],
                                         float (&row_sum)[kMTiles][2]) {
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) o[mt][dt][i] = 0.f;
    }
    row_max[mt][0] = row_max[mt][1] = NegInf();
    row_sum[mt][0] = row_sum[mt][1] = 0.f;
  }
}

// Counts one split of a row block in: called by one thread, after the
// __syncthreads that follows its block's writes of partial rows; true for the
// last split, which merges them all after another __syncthreads. The add is
// acquire-release at GPU scope: it publishes the block's rows (ordered before
// it by the barrier) and, in the last split, makes every other split's
// visible to the block (through the barrier after it). Cheaper than every
// thread fencing (__threadfence is a sequentially consistent fence) and
// then adding. Leaves the counter at 0 for the next launch.
__device__ __forceinline__ bool CountSplitIn(int* counter, int splits) {
  int old;
  asm volatile("atom.add.acq_rel.gpu.global.s32 %0, [%1], 1;\n"
               : "=r"(old)
               : "l"(counter)
               : "memory");
  if (old != splits - 1) return false;
  *counter = 0;
  return true;
}

// Floats between partial rows (fp32) kept in shared memory for a merge: the
// padding spreads a warp's stores of 8 rows over all the banks (at kD
// floats apart they would fall on the same ones).
template <int kD>
constexpr int kPartRowStride = kD + 8;

// A warp's unnormalised output rows (fp32; row r at part + r * stride) and
// their (max, sum) (at ml + 2 r), for split-KV: rows numbered from row0, of
// which those from `rows` on are not stored (nothing reads them).
template <int kMTiles, int kDTiles>
__device__ __forceinline__ void StorePartialRows(
    float* part, int stride, float* ml, int row0,
    const float (&o_acc)[kMTiles][kDTiles][4],
    const float (&row_max)[kMTiles][2], const float (&row_sum)[kMTiles][2],
    int lane, int rows = 1 << 30) {
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float sum = QuadSum(row_sum[mt][half]);
      const int row = row0 + mt * 16 + lane / 4 + half * 8;
      if (row >= rows) continue;
      float* out = part + static_cast<long long>(row) * stride + (lane % 4) * 2;
#pragma unroll
      for (int dt = 0; dt < kDTiles; ++dt) {
        *reinterpret_cast<float2*>(out + dt * 8) =
            make_float2(o_acc[mt][dt][2 * half], o_acc[mt][dt][2 * half + 1]);
      }
      if (lane % 4 == 0) {
        *reinterpret_cast<float2*>(ml + row * 2) =
            make_float2(row_max[mt][half], sum);
      }
    }
  }
}

// Eight output columns of one row from kSplits partial results: each
// split's running max m (exp2 domain), row sum l and unnormalised columns
// lo (0-3) and hi (4-7), and the row's sink (SinkLog2: one more state of
// sum 1 and no output; -inf for none). A row no split saw a key for is zero.
template <int kSplits>
__device__ __forceinline__ uint4 CombineSplits(const float (&m)[kSplits],
                                               const float (&l)[kSplits],
                                               const float4 (&lo)[kSplits],
                                               const float4 (&hi)[kSplits],
                                               float sink = NegInf()) {
  float mx = NegInf();
#pragma unroll
  for (int s = 0; s < kSplits; ++s) mx = fmaxf(mx, m[s]);
  if constexpr (kSinks) mx = fmaxf(mx, sink);
  float total = 0.f;
  float acc[8] = {};
  if (mx != NegInf()) {
    if constexpr (kSinks) total = Exp2(sink - mx);
#pragma unroll
    for (int s = 0; s < kSplits; ++s) {
      const float w = Exp2(m[s] - mx);
      total += l[s] * w;
      acc[0] += lo[s].x * w;
      acc[1] += lo[s].y * w;
      acc[2] += lo[s].z * w;
      acc[3] += lo[s].w * w;
      acc[4] += hi[s].x * w;
      acc[5] += hi[s].y * w;
      acc[6] += hi[s].z * w;
      acc[7] += hi[s].w * w;
    }
  }
  const float inv = total > 0.f ? 1.f / total : 0.f;
  uint4 packed;
  packed.x = Pack(acc[0] * inv, acc[1] * inv);
  packed.y = Pack(acc[2] * inv, acc[3] * inv);
  packed.z = Pack(acc[4] * inv, acc[5] * inv);
  packed.w = Pack(acc[6] * inv, acc[7] * inv);
  return packed;
}

// Normalises and stores the output rows of a warp, from row0 (rows past
// the sequence's seq_q are never written). With kSplits > 1 it stores this
// split's unnormalised rows with their max and sum (fp32) instead, and the
// block that finishes last combines the splits through the workspace: partial O
// [batch*heads][splits][q_rows][kD], then (max, sum)
// [batch*heads][splits][q_rows][2], with q_rows = q_blocks * kM. Only O's
// first kDMem columns are stored (a kernel that pads the head dim computes
// kD).
template <int kM, int kD, int kMTiles, int kSplits, int kThreads,
          int kDMem = kD>
__device__ __forceinline__ void StoreOutput(const AttentionParams& p,
                                            const BlockPlan& t, int row0,
                                            float (&o_acc)[kMTiles][kD / 8][4],
                                            const float (&row_max)[kMTiles][2],
                                            const float (&row_sum)[kMTiles][2],
                                            int lane) {
  evt_elem* o = t.o;
  const float sink = SinkLog2(p, t.h);
  if constexpr (kSplits == 1) {
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float sum =
            WithSink(QuadSum(row_sum[mt][half]), sink, row_max[mt][half]);
        const float inv = sum > 0.f ? 1.f / sum : 0.f;
        const int row = row0 + mt * 16 + lane / 4 + half * 8;
        if (row >= t.seq_q) continue;
        evt_elem* out = o + row * p.o_row_stride + (lane % 4) * 2;
#pragma unroll
        for (int dt = 0; dt < kDMem / 8; ++dt) {
          *reinterpret_cast<unsigned*>(out + dt * 8) = Pack(
              o_acc[mt][dt][2 * half] * inv, o_acc[mt][dt][2 * half + 1] * inv);
        }
      }
    }
  } else {
    const long long head = static_cast<long long>(t.b) * p.heads + t.h;
    const long long q_rows = static_cast<long long>(t.q_blocks) * kM;
    float* part_o = p.workspace;
    float* part_ml =
        p.workspace + p.batch * p.heads * (long long)kSplits * q_rows * kD;
    const long long mine = (head * kSplits + t.split) * q_rows;
    // Rows past seq_q are padding that the combine skips: not stored.
    StorePartialRows(part_o + mine * kD, kD, part_ml + mine * 2, row0, o_acc,
                     row_max, row_sum, lane, t.seq_q);
    // Publish, then count this split in; the last one combines.
    __syncthreads();
    __shared__ int last;
    if (threadIdx.x == 0) {
      last = CountSplitIn(p.counters + head * t.q_blocks + t.q_block, kSplits);
    }
    __syncthreads();
    if (!last) return;
    // Eight columns per thread and step, loads issued together: this runs
    // on the critical path of the whole launch.
    constexpr int kVec = 8;
    for (int idx = threadIdx.x; idx < kM * kD / kVec; idx += kThreads) {
      const int row = t.q0 + idx / (kD / kVec);
      const int col = (idx % (kD / kVec)) * kVec;
      if (row >= t.seq_q || col >= kDMem) continue;
      float m[kSplits], l[kSplits];
      float4 lo[kSplits], hi[kSplits];
#pragma unroll
      for (int s = 0; s < kSplits; ++s) {
        const long long at = (head * kSplits + s) * q_rows + row;
        const float2 ml = __ldcg(reinterpret_cast<const float2*>(part_ml) + at);
        m[s] = ml.x;
        l[s] = ml.y;
        const float4* src =
            reinterpret_cast<const float4*>(part_o + at * kD + col);
        lo[s] = __ldcg(src);
        hi[s] = __ldcg(src + 1);
      }
      const uint4 packed = CombineSplits(m, l, lo, hi, sink);
      *reinterpret_cast<uint4*>(o + row * p.o_row_stride + col) = packed;
    }
  }
}

}  // namespace flash

#endif  // EVOTUNE_KERNEL_TEMPLATES_COMMON_FLASH_COMMON_CUH_
