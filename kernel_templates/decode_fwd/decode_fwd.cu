// decode_fwd: attention for a few queries over many keys (LLM decode and
// speculative decode), built to stream K and V at memory speed.
//
// Computes O = softmax(Q K^T * scale) V (see common/attention_params.cuh for
// the layout and masking rules). Decode is bound by the bytes of K and V, so
// the kernel is organised around reading each of them once:
//   - the query rows that share a KV head (heads / kv_heads query heads times
//     seq_q queries) are packed into the M dimension of the MMA: packed row r
//     is query r / group of head kv_head * group + r % group. A block owns
//     ROWS packed rows of one (batch, kv_head), so with GQA every K/V tile is
//     read once for all the heads that use it;
//   - its keys are split over KV_SPLITS blocks (flash-decoding), enough blocks
//     to keep every SM streaming when batch x kv_heads is small;
//   - inside a block the WARPS warps split the keys, not the rows: warp w
//     takes key tiles w, w + WARPS, ... of TILE_N keys, each through its own
//     STAGES-deep ring of shared buffers filled with 16-byte cp.async (L2
//     evict-first: K and V are read once), so the main loop has no
//     block-wide barrier; every warp keeps an online
//     softmax and an fp32 output for all ROWS rows, rescaling the output
//     only when a row's max rises by more than 2^8 (the probabilities are
//     taken against a reference that may trail the max by that much);
//   - S = Q K^T and O += P V on mma.sync m16n8k16 (sm_80 and newer), K and V
//     read with ldmatrix from tiles swizzled by 16-byte chunk XOR row mod 8;
//   - at the end the warps merge through shared memory, and with KV_SPLITS >
//     1 each block stores its merged rows (fp32, unnormalised, with their max
//     and sum) to the workspace; the last block of a (batch, kv_head, row
//     block) to finish merges the splits and writes O, issuing its loads
//     together (the merge is on the launch's critical path).
//
// Tunables (compile-time macros):
//   ROWS       packed query rows per block (16, 32, 64): at least
//              group * seq_q reads K/V once; more costs registers.
//   TILE_N     keys per warp tile (multiple of 16).
//   WARPS      warps per block, each streaming its own key tiles.
//   STAGES     key tiles in flight per warp (2-4).
//   KV_SPLITS  blocks sharing one row block's keys.
//   Q_IN_REGS  1: Q fragments stay in registers; 0: they are re-read from
//              shared memory for every key tile (fewer registers).
// Fixed per problem: HEAD_DIM (32, 64, 80, 96, 128, 192 or 256; 64 or 128
// with e4m3 K/V), EVT_BF16, EVT_KV_FP8. Rows in shared memory are padded to
// the next multiple of 64 (D below); only HEAD_DIM's columns are copied and
// computed (the padding is never read).
//
// An FP8 KV cache (EVT_KV_FP8, common/fp8.cuh): K and V are e4m3, one byte
// an element, and stream at half the bytes. Their tiles are read from shared
// memory in whole words and dequantized in registers, in an order that
// suits bytes rather than ldmatrix: lane (g = lane / 4, t = lane % 4) takes
// from key row g of each 8-key tile the 16 bytes at d = 64 j + 16 t, and
// gives MMA k-step 4 j + s the bytes 4 s .. 4 s + 3 as its k = 2 t, 2 t + 1,
// 2 t + 8, 2 t + 9 (Q's fragments are loaded in the same order, so Q K^T is
// unchanged); for P V it takes from keys 2 t, 2 t + 1, 2 t + 8 and 2 t + 9
// of each 16-key step the HEAD_DIM / 8 bytes at d = g HEAD_DIM / 8, byte i
// serving output tile i, so that output tile i's column n is d = n
// HEAD_DIM / 8 + i (undone when the rows are stored). Both products run
// in fp16 whatever the dtype (e4m3 values and probabilities are exact or
// nearly so there; a bf16 Q tile is first rescaled into fp16 by a power of
// two, QTileToHalf); K's descale factor folds into the softmax scale and
// V's into the output.
//
// Lengths on the device (common/attention_params.cuh): each sequence's own
// query and key counts, up to seq_q and seq_k; the grid is sized by those
// maxima and a row block past its sequence's rows returns at once. Keys
// past a sequence's count are never read (zero-filled copies, masked).
//
// Grid: (ceil(seq_q * group / ROWS) * KV_SPLITS, kv_heads, batch); block:
// 32 * WARPS threads; dynamic shared memory: the larger of the Q tile plus
// the warps' rings, (ROWS * 2 + WARPS * STAGES * 2 * TILE_N * KV_BYTES) *
// D B (KV_BYTES 1 for e4m3 K/V, else 2),
// the merge area WARPS * ROWS * (D + 10) * 4 B and, with KV_SPLITS >
// 8, the splits' (max, sum) ROWS * KV_SPLITS * 8 B; plus 16 B. With
// KV_SPLITS > 1 the workspace holds batch * kv_heads * row_blocks *
// KV_SPLITS * ROWS * (D + 2) floats and one counter per (batch,
// kv_head, row block).
#include "flash_common.cuh"
#include "fp8.cuh"

