// flash_fwd_tma: attention forward on Hopper with the Tensor Memory
// Accelerator and warp specialization (sm_90a only).
//
// Computes O = softmax(Q K^T * scale) V (see common/attention_params.cuh for
// the layout and masking rules) in one pass over K and V with an online
// softmax. A block owns BLOCK_M = 64 * CONSUMERS query rows of one (batch,
// head) and has 1 + CONSUMERS warpgroups:
//   - the producer (warpgroup 0, one thread) loads Q once and streams K and
//     V tiles of BLOCK_N keys through a STAGES-deep ring of shared buffers
//     with bulk tensor copies (TMA) that complete on "full" mbarriers; it
//     waits on a stage's "empty" mbarrier before refilling it. It gives
//     its registers up (setmaxnreg) to the consumers.
//   - each consumer warpgroup owns 64 rows: S = Q K^T as one wgmma
//     m64nBLOCK_Nk16 per k-step, K from shared memory and Q from registers
//     where they allow (kQInRegs; else from shared memory), the online softmax
//     in registers (its reference moved lazily, see kLazy), O += P V with P
//     from registers (a k-step's wgmma m64n128k16 over all 128 output
//     columns, or m64n64k16 per 64, see kPvWide), and hands each
//     stage back through its empty barrier as soon as the tensor cores are done
//     with it. No block-wide barrier after the start. Of the block's key
//     tiles it computes those its own rows see (NarrowRows: a window's or
//     the causal diagonal's edge, rows past the sequence's) and hands the
//     others back unread.
//   - OVERLAP: S for tile j + 1 and O += P V for tile j are issued before the
//     softmax of tile j + 1, which then runs while the tensor cores work (S,
//     P and O live in distinct registers that nothing touches while a
//     wgmma owns them, so only the older group is waited on).
//   - PINGPONG (two consumers): named barriers make the warpgroups take
//     turns issuing their GEMMs, so one's softmax overlaps the other's
//     matrix work; at head_dim 64 the turns run on across a persistent
//     block's tiles, so one's epilogue does too.
//   - the output is normalised into shared memory and written by a TMA
//     store (rows past seq_q are clipped by the copy engine, as loads past
//     the end are zero-filled): where the warpgroup's Q rows were, or, with
//     PERSISTENT, into a buffer of its own.
//   - PERSISTENT: one block per SM walks the tiles (query block, head,
//     batch), longest first, in a snake over waves (see Tiles); the
//     producer loads the next tile's Q and K/V while the consumers finish
//     this one, and the K/V ring and its barrier phases run on across tiles.
//   - KV_SPLITS (not with PERSISTENT): that many blocks, a thread block
//     cluster, share one query block's keys, for problems with too few
//     (query block, head) tiles to fill the GPU; each leaves its
//     unnormalised rows in its shared memory and combines a slice of the
//     rows of all of them (CombineInCluster of common/hopper.cuh).
// Tiles use the 128-byte swizzle of common/hopper.cuh, so the tensor cores
// read what the copy engine wrote.
//
// FP8 attention (EVT_Q_FP8: Q, K and V e4m3, O 16-bit; head_dim 128, 128-key
// tiles): both GEMMs are e4m3 wgmma (k-steps of 32), Q and K as copied. Two
// more warps of the producer warpgroup transpose each V tile into a Vt ring
// (TransposeV), since e4m3 wgmma reads V K-major only; P is rounded to e4m3
// in registers (fp8::PackProbsE4m3, its keys in Vt's order), its probabilities
// taken 2^kProbShift above the usual reference so that fewer fall below
// e4m3's normal range. Q's and K's descale factors fold into the softmax
// scale, V's into the output.
//
// Lengths on the device (common/attention_params.cuh): tiles past a
// sequence's rows are skipped, copies start at the sequence's first row (a
// packed tensor is mapped as one batch of all its rows), a packed sequence's
// partial last row block is stored by the threads (the copy engine would
// write on into the next sequence), and the V rows of a last key tile that
// may hold anything are cleared before P V (TailNeedsClearing). Paged K/V
// (EVT_PAGE_SIZE): the K and V maps are the pages ([num_pages, page_size,
// kv_heads, head_dim]), and each key tile is copied in parts of
// gcd(BLOCK_N, page size) rows from the pages the block table names.
//
// Tunables (compile-time macros): CONSUMERS (1-3), BLOCK_N (64, 128, 192),
// STAGES (2-4), OVERLAP (0/1), PINGPONG (0/1, two consumers only),
// PERSISTENT (0/1), KV_SPLITS (1, 2, 4). Fixed per problem: HEAD_DIM (32,
// 64, 80, 96, 128, 192 or 256, computed as the next multiple of 64; 128 with
// FP8), HEAD_DIM_V (V's and O's, at most HEAD_DIM's 64-column blocks; the
// same unless defined), EVT_BF16, EVT_Q_FP8 and EVT_KV_FP8.
//
// Grid: (ceil(seq_q / BLOCK_M) * KV_SPLITS, heads, batch), the last query
// blocks first (with a causal mask they are the longest), clusters of
// (KV_SPLITS, 1, 1); persistent: one block per SM, at most one per tile. Block:
// 128 * (1 + CONSUMERS) threads; dynamic shared memory as the spec's Geometry
// lays it out (LayOut here): Q and O, the K/V ring (FP8: and the Vt ring),
// 1024 B of alignment and 256 B of barriers. Second parameter: tensor maps with
// boxes of 128 bytes of columns (64 16-bit, 128 e4m3) by BLOCK_M (Q), BLOCK_N
// (K, V; paged: gcd(BLOCK_N, page size)) and 64 (O) rows.
#include "fp8.cuh"
#include "hopper.cuh"

