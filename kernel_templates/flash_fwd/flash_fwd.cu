// flash_fwd: FlashAttention-2-style attention forward on tensor cores.
//
// Computes O = softmax(Q K^T * scale) V (see common/attention_params.cuh for
// the layout and masking rules) in one pass over K and V with an online
// softmax, never materialising the score matrix:
//   - a block owns BLOCK_M query rows of one (batch, head); its NUM_WARPS warps
//     split them along M, 16 * M_TILES rows each, so softmax statistics never
//     cross warps;
//   - Q is staged once through shared memory (and, with Q_IN_REGS, kept in
//     registers; ldmatrix.x4);
//   - K/V tiles of BLOCK_N keys stream through a STAGES-deep ring of shared
//     buffers filled with 16-byte cp.async; rows are swizzled (16-byte chunk
//     index XOR row mod 8) so ldmatrix reads are free of bank conflicts;
//   - S = Q K^T and O += P V both run on mma.sync m16n8k16 with fp32
//     accumulators; P goes from the S accumulators to the A operand of the
//     PV product in registers (the two layouts coincide);
//   - the softmax runs in the exp2 domain with scale * log2(e) folded in;
//     rows that see no key yet use a zero reference so -inf - -inf never
//     occurs, and rows that see no key at all output zeros.
//
// Tunables (compile-time macros):
//   BLOCK_M    query rows per block (multiple of 16 * NUM_WARPS, at most
//              32 * NUM_WARPS): larger reuses each K/V tile more, smaller
//              makes more blocks to fill the SMs.
//   BLOCK_N    keys per K/V tile (multiple of 16): larger means fewer
//              barriers and softmax rescales, more registers for S.
//   NUM_WARPS  warps per block.
//   STAGES     K/V tiles in flight (1 = load then compute, 2-3 = overlap the
//              next tiles' loads with this tile's math).
//   Q_IN_REGS  1: Q fragments stay in registers for the whole pass; 0: they
//              are re-read from shared memory for every K tile, which frees
//              registers for larger tiles.
//   KV_SPLITS  blocks that share one query block's keys (split-KV, for
//              problems with few heads x query blocks): each computes its
//              range of key tiles, and the last to finish combines them
//              through an fp32 workspace.
//   MIN_BLOCKS blocks per SM the register allocation must allow
//              (__launch_bounds__): 1 lets a thread use up to 255 registers,
//              more caps them at 65536 / (threads * MIN_BLOCKS) so that
//              blocks can share an SM.
// Fixed per problem: HEAD_DIM (32, 64, 80, 96, 128, 192 or 256, computed as
// the next multiple of 64), HEAD_DIM_V (V's and O's, one of the same; the
// same as HEAD_DIM unless defined), EVT_BF16, EVT_Q_FP8 (with EVT_KV_FP8).
//
// FP8 attention (EVT_Q_FP8, served on sm_89, where mma.sync takes e4m3
// natively; head_dim 64 or 128): Q, K and V are e4m3, O the
// problem's 16-bit dtype. Tiles of e4m3 rows are copied and swizzled as rows
// of 16-bit pairs (half as many columns; 64-byte rows by RowSwizzle's second
// form), and both products run on mma.sync m16n8k32 e4m3, whose A and B
// fragments hold the same bytes as m16n8k16's (ldmatrix serves both). Each
// tile of V is transposed in shared memory (kDv rows of BLOCK_N keys, the
// keys of a 16-key step in the order P's fragments take them: bytes
// 4 t .. 4 t + 3 hold keys 2 t, 2 t + 1, 2 t + 8, 2 t + 9, so that two such
// steps are one k-step's B operand); P is rounded in registers, 2^8 up, its
// rows summed as rounded, and each tile's products are added to O in fp32
// (Fp8PvTile). The descale factors of Q and K fold into the softmax
// scale, V's into the output.
//
// Grid: (ceil(seq_q / BLOCK_M) * KV_SPLITS, heads, batch); block:
// NUM_WARPS * 32 threads;
// dynamic shared memory ((BLOCK_M + STAGES * BLOCK_N) * D + STAGES * BLOCK_N
// * Dv) * E B, D and Dv the head dims rounded up to multiples of 64 and E
// the bytes of an element of Q, K and V (FP8: 1, plus V's transpose, Dv *
// BLOCK_N B).
#include "flash_common.cuh"
#include "fp8.cuh"

