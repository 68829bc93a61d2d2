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
// Fixed per problem: HEAD_DIM (64 or 128), EVT_BF16.
//
// Grid: (ceil(seq_q / BLOCK_M) * KV_SPLITS, heads, batch); block:
// NUM_WARPS * 32 threads;
// dynamic shared memory (BLOCK_M + 2 * STAGES * BLOCK_N) * HEAD_DIM * 2 B.
#include "attention_params.cuh"
#include "dtype.cuh"

namespace {

constexpr int kM = BLOCK_M;
constexpr int kN = BLOCK_N;
constexpr int kD = HEAD_DIM;
constexpr int kWarps = NUM_WARPS;
constexpr int kStages = STAGES;
constexpr bool kQInRegs = Q_IN_REGS != 0;
constexpr int kSplits = KV_SPLITS;
constexpr int kThreads = kWarps * 32;
constexpr int kMTiles = kM / (16 * kWarps);  // 16-row MMA tiles per warp.
constexpr int kChunks = kD / 8;              // 16-byte chunks per row.
constexpr int kKSteps = kD / 16;             // k-steps of Q K^T.
constexpr int kNTiles = kN / 8;              // n8 tiles of S.
constexpr int kDTiles = kD / 8;              // n8 tiles of O.
static_assert(kM % (16 * kWarps) == 0 && kMTiles >= 1, "BLOCK_M");
static_assert(kN % 16 == 0, "BLOCK_N");
static_assert(kD % 16 == 0, "HEAD_DIM");
static_assert(kStages >= 1, "STAGES");

__device__ __forceinline__ unsigned SmemAddress(const void* p) {
  unsigned long long a;
  asm("cvta.to.shared.u64 %0, %1;" : "=l"(a) : "l"(p));
  return static_cast<unsigned>(a);
}

// Element offset of (row, 16-byte chunk) in a swizzled [rows][kD] tile.
__device__ __forceinline__ int Swizzled(int row, int chunk) {
  return row * kD + ((chunk ^ (row & 7)) << 3);
}

// The rows a lane hands to ldmatrix are all congruent to the lane mod 8, so
// their swizzled chunk depends on the lane and the logical chunk only: the
// element offset of `chunk` within such a row.
__device__ __forceinline__ int LaneChunk(int chunk, int lane) {
  return (chunk ^ (lane & 7)) << 3;
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

// Rows [row0, row0 + kRows) of a [seq][kD] matrix into a swizzled tile; rows
// at or past `rows` are zero-filled.
template <int kRows>
__device__ __forceinline__ void LoadTile(evt_elem* tile, const evt_elem* g,
                                         long long stride, int row0, int rows) {
  for (int idx = threadIdx.x; idx < kRows * kChunks; idx += kThreads) {
    const int r = idx / kChunks;
    const int c = idx % kChunks;
    const bool valid = row0 + r < rows;
    const evt_elem* src = g + (valid ? (row0 + r) * stride : 0) + c * 8;
    CpAsync16(SmemAddress(tile + Swizzled(r, c)), src, valid);
  }
}

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

// c += a * b for one m16n8k16 tile.
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

}  // namespace

extern "C" __global__ void __launch_bounds__(kThreads, MIN_BLOCKS)
    attention_fwd(const __grid_constant__ AttentionParams p) {
  extern __shared__ __align__(128) evt_elem smem[];
  evt_elem* q_tile = smem;
  evt_elem* k_tiles = q_tile + kM * kD;
  evt_elem* v_tiles = k_tiles + kStages * kN * kD;

  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int b = blockIdx.z;
  const int h = blockIdx.y;
  const int kvh = h / (p.heads / p.kv_heads);
  // Last query blocks first: with a causal mask they see the most keys, so
  // the longest blocks start first (and the order does not matter otherwise).
  const int q_blocks = gridDim.x / kSplits;
  const int q_block = q_blocks - 1 - blockIdx.x / kSplits;
  const int split = blockIdx.x % kSplits;
  const int q0 = q_block * kM;
  const int shift = p.seq_k - p.seq_q;  // Causal: row i sees j <= i + shift.

  const evt_elem* q = static_cast<const evt_elem*>(p.q) + b * p.q_batch_stride +
                      h * p.q_head_stride;
  const evt_elem* k = static_cast<const evt_elem*>(p.k) + b * p.k_batch_stride +
                      kvh * p.k_head_stride;
  const evt_elem* v = static_cast<const evt_elem*>(p.v) + b * p.v_batch_stride +
                      kvh * p.v_head_stride;

  // Keys any row of this block may see.
  int kv_end = p.seq_k;
  if (p.causal) {
    const int last_row = min(p.seq_q - 1, q0 + kM - 1);
    kv_end = min(p.seq_k, max(0, last_row + shift + 1));
  }
  // This block's share of the key tiles: a contiguous range per split.
  const int all_blocks = (kv_end + kN - 1) / kN;
  const int per_split = (all_blocks + kSplits - 1) / kSplits;
  const int block0 = split * per_split;
  const int num_blocks = max(0, min(all_blocks, block0 + per_split) - block0);

  // Stage Q; its group completes with the first K/V tile's.
  LoadTile<kM>(q_tile, q, p.q_row_stride, q0, p.seq_q);
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < num_blocks) {
      LoadTile<kN>(k_tiles + s * kN * kD, k, p.k_row_stride, (block0 + s) * kN,
                   p.seq_k);
      LoadTile<kN>(v_tiles + s * kN * kD, v, p.v_row_stride, (block0 + s) * kN,
                   p.seq_k);
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
  const int k_row = ((lane % 8) + (lane / 16) * 8) * kD;
  const int v_row = ((lane % 8) + ((lane / 8) % 2) * 8) * kD;
  int v_chunk[4];
#pragma unroll
  for (int d = 0; d < 4; ++d) v_chunk[d] = LaneChunk(d * 2 + lane / 16, lane);
  unsigned q_frag[kMTiles][kQInRegs ? kKSteps : 1][4];
  float o_acc[kMTiles][kDTiles][4];
  float row_max[kMTiles][2];
  float row_sum[kMTiles][2];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) o_acc[mt][dt][i] = 0.f;
    }
    row_max[mt][0] = row_max[mt][1] = NegInf();
    row_sum[mt][0] = row_sum[mt][1] = 0.f;
  }

  for (int j = 0; j < num_blocks; ++j) {
    const int stage = j % kStages;
    if (kStages == 1) {
      LoadTile<kN>(k_tiles, k, p.k_row_stride, (block0 + j) * kN, p.seq_k);
      LoadTile<kN>(v_tiles, v, p.v_row_stride, (block0 + j) * kN, p.seq_k);
      CpAsyncCommit();
    }
    CpAsyncWait<(kStages >= 2 ? kStages - 2 : 0)>();
    __syncthreads();
    if (kStages > 1) {
      // Refill the stage every thread finished reading in iteration j - 1.
      const int next = j + kStages - 1;
      if (next < num_blocks) {
        const int s = next % kStages;
        LoadTile<kN>(k_tiles + s * kN * kD, k, p.k_row_stride,
                     (block0 + next) * kN, p.seq_k);
        LoadTile<kN>(v_tiles + s * kN * kD, v, p.v_row_stride,
                     (block0 + next) * kN, p.seq_k);
      }
      CpAsyncCommit();
    }
    if (kQInRegs && j == 0) {
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
        for (int ks = 0; ks < kKSteps; ++ks) {
          LdMatrixX4(q_frag[mt][ks],
                     q_lane + 2 * (mt * 16 * kD +
                                   LaneChunk(ks * 2 + lane / 16, lane)));
        }
      }
    }
    // Shared-memory byte addresses of this lane's ldmatrix rows.
    const unsigned k_lane = k_base + 2 * (stage * kN * kD + k_row);
    const unsigned v_lane = v_base + 2 * (stage * kN * kD + v_row);
    const int kv0 = (block0 + j) * kN;

    // S = Q K^T for this tile.
    float s_acc[kMTiles][kNTiles][4];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
        for (int i = 0; i < 4; ++i) s_acc[mt][nt][i] = 0.f;
      }
    }
    // With Q in shared memory nothing is indexed by ks, so the loop stays
    // rolled: fully unrolled, ptxas keeps too many fragments in flight and
    // spills at HEAD_DIM 128.