namespace {

using namespace flash;
using namespace hopper;

constexpr bool kFp8 = kQFp8;
constexpr int kConsumers = CONSUMERS;
constexpr int kM = 64 * kConsumers;
constexpr int kN = BLOCK_N;
constexpr int kDMem = kHeadDimMem;  // In memory; computed: kD (flash_common).
constexpr int kD = kHeadDimIn64s;
constexpr int kDvMem = kHeadDimVMem;  // V's and O's.
constexpr int kDv = kHeadDimVIn64s;
constexpr int kStages = STAGES;
constexpr int kThreads = 128 * (1 + kConsumers);
constexpr int kNTiles = kN / 8;
constexpr int kDTiles = kDv / 8;  // n8 tiles of O.
constexpr bool kOverlap = OVERLAP;
constexpr bool kPingPong = PINGPONG;
constexpr bool kPersistent = PERSISTENT;
constexpr int kSplits = KV_SPLITS;
// Bytes of an element of Q, K and V; columns of a 128-byte swizzled block
// of them and blocks of a row (O is always 16-bit: 64-column blocks).
constexpr int kElemBytes = kFp8 ? 1 : 2;
constexpr int kBlockCols = kRowBytes / kElemBytes;
constexpr int kDBlocks = kD / kBlockCols;
constexpr int kDvBlocks = kDv / kBlockCols;
constexpr unsigned kQBytes = kM * kD * kElemBytes;
constexpr unsigned kOBytes = kM * kDv * 2;
constexpr unsigned kTileBytes = kN * kD * kElemBytes;    // A K stage.
constexpr unsigned kVTileBytes = kN * kDv * kElemBytes;  // A V stage.
// FP8: a Vt stage, V's transpose and 8 more rows (1 KB) of which the first
// is ones (e4m3 1.0, byte 0x38): B's rows 128..135 of P V, P's row sums.
constexpr unsigned kVtStageBytes = kVTileBytes + 1024;
// Q's buffer and O's: one where O goes where Q was (not persistent).
constexpr unsigned kQOBytes =
    kPersistent ? kQBytes + kOBytes : (kOBytes > kQBytes ? kOBytes : kQBytes);
// Tensor-core k-steps (32 bytes of the operands' rows each): of S = Q K^T
// over head_dim, and of O += P V over a tile's keys.
constexpr int kQkSteps = kD * kElemBytes / 32;
constexpr int kPvSteps = kN * kElemBytes / 32;
static_assert(kN % 64 == 0 && kN <= 192, "BLOCK_N");
static_assert(kDMem % 16 == 0, "HEAD_DIM: rows of whole 32-byte sectors");
static_assert(kDvMem % 16 == 0 && kDv <= kD, "HEAD_DIM_V: 16 to HEAD_DIM");
static_assert(!kFp8 || kDv == kD, "FP8 attention: one head dim");
static_assert(!kFp8 || (kKvFp8 && kN == 128 && kDMem == 128),
              "FP8 attention: e4m3 K and V, 128-key tiles, head_dim 128");
static_assert(kStages >= 2, "STAGES");
static_assert(!kPingPong || kConsumers == 2, "PINGPONG needs two consumers");
static_assert(kSplits == 1 || !kPersistent, "KV_SPLITS needs one tile a block");

constexpr int Gcd(int a, int b) { return b == 0 ? a : Gcd(b, a % b); }
// Rows of a K/V copy: the tile, or in a paged kernel the largest part of it
// that lies in one page wherever the tile starts (a multiple of 16 rows, so
// that every part starts on the 128-byte swizzle's 1024-byte period).
constexpr int kKvBox = kPageSize > 0 ? Gcd(kN, kPageSize) : kN;
static_assert(kKvBox % 16 == 0, "a page holds a multiple of 16 keys");
// Split-KV partial rows go where Q and the K/V ring were.
static_assert(kM * (kPartRowStride<kDv> + 2) * 4 <=
                  kQOBytes + kStages * (kTileBytes + kVTileBytes),
              "partial rows fit where the tiles were");

// Register reallocation (a single consumer keeps the entry allocation):
// 128 * producer + 128 * kConsumers * consumer <= 64512 (168 registers a
// thread at launch, 384 or 512 threads): the consumers raise their count
// only by what the producer gave up, or setmaxnreg.inc waits forever. FP8
// leaves the producer warpgroup more, for V's transpose (TransposeV).
constexpr bool kRealloc = kConsumers > 1;
constexpr int kProducerRegs = kFp8 ? 80 : 24;
constexpr int kConsumerRegs = kConsumers == 2 ? (kFp8 ? 208 : 240) : 160;
static_assert(!kFp8 || kConsumers <= 2, "FP8 attention: up to two consumers");

// Named barriers: 0 is __syncthreads; 1 + c a consumer's epilogue; the
// ping-pong turns of consumer c wait on kTurn + c; kDone is all consumers.
// FP8: warps kTransposeWarp0 .. + 1 of the producer warpgroup transpose V.
constexpr int kTransposeWarp0 = 2;
constexpr int kTransposeWarps = 2;
constexpr int kTurn = 4;
constexpr int kDone = 6;

// Shared-memory addresses of the tiles and barriers. Persistent blocks keep
// O in a buffer of its own, so that the next tile's Q loads during the
// epilogue; otherwise O goes where Q was (FP8: Q's buffer is sized for O).
// FP8 adds a ring of V's transposes (Vt, [head_dim][keys], see TransposeV)
// with barriers of their own; P V reads the "pv" stages: Vt's for FP8,
// else V's.
struct Smem {
  unsigned q, o, k0, v0, vt0, bars;
  unsigned char* tiles;  // Where q is, as a generic pointer.
  __device__ __forceinline__ unsigned k(int s) const {
    return k0 + s * kTileBytes;
  }
  __device__ __forceinline__ unsigned v(int s) const {
    return v0 + s * kVTileBytes;
  }
  __device__ __forceinline__ unsigned vt(int s) const {
    return vt0 + s * kVtStageBytes;
  }
  __device__ __forceinline__ unsigned q_full() const { return bars; }
  __device__ __forceinline__ unsigned q_empty() const { return bars + 8; }
  __device__ __forceinline__ unsigned k_full(int s) const {
    return bars + 8 * (2 + s);
  }
  __device__ __forceinline__ unsigned v_full(int s) const {
    return bars + 8 * (2 + kStages + s);
  }
  __device__ __forceinline__ unsigned k_empty(int s) const {
    return bars + 8 * (2 + 2 * kStages + s);
  }
  __device__ __forceinline__ unsigned v_empty(int s) const {
    return bars + 8 * (2 + 3 * kStages + s);
  }
  // Where the producer waits for a V tile whose tail it clears (ClearTail).
  __device__ __forceinline__ unsigned v_tail() const {
    return bars + 8 * (2 + 4 * kStages);
  }
  __device__ __forceinline__ unsigned vt_full(int s) const {
    return bars + 8 * (3 + 4 * kStages + s);
  }
  __device__ __forceinline__ unsigned vt_empty(int s) const {
    return bars + 8 * (3 + 5 * kStages + s);
  }
  __device__ __forceinline__ unsigned pv(int s) const {
    return kFp8 ? vt(s) : v(s);
  }
  __device__ __forceinline__ unsigned pv_full(int s) const {
    return kFp8 ? vt_full(s) : v_full(s);
  }
  __device__ __forceinline__ unsigned pv_empty(int s) const {
    return kFp8 ? vt_empty(s) : v_empty(s);
  }
};
static_assert(8 * (3 + 6 * 4) <= 256, "barriers fit their 256 bytes");

__device__ __forceinline__ Smem LayOut(const unsigned char* smem_raw) {
  Smem s;
  // The swizzle pattern repeats every 1024 bytes of address.
  s.q = (SmemAddress(smem_raw) + 1023) & ~1023u;
  s.tiles =
      const_cast<unsigned char*>(smem_raw) + (s.q - SmemAddress(smem_raw));
  s.o = kPersistent ? s.q + kQBytes : s.q;
  s.k0 = s.q + kQOBytes;
  s.v0 = s.k0 + kStages * kTileBytes;
  s.vt0 = s.v0 + kStages * kVTileBytes;
  s.bars = s.vt0 + (kFp8 ? kStages * kVtStageBytes : 0);
  return s;
}

// The tiles (query block, head, batch) of this block. A block of its own
// per tile: grid (query block, head, batch). Persistent blocks take one tile
// of every wave of gridDim.x tiles, in a snake: block b takes the b-th of
// even waves and the b-th from the end of odd ones, so the blocks that drew
// the longer tiles of one wave draw the shorter of the next. With a causal
// mask (tiles of one head differ in length up to q_blocks times) the tiles
// are ordered by query block, the last first (they see the most keys), then
// (batch, head), so that each wave holds tiles of about one length: ordered
// by head first, a causal prompt of a few waves left its busiest block up
// to 1.7x the mean (bench/persistent_balance.py) and took up to 1.5x as
// long on the H100. Without one, by (batch, head) first, so that blocks
// running at the same time share a head's K and V in L2 (2% faster at
// 6,583 keys unmasked).
struct Tiles {
  int count, q_blocks, single;  // single: the tile of a non-persistent block.
  int split;                    // Its part of the keys, of kSplits.
  // The order: tiles of query block major (causal, persistent), else of
  // (batch, head) major; `inner` tiles share the major index.
  bool query_major;
  int inner;
  // The block's n-th tile; count or more when it has no more.
  __device__ __forceinline__ int At(int n) const {
    if (!kPersistent) return n == 0 ? single : count;
    const int rank = (n & 1) ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    return n * gridDim.x + rank;
  }
};

__device__ __forceinline__ Tiles MyTiles(const AttentionParams& p) {
  Tiles t;
  t.q_blocks = (p.seq_q + kM - 1) / kM;
  t.count = t.q_blocks * p.heads * p.batch;
  // Grid (q_blocks * kSplits, heads, batch) when not persistent.
  t.single =
      (blockIdx.z * p.heads + blockIdx.y) * t.q_blocks + blockIdx.x / kSplits;
  t.split = blockIdx.x % kSplits;
  t.query_major = kPersistent && p.causal;
  t.inner = t.query_major ? p.heads * p.batch : t.q_blocks;
  return t;
}

__device__ __forceinline__ BlockPlan TileAt(const AttentionParams& p,
                                            const Tiles& t, int tile) {
  const int major = tile / t.inner, minor = tile - major * t.inner;
  // batch * heads + head, and the query block's rank (0: the last).
  const int head = t.query_major ? minor : major;
  const int rank = t.query_major ? major : minor;
  return PlanWork<kM, kN, kSplits>(p, head / p.heads, head % p.heads,
                                   t.q_blocks, rank, t.split);
}

// The batch coordinate of a sequence in the tensor maps: packed tensors
// (rows from cu_seqlens) are mapped as one batch of all their rows.
__device__ __forceinline__ int MapBatch(const int* cu_seqlens, int b) {
  return cu_seqlens != nullptr ? 0 : b;
}

// Whether the rows of key tile kv0.. past the sequence's keys may hold
// anything at all (NaN included), so that V's must be cleared before P V
// (a masked key's probability is 0, but 0 * NaN is not). Rows past a
// dense problem's seq_k or past the packed tensor are zero-filled by the
// copy engine, and rows of the next packed sequence are its keys; rows past
// seqused_k, and those between the packed total cu_seqlens_k[batch] and the
// tensor's end, are not.
__device__ __forceinline__ bool TailNeedsClearing(const AttentionParams& p,
                                                  const BlockPlan& w, int kv0) {
  if (kv0 + kN <= w.seq_k) return false;
  if (SequsedK(p) != nullptr) return true;
  if (CuSeqlensK(p) == nullptr) return false;
  const int total = __ldg(p.cu_seqlens_k + p.batch);
  return w.k_start + kv0 + kN > total && p.rows_k > total;
}

// Zeroes rows [from, kN) of the V tile at `tile` (all its column blocks),
// the producer warp's 32 lanes together, and makes the zeros visible to the
// tensor cores.
__device__ __forceinline__ void ClearTail(unsigned tile, int from, int lane) {
  // Lane: 16-byte chunk lane % 8 of rows from + lane / 8, + 4, ... (of
  // each 64-column block); one address and one bound live.
  const int first = max(from, 0) + lane / 8;
  const unsigned end = tile + kN * kRowBytes;
  for (unsigned at = tile + first * kRowBytes + (lane % 8) * 16; at < end;
       at += 4 * kRowBytes) {
#pragma unroll
    for (int db = 0; db < kDvBlocks; ++db) {
      asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(
                       at + db * kN * kRowBytes),
                   "r"(0)
                   : "memory");
    }
  }
  FenceSharedForAsync();
  __syncwarp();
}