namespace {

using namespace flash;

constexpr int kM = BLOCK_M;
constexpr int kN = BLOCK_N;
constexpr int kDMem = kHeadDimMem;  // In memory; computed: kD (flash_common).
constexpr int kD = kHeadDimIn64s;
constexpr int kDvMem = kHeadDimVMem;  // V's and O's.
constexpr int kDv = kHeadDimVIn64s;
constexpr int kWarps = NUM_WARPS;
constexpr int kStages = STAGES;
constexpr bool kQInRegs = Q_IN_REGS != 0;
constexpr int kSplits = KV_SPLITS;
constexpr int kThreads = kWarps * 32;
constexpr bool kFp8 = kQFp8;
// Q's and K's rows and V's in 16-bit units (FP8: e4m3 pairs), as the tiles
// hold them.
constexpr int kDc = kFp8 ? kD / 2 : kD;
constexpr int kDcMem = kFp8 ? kDMem / 2 : kDMem;
constexpr int kDvc = kFp8 ? kDv / 2 : kDv;
constexpr int kDvcMem = kFp8 ? kDvMem / 2 : kDvMem;
constexpr int kMTiles = kM / (16 * kWarps);  // 16-row MMA tiles per warp.
constexpr int kKSteps = kDc / 16;            // k-steps of Q K^T.
constexpr int kNTiles = kN / 8;              // n8 tiles of S.
constexpr int kDTiles = kDv / 8;             // n8 tiles of O.
static_assert(kM % (16 * kWarps) == 0 && kMTiles >= 1, "BLOCK_M");
static_assert(kN % 16 == 0, "BLOCK_N");
static_assert(kDMem % 16 == 0, "HEAD_DIM");
static_assert(kDvMem % 16 == 0, "HEAD_DIM_V");
static_assert(kStages >= 1, "STAGES");
static_assert(!kFp8 ||
                  (kKvFp8 && (kDMem == 64 || kDMem == 128) && kDvMem == kDMem),
              "FP8 attention: head_dim 64 or 128");

// Element offset of (row, 16-byte chunk) in a swizzled [rows][kCols] tile
// (RowSwizzle).
template <int kCols>
__device__ __forceinline__ int Swizzled(int row, int chunk) {
  return row * kCols + ((chunk ^ RowSwizzle<kCols>(row)) << 3);
}

// A stride of Q, K or V in elements as one in 16-bit units (FP8: pairs).
__device__ __forceinline__ long long Units(long long stride) {
  return kFp8 ? stride / 2 : stride;
}

// Rows of Q, K or V planned as 16-bit elements at `planned` (BlockPlan's,
// from `base`) as the kernel copies them: FP8's e4m3 rows at the same
// element offset, as 16-bit pairs.
__device__ __forceinline__ const evt_elem* Pairs(const void* base,
                                                 const evt_elem* planned) {
  if constexpr (!kFp8) return planned;
  const long long offset = planned - static_cast<const evt_elem*>(base);
  return reinterpret_cast<const evt_elem*>(
      static_cast<const unsigned char*>(base) + offset);
}

// Rows [row0, row0 + kRows) of Q (`g` and `stride` in 16-bit units) into a
// swizzled tile; rows at or past `rows` are zero-filled.
template <int kRows>
__device__ __forceinline__ void LoadTile(evt_elem* tile, const evt_elem* g,
                                         long long stride, int row0, int rows) {
  CopyRows<kRows, kDc, kThreads, kDcMem>(tile, g, stride, row0, rows,
                                         Swizzled<kDc>);
}

// Key rows [row0, row0 + kN) of sequence b of K (V with kCols = kDvc) at
// `g`, pages `page_stride` apart in a paged kernel, into a tile, as
// LoadTile.
template <int kCols = kDc, int kColsMem = kDcMem>
__device__ __forceinline__ void LoadKeys(evt_elem* tile, const evt_elem* g,
                                         const AttentionParams& p, int b,
                                         long long page_stride,
                                         long long stride, int row0, int rows) {
  CopyKeyRows<kN, kCols, kThreads, kColsMem>(tile, g, p, b, page_stride, stride,
                                             row0, rows, Swizzled<kCols>);
}

// K's and V's rows of key tile `tile` (kN keys from tile * kN) of block
// w's sequence into stage `s` of the rings, as LoadKeys.
__device__ __forceinline__ void LoadKvTile(evt_elem* k_tiles, evt_elem* v_tiles,
                                           int s, const AttentionParams& p,
                                           const BlockPlan& w, int tile) {
  LoadKeys(k_tiles + s * kN * kDc, Pairs(p.k, w.k), p, w.b,
           Units(p.k_batch_stride), Units(p.k_row_stride), tile * kN, w.seq_k);
  LoadKeys<kDvc, kDvcMem>(v_tiles + s * kN * kDvc, Pairs(p.v, w.v), p, w.b,
                          Units(p.v_batch_stride), Units(p.v_row_stride),
                          tile * kN, w.seq_k);
}

// FP8: the 16-byte chunks of a row of V's transpose (BLOCK_N keys).
constexpr int kVtChunks = kN / 16;
static_assert(8 % kVtChunks == 0, "BLOCK_N");

// FP8: the byte offset of (row, 16-byte chunk) in V's transpose, chunks
// XOR the row's place among the rows of one 128-byte span, so that the
// eight rows of an ldmatrix read fall on different banks.
__device__ __forceinline__ int VtOffset(int row, int chunk) {
  return row * kN + ((chunk ^ ((row / (8 / kVtChunks)) % kVtChunks)) << 4);
}

// FP8: the e4m3 tile of V (kN keys of kDv bytes, as LoadKvTile swizzles
// it) into `vt`, its transpose: kDv rows of kN keys, bytes 4 t .. 4 t + 3 of
// each 16-key step holding its keys 2 t, 2 t + 1, 2 t + 8 and 2 t + 9.
__device__ __forceinline__ void TransposeValues(unsigned char* vt,
                                                const evt_elem* v_tile) {
  const unsigned char* v = reinterpret_cast<const unsigned char*>(v_tile);
  constexpr int kQuads = kDv / 4;  // 4-byte words of a row of V.
  for (int idx = threadIdx.x; idx < kN / 4 * kQuads; idx += kThreads) {
    const int quad = idx % kQuads;
    const int step = idx / kQuads / 4;
    const int t = idx / kQuads % 4;
    const int key0 = step * 16 + 2 * t;
    const int keys[4] = {key0, key0 + 1, key0 + 8, key0 + 9};
    unsigned w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      w[i] = *reinterpret_cast<const unsigned*>(
          v + 2 * Swizzled<kDvc>(keys[i], quad / 4) + 4 * (quad % 4));
    }
    // Column c of the four keys, for c = 4 quad .. 4 quad + 3.
    const unsigned lo01 = fp8::Interleave<0>(w[0], w[1]);
    const unsigned hi01 = fp8::Interleave<0>(w[2], w[3]);
    const unsigned lo23 = fp8::Interleave<2>(w[0], w[1]);
    const unsigned hi23 = fp8::Interleave<2>(w[2], w[3]);
    const unsigned cols[4] = {
        __byte_perm(lo01, hi01, 0x5410), __byte_perm(lo01, hi01, 0x7632),
        __byte_perm(lo23, hi23, 0x5410), __byte_perm(lo23, hi23, 0x7632)};
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      *reinterpret_cast<unsigned*>(vt + VtOffset(4 * quad + c, step) + 4 * t) =
          cols[c];
    }
  }
}