namespace {

using namespace flash;

constexpr int kRows = ROWS;
constexpr int kN = TILE_N;
constexpr int kWarps = WARPS;
constexpr int kStages = STAGES;
constexpr int kSplits = KV_SPLITS;
constexpr bool kQInRegs = Q_IN_REGS != 0;
constexpr int kDMem = kHeadDimMem;  // In memory; computed: kD (flash_common).
constexpr int kD = kHeadDimIn64s;
constexpr int kThreads = 32 * kWarps;
constexpr int kMTiles = kRows / 16;  // 16-row MMA tiles, all in every warp.
constexpr int kKSteps = kDMem / 16;  // k-steps of Q K^T.
constexpr int kNTiles = kN / 8;      // n8 tiles of S.
constexpr int kDTiles = kDMem / 8;   // n8 tiles of O.
constexpr int kChunks = kD / 8;      // 16-byte chunks per row.
constexpr int kTile = kN * kD;       // Elements of one K or V tile.
constexpr int kKvBytes = kKvFp8 ? 1 : 2;
constexpr int kTileBytes = kTile * kKvBytes;
constexpr int kKvChunks = kD * kKvBytes / 16;  // 16-byte chunks per K/V row.
static_assert(kRows % 16 == 0 && kMTiles >= 1, "ROWS");
static_assert(kN % 16 == 0, "TILE_N");
static_assert(kPageSize % kN == 0 || kN % kPageSize == 0,
              "TILE_N: a paged kernel's tile in one page, or whole pages");
// Pages a key tile spans (several where pages are smaller than the tile),
// and the tile's rows in each.
constexpr int kTilePages = kPageSize > 0 && kN > kPageSize ? kN / kPageSize : 1;
constexpr int kPageRows = kN / kTilePages;
constexpr int kMemChunks = kDMem / 8;  // Of a row in memory.
static_assert(kDMem % 16 == 0 && kChunks <= 32, "HEAD_DIM: 16 to 256");
static_assert(!kKvFp8 || kDMem == kD, "HEAD_DIM: 64 or 128 with e4m3 K/V");
static_assert(kStages >= 2, "STAGES");

// Element offset of (row, 16-byte chunk) in a swizzled [rows][kD] tile.
__device__ __forceinline__ int Swizzled(int row, int chunk) {
  return row * kD + ((chunk ^ (row & 7)) << 3);
}

// What one block computes.
struct DecodePlan {
  int b, kvh, group, rows, r0, shift;
  int row_block, row_blocks, split;
  // Keys any row of the block may see: below kv_end, and for query q in
  // [q + shift - WindowLeft(p), q + shift + WindowRight(p)].
  int kv_end;
  int tile0, tiles;  // This split's key tiles.
  Sequence seq;      // Sequence b: its lengths and row offsets.
};

__device__ __forceinline__ DecodePlan PlanDecode(const AttentionParams& p) {
  DecodePlan w;
  w.b = blockIdx.z;
  w.kvh = blockIdx.y;
  w.group = p.heads / p.kv_heads;
  w.seq = SequenceOf(p, w.b);
  w.rows = w.seq.seq_q * w.group;
  w.row_blocks = gridDim.x / kSplits;
  w.row_block = blockIdx.x / kSplits;
  w.split = blockIdx.x % kSplits;
  w.r0 = w.row_block * kRows;
  w.shift = w.seq.seq_k - w.seq.seq_q;
  const int last_q = min(w.seq.seq_q - 1, (w.r0 + kRows - 1) / w.group);
  w.kv_end = w.r0 < w.rows ? w.seq.seq_k : 0;
  if (kWindow) {
    w.kv_end = min(w.kv_end, max(0, last_q + w.shift + WindowRight(p) + 1));
  } else if (p.causal) {
    w.kv_end = min(w.kv_end, max(0, last_q + w.shift + 1));
  }
  const int first =
      kWindow ? max(0, w.r0 / w.group + w.shift - WindowLeft(p)) / kN : 0;
  const int tiles = max(0, (w.kv_end + kN - 1) / kN - first);
  const int per_split = (tiles + kSplits - 1) / kSplits;
  const int begin = w.split * per_split;
  w.tile0 = first + begin;
  w.tiles = max(0, min(tiles, begin + per_split) - begin);
  return w;
}

// The sink logit (SinkLog2) of packed row r's query head.
__device__ __forceinline__ float RowSink(const AttentionParams& p,
                                         const DecodePlan& w, int r) {
  return SinkLog2(p, w.kvh * w.group + r % w.group);
}

// Element offset of packed row r's query in Q or O: `base` is the
// sequence's offset in that tensor (strides in elements).
__device__ __forceinline__ long long RowOffset(const DecodePlan& w, int r,
                                               long long base,
                                               long long head_stride,
                                               long long row_stride) {
  const int h = w.kvh * w.group + r % w.group;
  return base + h * head_stride + (r / w.group) * row_stride;
}

// The block's packed Q rows into a swizzled [kRows][kD] tile; rows past the
// problem's are zero-filled.
__device__ __forceinline__ void LoadQ(evt_elem* tile, const AttentionParams& p,
                                      const DecodePlan& w) {
  const evt_elem* q = static_cast<const evt_elem*>(p.q);
  for (int idx = threadIdx.x; idx < kRows * kChunks; idx += kThreads) {
    const int r = idx / kChunks;
    const int c = idx % kChunks;
    const bool valid = w.r0 + r < w.rows && c < kMemChunks;
    const long long at =
        valid ? RowOffset(w, w.r0 + r, w.seq.q, p.q_head_stride, p.q_row_stride)
              : 0;
    CpAsync16(SmemAddress(tile + Swizzled(r, c)), q + at + c * 8, valid);
  }
}

// An L2 policy that evicts first what it covers: K and V are read once, so
// they should not push anything else out of L2.
__device__ __forceinline__ unsigned long long EvictFirstPolicy() {
  unsigned long long policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n"
               : "=l"(policy));
  return policy;
}

// CpAsync16 for streamed data: under `policy`, and asking L2 to fetch the
// whole 256-byte block around the chunk (the rest of the row, or the next
// row, is read next).
__device__ __forceinline__ void CpAsync16Stream(unsigned dst, const void* src,
                                                bool valid,
                                                unsigned long long policy) {
  asm volatile(
      "cp.async.cg.shared.global.L2::cache_hint.L2::256B [%0], [%1], 16, %2, "
      "%3;\n" ::"r"(dst),
      "l"(src), "r"(valid ? 16 : 0), "l"(policy));
}

// Where a key tile's rows start: its first row in each page it spans.
struct TileRows {
  const evt_kv* page[kTilePages];
};

// The largest power of two at most n.
constexpr int FloorPow2(int n) { return n < 2 ? 1 : 2 * FloorPow2(n / 2); }