// The page (the map's batch coordinate) of part `lane` of the key tile at
// row `row` of sequence `batch`, each part kKvBox rows of one page: lanes
// past the tile's parts take its last. The page id is clamped to the pool
// as KeyRow does and the table read within the sequence's row (parts past
// the problem's keys, a tile reaching over seq_k, read its last page of the
// row: masked, and V cleared). Without pages: `batch`. One load a lane, so
// a tile's ids arrive together, read once for K and V.
__device__ __forceinline__ int PartPage(const AttentionParams& p, int row,
                                        int batch, int lane) {
  if (kPageSize == 0) return batch;
  const int at = row + min(lane, kN / kKvBox - 1) * kKvBox;
  const int slot = min(at / kPageSize, p.seq_k / kPageSize - 1);
  const int* table = p.block_table + batch * p.block_table_stride;
  return min(max(__ldg(table + slot), 0), p.rows_k / kPageSize - 1);
}

// The key tile at row `row` (of kv head kv_head; in a paged kernel the
// sequence's key) into the shared tile at `tile`, completing on `bar`: each
// kKvBox rows from the page lane `part` holds (PartPage). The whole warp
// calls it; lane 0 issues the copies. kBlocks: the tile's column blocks
// (kDvBlocks for V).
template <int kBlocks = kDBlocks>
__device__ __forceinline__ void LoadTileRows(const TensorMap& map,
                                             unsigned tile, unsigned bar,
                                             int row, int kv_head, int page,
                                             int lane) {
#pragma unroll
  for (int part = 0; part < kN / kKvBox; ++part) {
    int at = row + part * kKvBox, from = page;
    if (kPageSize > 0) {
      from = __shfl_sync(0xffffffffu, page, part);
      at %= kPageSize;
    }
    if (lane == 0) {
#pragma unroll
      for (int db = 0; db < kBlocks; ++db) {
        TmaLoad(tile + (db * kN + part * kKvBox) * kRowBytes, map, bar,
                kBlockCols * db, at, kv_head, from);
      }
    }
  }
}

// The K and V of the key tile at row `row` (of kv head kv_head, batch
// coordinate `batch` in the maps; in a paged kernel key `row` of sequence
// `batch`) into the stage of the block's it-th key
// tile, once the consumers have handed that stage back. With clear_from >=
// 0 its V rows from clear_from on are cleared (TailNeedsClearing): `tails`
// counts the tiles cleared so far (the phase of v_tail). Lane 0 of the
// producer warp issues the copies; the warp clears a tail. The producer has
// 24 registers: the arguments are what it keeps per tile.
__device__ __forceinline__ void LoadKv(const AttentionParams& p,
                                       const AttentionTensorMaps& maps,
                                       const Smem& s, int it, int row,
                                       int kv_head, int batch, int clear_from,
                                       int& tails, int lane) {
  const int stage = it % kStages;
  // The first round finds every stage empty (the phase before the first).
  const int parity = ((it / kStages) & 1) ^ 1;
  const int page = PartPage(p, row, batch, lane);  // Loads while it waits.
  BarrierWait(s.k_empty(stage), parity);
  if (lane == 0) BarrierExpectBytes(s.k_full(stage), kTileBytes);
  LoadTileRows(maps.k, s.k(stage), s.k_full(stage), row, kv_head, page, lane);
  const bool clear = clear_from >= 0;
  const unsigned v_bar = clear ? s.v_tail() : s.v_full(stage);
  BarrierWait(s.v_empty(stage), parity);
  if (lane == 0) BarrierExpectBytes(v_bar, kVTileBytes);
  LoadTileRows<kDvBlocks>(maps.v, s.v(stage), v_bar, row, kv_head, page, lane);
  if (clear) {
    BarrierWait(s.v_tail(), tails & 1);
    ++tails;
    ClearTail(s.v(stage), clear_from, lane);
    if (lane == 0) BarrierArrive(s.v_full(stage));
  }
}

