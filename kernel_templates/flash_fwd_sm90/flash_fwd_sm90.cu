// flash_fwd_sm90: attention forward on Hopper's warpgroup tensor cores.
//
// Computes O = softmax(Q K^T * scale) V (see common/attention_params.cuh for
// the layout and masking rules) in one pass over K and V with an online
// softmax, like flash_fwd, but with wgmma (sm_90a only):
//   - a block owns BLOCK_M = 64 * WARPGROUPS query rows of one (batch, head);
//     each warpgroup (4 warps) owns 64 of them, each warp 16, so softmax
//     statistics never cross warps;
//   - Q is staged once in shared memory, the A operand of S = Q K^T;
//   - K/V tiles of BLOCK_N keys stream through a STAGES-deep ring of shared
//     buffers filled with 16-byte cp.async, stored in the 128-byte-swizzle
//     layout the tensor cores read directly: a [rows][HEAD_DIM] tile is
//     HEAD_DIM / 64 blocks of [rows][64], rows of 128 bytes whose 16-byte
//     chunk index is XORed with row mod 8, every block 1024-byte aligned;
//   - S = Q K^T and O += P V run as wgmma m64n64k16 with fp32 accumulators
//     and shared-memory operands through matrix descriptors (Q and K
//     K-major, V read transposed, N-major); P goes from the S accumulators
//     to the A operand of P V in registers (the layouts coincide);
//   - softmax, masks and epilogue are those of common/flash_common.cuh.
//
// Tunables (compile-time macros):
//   WARPGROUPS  warpgroups per block (BLOCK_M = 64 * WARPGROUPS): more reuse
//               each K/V tile, fewer make more blocks to fill the SMs.
//   BLOCK_N     keys per K/V tile (a multiple of 64): larger means fewer
//               barriers and rescales, more registers for S.
//   STAGES      K/V tiles in flight in shared memory (2-3: the next tiles'
//               loads overlap this tile's math).
//   KV_SPLITS   blocks that share one query block's keys (split-KV, for
//               problems with few heads x query blocks): they form a thread
//               block cluster, each computes its range of key tiles, leaves
//               its unnormalised rows in its shared memory and combines a
//               slice of the rows from all of them (distributed shared
//               memory, no global workspace).
//   MIN_BLOCKS  blocks per SM the register allocation must allow.
// Fixed per problem: HEAD_DIM (64 or 128), EVT_BF16.
//
// Grid: (ceil(seq_q / BLOCK_M) * KV_SPLITS, heads, batch), clusters of
// (KV_SPLITS, 1, 1) blocks; block:
// WARPGROUPS * 128 threads; dynamic shared memory
// (BLOCK_M + 2 * STAGES * BLOCK_N) * HEAD_DIM * 2 + 1024 B (the 1024 aligns
// the tiles).
#include "hopper.cuh"

namespace {

using namespace flash;
using namespace hopper;

constexpr int kM = 64 * WARPGROUPS;
constexpr int kN = BLOCK_N;
constexpr int kD = HEAD_DIM;
constexpr int kStages = STAGES;
constexpr int kSplits = KV_SPLITS;
constexpr int kThreads = 128 * WARPGROUPS;
constexpr int kKSteps = kD / 16;  // k-steps of Q K^T.
constexpr int kNTiles = kN / 8;   // n8 tiles of S.
constexpr int kDTiles = kD / 8;   // n8 tiles of O.
static_assert(kN % 64 == 0, "BLOCK_N");
static_assert(kD % 64 == 0, "HEAD_DIM");
static_assert(kStages >= 2, "STAGES");

// Element offset of (row, 16-byte chunk) in a [kRows][kD] tile stored as
// kD / 64 swizzled [kRows][64] blocks.
template <int kRows>
__device__ __forceinline__ int Swizzled(int row, int chunk) {
  return (chunk / 8) * kRows * 64 + row * 64 + (((chunk % 8) ^ (row % 8)) << 3);
}

// Rows [row0, row0 + kRows) of a [seq][kD] matrix into a tile; rows at or
// past `rows` are zero-filled.
template <int kRows>
__device__ __forceinline__ void LoadTile(evt_elem* tile, const evt_elem* g,
                                         long long stride, int row0, int rows) {
  CopyRows<kRows, kD, kThreads>(tile, g, stride, row0, rows, Swizzled<kRows>);
}

__device__ __forceinline__ void WgmmaCommitAndWait() {
  WgmmaCommit();
  WgmmaWait<0>();
}

// Split-KV epilogue (CombineInCluster of common/hopper.cuh): the partial
// rows go where the tiles were.
static_assert(kM * (kPartRowStride<kD> + 2) * 4 <=
                  (kM + 2 * kStages * kN) * kD * 2,
              "partial rows fit where the tiles were");

// Key rows [row0, row0 + kN) of sequence b (K or V at `g`, pages
// `page_stride` apart in a paged kernel) into a tile, as LoadTile.
__device__ __forceinline__ void LoadKeys(evt_elem* tile, const evt_elem* g,
                                         const AttentionParams& p, int b,
                                         long long page_stride,
                                         long long stride, int row0, int rows) {
  CopyKeyRows<kN, kD, kThreads>(tile, g, p, b, page_stride, stride, row0, rows,
                                Swizzled<kN>);
}

}  // namespace