// One warp's copies of a K or V tile: a pass of the warp's lanes covers
// kPass rows of kChunks 16-byte chunks; lane copies chunk lane % kChunks of
// rows lane / kChunks + kPass * j. Everything that depends on the lane is
// computed once, so a tile costs a pointer step and a compare per chunk.
// kPass is a power of two (it divides the pages' rows and leaves the
// swizzle's row bits to j); where kPass rows of chunks are fewer than 32
// (HEAD_DIM 192: 24 chunks a row) the other lanes copy nothing, nor do
// those whose chunk is padding (past HEAD_DIM's).
struct TileCopy {
  static constexpr int kPass = FloorPow2(32 / kChunks);
  static constexpr bool kEveryLane =
      kPass * kChunks == 32 && kMemChunks == kChunks;
  bool copies;       // Whether the lane copies at all.
  int r0;            // The lane's first row.
  int swizzled;      // Its chunk XOR its first row's swizzle.
  long long offset;  // Element offset of its first chunk in global memory.
  long long pass;    // Elements between its chunks of consecutive passes.

  __device__ __forceinline__ TileCopy(long long row_stride, int lane) {
    r0 = lane / kChunks;
    const int c = lane % kChunks;
    copies = kEveryLane || (lane < kPass * kChunks && c < kMemChunks);
    swizzled = c ^ r0;  // r0 < kPass: the row's low bits, as in Swizzled.
    offset = r0 * row_stride + c * 8;
    pass = kPass * row_stride;
  }

  // Rows [0, kN) of the tile at `rows` into the swizzled tile at shared
  // byte address `dst`; rows at or past `valid_rows` are zero-filled.
  template <bool kFull>
  __device__ __forceinline__ void Copy(unsigned dst, const TileRows& rows,
                                       int valid_rows,
                                       unsigned long long policy) const {
    if (!kEveryLane && !copies) return;
    const evt_elem* src = rows.page[0] + offset;
#pragma unroll
    for (int j = 0; j < kN / kPass; ++j) {
      // kPass divides a page's rows: a pass lies in one page, and the next
      // page's rows start at its own first row.
      if (j > 0 && kPass * j % kPageRows == 0) {
        src = rows.page[kPass * j / kPageRows] + offset;
      }
      // Row r0 + kPass * j: its swizzle is r0 ^ (kPass * j mod 8).
      const int r = r0 + kPass * j;
      const unsigned at = 2 * (r * kD + ((swizzled ^ ((kPass * j) & 7)) << 3));
      const bool valid = kFull || r < valid_rows;
      CpAsync16Stream(dst + at, valid ? src : rows.page[0], valid, policy);
      src += pass;
    }
  }
};

// The 16-byte chunk that chunk c of row r of an e4m3 tile is stored at: K
// and V tiles are read in different orders (see the header), each swizzled
// so that its reads spread over the banks.
template <bool kIsV>
__device__ __forceinline__ int Fp8Chunk(int r, int c) {
  if (kIsV) return c ^ (kKvChunks >= 8 ? ((r >> 1) & 3) << 1 : (r & 2));
  return c ^ (kKvChunks >= 8 ? (r & 1) << 2 : 0);
}

// TileCopy for an e4m3 K (kIsV false) or V tile: rows of kD bytes, chunk c
// of row r at byte r * kD + 16 * Fp8Chunk(r, c).
template <bool kIsV>
struct Fp8TileCopy {
  static constexpr int kPass = 32 / kKvChunks;
  int r0, c;
  long long offset, pass;

  __device__ __forceinline__ Fp8TileCopy(long long row_stride, int lane) {
    r0 = lane / kKvChunks;
    c = lane % kKvChunks;
    offset = r0 * row_stride + c * 16;
    pass = kPass * row_stride;
  }

  template <bool kFull>
  __device__ __forceinline__ void Copy(unsigned dst, const TileRows& rows,
                                       int valid_rows,
                                       unsigned long long policy) const {
    const unsigned char* src =
        reinterpret_cast<const unsigned char*>(rows.page[0]) + offset;
#pragma unroll
    for (int j = 0; j < kN / kPass; ++j) {
      if (j > 0 && kPass * j % kPageRows == 0) {  // The next page's rows.
        src = reinterpret_cast<const unsigned char*>(
                  rows.page[kPass * j / kPageRows]) +
              offset;
      }
      const int r = r0 + kPass * j;
      const unsigned at = r * kD + (Fp8Chunk<kIsV>(r, c) << 4);
      const bool valid = kFull || r < valid_rows;
      CpAsync16Stream(dst + at, valid ? src : rows.page[0], valid, policy);
      src += pass;
    }
  }
};

#if EVT_KV_FP8
using KCopy = Fp8TileCopy<false>;
using VCopy = Fp8TileCopy<true>;
#else
using KCopy = TileCopy;
using VCopy = TileCopy;
#endif

// Keys [key0, key0 + kN) of sequence b's K and V (its row 0 at k and v)
// into one stage of a warp's ring (shared byte addresses k_dst, v_dst); keys
// at or past kv_end are zero-filled (and masked). A paged kernel's tile lies
// in one page (TILE_N divides the page size) or spans whole pages (the page
// size divides TILE_N); a page past kv_end is not looked up (its rows are
// zero-filled, and its block table entry may lie past the sequence's).
__device__ __forceinline__ void LoadKv(const AttentionParams& p, int b,
                                       unsigned k_dst, const evt_kv* k,
                                       const KCopy& k_copy, unsigned v_dst,
                                       const evt_kv* v, const VCopy& v_copy,
                                       int key0, int kv_end,
                                       unsigned long long policy) {
  TileRows k_rows, v_rows;
#pragma unroll
  for (int i = 0; i < kTilePages; ++i) {
    const int key = key0 + i * kPageRows;
    const int at = i == 0 || key < kv_end ? key : key0;
    k_rows.page[i] = k + KeyRow(p, b, at, p.k_batch_stride, p.k_row_stride);
    v_rows.page[i] = v + KeyRow(p, b, at, p.v_batch_stride, p.v_row_stride);
  }
  const int valid = kv_end - key0;
  if (valid >= kN) {
    k_copy.Copy<true>(k_dst, k_rows, valid, policy);
    v_copy.Copy<true>(v_dst, v_rows, valid, policy);
  } else {
    k_copy.Copy<false>(k_dst, k_rows, valid, policy);
    v_copy.Copy<false>(v_dst, v_rows, valid, policy);
  }
}

// A running merge of partial softmax states of one row (max m in the exp2
// domain, sum l, eight unnormalised output columns).
struct RowMerge {
  float m = NegInf();
  float l = 0.f;
  float acc[8] = {};