// Whether tile `w` has rows to compute (with lengths on the device, query
// blocks past a sequence's rows have none).
__device__ __forceinline__ bool HasRows(const BlockPlan& w) {
  return w.q0 < w.seq_q;
}

// The producer warp: for each tile, Q once the consumers are done with the
// previous tile's, then every key tile's K and V, each into the next stage
// of the ring (which runs on across tiles). Lane 0 issues the copies.
__device__ __forceinline__ void Produce(const AttentionParams& p,
                                        const AttentionTensorMaps& maps,
                                        const Smem& s, int lane) {
  if (lane == 0) {
    PrefetchTensorMap(maps.q);
    PrefetchTensorMap(maps.k);
    PrefetchTensorMap(maps.v);
  }
  const Tiles tiles = MyTiles(p);
  int it = 0, done = 0, tails = 0;
  for (int n = 0, tile; (tile = tiles.At(n)) < tiles.count; ++n) {
    const BlockPlan w = TileAt(p, tiles, tile);
    if (!HasRows(w)) continue;
    if (done > 0) BarrierWait(s.q_empty(), (done - 1) & 1);
    if (lane == 0) {
      BarrierExpectBytes(s.q_full(), kQBytes);
#pragma unroll
      for (int db = 0; db < kDBlocks; ++db) {
        TmaLoad(s.q + db * kM * kRowBytes, maps.q, s.q_full(), kBlockCols * db,
                w.q_start + w.q0, w.h, MapBatch(CuSeqlensQ(p), w.b));
      }
    }
    const int kv_head = w.h / (p.heads / p.kv_heads);
    const int batch = MapBatch(CuSeqlensK(p), w.b);
    const int row0 = w.k_start + w.block0 * kN;
    // Only a sequence's last key tile can reach past its keys: it is
    // loaded after the loop (inside, its values would stay live).
    const int last = w.num_blocks - 1;
    const int kv_last = (w.block0 + last) * kN;
    // (FP8: the transposer clears them in Vt instead.)
    const bool clear_last =
        !kFp8 && last >= 0 && TailNeedsClearing(p, w, kv_last);
    const int plain = clear_last ? last : w.num_blocks;
    for (int j = 0, row = row0; j < plain; ++j, ++it, row += kN) {
      LoadKv(p, maps, s, it, row, kv_head, batch, -1, tails, lane);
    }
    if (clear_last) {
      LoadKv(p, maps, s, it++, row0 + last * kN, kv_head, batch,
             w.seq_k - kv_last, tails, lane);
    }
    ++done;
  }
}

// FP8: Hopper's e4m3 wgmma reads both operands K-major, so P V needs V as
// [head_dim][keys]. The transposer warps turn each V tile ([kN keys][kD],
// as copied) into Vt (kD rows of kN bytes, the same 128-byte swizzle),
// permuting the keys within each k-step of 32 so that P's A fragments come
// straight from S's accumulators (fp8::PackProbsE4m3): the lane that holds keys
// 2i, 2i + 1, 2i + 8, 2i + 9 (+ 16) of a step's scores holds them as
// k-positions 4i .. 4i + 3 (+ 16), so Vt's column 4i + e holds key
// Key(i, e). A lane owns one 4-byte word of a Vt row: 4 keys of a k-step
// (lane / 8 the step, lane % 8 the word), and per pass 16 of head_dim (a
// 16-byte chunk of the 4 key rows, loaded whole), transposed 4 by 4 bytes
// with byte permutes. With kClear, V's rows from key `from` on (which may
// hold anything, TailNeedsClearing) are taken as zeros.
__device__ __forceinline__ unsigned Prmt(unsigned a, unsigned b, unsigned sel) {
  unsigned d;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}

template <bool kClear>
__device__ __forceinline__ void TransposeV(unsigned v, unsigned vt, int thread,
                                           int from) {
  const int lane = thread % 32;
  const int step = lane / 8, word = lane % 8;
  const int key0 = 32 * step + 16 * (word / 4) + 2 * (word % 4);
  constexpr int kChunks = kD / 16;  // 16-byte chunks of a V row.
  constexpr int kPasses = kChunks / kTransposeWarps;
#pragma unroll 1
  for (int pass = 0; pass < kPasses; ++pass) {
    const int c = (thread / 32) * kPasses + pass;
    unsigned r[4][4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key = key0 + (e & 1) + 8 * (e >> 1);
      asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(r[e][0]), "=r"(r[e][1]), "=r"(r[e][2]), "=r"(r[e][3])
                   : "r"(v + key * kRowBytes + ((c ^ (key % 8)) << 4)));
      if (kClear && key >= from) r[e][0] = r[e][1] = r[e][2] = r[e][3] = 0;
    }
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      // Bytes 0..3 of r[e][w] are head_dim 16 c + 4 w + 0..3 of key e.
      const unsigned lo01 = Prmt(r[0][w], r[1][w], 0x5140);
      const unsigned hi01 = Prmt(r[0][w], r[1][w], 0x7362);
      const unsigned lo23 = Prmt(r[2][w], r[3][w], 0x5140);
      const unsigned hi23 = Prmt(r[2][w], r[3][w], 0x7362);
      const unsigned out[4] = {
          Prmt(lo01, lo23, 0x5410), Prmt(lo01, lo23, 0x7632),
          Prmt(hi01, hi23, 0x5410), Prmt(hi01, hi23, 0x7632)};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = 16 * c + 4 * w + e;
        const int col = 4 * (8 * step + word);  // Byte in the row.
        asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(
                         vt + row * kRowBytes +
                         (((col / 16) ^ (row % 8)) << 4) + col % 16),
                     "r"(out[e])
                     : "memory");
      }
    }
  }
}

// The transposer warps (FP8): every key tile's V into its Vt stage, in the
// producer's order, once the copy has landed and the consumers are done
// with the stage's previous Vt; then V's stage goes back to the producer.
__device__ __forceinline__ void Transpose(const AttentionParams& p,
                                          const Smem& s, int thread) {
  const Tiles tiles = MyTiles(p);
  int it = 0;
  for (int n = 0, tile; (tile = tiles.At(n)) < tiles.count; ++n) {
    const BlockPlan w = TileAt(p, tiles, tile);
    if (!HasRows(w)) continue;
    // Only a sequence's last key tile can reach past its keys.
    const int kv_last = (w.block0 + w.num_blocks - 1) * kN;
    const int clear_from = w.num_blocks > 0 && TailNeedsClearing(p, w, kv_last)
                               ? w.seq_k - kv_last
                               : kN;
    for (int j = 0; j < w.num_blocks; ++j, ++it) {
      const int stage = it % kStages;
      const int parity = (it / kStages) & 1;
      BarrierWait(s.v_full(stage), parity);
      BarrierWait(s.vt_empty(stage), parity ^ 1);
      if (j == w.num_blocks - 1 && clear_from < kN) {
        TransposeV<true>(s.v(stage), s.vt(stage), thread, clear_from);
      } else {
        TransposeV<false>(s.v(stage), s.vt(stage), thread, kN);
      }
      FenceSharedForAsync();
      __syncwarp();
      if (thread % 32 == 0) {
        BarrierArrive(s.vt_full(stage));
        BarrierArrive(s.v_empty(stage));
      }
    }
  }
}

