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
// same as HEAD_DIM unless defined), EVT_BF16.
//
// Grid: (ceil(seq_q / BLOCK_M) * KV_SPLITS, heads, batch); block:
// NUM_WARPS * 32 threads;
// dynamic shared memory ((BLOCK_M + STAGES * BLOCK_N) * D + STAGES * BLOCK_N
// * Dv) * 2 B, D and Dv the head dims rounded up to multiples of 64.
#include "flash_common.cuh"

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
constexpr int kMTiles = kM / (16 * kWarps);  // 16-row MMA tiles per warp.
constexpr int kKSteps = kD / 16;             // k-steps of Q K^T.
constexpr int kNTiles = kN / 8;              // n8 tiles of S.
constexpr int kDTiles = kDv / 8;             // n8 tiles of O.
static_assert(kM % (16 * kWarps) == 0 && kMTiles >= 1, "BLOCK_M");
static_assert(kN % 16 == 0, "BLOCK_N");
static_assert(kDMem % 16 == 0, "HEAD_DIM");
static_assert(kDvMem % 16 == 0, "HEAD_DIM_V");
static_assert(kStages >= 1, "STAGES");

// Element offset of (row, 16-byte chunk) in a swizzled [rows][kCols] tile.
template <int kCols>
__device__ __forceinline__ int Swizzled(int row, int chunk) {
  return row * kCols + ((chunk ^ (row & 7)) << 3);
}

// Rows [row0, row0 + kRows) of a [seq][kD] matrix into a swizzled tile; rows
// at or past `rows` are zero-filled.
template <int kRows>
__device__ __forceinline__ void LoadTile(evt_elem* tile, const evt_elem* g,
                                         long long stride, int row0, int rows) {
  CopyRows<kRows, kD, kThreads, kDMem>(tile, g, stride, row0, rows,
                                       Swizzled<kD>);
}

// Key rows [row0, row0 + kN) of sequence b (K, or V with kCols = kDv, at
// `g`, pages `page_stride` apart in a paged kernel) into a tile, as
// LoadTile.
template <int kCols = kD, int kColsMem = kDMem>
__device__ __forceinline__ void LoadKeys(evt_elem* tile, const evt_elem* g,
                                         const AttentionParams& p, int b,
                                         long long page_stride,
                                         long long stride, int row0, int rows) {
  CopyKeyRows<kN, kCols, kThreads, kColsMem>(tile, g, p, b, page_stride, stride,
                                             row0, rows, Swizzled<kCols>);
}

// V's rows, as LoadKeys.
__device__ __forceinline__ void LoadValues(evt_elem* tile, const evt_elem* g,
                                           const AttentionParams& p, int b,
                                           int row0, int rows) {
  LoadKeys<kDv, kDvMem>(tile, g, p, b, p.v_batch_stride, p.v_row_stride, row0,
                        rows);
}

}  // namespace