  __device__ __forceinline__ void Add(float ms, float ls, float4 lo,
                                      float4 hi) {
    const float mx = fmaxf(m, ms);
    if (mx == NegInf()) return;  // Neither part saw a key.
    const float a = Exp2(m - mx);
    const float c = Exp2(ms - mx);
    const float x[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[i] = acc[i] * a + x[i] * c;
    l = l * a + ls * c;
    m = mx;
  }

  // The normalised columns; zero for a row that saw no key.
  __device__ __forceinline__ uint4 Normalised() const {
    const float inv = l > 0.f ? 1.f / l : 0.f;
    return make_uint4(
        Pack(acc[0] * inv, acc[1] * inv), Pack(acc[2] * inv, acc[3] * inv),
        Pack(acc[4] * inv, acc[5] * inv), Pack(acc[6] * inv, acc[7] * inv));
  }
};

// How far (exp2 domain) a row's tile max may rise above the reference its
// probabilities are taken against before the reference is raised: they stay
// at most 2^8, far from 16-bit or fp32 limits.
constexpr float kRescaleSlack = 8.f;

// One step of the online softmax, rescaling lazily: as SoftmaxTile, but
// row_max is a reference raised only when some row of the warp sees a score
// more than kRescaleSlack above its own (always on its first keys), so the
// output accumulator is rarely rescaled once the first tiles have set the
// references. Exact: O and the row sum share each row's reference.
template <int kNTiles>
__device__ __forceinline__ void SoftmaxTileLazy(float (&s)[kMTiles][kNTiles][4],
                                                float (&o)[kMTiles][kDTiles][4],
                                                float (&row_max)[kMTiles][2],
                                                float (&row_sum)[kMTiles][2],
                                                float scale_log2) {
  float tile_max[kMTiles][2];
  bool raise = false;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      tile_max[mt][half] = QuadRowMax(s[mt], half) * scale_log2;
      raise |= tile_max[mt][half] > row_max[mt][half] + kRescaleSlack;
    }
  }
  if (__any_sync(0xffffffffu, raise)) {
    float correction[kMTiles][2];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float new_max = fmaxf(row_max[mt][half], tile_max[mt][half]);
        correction[mt][half] =
            Exp2(row_max[mt][half] - (new_max == NegInf() ? 0.f : new_max));
        row_max[mt][half] = new_max;
        row_sum[mt][half] *= correction[mt][half];
      }
    }
    RescaleRows(o, correction);
  }
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float ref = row_max[mt][half] == NegInf() ? 0.f : row_max[mt][half];
      row_sum[mt][half] += ExpRowHalf(s[mt], half, scale_log2, ref);
    }
  }
}

// A bf16 Q tile (in shared memory, all of the block's rows) turned into
// fp16 in place, scaled by 2^e so that its largest magnitude lies in
// [2^13, 2^14) (fp16 keeps three more bits of every element than bf16;
// magnitudes below the largest times 2^-37 flush, as they would in any
// fp32 dot product with it); returns 2^-e, the factor the scores need. Every
// warp reads the whole tile for the maximum, so they agree without sharing
// it; the block's barriers separate the reads, the writes and the uses.
__device__ __forceinline__ float QTileToHalf(evt_elem* q_tile) {
  constexpr int kWords = kRows * kD / 2;
  const unsigned* words = reinterpret_cast<const unsigned*>(q_tile);
  unsigned amax = 0;  // Magnitude bits; bf16 orders like its integers.
  for (int i = threadIdx.x % 32; i < kWords; i += 32) {
    const unsigned w = words[i];
    amax = max(amax, max(w & 0x7fffu, (w >> 16) & 0x7fffu));
  }
#pragma unroll
  for (int m = 16; m > 0; m /= 2) {
    amax = max(amax, __shfl_xor_sync(0xffffffffu, amax, m));
  }
  // amax < 2^(exponent field - 126): scale by 2^(140 - field), within
  // fp32's normal powers.
  const int field = static_cast<int>(amax >> 7);
  const int e = amax == 0 ? 0 : min(126, max(-126, 140 - max(field, 1)));
  const float up = __int_as_float((127 + e) << 23);
  __syncthreads();
  unsigned* out = reinterpret_cast<unsigned*>(q_tile);
  for (int i = threadIdx.x; i < kWords; i += kThreads) {
    const unsigned w = out[i];
    out[i] = fp8::PackHalf2(__uint_as_float(w << 16) * up,
                            __uint_as_float(w & 0xffff0000u) * up);
  }
  __syncthreads();
  return __int_as_float((127 - e) << 23);
}

// The A fragment of m-tile mt for e4m3 k-step ks = 4 j + s (see the
// header): rows g and g + 8, columns 64 j + 16 t + 4 s .. + 3 of the
// swizzled Q tile, two at a time.
__device__ __forceinline__ void Fp8QFragment(const evt_elem* q_tile, int mt,
                                             int ks, int lane,
                                             unsigned (&a)[4]) {
  const int col = (ks / 4) * 64 + (lane % 4) * 16 + (ks % 4) * 4;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = mt * 16 + lane / 4 + half * 8;
    const uint2 x = *reinterpret_cast<const uint2*>(
        q_tile + Swizzled(row, col / 8) + col % 8);
    a[half] = x.x;
    a[2 + half] = x.y;
  }
}

// Fp8QkTile's loop where Q's fragments are re-read from the Q tile: each
// once per k-step, K's words of the whole tile loaded first.
template <class LoadK>
__device__ __forceinline__ void QkTileFromSharedQ(
    float (&s)[kMTiles][kNTiles][4], const evt_elem* q_tile,
    const LoadK& load_k, int lane) {
#pragma unroll
  for (int j = 0; j < kD / 64; ++j) {
    unsigned kw[kNTiles][4];
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) load_k(j, nt, kw[nt]);
#pragma unroll
    for (int st = 0; st < 4; ++st) {
      unsigned qf[kMTiles][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        Fp8QFragment(q_tile, mt, 4 * j + st, lane, qf[mt]);
      }
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
        const unsigned b0 = fp8::ToHalf2<0>(kw[nt][st]);
        const unsigned b1 = fp8::ToHalf2<1>(kw[nt][st]);
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          fp8::MmaF16(s[mt][nt], qf[mt], b0, b1);
        }
      }
    }
  }
}