// With OVERLAP, where registers allow (the spec's estimate of a consumer
// thread's registers plus D / 4), each thread keeps its part of the
// warpgroup's Q rows in registers (A fragments) for the whole tile, and S =
// Q K^T reads only K from shared memory: 2-3% faster on the mid-sized suite
// problems, the same on the large ones (bench/RESULTS.md, 2026-11-26). Not
// without OVERLAP: there ptxas (CUDA 13.0) gave the fragments' registers to
// P inside the key loop of 64-key tiles, so that S of the next tile was
// taken against P (wrong results, caught by the GPU tests).
constexpr int kRegisterBudget = kRealloc ? kConsumerRegs : 255;
// Not for FP8, whose consumers have fewer registers (the transposer's).
constexpr bool kQInRegs =
    kOverlap && !kFp8 &&
    kDv / 2 + kN / 2 + kN / 4 + 32 + (kPersistent ? 8 : 0) + kD / 4 <=
        kRegisterBudget;
constexpr int kQFrags = kQInRegs ? kQkSteps : 1;

// The thread's A fragments of the warpgroup's 64 rows of Q (at q_rows, in
// 128-byte column blocks), one per k-step: ldmatrix of 16 rows by 32 bytes
// per warp (e4m3's A fragment of a k-step of 32 holds the same bytes as a
// 16-bit one of 16). The lane's row is its lane mod 8, so LaneChunk's
// swizzle applies.
__device__ __forceinline__ void LoadWarpgroupQ(unsigned (&qf)[kQFrags][4],
                                               unsigned q_rows, int thread) {
  const int lane = thread % 32;
  const int row = (thread / 32) * 16 + lane % 8 + 8 * ((lane / 8) % 2);
#pragma unroll
  for (int ks = 0; ks < kQkSteps; ++ks) {
    const int chunk = 2 * (ks % 4) + lane / 16;
    LdMatrixX4(qf[ks], q_rows + (ks / 4) * kM * kRowBytes + row * kRowBytes +
                           2 * LaneChunk(chunk, lane));
  }
}

// S = Q K^T for one key tile: the warpgroup's 64 rows of Q (from q_rows or
// the fragments qf) against the kN keys of the K stage, one wgmma per k-step
// of 16.
// (Templates only so that the branches of the other dtype are discarded.)
template <bool kE4m3 = kFp8>
__device__ __forceinline__ void IssueQk(float (&s)[kNTiles][4], unsigned q_rows,
                                        const unsigned (&qf)[kQFrags][4],
                                        unsigned k_stage) {
#pragma unroll
  for (int ks = 0; ks < kQkSteps; ++ks) {
    const unsigned step = (ks % 4) * 32;  // Bytes into the 128-byte rows.
    const unsigned long long k =
        Descriptor(k_stage + (ks / 4) * kN * kRowBytes + step);
    const unsigned long long q =
        Descriptor(q_rows + (ks / 4) * kM * kRowBytes + step);
    if constexpr (kE4m3 && kQInRegs) {
      WgmmaRSFp8(s, qf[ks], k, ks > 0);
    } else if constexpr (kE4m3) {
      WgmmaSSFp8(s, q, k, ks > 0);
    } else if constexpr (kQInRegs) {
      WgmmaRSK(s, qf[ks], k, ks > 0);
    } else {
      WgmmaSS(s, q, k, ks > 0);
    }
  }
}

// O += P V for one key tile: for key step t, rows 16 t .. 16 t + 15 of the
// V stage. At head_dim 128 with up to 128 keys a tile, one m64n128k16 a
// step reads both 64-column blocks of V and P's registers once: 1-3%
// faster than one m64n64k16 per block, but 1-2.5% slower with 192-key
// tiles (bench/RESULTS.md, 2026-11-26). Else output columns 64 db .. 64 db
// + 63 from V's column block db.
// FP8: Vt's rows (head_dim) of 32 bytes (keys) a step, K-major, into `o`
// anew (a tile's own accumulator, AddPv).
constexpr bool kPvWide = kDv == 128 && kN <= 128;
template <bool kE4m3 = kFp8, int kTiles>
__device__ __forceinline__ void IssuePv(float (&o)[kTiles][4],
                                        const unsigned (&pf)[kPvSteps][4],
                                        unsigned v_stage) {
#pragma unroll
  for (int t = 0; t < kPvSteps; ++t) {
    const unsigned rows = v_stage + t * 16 * kRowBytes;
    if constexpr (kE4m3) {
      WgmmaRSFp8(o, pf[t],
                 Descriptor(v_stage + (t / 4) * kD * kRowBytes + (t % 4) * 32),
                 t > 0);
    } else if constexpr (kPvWide) {  // o is 16 tiles then.
      WgmmaRS(*reinterpret_cast<float(*)[16][4]>(&o[0]), pf[t],
              Descriptor(rows, kN * kRowBytes));
    } else {
#pragma unroll
      for (int db = 0; db < kDv / 64; ++db) {
        WgmmaRS(N64(o, db), pf[t], Descriptor(rows + db * kN * kRowBytes));
      }
    }
  }
}

// Whether the ping-pong turns run on across a persistent block's tiles
// (else they restart at each tile). Across tiles, one consumer's epilogue
// overlaps the other's GEMMs: up to 6% faster at head_dim 64 on the H100,
// but 1-2% slower at 128 (bench/RESULTS.md).
constexpr bool kTurnsAcrossTiles = kPersistent && kD == 64;

// Turn-taking of two consumer warpgroups around their GEMM issues (a no-op
// without PINGPONG). Consumer c waits for its turn on barrier kTurn + c and
// then gives the turn to the other. Consumer 1 hands consumer 0 the first
// turn of the block (or of each tile with key tiles); the last turn of the
// block (or tile) given to consumer 0 is taken by its FinishBlock (or kept
// by consumer 1), so every barrier sees as many arrivals as waits. Both
// consumers take as many turns a tile: one whose rows see fewer of the
// block's key tiles passes the turns of the others (PassTiles).
struct Turns {
  int consumer;
  __device__ __forceinline__ void StartBlock() const {
    if (kTurnsAcrossTiles) HandFirst();
  }
  __device__ __forceinline__ void StartTile(int regions) const {
    if (!kTurnsAcrossTiles && regions > 0) HandFirst();
  }
  __device__ __forceinline__ void Begin() const {
    if (kPingPong) NamedBarrierSync(kTurn + consumer, 256);
  }
  // `last`: the tile's last turn.
  __device__ __forceinline__ void End(bool last) const {
    if (kPingPong && !(last && consumer == 1 && !kTurnsAcrossTiles)) {
      NamedBarrierArrive(kTurn + 1 - consumer, 256);
    }
  }
  __device__ __forceinline__ void FinishBlock() const {
    if (kTurnsAcrossTiles && consumer == 0) Begin();
  }
  // A turn with nothing to issue, the tile's last: a consumer that computes
  // none of the block's n key tiles passes n (PassTiles) and, with
  // OVERLAP, takes this one more, as many as the other's n + 1.
  __device__ __forceinline__ void PassLast() const {
    Begin();
    End(true);
  }