#pragma unroll(kQInRegs ? kKSteps : 1)
    for (int ks = 0; ks < kKSteps; ++ks) {
      unsigned qf[kMTiles][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        if constexpr (kQInRegs) {
#pragma unroll
          for (int i = 0; i < 4; ++i) qf[mt][i] = q_frag[mt][ks][i];
        } else {
          LdMatrixX4(qf[mt],
                     q_lane + 2 * (mt * 16 * kD +
                                   LaneChunk(ks * 2 + lane / 16, lane)));
        }
      }
      const unsigned k_ks =
          k_lane + 2 * LaneChunk(ks * 2 + (lane / 8) % 2, lane);
#pragma unroll
      for (int kb = 0; kb < kN / 16; ++kb) {
        unsigned kf[4];
        LdMatrixX4(kf, k_ks + 2 * kb * 16 * kD);
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          Mma(s_acc[mt][2 * kb], qf[mt], kf[0], kf[1]);
          Mma(s_acc[mt][2 * kb + 1], qf[mt], kf[2], kf[3]);
        }
      }
    }

    // Mask keys past seq_k and, when causal, above the diagonal.
    const bool need_mask =
        kv0 + kN > p.seq_k || (p.causal && kv0 + kN - 1 > q0 + shift);
    if (need_mask) {
      // Element (nt, i) of a row holds key kv0 + c + nt * 8 + (i & 1), with
      // c = (lane % 4) * 2: compare the compile-time part against per-row
      // limits, so no per-element index lives in a register.
      const int c = kv0 + (lane % 4) * 2;
      const int key_limit = p.seq_k - c;  // Keys at or past it are masked.
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int row = q0 + warp_row0 + mt * 16 + lane / 4 + half * 8;
          const int limit =
              p.causal ? min(key_limit, row + shift + 1 - c) : key_limit;
#pragma unroll
          for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
            for (int i = 0; i < 2; ++i) {
              if (nt * 8 + i >= limit) s_acc[mt][nt][2 * half + i] = NegInf();
            }
          }
        }
      }
    }

    // Online softmax; P replaces S in place.
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float mx = NegInf();
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt) {
          mx = fmaxf(
              mx, fmaxf(s_acc[mt][nt][2 * half], s_acc[mt][nt][2 * half + 1]));
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float new_max = fmaxf(row_max[mt][half], mx * p.scale_log2);
        // A row that has seen no key keeps a zero reference: its scores are
        // all -inf and exp2(-inf) = 0, never NaN.
        const float ref = new_max == NegInf() ? 0.f : new_max;
        const float correction = Exp2(row_max[mt][half] - ref);
        row_max[mt][half] = new_max;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            float& s = s_acc[mt][nt][2 * half + i];
            s = Exp2(fmaf(s, p.scale_log2, -ref));
            sum += s;
          }
        }
        row_sum[mt][half] = row_sum[mt][half] * correction + sum;