extern "C" __global__ void __launch_bounds__(kThreads, MIN_BLOCKS)
    attention_fwd(const __grid_constant__ AttentionParams p) {
  extern __shared__ __align__(128) evt_elem smem[];
  evt_elem* q_tile = smem;
  evt_elem* k_tiles = q_tile + kM * kD;
  evt_elem* v_tiles = k_tiles + kStages * kN * kD;

  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const BlockPlan w = PlanBlock<kM, kN, kSplits>(p);
  const ScoreScales scales = ScalesOf(p, p.scale_log2);
  if (w.q0 >= w.seq_q) return;  // Past its sequence: every split alike.
  const int q0 = w.q0;
  const int block0 = w.block0;
  const int num_blocks = w.num_blocks;
  const evt_elem* q = w.q;
  const evt_elem* k = w.k;
  const evt_elem* v = w.v;

  // Stage Q; its group completes with the first K/V tile's.
  LoadTile<kM>(q_tile, q, p.q_row_stride, q0, w.seq_q);
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < num_blocks) {
      LoadKeys(k_tiles + s * kN * kD, k, p, w.b, p.k_batch_stride,
               p.k_row_stride, (block0 + s) * kN, w.seq_k);
      LoadValues(v_tiles + s * kN * kDv, v, p, w.b, (block0 + s) * kN, w.seq_k);
    }
    CpAsyncCommit();
  }

  const int warp_row0 = warp * 16 * kMTiles;
  // Per-lane parts of the ldmatrix addresses, fixed for the whole pass.
  const unsigned q_lane =
      SmemAddress(q_tile) +
      2 * (warp_row0 + (lane % 8) + ((lane / 8) % 2) * 8) * kD;
  const unsigned k_base = SmemAddress(k_tiles);
  const unsigned v_base = SmemAddress(v_tiles);
  const LaneFragments<kD> f(lane);
  const LaneFragments<kDv> fv(lane);
  unsigned q_frag[kMTiles][kQInRegs ? kKSteps : 1][4];
  float o_acc[kMTiles][kDTiles][4];
  float row_max[kMTiles][2];
  float row_sum[kMTiles][2];
  InitRows(o_acc, row_max, row_sum);

  for (int j = 0; j < num_blocks; ++j) {
    const int stage = j % kStages;
    if (kStages == 1) {
      LoadKeys(k_tiles, k, p, w.b, p.k_batch_stride, p.k_row_stride,
               (block0 + j) * kN, w.seq_k);
      LoadValues(v_tiles, v, p, w.b, (block0 + j) * kN, w.seq_k);
      CpAsyncCommit();
    }
    CpAsyncWait<(kStages >= 2 ? kStages - 2 : 0)>();
    __syncthreads();
    if (kStages > 1) {
      // Refill the stage every thread finished reading in iteration j - 1.
      const int next = j + kStages - 1;
      if (next < num_blocks) {
        const int s = next % kStages;
        LoadKeys(k_tiles + s * kN * kD, k, p, w.b, p.k_batch_stride,
                 p.k_row_stride, (block0 + next) * kN, w.seq_k);
        LoadValues(v_tiles + s * kN * kDv, v, p, w.b, (block0 + next) * kN,
                   w.seq_k);
      }
      CpAsyncCommit();
    }
    if (kQInRegs && j == 0) LoadQFragments<kD>(q_frag, q_lane, lane);
    // Shared-memory byte addresses of this lane's ldmatrix rows.
    const unsigned k_lane = k_base + 2 * (stage * kN * kD + f.k_row);
    const unsigned v_lane = v_base + 2 * (stage * kN * kDv + fv.v_row);
    const int kv0 = (block0 + j) * kN;

    // S = Q K^T for this tile. With Q in shared memory nothing is indexed
    // by the k-step, so its loop stays rolled: fully unrolled, ptxas keeps
    // too many fragments in flight and spills at HEAD_DIM 128.
    float s_acc[kMTiles][kNTiles][4];
    QkTile<kMTiles, kN, kD, kQInRegs, (kQInRegs ? kKSteps : 1)>(
        s_acc, q_frag, q_lane, k_lane, lane);

    // Softcap; mask keys past seq_k and outside the window (or causal mask).
    PrepareScores<kN>(s_acc, p, w, scales, kv0, q0 + warp_row0, lane);

    // Online softmax; P replaces S in place.
    SoftmaxTile(s_acc, o_acc, row_max, row_sum, scales.log2);

    // O += P V.
    PvTile<kMTiles, kN, kDv>(o_acc, s_acc, v_lane, fv.v_chunk);
    if (kStages == 1) __syncthreads();
  }
  CpAsyncWait<0>();  // Q's copy when no key tile was loaded.

  StoreOutput<kM, kDv, kMTiles, kSplits, kThreads, kDvMem>(
      p, w, q0 + warp_row0, o_acc, row_max, row_sum, lane);
}