 private:
  __device__ __forceinline__ void HandFirst() const {
    if (kPingPong && consumer == 1) NamedBarrierArrive(kTurn, 256);
  }
};

// Per-thread state of a consumer warpgroup.
struct Rows {
  float o[1][kDTiles][4];
  float s[1][kNTiles][4];
  unsigned pf[kPvSteps][4];
  unsigned qf[kQFrags][4];  // Q's A fragments (kQInRegs).
  float row_max[1][2], row_sum[1][2], correction[1][2];
  // scale * log2(e), times Q's and K's descale factors (FP8), and with
  // softcapping the factor of scores before tanh (ScalesOf).
  ScoreScales scales;
  // FP8: the last key tile's P V, added to O by AddPv.
  // Tile kDTiles: P's row sums (lanes 4 i hold rows i and i + 8 in [0] and
  // [2], the others zeros, so that QuadSum adds them up).
  float pv[1][kDTiles + 1][4];
};

// The online softmax of a tile with a lazy reference: a row's reference
// (its max so far, exp2 domain) moves only when one of its scores passes it
// by more than kSlack, so probabilities stay below 2^kSlack (well inside
// the range of fp16 and bf16; the sums and O are fp32) and O is rescaled on
// few tiles (correction 1 on the others). Fewer instructions a tile: the
// large problems run at the H100's power cap (bench/RESULTS.md,
// 2026-11-26). Not with 192-key tiles, where it measured 1-1.6% slower
// (8k-d128).
// FP8 probabilities are e4m3 for P V: they are taken against a reference
// kProbShift below the row's, so that they span [0, 2^(kSlack +
// kProbShift)] = [0, 256] (e4m3 reaches 448), and fewer of them fall below
// e4m3's normal range (2^-6). Their row sums are of the rounded values
// (AddPv), so that rounding P scales no row: with 3 mantissa bits, the
// probabilities of a row with scores close together all round the same way
// (up to 6% off), which summing the unrounded ones would leave in O.
constexpr bool kLazy = kN <= 128;
constexpr float kSlack = kFp8 ? 4.f : 8.f;
constexpr float kProbShift = kFp8 ? 4.f : 0.f;
__device__ __forceinline__ void SoftmaxLazy(Rows& r, float scale_log2) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const float mx = QuadRowMax(r.s[0], half) * scale_log2;
    const float old = r.row_max[0][half];
    r.correction[0][half] = 1.f;
    if (mx > old + kSlack) {  // Always on a row's first key: old is -inf.
      r.correction[0][half] = Exp2(old - mx);
      r.row_max[0][half] = mx;
    }
    const float ref = r.row_max[0][half] == NegInf() ? 0.f : r.row_max[0][half];
    const float sum = ExpRowHalf(r.s[0], half, scale_log2, ref - kProbShift);
    r.row_sum[0][half] =
        r.row_sum[0][half] * r.correction[0][half] + (kFp8 ? 0.f : sum);
  }
}

// Masks (where the tile needs it) and runs the softmax of key tile j.
__device__ __forceinline__ void Softmax(Rows& r, const AttentionParams& p,
                                        const BlockPlan& w, int j, int row0,
                                        int lane) {
  const int kv0 = (w.block0 + j) * kN;
  PrepareScores<kN>(r.s, p, w, r.scales, kv0, w.q0 + row0, lane);
  if constexpr (kLazy) {
    SoftmaxLazy(r, r.scales.log2);
  } else {
    SoftmaxScores(r.s, r.row_max, r.row_sum, r.scales.log2, r.correction);
  }
}

// P for O += P V, done before the wgmma.fence that precedes its use.
__device__ __forceinline__ void PackAll(Rows& r) {
#pragma unroll
  for (int t = 0; t < kPvSteps; ++t) {
    if constexpr (kFp8) {
      fp8::PackProbsE4m3(r.s[0], t, r.pf[t]);
    } else {
      PackProbs(r.s, 0, t, r.pf[t]);
    }
  }
  FenceOperands(r.pf);
}

// FP8: the tensor cores keep fewer bits of a sum of e4m3 products than
// fp32 has (about 13 below the accumulator's leading one, truncated), so O
// summed over thousands of keys in their accumulator drifts (7% relative
// L2 error at 8,192 keys with a V of nonzero mean). Each key tile's P V
// goes to an accumulator of its own (Rows::pv), added to O in fp32 once
// done, outside the ping-pong turns: the truncation stays within a tile.
// The same wgmma sums P's rows (of what P rounded to, so that rounding
// scales no row) on a column of ones after V's (Smem::vt), at no ALU cost;
// `rescaled`: the rows' sums have taken a correction since (r.correction).
__device__ __forceinline__ void AddPv(Rows& r, bool rescaled) {
  if constexpr (kFp8) {
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) r.o[0][dt][i] += r.pv[0][dt][i];
    }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float sum = r.pv[0][kDTiles][2 * half];
      r.row_sum[0][half] += rescaled ? sum * r.correction[0][half] : sum;
    }
  }
}

// O += P V of one key tile: into O, or (FP8) into the tile's own
// accumulator (AddPv).
__device__ __forceinline__ void IssueTilePv(Rows& r, unsigned v_stage) {
  if constexpr (kFp8) {
    IssuePv(r.pv[0], r.pf, v_stage);
  } else {
    IssuePv(r.o[0], r.pf, v_stage);
  }
}

// After the wait for IssueTilePv's wgmma.
__device__ __forceinline__ void FenceTilePv(Rows& r) {
  if constexpr (kFp8) {
    FenceOperands(r.pv[0]);
  } else {
    FenceOperands(r.o[0]);
  }
}

// O scaled to the rows' new references where one moved, done before the
// next wgmma.fence.
__device__ __forceinline__ void Rescale(Rows& r) {
  if (!kLazy || r.correction[0][0] != 1.f || r.correction[0][1] != 1.f) {
    RescaleRows(r.o, r.correction);
  }
  FenceOperands(r.o[0]);
}

// Consumers narrow the block's key tiles to those of their own rows with
// tiles of up to 128 keys. 192-key tiles keep the block's: a consumer's rows
// seldom miss a whole one, and its registers have no room for the ranges
// (up to 96 bytes of spills with score mods or three consumers).
constexpr bool kNarrow = kN <= 128;

// Key tiles [from, to) of the block from ring index `it`, which this
// consumer's rows do not see: each waited on and handed back as its GEMMs
// would have, taking their turns with nothing to issue (one a tile, two
// without OVERLAP), so that every consumer sees every phase of the ring
// (no stage is refilled before each has arrived) and the turns alternate
// as before. `ends`: whether the last of them is the block tile's last.
__device__ __forceinline__ void PassTiles(const Smem& s, const Turns& turns,
                                          int it, int from, int to, bool ends,
                                          int lane) {
  for (int j = from; j < to; ++j) {
    const int stage = (it + j) % kStages;
    const int parity = ((it + j) / kStages) & 1;
    const bool last = ends && j == to - 1;
    BarrierWait(s.k_full(stage), parity);
    if (lane == 0) BarrierArrive(s.k_empty(stage));
    turns.Begin();
    turns.End(kOverlap && last);
    BarrierWait(s.pv_full(stage), parity);
    if (lane == 0) BarrierArrive(s.pv_empty(stage));
    if constexpr (!kOverlap) {
      turns.Begin();
      turns.End(last);
    }
  }
}