// S = Q K^T for one tile of e4m3 keys at shared byte address k_tile: Q's
// fragments from q_frag when kQInRegs, else from the Q tile.
__device__ __forceinline__ void Fp8QkTile(
    float (&s)[kMTiles][kNTiles][4],
    const unsigned (&q_frag)[kMTiles][kQInRegs ? kKSteps : 1][4],
    const evt_elem* q_tile, unsigned k_tile, int lane) {
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) s[mt][nt][i] = 0.f;
    }
  }
  const int g = lane / 4;
  // The lane's 16 bytes of key row g of 8-key tile nt in d group j.
  auto load_k = [&](int j, int nt, unsigned(&w)[4]) {
    const unsigned at = k_tile + (nt * 8 + g) * kD +
                        (Fp8Chunk<false>(g, 4 * j + lane % 4) << 4);
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
                 : "r"(at));
  };
  if constexpr (kQInRegs) {
    // One 8-key tile's words at a time: fewer live registers.
#pragma unroll
    for (int j = 0; j < kD / 64; ++j) {
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
        unsigned w[4];
        load_k(j, nt, w);
#pragma unroll
        for (int st = 0; st < 4; ++st) {
          const unsigned b0 = fp8::ToHalf2<0>(w[st]);
          const unsigned b1 = fp8::ToHalf2<1>(w[st]);
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt) {
            fp8::MmaF16(s[mt][nt], q_frag[mt][4 * j + st], b0, b1);
          }
        }
      }
    }
  } else {
    QkTileFromSharedQ(s, q_tile, load_k, lane);
  }
}

// Words of V a lane reads per key of a 16-key step: HEAD_DIM / 8 bytes.
constexpr int kVWords = kD / 32;
static_assert(!kKvFp8 || kVWords == 2 || kVWords == 4,
              "HEAD_DIM: 64 or 128 with e4m3 K/V");

// O += P V for one tile of e4m3 values at shared byte address v_tile, P
// packed to fp16 from the probabilities in s; output tile i's column n is
// d = n kD / 8 + i (see the header).
__device__ __forceinline__ void Fp8PvTile(float (&o)[kMTiles][kDTiles][4],
                                          const float (&s)[kMTiles][kNTiles][4],
                                          unsigned v_tile, int lane) {
  const int t = lane % 4;
  const int off = (lane / 4) * (kD / 8);  // Byte of the lane's d in a row.
  const unsigned at =
      v_tile + 2 * t * kD + (Fp8Chunk<true>(2 * t, off / 16) << 4) + off % 16;
#pragma unroll
  for (int step = 0; step < kN / 16; ++step) {
    unsigned pf[kMTiles][4];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
      fp8::PackProbsHalf(s[mt], step, pf[mt]);
    }
    // Keys 2 t, 2 t + 1, 2 t + 8, 2 t + 9 of the step.
    unsigned w[4][kVWords];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const unsigned row = at + (step * 16 + (e % 2) + (e / 2) * 8) * kD;
      if constexpr (kVWords == 4) {
        asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(w[e][0]), "=r"(w[e][1]), "=r"(w[e][2]),
                       "=r"(w[e][3])
                     : "r"(row));
      } else {
        asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];\n"
                     : "=r"(w[e][0]), "=r"(w[e][1])
                     : "r"(row));
      }
    }
#pragma unroll
    for (int wi = 0; wi < kVWords; ++wi) {
      const unsigned lo01 = fp8::Interleave<0>(w[0][wi], w[1][wi]);
      const unsigned hi01 = fp8::Interleave<0>(w[2][wi], w[3][wi]);
      const unsigned lo23 = fp8::Interleave<2>(w[0][wi], w[1][wi]);
      const unsigned hi23 = fp8::Interleave<2>(w[2][wi], w[3][wi]);
      const unsigned b[4][2] = {{fp8::ToHalf2<0>(lo01), fp8::ToHalf2<0>(hi01)},
                                {fp8::ToHalf2<1>(lo01), fp8::ToHalf2<1>(hi01)},
                                {fp8::ToHalf2<0>(lo23), fp8::ToHalf2<0>(hi23)},
                                {fp8::ToHalf2<1>(lo23), fp8::ToHalf2<1>(hi23)}};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          fp8::MmaF16(o[mt][4 * wi + i], pf[mt], b[i][0], b[i][1]);
        }
      }
    }
  }
}

// StorePartialRows for Fp8PvTile's accumulators: columns in their place.
__device__ __forceinline__ void Fp8StorePartialRows(
    float* part, int stride, float* ml,
    const float (&o_acc)[kMTiles][kDTiles][4],
    const float (&row_max)[kMTiles][2], const float (&row_sum)[kMTiles][2],
    int lane, int rows) {
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float sum = QuadSum(row_sum[mt][half]);
      const int row = mt * 16 + lane / 4 + half * 8;
      if (row >= rows) continue;
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float* out = part + row * stride + (2 * (lane % 4) + e) * kDTiles;
#pragma unroll
        for (int i = 0; i < kDTiles; i += 4) {
          *reinterpret_cast<float4*>(out + i) = make_float4(
              o_acc[mt][i][2 * half + e], o_acc[mt][i + 1][2 * half + e],
              o_acc[mt][i + 2][2 * half + e], o_acc[mt][i + 3][2 * half + e]);
        }
      }
      if (lane % 4 == 0) {
        *reinterpret_cast<float2*>(ml + row * 2) =
            make_float2(row_max[mt][half], sum);
      }
    }
  }
}