// FP8: probabilities are taken 2^kProbShift above the row's
// max, so that they span [0, 256] (e4m3 reaches 448) and fewer fall below
// e4m3's normal range (2^-6); the row sums are of the rounded values
// (Fp8PvTile), so that rounding P scales no row (with 3 mantissa bits, a
// row of close scores rounds all one way).
constexpr int kProbShift = kFp8 ? 8 : 0;

// FP8: O += P V for one tile of kN keys on e4m3 MMAs (k-steps of 32 keys):
// P rounded from the probabilities in s, its values added to row_sum; V
// from its transpose at vt_lane (row `lane` of it, shared bytes; its keys
// in the order of fp8::PackProbsE4m3), vt_swizzle the lane's row's chunk
// XOR (VtOffset). The tensor cores keep fewer bits of a sum of e4m3
// products than fp32 has (truncated below the accumulator's leading one),
// so the tile's products are summed from zero and added to O in fp32.
__device__ __forceinline__ void Fp8PvTile(float (&o)[kMTiles][kDv / 8][4],
                                          const float (&s)[kMTiles][kN / 8][4],
                                          float (&row_sum)[kMTiles][2],
                                          unsigned vt_lane, int vt_swizzle) {
  constexpr int kSteps = kN / 32;
  unsigned pf[kMTiles][kSteps][4];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
    fp8::PackProbsE4m3Summed(s[mt], pf[mt], row_sum[mt]);
  }