#pragma unroll
        for (int dt = 0; dt < kDTiles; ++dt) {
          o_acc[mt][dt][2 * half] *= correction;
          o_acc[mt][dt][2 * half + 1] *= correction;
        }
      }
    }

    // O += P V.
#pragma unroll
    for (int t = 0; t < kN / 16; ++t) {
      unsigned pf[kMTiles][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        pf[mt][0] = Pack(s_acc[mt][2 * t][0], s_acc[mt][2 * t][1]);
        pf[mt][1] = Pack(s_acc[mt][2 * t][2], s_acc[mt][2 * t][3]);
        pf[mt][2] = Pack(s_acc[mt][2 * t + 1][0], s_acc[mt][2 * t + 1][1]);
        pf[mt][3] = Pack(s_acc[mt][2 * t + 1][2], s_acc[mt][2 * t + 1][3]);
      }
#pragma unroll
      for (int dp = 0; dp < kD / 16; ++dp) {
        unsigned vf[4];
        // Chunks 8..15 differ from 0..7 by a constant under the swizzle.
        LdMatrixX4Trans(
            vf, v_lane + 2 * (t * 16 * kD + (dp / 4) * 64 + v_chunk[dp % 4]));
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          Mma(o_acc[mt][2 * dp], pf[mt], vf[0], vf[1]);
          Mma(o_acc[mt][2 * dp + 1], pf[mt], vf[2], vf[3]);
        }
      }
    }
    if (kStages == 1) __syncthreads();
  }
  CpAsyncWait<0>();  // Q's copy when no key tile was loaded.

  evt_elem* o =
      static_cast<evt_elem*>(p.o) + b * p.o_batch_stride + h * p.o_head_stride;
  if constexpr (kSplits == 1) {
    // Normalise and store; rows past seq_q are never written.
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float sum = QuadSum(row_sum[mt][half]);
        const float inv = sum > 0.f ? 1.f / sum : 0.f;
        const int row = q0 + warp_row0 + mt * 16 + lane / 4 + half * 8;
        if (row >= p.seq_q) continue;
        evt_elem* out = o + row * p.o_row_stride + (lane % 4) * 2;
#pragma unroll
        for (int dt = 0; dt < kDTiles; ++dt) {
          *reinterpret_cast<unsigned*>(out + dt * 8) = Pack(
              o_acc[mt][dt][2 * half] * inv, o_acc[mt][dt][2 * half + 1] * inv);
        }
      }
    }
  } else {
    // Split-KV: store this split's unnormalised rows with their max and sum
    // (fp32), and let the block that finishes last combine the splits.
    // Workspace: partial O [batch*heads][splits][q_rows][head_dim], then
    // (max, sum) [batch*heads][splits][q_rows][2]; q_rows = q_blocks * kM.
    const long long head = static_cast<long long>(b) * p.heads + h;
    const long long q_rows = static_cast<long long>(q_blocks) * kM;
    float* part_o = p.workspace;
    float* part_ml =
        p.workspace + p.batch * p.heads * (long long)kSplits * q_rows * kD;
    const long long mine = (head * kSplits + split) * q_rows;
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float sum = QuadSum(row_sum[mt][half]);
        const int row = q0 + warp_row0 + mt * 16 + lane / 4 + half * 8;
        float* out = part_o + (mine + row) * kD + (lane % 4) * 2;
#pragma unroll
        for (int dt = 0; dt < kDTiles; ++dt) {
          out[dt * 8] = o_acc[mt][dt][2 * half];
          out[dt * 8 + 1] = o_acc[mt][dt][2 * half + 1];
        }
        if (lane % 4 == 0) {
          part_ml[(mine + row) * 2] = row_max[mt][half];
          part_ml[(mine + row) * 2 + 1] = sum;
        }
      }
    }
    // Publish, then count this split in; the last one combines.
    __threadfence();
    __syncthreads();
    __shared__ int last;
    if (threadIdx.x == 0) {
      int* counter = p.counters + head * q_blocks + q_block;
      last = atomicAdd(counter, 1) == kSplits - 1;
      if (last) *counter = 0;  // Ready for the next launch.
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    // Eight columns per thread and step, loads issued together: this runs
    // on the critical path of the whole launch.
    constexpr int kVec = 8;
    for (int idx = threadIdx.x; idx < kM * kD / kVec; idx += kThreads) {
      const int row = q0 + idx / (kD / kVec);
      const int col = (idx % (kD / kVec)) * kVec;
      if (row >= p.seq_q) continue;
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
      float mx = NegInf();
#pragma unroll
      for (int s = 0; s < kSplits; ++s) mx = fmaxf(mx, m[s]);
      float total = 0.f;
      float acc[kVec] = {};
      if (mx != NegInf()) {
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
      *reinterpret_cast<uint4*>(o + row * p.o_row_stride + col) = packed;
    }
  }
}