// One warp's pass over its key tiles: acc, row_max and row_sum as in
// flash_common's SoftmaxTile.
__device__ __forceinline__ void StreamKeys(
    const AttentionParams& p, const DecodePlan& w, const evt_elem* q_tile,
    unsigned char* ring, float scale_log2, float (&o_acc)[kMTiles][kDTiles][4],
    float (&row_max)[kMTiles][2], float (&row_sum)[kMTiles][2]) {
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const evt_kv* k =
      static_cast<const evt_kv*>(p.k) + w.seq.k + w.kvh * p.k_head_stride;
  const evt_kv* v =
      static_cast<const evt_kv*>(p.v) + w.seq.v + w.kvh * p.v_head_stride;
  const int my_tiles =
      w.tiles > warp ? (w.tiles - warp + kWarps - 1) / kWarps : 0;
  const unsigned long long policy = EvictFirstPolicy();
  const KCopy k_copy(p.k_row_stride, lane);
  const VCopy v_copy(p.v_row_stride, lane);
  const unsigned ring_base = SmemAddress(ring);
  auto key0 = [&](int i) { return (w.tile0 + warp + i * kWarps) * kN; };
  auto load = [&](int i) {
    const unsigned stage = ring_base + (i % kStages) * 2 * kTileBytes;
    LoadKv(p, w.b, stage, k, k_copy, stage + kTileBytes, v, v_copy, key0(i),
           w.kv_end, policy);
  };
  // Q's copy group (committed by the caller) completes before the first
  // tile's; the caller's barrier after this prologue publishes it.
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < my_tiles) load(s);
    CpAsyncCommit();
  }
  CpAsyncWait<kStages - 1>();
  __syncthreads();
#if EVT_BF16
  if constexpr (kKvFp8) {  // Q K^T in fp16 (common/fp8.cuh).
    scale_log2 *= QTileToHalf(const_cast<evt_elem*>(q_tile));
  }
#endif

  // Per-lane parts of the ldmatrix addresses.
  const LaneFragments<kD> f(lane);
  const unsigned q_lane = SmemAddress(q_tile) + 2 * f.a_row;
  unsigned q_frag[kMTiles][kQInRegs ? kKSteps : 1][4];
  if constexpr (kQInRegs && kKvFp8) {
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int ks = 0; ks < kKSteps; ++ks) {
        Fp8QFragment(q_tile, mt, ks, lane, q_frag[mt][ks]);
      }
    }
  } else if constexpr (kQInRegs) {
    LoadQFragments<kD>(q_frag, q_lane, lane);
  }

  // Each lane's rows see keys in [start, limit); tiles within [the largest
  // start, the smallest limit) of the block need no mask.
  int limit[kMTiles][2], start[kMTiles][2];
  int mask_from = w.kv_end, mask_before = 0;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = w.r0 + mt * 16 + lane / 4 + half * 8;
      const int q = r / w.group;
      const bool row = r < w.rows;
      limit[mt][half] =
          !row       ? w.kv_end
          : kWindow  ? min(w.kv_end, max(0, q + w.shift + WindowRight(p) + 1))
          : p.causal ? min(w.kv_end, max(0, q + w.shift + 1))
                     : w.kv_end;
      start[mt][half] = row && kWindow ? q + w.shift - WindowLeft(p) : 0;
      mask_from = min(mask_from, limit[mt][half]);
      mask_before = max(mask_before, start[mt][half]);
    }
  }
#pragma unroll
  for (int m = 1; m < 32; m *= 2) {
    mask_from = min(mask_from, __shfl_xor_sync(0xffffffffu, mask_from, m));
    mask_before =
        max(mask_before, __shfl_xor_sync(0xffffffffu, mask_before, m));
  }
  const ScoreScales scales = ScalesOf(p, scale_log2);
  // ALiBi: each row's slope (its query head's); its diagonal key is
  // recomputed per tile, which holds fewer registers across the loop.
  float alibi_slope[kMTiles][2];
  if constexpr (kAlibi) {
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = w.r0 + mt * 16 + lane / 4 + half * 8;
        alibi_slope[mt][half] =
            AlibiSlope(p, w.b, w.kvh * w.group + r % w.group, scales);
      }
    }
  }

  for (int i = 0; i < my_tiles; ++i) {
    CpAsyncWait<kStages - 2>();
    // Tile i is visible to the whole warp, and every lane is done reading
    // the stage refilled next (tile i - 1's).
    __syncwarp();
    if (i + kStages - 1 < my_tiles) load(i + kStages - 1);
    CpAsyncCommit();
    const unsigned k_tile = ring_base + (i % kStages) * 2 * kTileBytes;
    const unsigned v_tile = k_tile + kTileBytes;

    float s_acc[kMTiles][kNTiles][4];
    if constexpr (kKvFp8) {
      Fp8QkTile(s_acc, q_frag, q_tile, k_tile, lane);
    } else {
      QkTile<kMTiles, kN, kD, kQInRegs, kKSteps, (kQInRegs ? kKSteps : 1),
             false, kKSteps>(s_acc, q_frag, q_lane, k_tile + 2 * f.k_row, lane);
    }

    if constexpr (kSoftcap) SoftcapTile(s_acc, scales.pre);
    const int kv0 = key0(i);
    if constexpr (kAlibi) {
      int diag[kMTiles][2];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          diag[mt][half] =
              (w.r0 + mt * 16 + lane / 4 + half * 8) / w.group + w.shift;
        }
      }
      AlibiTile(s_acc, alibi_slope, diag, kv0, lane);
    }
    if (kv0 + kN > mask_from || (kWindow && kv0 < mask_before)) {
      // Element (nt, e) of a row holds key kv0 + c + nt * 8 + e % 2.
      const int c = kv0 + (lane % 4) * 2;
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int lim = limit[mt][half] - c;
          const int from = start[mt][half] - c;
#pragma unroll
          for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              if (nt * 8 + e >= lim || (kWindow && nt * 8 + e < from)) {
                s_acc[mt][nt][2 * half + e] = NegInf();
              }
            }
          }
        }
      }
    }

    SoftmaxTileLazy(s_acc, o_acc, row_max, row_sum, scales.log2);
    if constexpr (kKvFp8) {
      Fp8PvTile(o_acc, s_acc, v_tile, lane);
    } else {
      PvTile<kMTiles, kN, kD, kDMem>(o_acc, s_acc, v_tile + 2 * f.v_row,
                                     f.v_chunk);
    }
  }
  CpAsyncWait<0>();
}

// Workspace of split-KV partial rows: per (batch, kv_head, row block,
// split) unit, kRows x kD unnormalised outputs, then after all units' outputs
// kRows x (max, sum).
struct Workspace {
  float* o;
  float* ml;
  long long first_unit;  // Split 0 of this block's row block.