#pragma unroll
  for (int dq = 0; dq < kDv / 32; ++dq) {
    float acc[kMTiles][4][4] = {};  // Output tiles 4 dq .. 4 dq + 3.
#pragma unroll
    for (int t = 0; t < kSteps; ++t) {
      unsigned lo[4], hi[4];  // Keys 32 t .. + 15 and 32 t + 16 .. + 31.
      const unsigned row = vt_lane + dq * 32 * kN;
      LdMatrixX4(lo, row + (((2 * t) ^ vt_swizzle) << 4));
      LdMatrixX4(hi, row + (((2 * t + 1) ^ vt_swizzle) << 4));
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          MmaE4m3(acc[mt][i], pf[mt][t], lo[i], hi[i]);
        }
      }
    }
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int e = 0; e < 4; ++e) o[mt][4 * dq + i][e] += acc[mt][i][e];
      }
    }
  }
}

// FP8: the output's rows times V's descale factor.
__device__ __forceinline__ void DescaleOutput(float (&o)[kMTiles][kDv / 8][4],
                                              const AttentionParams& p,
                                              const BlockPlan& w) {
  const float factor =
      fp8::Descale(p, p.v_descale, w.b, w.h / (p.heads / p.kv_heads));
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int dt = 0; dt < kDv / 8; ++dt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) o[mt][dt][i] *= factor;
    }
  }
}

// FP8: each row's max moved to the reference its probabilities
// were taken against (kProbShift below), which its sink's part (WithSink) and
// the split combine (CombineSplits) take the row's sum as relative to.
__device__ __forceinline__ void ShiftReferences(float (&row_max)[kMTiles][2]) {
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
    row_max[mt][0] -= kProbShift;
    row_max[mt][1] -= kProbShift;
  }
}

// FP8: after the last tile, V's descale on the output and the rows'
// references as StoreOutput takes them.
__device__ __forceinline__ void FinishFp8(float (&o)[kMTiles][kDv / 8][4],
                                          float (&row_max)[kMTiles][2],
                                          const AttentionParams& p,
                                          const BlockPlan& w) {
  DescaleOutput(o, p, w);
  ShiftReferences(row_max);
}

// The softmax scale * log2(e) of block w's rows (FP8: Q's and K's descale
// factors folded in).
__device__ __forceinline__ float ScaleLog2(const AttentionParams& p,
                                           const BlockPlan& w) {
  if constexpr (!kFp8) return p.scale_log2;
  const int kvh = w.h / (p.heads / p.kv_heads);
  return p.scale_log2 * fp8::Descale(p, p.q_descale, w.b, kvh) *
         fp8::Descale(p, p.k_descale, w.b, kvh);
}

}  // namespace