extern "C" __global__ void EVT_CLUSTER_DIMS __launch_bounds__(kThreads,
                                                              MIN_BLOCKS)
    attention_fwd(const __grid_constant__ AttentionParams p) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  // The swizzle pattern repeats every 1024 bytes of address.
  evt_elem* q_tile = reinterpret_cast<evt_elem*>(
      (reinterpret_cast<unsigned long long>(smem_raw) + 1023) & ~1023ull);
  evt_elem* k_tiles = q_tile + kM * kD;
  evt_elem* v_tiles = k_tiles + kStages * kN * kD;

  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const BlockPlan w = PlanBlock<kM, kN, kSplits>(p);
  const ScoreScales scales = ScalesOf(p, p.scale_log2);
  if (w.q0 >= w.seq_q) return;  // Past its sequence: every split alike.

  // Stage Q; its group completes with the first K/V tile's.
  LoadTile<kM>(q_tile, w.q, p.q_row_stride, w.q0, w.seq_q);
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < w.num_blocks) {
      LoadKeys(k_tiles + s * kN * kD, w.k, p, w.b, p.k_batch_stride,
               p.k_row_stride, (w.block0 + s) * kN, w.seq_k);
      LoadKeys(v_tiles + s * kN * kD, w.v, p, w.b, p.v_batch_stride,
               p.v_row_stride, (w.block0 + s) * kN, w.seq_k);
    }
    CpAsyncCommit();
  }

  const int warp_row0 = warp * 16;  // Warp w of warpgroup g: 64 g + 16 (w % 4).
  const unsigned q_base = SmemAddress(q_tile);
  float o_acc[1][kDTiles][4];
  float row_max[1][2] = {{NegInf(), NegInf()}};
  float row_sum[1][2] = {{0.f, 0.f}};
#pragma unroll
  for (int dt = 0; dt < kDTiles; ++dt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) o_acc[0][dt][i] = 0.f;
  }

  for (int j = 0; j < w.num_blocks; ++j) {
    const int stage = j % kStages;
    CpAsyncWait<kStages - 2>();
    // The tensor cores read shared memory through the async proxy.
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    // Refill the stage every thread finished reading in iteration j - 1.
    const int next = j + kStages - 1;
    if (next < w.num_blocks) {
      const int s = next % kStages;
      LoadKeys(k_tiles + s * kN * kD, w.k, p, w.b, p.k_batch_stride,
               p.k_row_stride, (w.block0 + next) * kN, w.seq_k);
      LoadKeys(v_tiles + s * kN * kD, w.v, p, w.b, p.v_batch_stride,
               p.v_row_stride, (w.block0 + next) * kN, w.seq_k);
    }
    CpAsyncCommit();
    const unsigned k_stage = SmemAddress(k_tiles + stage * kN * kD);
    const unsigned v_stage = SmemAddress(v_tiles + stage * kN * kD);

    // S = Q K^T, both operands from shared memory (Q kept in registers
    // across iterations was found overwritten by ptxas 13.0 after the first
    // tile's wgmma had read it). k-step ks reads the 16 columns at byte
    // 32 * (ks % 4) of column block ks / 4; n64 chunk c keys 64 c ..
    // 64 c + 63; warpgroup g its 64 rows of Q.
    const unsigned q_group = q_base + (warp / 4) * 64 * kRowBytes;
    float s_acc[1][kNTiles][4];
    WgmmaFence();
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      const unsigned k_step = (ks / 4) * kN * kRowBytes + (ks % 4) * 32;
      const unsigned long long q_desc =
          Descriptor(q_group + (ks / 4) * kM * kRowBytes + (ks % 4) * 32);
#pragma unroll
      for (int c = 0; c < kN / 64; ++c) {
        WgmmaSS(N64(s_acc[0], c), q_desc,
                Descriptor(k_stage + k_step + c * 64 * kRowBytes), ks > 0);
      }
    }
    WgmmaCommitAndWait();
    FenceOperands(s_acc[0]);

    const int kv0 = (w.block0 + j) * kN;
    PrepareScores<kN>(s_acc, p, w, scales, kv0, w.q0 + warp_row0, lane);
    SoftmaxTile(s_acc, o_acc, row_max, row_sum, scales.log2);

    // O += P V: for key step t, rows 16 t .. 16 t + 15 of the V tile; output
    // columns 64 db .. 64 db + 63 from column block db.
    unsigned pf[kN / 16][4];
#pragma unroll
    for (int t = 0; t < kN / 16; ++t) PackProbs(s_acc, 0, t, pf[t]);
    WgmmaFence();
#pragma unroll
    for (int t = 0; t < kN / 16; ++t) {
#pragma unroll
      for (int db = 0; db < kD / 64; ++db) {
        WgmmaRS(N64(o_acc[0], db), pf[t],
                Descriptor(v_stage + db * kN * kRowBytes + t * 16 * kRowBytes));
      }
    }
    WgmmaCommitAndWait();
    FenceOperands(o_acc[0]);
  }
  CpAsyncWait<0>();  // Q's copy when no key tile was loaded.

  if constexpr (kSplits == 1) {
    StoreOutput<kM, kD, 1, 1, kThreads>(p, w, w.q0 + warp_row0, o_acc, row_max,
                                        row_sum, lane);
  } else {
    __syncthreads();  // Every warpgroup is done with the tiles.
    CombineInCluster<kM, kD, kSplits>(p, w, reinterpret_cast<float*>(q_tile),
                                      warp_row0, o_acc, row_max, row_sum, lane,
                                      threadIdx.x, kThreads);
  }
}