  __device__ __forceinline__ Workspace(const AttentionParams& p,
                                       const DecodePlan& w) {
    const long long units =
        static_cast<long long>(p.batch) * p.kv_heads * w.row_blocks * kSplits;
    o = p.workspace;
    ml = p.workspace + units * kRows * kD;
    first_unit =
        ((static_cast<long long>(w.b) * p.kv_heads + w.kvh) * w.row_blocks +
         w.row_block) *
        kSplits;
  }
  __device__ __forceinline__ float* Out(int split, int row) const {
    return o + ((first_unit + split) * kRows + row) * kD;
  }
  __device__ __forceinline__ float* MaxSum(int split, int row) const {
    return ml + ((first_unit + split) * kRows + row) * 2;
  }
};

// Splits whose partial rows a merging thread loads at once.
constexpr int kMergeBatch = 8;
// Shared bytes of the (max, sum) of every row and split, for MergeMany.
constexpr int kMergeMlBytes = kSplits > kMergeBatch ? kRows* kSplits * 8 : 0;

// Stores eight normalised columns of packed row `row` of the block into O.
__device__ __forceinline__ void StoreRow(const AttentionParams& p,
                                         const DecodePlan& w, int row, int col,
                                         uint4 packed) {
  const long long at =
      RowOffset(w, w.r0 + row, w.seq.o, p.o_head_stride, p.o_row_stride);
  *reinterpret_cast<uint4*>(static_cast<evt_elem*>(p.o) + at + col) = packed;
}

// The merge of up to kMergeBatch splits: every load of a thread's eight
// columns, every split's (max, sum) and columns, issued at once (one L2
// round trip), combined by flash_common's CombineSplits.
__device__ __forceinline__ void MergeFew(const AttentionParams& p,
                                         const DecodePlan& w,
                                         const Workspace& ws, int rows_here) {
  for (int idx = threadIdx.x; idx < rows_here * kMemChunks; idx += kThreads) {
    const int row = idx / kMemChunks;
    const int col = (idx % kMemChunks) * 8;
    float m[kSplits], l[kSplits];
    float4 lo[kSplits], hi[kSplits];
#pragma unroll
    for (int s = 0; s < kSplits; ++s) {
      const float2 ml =
          __ldcg(reinterpret_cast<const float2*>(ws.MaxSum(s, row)));
      m[s] = ml.x;
      l[s] = ml.y;
      const float4* src = reinterpret_cast<const float4*>(ws.Out(s, row) + col);
      lo[s] = __ldcg(src);
      hi[s] = __ldcg(src + 1);
    }
    StoreRow(p, w, row, col,
             CombineSplits(m, l, lo, hi, RowSink(p, w, w.r0 + row)));
  }
}

// The merge of many splits: first the (max, sum) of every row and split into
// shared `ml` (loads issued at once), then each thread's eight columns of a
// row, kMergeBatch splits' loads at a time, weighted by exp2(m_s - max).
__device__ __forceinline__ void MergeMany(const AttentionParams& p,
                                          const DecodePlan& w,
                                          const Workspace& ws, int rows_here,
                                          float2* ml) {
  constexpr int kEntries = kRows * kSplits;
#pragma unroll
  for (int j = 0; j < (kEntries + kThreads - 1) / kThreads; ++j) {
    const int i = threadIdx.x + j * kThreads;
    const int row = i / kSplits;
    if (i < kEntries && row < rows_here) {
      ml[i] =
          __ldcg(reinterpret_cast<const float2*>(ws.MaxSum(i % kSplits, row)));
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < rows_here * kMemChunks; idx += kThreads) {
    const int row = idx / kMemChunks;
    const int col = (idx % kMemChunks) * 8;
    const float2* row_ml = ml + row * kSplits;
    const float sink = RowSink(p, w, w.r0 + row);  // One more state.
    float mx = NegInf();
    for (int s = 0; s < kSplits; ++s) mx = fmaxf(mx, row_ml[s].x);
    if constexpr (kSinks) mx = fmaxf(mx, sink);
    const float ref = mx == NegInf() ? 0.f : mx;
    float total = kSinks ? Exp2(sink - ref) : 0.f;
    float acc[8] = {};
    for (int s0 = 0; s0 < kSplits; s0 += kMergeBatch) {
      float4 part[kMergeBatch][2];
#pragma unroll
      for (int b = 0; b < kMergeBatch; ++b) {
        const float4* src =
            reinterpret_cast<const float4*>(ws.Out(s0 + b, row) + col);
        part[b][0] = __ldcg(src);
        part[b][1] = __ldcg(src + 1);
      }
#pragma unroll
      for (int b = 0; b < kMergeBatch; ++b) {
        const float x = Exp2(row_ml[s0 + b].x - ref);  // 0: saw no key.
        total += x * row_ml[s0 + b].y;
        const float y[8] = {part[b][0].x, part[b][0].y, part[b][0].z,
                            part[b][0].w, part[b][1].x, part[b][1].y,
                            part[b][1].z, part[b][1].w};
#pragma unroll
        for (int c = 0; c < 8; ++c) acc[c] += x * y[c];
      }
    }
    const float inv = total > 0.f ? 1.f / total : 0.f;
    StoreRow(p, w, row, col,
             make_uint4(Pack(acc[0] * inv, acc[1] * inv),
                        Pack(acc[2] * inv, acc[3] * inv),
                        Pack(acc[4] * inv, acc[5] * inv),
                        Pack(acc[6] * inv, acc[7] * inv)));
  }
}

// The last split of a row block to finish merges all of them into O. It runs
// after every other block of the row block, on the launch's critical path,
// so its loads are issued together: one L2 round trip for a few splits, one
// per kMergeBatch splits for many (not one per split). `scratch`: shared,
// kMergeMlBytes.
__device__ __forceinline__ void MergeSplits(const AttentionParams& p,
                                            const DecodePlan& w,
                                            const Workspace& ws, int rows_here,
                                            void* scratch) {
  if constexpr (kSplits <= kMergeBatch) {
    MergeFew(p, w, ws, rows_here);
  } else {
    MergeMany(p, w, ws, rows_here, static_cast<float2*>(scratch));
  }
}

// Dynamic shared memory (as the spec's geometry): the Q tile and rings, or
// the warps' merge area, or the splits' (max, sum); then the last-split flag.
// A warp's partial rows lie kPartStride floats apart in the merge area.
constexpr int kPartStride = kPartRowStride<kD>;
constexpr int kRingBytes = kRows * kD * 2 + kWarps * kStages * 2 * kTileBytes;
constexpr int kMergeBytes = kWarps * kRows * (kPartStride + 2) * 4;
constexpr int kFlagOffset = kRingBytes > kMergeBytes
                                ? (kRingBytes > kMergeMlBytes ? kRingBytes
                                                              : kMergeMlBytes)
                                : (kMergeBytes > kMergeMlBytes ? kMergeBytes
                                                               : kMergeMlBytes);
constexpr int kSmemBytes = kFlagOffset + 16;

// Where shared memory holds one block of this config per SM (1 KB of it is
// reserved per block), ptxas is told so: left to itself it may trade a spill
// for registers no second block could use. So too below head_dim 64, whose
// rows are padded to 64 columns in shared memory: it limits the blocks an
// SM holds before registers do, and unhinted ptxas spilled at head_dim 32
// to fit more (80 registers and 8 bytes of spills, 127 and none when told).
// Elsewhere it chooses (0: no hint).
#if __CUDA_ARCH__ >= 900 && __CUDA_ARCH__ < 1200  // Hopper, Blackwell DC.
constexpr int kSmemPerSm = 228 * 1024, kThreadsPerSm = 2048;
#elif __CUDA_ARCH__ == 800 || __CUDA_ARCH__ == 870
constexpr int kSmemPerSm = 164 * 1024, kThreadsPerSm = 2048;
#else
constexpr int kSmemPerSm = 100 * 1024, kThreadsPerSm = 1536;
#endif
constexpr int kSmemBlocks = kSmemPerSm / (kSmemBytes + 1024);
constexpr int kMinBlocks =
    kKvFp8 || kSmemBlocks <= 1                              ? 1
    : kDMem < 64 && kSmemBlocks * kThreads <= kThreadsPerSm ? kSmemBlocks
                                                            : 0;

}  // namespace