// The key tiles one after another: S, softmax, then O += P V. `w`: this
// consumer's part of the block (NarrowRows); `ends`: whether its last turn
// is the block tile's last.
__device__ __forceinline__ void ConsumeSerial(Rows& r, const Smem& s,
                                              const AttentionParams& p,
                                              const BlockPlan& w,
                                              unsigned q_rows, int row0,
                                              const Turns& turns, int it,
                                              bool ends, int lane) {
  for (int j = 0; j < w.num_blocks; ++j) {
    const int stage = (it + j) % kStages;
    const int parity = ((it + j) / kStages) & 1;
    BarrierWait(s.k_full(stage), parity);
    turns.Begin();
    WgmmaFence();
    IssueQk(r.s[0], q_rows, r.qf, s.k(stage));
    WgmmaCommit();
    turns.End(false);
    WgmmaWait<0>();
    FenceOperands(r.s[0]);
    if (lane == 0) BarrierArrive(s.k_empty(stage));
    if (lane == 0 && j == w.num_blocks - 1) BarrierArrive(s.q_empty());
    Softmax(r, p, w, j, row0, lane);
    Rescale(r);
    PackAll(r);
    BarrierWait(s.pv_full(stage), parity);
    turns.Begin();
    WgmmaFence();
    IssueTilePv(r, s.pv(stage));
    WgmmaCommit();
    turns.End(ends && j == w.num_blocks - 1);
    WgmmaWait<0>();
    FenceTilePv(r);
    if (lane == 0) BarrierArrive(s.pv_empty(stage));
    AddPv(r, false);
  }
}

// The key tiles pipelined: S of tile j and O += P V of tile j - 1 are in
// flight together while nothing else is; the softmax of tile j runs while O
// += P V of tile j - 1 does, and O is rescaled while S of tile j + 1 runs.
__device__ __forceinline__ void ConsumeOverlapped(Rows& r, const Smem& s,
                                                  const AttentionParams& p,
                                                  const BlockPlan& w,
                                                  unsigned q_rows, int row0,
                                                  const Turns& turns, int it,
                                                  bool ends, int lane) {
  const int n = w.num_blocks;
  if (n == 0) return;
  BarrierWait(s.k_full(it % kStages), (it / kStages) & 1);
  turns.Begin();
  WgmmaFence();
  IssueQk(r.s[0], q_rows, r.qf, s.k(it % kStages));
  WgmmaCommit();
  turns.End(false);
  WgmmaWait<0>();
  FenceOperands(r.s[0]);
  if (lane == 0) BarrierArrive(s.k_empty(it % kStages));
  if (lane == 0 && n == 1) BarrierArrive(s.q_empty());
  Softmax(r, p, w, 0, row0, lane);
  PackAll(r);
  for (int j = 1; j < n; ++j) {
    const int stage = (it + j) % kStages;
    const int prev = (it + j - 1) % kStages;
    BarrierWait(s.k_full(stage), ((it + j) / kStages) & 1);
    turns.Begin();
    WgmmaFence();
    IssueQk(r.s[0], q_rows, r.qf, s.k(stage));
    WgmmaCommit();
    Rescale(r);
    BarrierWait(s.pv_full(prev), ((it + j - 1) / kStages) & 1);
    WgmmaFence();
    IssueTilePv(r, s.pv(prev));
    WgmmaCommit();
    turns.End(false);
    WgmmaWait<1>();
    FenceOperands(r.s[0]);
    if (lane == 0) BarrierArrive(s.k_empty(stage));
    if (lane == 0 && j == n - 1) BarrierArrive(s.q_empty());
    Softmax(r, p, w, j, row0, lane);
    WgmmaWait<0>();
    FenceTilePv(r);
    FenceOperands(r.s[0]);
    if (lane == 0) BarrierArrive(s.pv_empty(prev));
    PackAll(r);
    AddPv(r, true);
  }
  const int last = (it + n - 1) % kStages;
  BarrierWait(s.pv_full(last), ((it + n - 1) / kStages) & 1);
  turns.Begin();
  Rescale(r);
  WgmmaFence();
  IssueTilePv(r, s.pv(last));
  WgmmaCommit();
  turns.End(ends);
  WgmmaWait<0>();
  FenceTilePv(r);
  if (lane == 0) BarrierArrive(s.pv_empty(last));
  AddPv(r, false);
}

// Rows row0.. (up to the sequence's seq_q) of the warpgroup's part of the
// O buffer (`rows`, swizzled as Q) into O, 16 bytes a thread and step.
__device__ __forceinline__ void StoreRowsDirect(const BlockPlan& w,
                                                long long row_stride,
                                                const unsigned char* rows,
                                                int row0, int thread) {
  constexpr int kChunks = kDvMem / 8;  // 16-byte chunks of a row in O.
  const int valid = min(64, w.seq_q - row0);
  for (int i = thread; i < valid * kChunks; i += 128) {
    const int r = i / kChunks;
    const int c = i % kChunks;
    const uint4 x = *reinterpret_cast<const uint4*>(
        rows + (c / 8) * kM * kRowBytes + r * kRowBytes +
        (((c % 8) ^ (r % 8)) << 4));
    *reinterpret_cast<uint4*>(w.o + (row0 + r) * row_stride + c * 8) = x;
  }
}

// Normalises the warpgroup's 64 rows into its rows of the O buffer (the
// swizzled layout of Q) and stores them with the copy engine. A persistent
// block first waits until its previous store has read the buffer.
__device__ __forceinline__ void StoreRows(const Rows& r,
                                          const AttentionParams& p,
                                          const AttentionTensorMaps& maps,
                                          const BlockPlan& w, const Smem& s,
                                          int consumer, int thread) {
  const int lane = thread % 32;
  const unsigned o_rows = s.o + consumer * 64 * kRowBytes;
  if (kPersistent) {
    if (thread == 0) TmaStoreWait</*kRead=*/true>();
    NamedBarrierSync(1 + consumer, 128);
  }
  const float sink = SinkLog2(p, w.h);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const float sum = WithSink(QuadSum(r.row_sum[0][half]), sink,
                               r.row_max[0][half], kProbShift);
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    const int row = (thread / 32) * 16 + lane / 4 + half * 8;
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt) {
      const unsigned at = o_rows + (dt / 8) * kM * kRowBytes + row * kRowBytes +
                          (((dt % 8) ^ (row % 8)) << 4) + (lane % 4) * 4;
      const unsigned v =
          Pack(r.o[0][dt][2 * half] * inv, r.o[0][dt][2 * half + 1] * inv);
      asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(at), "r"(v) : "memory");
    }
  }
  FenceSharedForAsync();
  NamedBarrierSync(1 + consumer, 128);
  const int row0 = w.q0 + consumer * 64;
  if (row0 >= w.seq_q) return;
  if (CuSeqlensQ(p) != nullptr && row0 + 64 > w.seq_q) {
    // A packed sequence's last rows: the copy engine would run on into the
    // next sequence's, so the warpgroup stores just its own.
    StoreRowsDirect(w, p.o_row_stride, s.tiles + (o_rows - s.q), row0, thread);
    return;
  }
  if (thread == 0) {
#pragma unroll
    for (int db = 0; db < kDv / 64; ++db) {
      TmaStore(maps.o, o_rows + db * kM * kRowBytes, 64 * db, w.q_start + row0,
               w.h, MapBatch(CuSeqlensQ(p), w.b));
    }
    TmaStoreCommit();
  }
}

