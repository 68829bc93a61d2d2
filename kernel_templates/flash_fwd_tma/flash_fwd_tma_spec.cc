// Parameter space and launch geometry of
// kernel_templates/flash_fwd_tma/flash_fwd_tma.cu.
#include <algorithm>
#include <numeric>

#include "kernel_templates/template_registry.h"

namespace evotune {
namespace {

// Registers per consumer thread after reallocation (the kernel's
// kConsumerRegs; a single consumer keeps the entry cap of 255). FP8 leaves
// the producer warpgroup more, for V's transpose.
int64_t ConsumerRegisters(int64_t consumers, const Problem& p) {
  if (consumers == 1) return 255;
  if (consumers == 2) return p.q_fp8 ? 208 : 240;
  return 160;
}

// What a consumer thread keeps in registers: O (HEAD_DIM_V / 2 fp32), S
// (BLOCK_N / 2), with OVERLAP P beside S (BLOCK_N / 4 packed pairs), and
// about 32 for addresses, row statistics and loop state, 8 more for the
// tile loop of PERSISTENT. Configs above their budget spill
// (nvrtc_compiler_test's FlashFwdTmaConfigsDoNotSpill holds the rest to it).
// With OVERLAP the kernel keeps Q in registers (HEAD_DIM / 4 more) where
// that still fits (its kQInRegs).
// FP8 packs P four to a register and keeps a tile's P V (HEAD_DIM_V / 2)
// apart from O: with OVERLAP beside S and P, without it in S's place beside
// P (the larger of S and P V plus P). A window, softcap or sinks (MODS)
// take 8 more: bounds, the softcap's factor, the sink.
int64_t RegisterEstimate(const Config& c, const Problem& p) {
  const int64_t o = HeadDimIn64s(HeadDimV(p)) / 2;
  const int64_t s = c.at("BLOCK_N") / 2;
  const int64_t pf = c.at("BLOCK_N") / (p.q_fp8 ? 8 : 4);  // P, packed.
  const int64_t tile = !p.q_fp8          ? s + c.at("OVERLAP") * pf
                       : c.at("OVERLAP") ? s + pf + o
                                         : std::max(s, pf + o);
  return o + tile + 32 + 8 * c.at("PERSISTENT") + 8 * HasScoreMods(p);
}

std::vector<Constraint> Constraints() {
  return {
      {"KV_SPLITS == 1 || PERSISTENT == 0",
       [](const Config& c, const Problem&) {
         return c.at("KV_SPLITS") == 1 || c.at("PERSISTENT") == 0;
       }},
      {"PINGPONG == 0 || CONSUMERS == 2",
       [](const Config& c, const Problem&) {
         return c.at("PINGPONG") == 0 || c.at("CONSUMERS") == 2;
       }},
      {"CEIL64(HEAD_DIM_V) / 2 + (Q_FP8 == 0 ? BLOCK_N / 2 + OVERLAP * "
       "BLOCK_N / 4 : OVERLAP ? BLOCK_N / 2 + BLOCK_N / 8 + "
       "CEIL64(HEAD_DIM_V) / 2 : MAX(BLOCK_N / 2, BLOCK_N / 8 + "
       "CEIL64(HEAD_DIM_V) / 2)) + 32 + 8 * PERSISTENT + 8 * MODS <= "
       "(CONSUMERS == 1 ? 255 : CONSUMERS == 2 ? (Q_FP8 ? 208 : 240) : 160)",
       [](const Config& c, const Problem& p) {
         return RegisterEstimate(c, p) <=
                ConsumerRegisters(c.at("CONSUMERS"), p);
       }},
      // FP8 attention: one tile shape (V's transpose is written for it),
      // and the producer warpgroup's registers leave room for two
      // consumers at most.
      {"Q_FP8 == 0 || (HEAD_DIM == 128 && BLOCK_N == 128 && CONSUMERS <= 2)",
       [](const Config& c, const Problem& p) {
         return !p.q_fp8 || (p.head_dim == 128 && c.at("BLOCK_N") == 128 &&
                             c.at("CONSUMERS") <= 2);
       }},
      // A paged split cluster of several consumers spills in the producer
      // (12 bytes at 24 registers: the page ids beside the cluster's state).
      {"LAYOUT != paged || KV_SPLITS == 1 || CONSUMERS == 1",
       [](const Config& c, const Problem& p) {
         return p.layout != Layout::kPaged || c.at("KV_SPLITS") == 1 ||
                c.at("CONSUMERS") == 1;
       }},
      // FP8 attention with score mods spills (4 bytes) in split clusters
      // and under ping-pong.
      {"Q_FP8 == 0 || MODS == 0 || (KV_SPLITS == 1 && PINGPONG == 0)",
       [](const Config& c, const Problem& p) {
         return !p.q_fp8 || !HasScoreMods(p) ||
                (c.at("KV_SPLITS") == 1 && c.at("PINGPONG") == 0);
       }},
      // ALiBi's distances beside the other mods spill FP8 attention's two
      // overlapped consumers (12 bytes).
      {"Q_FP8 == 0 || ALIBI == 0 || OVERLAP == 0 || CONSUMERS == 1",
       [](const Config& c, const Problem& p) {
         return !p.q_fp8 || !p.alibi || c.at("OVERLAP") == 0 ||
                c.at("CONSUMERS") == 1;
       }},
      // Rows of whole 32-byte sectors; the kernel computes up to the next
      // multiple of 64 (HeadDimIn64s).
      {"HEAD_DIM % 16 == 0 && HEAD_DIM_V % 16 == 0",
       [](const Config&, const Problem& p) {
         return p.head_dim % 16 == 0 && HeadDimV(p) % 16 == 0;
       }},

  };
}

Config TmaConfig(int64_t consumers, int64_t n, int64_t stages, int64_t overlap,
                 int64_t pingpong, int64_t persistent, int64_t splits) {
  return Config{
      {"BLOCK_N", n},       {"CONSUMERS", consumers},   {"KV_SPLITS", splits},
      {"OVERLAP", overlap}, {"PERSISTENT", persistent}, {"PINGPONG", pingpong},
      {"STAGES", stages}};
}

// Configs known to do well: persistent ping-pong first, split-KV for small
// grids, one of each consumer count.
std::vector<Config> Defaults() {
  return {TmaConfig(2, 128, 2, 1, 1, 1, 1), TmaConfig(2, 128, 2, 1, 1, 0, 1),
          TmaConfig(2, 192, 2, 1, 1, 0, 1), TmaConfig(2, 128, 2, 1, 1, 0, 2),
          TmaConfig(2, 128, 2, 1, 1, 0, 4), TmaConfig(2, 128, 2, 0, 1, 0, 1),
          TmaConfig(3, 128, 2, 1, 0, 0, 1), TmaConfig(1, 128, 2, 1, 0, 0, 1)};
}

LaunchGeometry Geometry(const Config& c, const Problem& p);

// Hopper's shared memory per block (the template runs on nothing else).
constexpr int64_t kHopperSmemBytes = 232448;

// `c` made to fit Hopper's shared memory: above head_dim 128 a ring of
// 128-key tiles may not (at 256, two stages alone take 256 KB). Without
// persistence (which keeps the next tile's Q beside this tile's O) first,
// then with 64-key tiles, persistent again where that fits.
Config FitSharedMemory(Config c, const Problem& p) {
  auto fits = [&] { return Geometry(c, p).smem_bytes <= kHopperSmemBytes; };
  const int64_t persistent = c.at("PERSISTENT");
  if (!fits()) c["PERSISTENT"] = 0;
  if (!fits()) {
    c["BLOCK_N"] = 64;
    c["PERSISTENT"] = persistent;
    if (!fits()) c["PERSISTENT"] = 0;
  }
  return c;
}

// Whether a row sees at most 1,025 keys (a window of both bounds, or of
// the left with the causal mask). Each consumer then computes only the key
// tiles its own rows see (flash_fwd_tma.cu, NarrowRows), so that 64-key
// tiles and three consumers leave the least of a block's tiles unseen: at
// gpt-oss's window of 128, 3 of 5 tiles a consumer where two consumers of
// 128-key tiles compute all 2. On the H100 (bench/RESULTS.md), three
// consumers of 64 keys against two of 128: 55.4-56.3 us against 69.0-70.2
// at gpt-oss's window of 128, 107.1-107.6 against 113.1 at 512, and on
// Mistral's 32k prompt (head_dim 128) 874-886 us against 906-922 at 1,024,
// even at 2,048 (1,579-1,590 against 1,579-1,721) and 3% behind at 4,096
// (3,279-3,309 against 3,176-3,180).
bool NarrowWindow(const Problem& p) {
  const int64_t right = p.causal ? 0 : p.window_right;
  return p.window_left >= 0 && right >= 0 && p.window_left + right <= 1024;
}

// Configs fitted to the problem and device. One consumer (64-row tiles)
// where a head has 64 queries or fewer (a 128-row tile would be at least
// half empty) or where 128-row tiles would fill at most a quarter of the
// multiprocessors, else two taking turns (ping-pong). Then up to 4 splits
// of the keys while the grid stays within the multiprocessors and each
// split keeps 4 tiles of 128 keys or more; persistent blocks when unsplit.
// With one consumer, also 64-key tiles without persistence, overlapped at
// head_dim 64 only. On the H100 recordings the overlap was within 2% of
// none on five of the six head_dim 64 problems fitted one consumer, and the
// optimum on the sixth (16 heads of 32 queries on 512 keys, 3% ahead); at
// head_dim 128 no overlap was the optimum on both problems the first config
// misses by 9-11%, and the overlap 32-35% off there. In those recordings
// (tests/data/flash_fwd_tma_landscapes_h100.csv) the first is within 10% of
// the optimum on 28 of 30 problems, 23% off at worst (16 heads of 32
// queries on 512 keys, where the second is the optimum); the persistent
// ping-pong default was up to 4x off on decode-like problems.
std::vector<Config> FittedDefaults(const Problem& p,
                                   const DeviceLimits& limits) {
  const int64_t sms = limits.multiprocessors > 0 ? limits.multiprocessors : 132;
  auto tiles = [&](int64_t rows) {
    return p.batch * p.heads * ((p.seq_q + rows - 1) / rows);
  };
  const int64_t consumers = p.seq_q <= 64 || 4 * tiles(128) <= sms ? 1 : 2;
  const int64_t grid = tiles(64 * consumers);
  int64_t splits = 1;
  while (splits < 4 && 2 * splits * grid <= sms && 1024 * splits <= p.seq_k) {
    splits *= 2;
  }
  // Persistent blocks wherever the keys are not split, causal or not: with
  // the tiles of a causal mask taken longest first (flash_fwd_tma.cu,
  // Tiles), even a ragged last round of them leaves no block idle for long
  // (on the H100, b4 h14/2 q=k=2413 d64 and b2 h32/8 q=k=805 d128 causal
  // took 0.73x and 0.76x the time persistent that they took unpersisted;
  // bench/RESULTS.md, 2026-12-06).
  if (consumers == 2) {
    // Paged, two consumers do not split (the constraint above).
    if (p.layout == Layout::kPaged) splits = 1;
    const Config narrow =
        TmaConfig(3, 64, 2, 1, 0, splits == 1 ? 1 : 0, splits);
    if (NarrowWindow(p) && !p.q_fp8 &&
        RegisterEstimate(narrow, p) <= ConsumerRegisters(3, p)) {
      return {FitSharedMemory(narrow, p)};
    }
    // FP8's two consumers keep S and a tile's P V in turn (no OVERLAP).
    return {FitSharedMemory(
        TmaConfig(2, 128, 2, p.q_fp8 ? 0 : 1, 1, splits == 1 ? 1 : 0, splits),
        p)};
  }
  const int64_t persistent = splits == 1 ? 1 : 0;
  const Config first =
      FitSharedMemory(TmaConfig(1, 128, 2, 1, 0, persistent, splits), p);
  const Config second =
      TmaConfig(1, 64, 2, HeadDimIn64s(p.head_dim) == 64 ? 1 : 0, 0, 0, splits);
  if (p.q_fp8 || first == second) return {first};
  return {first, second};
}

// Grid (persistent: the tiles, walked by LaunchGrid's blocks), threads,
// shared memory and tensor map boxes.
LaunchGeometry Geometry(const Config& c, const Problem& p) {
  const int64_t block_m = 64 * c.at("CONSUMERS");
  LaunchGeometry g = SplitKvGeometry(p, block_m, c.at("BLOCK_N"),
                                     c.at("KV_SPLITS"), SplitCombine::kCluster);
  const bool persistent = c.at("PERSISTENT") == 1;
  if (persistent) {  // The tiles, walked by LaunchGrid's blocks.
    g.grid[0] *= g.grid[1] * g.grid[2];
    g.grid[1] = g.grid[2] = 1;
    g.persistent = true;
  }
  g.block_threads = static_cast<int>(128 * (1 + c.at("CONSUMERS")));
  // Q and O (one buffer unless persistent; O is 16-bit), the K/V ring (FP8:
  // and V's transposes, each with 1 KB of the row sums' ones); 1024 B to
  // align the swizzled tiles, 256 B of mbarriers.
  const int64_t elem = DTypeBytes(QDType(p));  // Of Q, K and V.
  const int64_t d = HeadDimIn64s(p.head_dim);
  const int64_t dv = HeadDimIn64s(HeadDimV(p));  // Of V and O.
  const int64_t q_bytes = block_m * d * elem;
  const int64_t o_bytes = block_m * dv * 2;
  const int64_t ring =
      c.at("STAGES") * (c.at("BLOCK_N") * (d + (p.q_fp8 ? 2 : 1) * dv) * elem +
                        (p.q_fp8 ? 1024 : 0));
  g.smem_bytes = (persistent ? q_bytes + o_bytes : std::max(q_bytes, o_bytes)) +
                 ring + 1024 + 256;
  g.tma.q_rows = static_cast<int>(block_m);
  // A paged kernel copies each tile in parts that lie in one page.
  g.tma.kv_rows = static_cast<int>(p.layout == Layout::kPaged
                                       ? std::gcd(c.at("BLOCK_N"), p.page_size)
                                       : c.at("BLOCK_N"));
  g.tma.o_rows = 64;
  return g;
}

}  // namespace

KernelTemplate EVOTUNE_TEMPLATE_SPEC(flash_fwd_tma)(std::string source,
                                                    std::string hash) {
  KernelTemplate t;
  t.name = "flash_fwd_tma";
  t.description =
      "Attention forward on Hopper (sm_90a) with warp specialization: a "
      "producer warp streams Q/K/V by TMA through mbarrier-synchronised "
      "stages, consumer warpgroups run wgmma with register reallocation, "
      "optional intra-warpgroup overlap of softmax and GEMMs and ping-pong "
      "between two consumers; output by TMA store.";
  t.source = std::move(source);
  t.hash = std::move(hash);
  t.only_compute_capability = 90;
  t.space = ParamSpace({
      {"CONSUMERS", {1, 2, 3}, "consumer warpgroups, 64 query rows each"},
      {"BLOCK_N", {64, 128, 192}, "keys per K/V tile"},
      {"STAGES", {2, 3, 4}, "K/V tiles in flight in shared memory"},
      {"OVERLAP",
       {0, 1},
       "issue the next tile's Q K^T and this tile's P V before the softmax"},
      {"PINGPONG", {0, 1}, "two consumers take turns issuing their GEMMs"},
      {"PERSISTENT",
       {0, 1},
       "one block per SM walks the tiles, loading the next tile's Q and K/V "
       "during this tile's epilogue"},
      {"KV_SPLITS",
       {1, 2, 4},
       "blocks (a cluster) sharing one query block's keys, for problems with "
       "few query blocks"},
  });
  // 32 is computed as 64: the copy engine zero-fills the box's columns
  // past the tensor's (no bytes read), the stores leave them out.
  t.head_dims = {32, 64, 80, 96, 128, 192, 256};
  // V's column blocks are no more than K's (the O buffer fits Q's).
  t.value_head_dims = KernelTemplate::ValueHeadDims::kNarrower;
  t.fits_every_form = true;  // NvrtcCompilerTest.FlashFwdTmaConfigsDoNotSpill
  t.dtypes = {DType::kFp16, DType::kBf16};
  t.q_fp8 = true;  // Q, K and V in e4m3 (docs/fp8.md).
  t.layouts = {Layout::kDense, Layout::kVarlen, Layout::kKvCache,
               Layout::kPaged};
  t.constraints = Constraints();
  // Hopper's fastest prefill template (bench/RESULTS.md).
  t.default_rank = [](const Problem&) { return 2; };
  t.fitted_defaults = FittedDefaults;
  t.defaults = Defaults();
  t.geometry = Geometry;
  return t;
}

}  // namespace evotune