extern "C" __global__ void __launch_bounds__(kThreads, kMinBlocks)
    attention_fwd(const __grid_constant__ AttentionParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  evt_elem* q_tile = reinterpret_cast<evt_elem*>(smem);
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const DecodePlan w = PlanDecode(p);
  // Past the sequence's rows (lengths on the device): every split of the
  // row block leaves alike, and its counter stays zero.
  if (w.r0 >= w.rows) return;
  const int rows_here = min(kRows, w.rows - w.r0);

  LoadQ(q_tile, p, w);
  CpAsyncCommit();
  float o_acc[kMTiles][kDTiles][4];
  float row_max[kMTiles][2];
  float row_sum[kMTiles][2];
  InitRows(o_acc, row_max, row_sum);
  unsigned char* ring = smem + kRows * kD * 2 + warp * kStages * 2 * kTileBytes;
  StreamKeys(p, w, q_tile, ring,
             p.scale_log2 * fp8::Descale(p, p.k_descale, w.b, w.kvh), o_acc,
             row_max, row_sum);

  // Merge the warps' partial rows through shared memory (over the rings).
  __syncthreads();
  float* part_o = reinterpret_cast<float*>(smem);
  float* part_ml = part_o + kWarps * kRows * kPartStride;
  if constexpr (kKvFp8) {
    const float v_descale = fp8::Descale(p, p.v_descale, w.b, w.kvh);
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int dt = 0; dt < kDTiles; ++dt) {
#pragma unroll
        for (int i = 0; i < 4; ++i) o_acc[mt][dt][i] *= v_descale;
      }
    }
    Fp8StorePartialRows(part_o + warp * kRows * kPartStride, kPartStride,
                        part_ml + warp * kRows * 2, o_acc, row_max, row_sum,
                        lane, rows_here);
  } else {
    StorePartialRows(part_o + warp * kRows * kPartStride, kPartStride,
                     part_ml + warp * kRows * 2, 0, o_acc, row_max, row_sum,
                     lane, rows_here);
  }
  __syncthreads();
  evt_elem* o = static_cast<evt_elem*>(p.o);
  const Workspace ws(p, w);
  for (int idx = threadIdx.x; idx < rows_here * kMemChunks; idx += kThreads) {
    const int row = idx / kMemChunks;
    const int col = (idx % kMemChunks) * 8;
    RowMerge merge;
#pragma unroll
    for (int wp = 0; wp < kWarps; ++wp) {
      const float* ml = part_ml + (wp * kRows + row) * 2;
      const float4* part = reinterpret_cast<const float4*>(
          part_o + (wp * kRows + row) * kPartStride + col);
      merge.Add(ml[0], ml[1], part[0], part[1]);
    }
    if constexpr (kSplits == 1) {
      const float4 none = make_float4(0.f, 0.f, 0.f, 0.f);
      if (kSinks) merge.Add(RowSink(p, w, w.r0 + row), 1.f, none, none);
      const long long at =
          RowOffset(w, w.r0 + row, w.seq.o, p.o_head_stride, p.o_row_stride);
      *reinterpret_cast<uint4*>(o + at + col) = merge.Normalised();
    } else {
      float4* out = reinterpret_cast<float4*>(ws.Out(w.split, row) + col);
      out[0] =
          make_float4(merge.acc[0], merge.acc[1], merge.acc[2], merge.acc[3]);
      out[1] =
          make_float4(merge.acc[4], merge.acc[5], merge.acc[6], merge.acc[7]);
      if (col == 0) {
        *reinterpret_cast<float2*>(ws.MaxSum(w.split, row)) =
            make_float2(merge.m, merge.l);
      }
    }
  }
  if constexpr (kSplits > 1) {
    // Publish, then count this split in; the last one merges.
    __syncthreads();
    int* last = reinterpret_cast<int*>(smem + kFlagOffset);
    if (threadIdx.x == 0) {
      *last =
          CountSplitIn(p.counters +
                           (static_cast<long long>(w.b) * p.kv_heads + w.kvh) *
                               w.row_blocks +
                           w.row_block,
                       kSplits);
    }
    __syncthreads();
    if (!*last) return;
    MergeSplits(p, w, ws, rows_here, smem);  // Over the rings: done with.
  }
}