extern "C" __global__ void __launch_bounds__(kThreads, MIN_BLOCKS)
    attention_fwd(const __grid_constant__ AttentionParams p) {
  extern __shared__ __align__(128) evt_elem smem[];
  evt_elem* q_tile = smem;
  evt_elem* k_tiles = q_tile + kM * kDc;
  evt_elem* v_tiles = k_tiles + kStages * kN * kDc;
  unsigned char* vt =
      reinterpret_cast<unsigned char*>(v_tiles + kStages * kN * kDvc);

  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const BlockPlan w = PlanBlock<kM, kN, kSplits>(p);
  const ScoreScales scales = ScalesOf(p, ScaleLog2(p, w));
  if (w.q0 >= w.seq_q) return;  // Past its sequence: every split alike.
  const int q0 = w.q0;
  const int block0 = w.block0;
  const int num_blocks = w.num_blocks;

  // Stage Q; its group completes with the first K/V tile's.
  LoadTile<kM>(q_tile, Pairs(p.q, w.q), Units(p.q_row_stride), q0, w.seq_q);
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < num_blocks) LoadKvTile(k_tiles, v_tiles, s, p, w, block0 + s);
    CpAsyncCommit();
  }

  const int warp_row0 = warp * 16 * kMTiles;
  // Per-lane parts of the ldmatrix addresses, fixed for the whole pass.
  const unsigned q_lane =
      SmemAddress(q_tile) +
      2 * (warp_row0 + (lane % 8) + ((lane / 8) % 2) * 8) * kDc;
  const unsigned k_base = SmemAddress(k_tiles);
  const unsigned v_base = SmemAddress(v_tiles);
  const unsigned vt_lane = SmemAddress(vt) + lane * kN;
  const int vt_swizzle = (lane % 8) / (8 / kVtChunks);
  const LaneFragments<kDc> f(lane);
  const LaneFragments<kDv> fv(lane);
  unsigned q_frag[kMTiles][kQInRegs ? kKSteps : 1][4];
  float o_acc[kMTiles][kDTiles][4];
  float row_max[kMTiles][2];
  float row_sum[kMTiles][2];
  InitRows(o_acc, row_max, row_sum);

  for (int j = 0; j < num_blocks; ++j) {
    const int stage = j % kStages;
    if (kStages == 1) {
      LoadKvTile(k_tiles, v_tiles, 0, p, w, block0 + j);
      CpAsyncCommit();
    }
    CpAsyncWait<(kStages >= 2 ? kStages - 2 : 0)>();
    __syncthreads();
    if (kStages > 1) {
      // Refill the stage every thread finished reading in iteration j - 1.
      const int next = j + kStages - 1;
      if (next < num_blocks) {
        LoadKvTile(k_tiles, v_tiles, next % kStages, p, w, block0 + next);
      }
      CpAsyncCommit();
    }
    // FP8: V's transpose, read after the barrier below (every thread
    // finished iteration j - 1's reads of it before the one above).
    if constexpr (kFp8) TransposeValues(vt, v_tiles + stage * kN * kDvc);
    if (kQInRegs && j == 0) LoadQFragments<kDc>(q_frag, q_lane, lane);
    // Shared-memory byte addresses of this lane's ldmatrix rows.
    const unsigned k_lane = k_base + 2 * (stage * kN * kDc + f.k_row);
    const unsigned v_lane = v_base + 2 * (stage * kN * kDv + fv.v_row);
    const int kv0 = (block0 + j) * kN;

    // S = Q K^T for this tile. With Q in shared memory nothing is indexed
    // by the k-step, so its loop stays rolled: fully unrolled, ptxas keeps
    // too many fragments in flight and spills at HEAD_DIM 128.
    float s_acc[kMTiles][kNTiles][4];
    QkTile<kMTiles, kN, kDc, kQInRegs, (kQInRegs ? kKSteps : 1),
           (kQInRegs ? kKSteps : 1), kFp8>(s_acc, q_frag, q_lane, k_lane, lane);

    // Softcap; mask keys past seq_k and outside the window (or causal mask).
    PrepareScores<kN>(s_acc, p, w, scales, kv0, q0 + warp_row0, lane);

    // Online softmax; P replaces S in place.
    SoftmaxTile<kProbShift, !kFp8>(s_acc, o_acc, row_max, row_sum, scales.log2);

    // O += P V.
    if constexpr (kFp8) {
      __syncthreads();  // V's transpose written.
      Fp8PvTile(o_acc, s_acc, row_sum, vt_lane, vt_swizzle);
    } else {
      PvTile<kMTiles, kN, kDv>(o_acc, s_acc, v_lane, fv.v_chunk);
    }
    if (kStages == 1) __syncthreads();
  }
  CpAsyncWait<0>();  // Q's copy when no key tile was loaded.

  if constexpr (kFp8) FinishFp8(o_acc, row_max, p, w);
  StoreOutput<kM, kDv, kMTiles, kSplits, kThreads, kDvMem>(
      p, w, q0 + warp_row0, o_acc, row_max, row_sum, lane);
}