// A consumer warpgroup: its 64 rows of each of the block's tiles.
__device__ __forceinline__ void Consume(const AttentionParams& p,
                                        const AttentionTensorMaps& maps,
                                        const Smem& s, int consumer,
                                        int thread) {
  const int lane = thread % 32;
  const int warp_row0 = (thread / 32) * 16;  // Of the warpgroup's rows.
  const int row0 = consumer * 64 + warp_row0;
  const unsigned q_rows = s.q + consumer * 64 * kRowBytes;
  const Turns turns{consumer};
  const Tiles tiles = MyTiles(p);
  int it = 0;    // Key tiles consumed before this tile.
  int done = 0;  // Tiles with rows before this one.
  turns.StartBlock();
  for (int n = 0, tile; (tile = tiles.At(n)) < tiles.count; ++n) {
    const BlockPlan w = TileAt(p, tiles, tile);
    if (!HasRows(w)) continue;
    Rows r;
    InitRows(r.o, r.row_max, r.row_sum);
    const int kv_head = w.h / (p.heads / p.kv_heads);
    float scale_log2 = p.scale_log2;
    if constexpr (kFp8) {
      scale_log2 *= fp8::Descale(p, p.q_descale, w.b, kv_head) *
                    fp8::Descale(p, p.k_descale, w.b, kv_head);
    }
    r.scales = ScalesOf(p, scale_log2);
    // This warpgroup's rows and the block's key tiles they see: the others
    // (at a window's or the causal diagonal's edge, or all of them for rows
    // past the sequence's) are passed (PassTiles), and where it computes
    // none, one more turn keeps the count (Turns::PassLast).
    const BlockPlan mine =
        kNarrow ? NarrowRows<kN>(p, w, consumer * 64, 64) : w;
    const int mine_row0 = kNarrow ? warp_row0 : row0;  // Of mine.q0.
    const int before = mine.block0 - w.block0;
    const int after = before + mine.num_blocks;
    const bool extra = kOverlap && mine.num_blocks == 0 && w.num_blocks > 0;
    turns.StartTile(w.num_blocks);
    BarrierWait(s.q_full(), done & 1);
    ++done;
    if constexpr (kQInRegs) LoadWarpgroupQ(r.qf, q_rows, thread);
    // The loops hand Q back after their last S; with no key tile, here.
    if (lane == 0 && mine.num_blocks == 0) BarrierArrive(s.q_empty());
    PassTiles(s, turns, it, 0, before, false, lane);
    if constexpr (kOverlap) {
      ConsumeOverlapped(r, s, p, mine, q_rows, mine_row0, turns, it + before,
                        after == w.num_blocks, lane);
    } else {
      ConsumeSerial(r, s, p, mine, q_rows, mine_row0, turns, it + before,
                    after == w.num_blocks, lane);
    }
    PassTiles(s, turns, it, after, w.num_blocks, !extra, lane);
    if (extra) turns.PassLast();
    it += w.num_blocks;
    if constexpr (kFp8) {
      const float v_descale = fp8::Descale(p, p.v_descale, w.b, kv_head);
#pragma unroll
      for (int dt = 0; dt < kDTiles; ++dt) {
#pragma unroll
        for (int i = 0; i < 4; ++i) r.o[0][dt][i] *= v_descale;
      }
    }
    if constexpr (kSplits == 1) {
      StoreRows(r, p, maps, w, s, consumer, thread);
    } else {
      NamedBarrierSync(kDone, 128 * kConsumers);  // Done with the tiles.
      CombineInCluster<kM, kDv, kSplits, kDvMem>(
          p, w, reinterpret_cast<float*>(s.tiles), row0, r.o, r.row_max,
          r.row_sum, lane, consumer * 128 + thread, 128 * kConsumers,
          kProbShift);
    }
  }
  turns.FinishBlock();
  if (thread == 0) TmaStoreWait</*kRead=*/false>();
}

}  // namespace

extern "C" __global__ void EVT_CLUSTER_DIMS __launch_bounds__(kThreads, 1)
    attention_fwd(const __grid_constant__ AttentionParams p,
                  const __grid_constant__ AttentionTensorMaps maps) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const Smem s = LayOut(smem_raw);
  if constexpr (!kPersistent) {
    // A block (or cluster: its blocks share the tile) past its sequence's
    // rows has nothing to do.
    const Tiles t = MyTiles(p);
    if (!HasRows(TileAt(p, t, t.single))) return;
  }
  if (threadIdx.x == 0) {
    BarrierInit(s.q_full(), 1);
    BarrierInit(s.v_tail(), 1);
    BarrierInit(s.q_empty(), 4 * kConsumers);
    for (int i = 0; i < kStages; ++i) {
      BarrierInit(s.k_full(i), 1);
      BarrierInit(s.v_full(i), 1);
      // Lane 0 of every consumer warp hands a stage back (FP8: of every
      // transposer warp for V, of every consumer warp for Vt).
      BarrierInit(s.k_empty(i), 4 * kConsumers);
      BarrierInit(s.v_empty(i), kFp8 ? kTransposeWarps : 4 * kConsumers);
      if constexpr (kFp8) {
        BarrierInit(s.vt_full(i), kTransposeWarps);
        BarrierInit(s.vt_empty(i), 4 * kConsumers);
      }
    }
    BarrierInitFence();
  }
  if constexpr (kFp8) {  // Each Vt stage's rows of ones (kVtStageBytes).
    for (int i = threadIdx.x; i < kStages * 256; i += kThreads) {
      const unsigned at = s.vt(i / 256) + kVTileBytes + (i % 256) * 4;
      *reinterpret_cast<unsigned*>(s.tiles + (at - s.q)) =
          i % 256 < kRowBytes / 4 ? 0x38383838u : 0u;
    }
    FenceSharedForAsync();
  }
  __syncthreads();
  // Broadcast from lane 0, so the compiler sees it uniform across the warp
  // (else it serialises the wgmma behind the divergent role branch).
  const int warpgroup = __shfl_sync(0xffffffffu, threadIdx.x / 128, 0);
  if (warpgroup == 0) {
    if constexpr (kRealloc) LowerRegisters<kProducerRegs>();
    if (threadIdx.x < 32) Produce(p, maps, s, threadIdx.x);
    const int transposer = threadIdx.x - 32 * kTransposeWarp0;
    if (kFp8 && transposer >= 0 && transposer < 32 * kTransposeWarps) {
      Transpose(p, s, transposer);
    }
    if constexpr (kSplits > 1) {  // The consumers' CombineInCluster.
      __syncwarp();
      ClusterSync();
      ClusterSync();
    }
  } else {
    if constexpr (kRealloc) RaiseRegisters<kConsumerRegs>();
    Consume(p, maps, s, warpgroup - 1, threadIdx.x % 128);
  }
}
