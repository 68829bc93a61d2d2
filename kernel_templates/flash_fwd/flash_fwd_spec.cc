// Parameter space and launch geometry of
// kernel_templates/flash_fwd/flash_fwd.cu.
#include <algorithm>
#include <vector>

#include "kernel_templates/template_registry.h"

namespace evotune {
namespace {

Config FlashConfig(int64_t m, int64_t n, int64_t warps, int64_t stages,
                   int64_t splits) {
  return Config{{"BLOCK_M", m},    {"BLOCK_N", n},       {"KV_SPLITS", splits},
                {"MIN_BLOCKS", 1}, {"NUM_WARPS", warps}, {"Q_IN_REGS", 1},
                {"STAGES", stages}};
}

// Dynamic shared memory of `c`: Q's tile and STAGES tiles of K and of V,
// each row of its head dim rounded up to a multiple of 64 (16-bit, or e4m3
// with V's transpose beside them).
int64_t SmemBytes(const Config& c, const Problem& p) {
  const int64_t ring = c.at("STAGES") * c.at("BLOCK_N");
  const int64_t dv = HeadDimIn64s(HeadDimV(p));
  const int64_t elems =
      (c.at("BLOCK_M") + ring) * HeadDimIn64s(p.head_dim) + ring * dv;
  return p.q_fp8 ? elems + dv * c.at("BLOCK_N") : 2 * elems;
}

// `c` with fewer stages, then smaller key tiles (down to 32 keys and one
// stage), until its shared memory fits the device's opt-in maximum (227 KB
// on an H100, 163 KB on an A100, 99 KB on an L4).
Config FitSharedMemory(Config c, const Problem& p, const DeviceLimits& limits) {
  while (SmemBytes(c, p) > limits.smem_per_block_bytes) {
    if (c.at("STAGES") > 2) {
      --c["STAGES"];
    } else if (c.at("BLOCK_N") > 32) {
      c["BLOCK_N"] /= 2;
    } else if (c.at("STAGES") > 1) {
      --c["STAGES"];
    } else {
      break;
    }
  }
  return c;
}

// Whether FP8 attention's registers fit (all but FP8's do, or are refused
// by the output's constraint): one 16-row tile a warp, a thread's whole
// share (MIN_BLOCKS 1) and, with score mods, Q re-read from shared memory.
// Two tiles spill on sm_90 (36-392 bytes: each holds the output's and the
// scores' accumulators), so do two blocks' shares, and mods with Q's
// fragments held (8-12 bytes; NvrtcCompilerTest.FlashFwdFp8ConfigsDoNotSpill).
// Head_dim 64 takes the same: without it, 128-key tiles spilled on sm_89
// (8-184 bytes) with two tiles a warp, two blocks' shares or score mods.
// Split keys take 64-key tiles: 128-key tiles with two splits spilled 8-40
// bytes on sm_120 (unsplit they take 238-255 registers there, no spill).
bool RegistersFit(const Config& c, const Problem& p) {
  return !p.q_fp8 || (c.at("BLOCK_M") == 16 * c.at("NUM_WARPS") &&
                      c.at("MIN_BLOCKS") == 1 &&
                      (!HasScoreMods(p) || c.at("Q_IN_REGS") == 0) &&
                      (c.at("KV_SPLITS") == 1 || c.at("BLOCK_N") <= 64));
}

// `c` with what keeps a thread's registers within 255: FP8 attention's as
// RegistersFit asks (a warp for each 16 rows, 64-key tiles where split);
// above head_dim 128 (the output alone takes HEAD_DIM / 2 floats for each
// 16-row tile): one 16-row tile a warp, key tiles of at most 64, Q re-read
// from shared memory, and at least two stages (with one, 64-key tiles spill at
// 256 on sm_80; FitSharedMemory goes down to one stage only with 32-key tiles).
// Score mods hold more (a split decode at 256 with every mod spilled 20
// bytes at 64-key tiles): 32-key tiles there.
Config FitRegisters(Config c, const Problem& p) {
  if (p.q_fp8) {  // RegistersFit.
    c["NUM_WARPS"] = c.at("BLOCK_M") / 16;
    c["MIN_BLOCKS"] = 1;
    if (HasScoreMods(p)) c["Q_IN_REGS"] = 0;
    if (c.at("KV_SPLITS") > 1) {
      c["BLOCK_N"] = std::min<int64_t>(c.at("BLOCK_N"), 64);
    }
  }
  if (std::max(p.head_dim, HeadDimV(p)) <= 128) return c;
  c["BLOCK_M"] = 16 * c.at("NUM_WARPS");
  c["BLOCK_N"] = std::min<int64_t>(c.at("BLOCK_N"), HasScoreMods(p) ? 32 : 64);
  c["Q_IN_REGS"] = 0;
  c["STAGES"] = std::max<int64_t>(c.at("STAGES"), 2);
  return c;
}

// Key splits, doubled (up to 4) while `more` holds for the next count and
// each split keeps at least `min_keys` keys.
template <typename More>
int64_t Splits(const Problem& p, int64_t min_keys, More more) {
  int64_t splits = 1;
  while (splits < 4 && p.seq_k / (2 * splits) >= min_keys && more(2 * splits)) {
    splits *= 2;
  }
  return splits;
}

// Up to 64 queries a head: the smallest row block that holds them, one warp
// per 16 rows (32 rows where 16-row blocks, even split four ways, would
// leave fewer than 1024 warps), and splits of at least 512 keys until the
// grid has 1024 warps (about 8 per multiprocessor: enough loads in flight to
// stream K and V). Small blocks share a multiprocessor many at a time; with
// 512 blocks or more one stage each does best.
std::vector<Config> FitFewQueries(const Problem& p) {
  auto blocks = [&](int64_t m) {
    return p.batch * p.heads * ((p.seq_q + m - 1) / m);
  };
  int64_t m = p.seq_q <= 16 ? 16 : p.seq_q <= 32 ? 32 : 64;
  if (m == 16 && 4 * blocks(16) < 1024) m = 32;
  const int64_t warps = m / 16;
  const int64_t n = m == 16 ? 32 : m == 32 ? 64 : 128;
  const int64_t splits = Splits(
      p, 512, [&](int64_t k) { return blocks(m) * (k / 2) * warps < 1024; });
  const int64_t stages = m <= 32 && blocks(m) * splits >= 512 ? 1 : 3;
  return {FlashConfig(m, n, warps, stages, splits),
          FlashConfig(m, n, warps, stages == 1 ? 3 : 1, splits)};
}

// More queries: 128-row blocks of 8 warps on 128-key tiles, three stages
// (one block per multiprocessor at head_dim 128), split while the grid,
// counted by the share of the query x key square a causal mask keeps, stays
// within two blocks per multiprocessor and each split keeps 512 keys
// (1024 at head_dim 64). At head_dim 64, where 128-row blocks fill one and
// a half waves unsplit, four warps on 64-key tiles; where they do not and
// splitting does not pay, 64-row blocks of four warps. The second config:
// 64-row blocks of four warps on 64-key tiles.
std::vector<Config> FitManyQueries(const Problem& p, int64_t sms) {
  const int64_t blocks = p.batch * p.heads * ((p.seq_q + 127) / 128);
  const double kept =
      p.causal ? 1 - 0.5 * std::min(p.seq_q, p.seq_k) / double(p.seq_k) : 1;
  const Config second = FlashConfig(64, 64, 4, 3, 1);
  if (p.head_dim <= 64 && 2 * blocks >= 3 * sms) {
    return {FlashConfig(128, 64, 4, 3, 1), second};
  }
  const int64_t splits = Splits(p, 512 * 128 / p.head_dim, [&](int64_t k) {
    return blocks * kept * k <= 2 * sms;
  });
  if (p.head_dim <= 64 && splits == 1) {
    return {FlashConfig(64, 128, 4, 3, 1), second};
  }
  Config split_second = second;
  split_second["KV_SPLITS"] = splits;
  return {FlashConfig(128, 128, 8, 3, splits), split_second};
}

// Configs fitted to the problem and device (shared memory per block and
// multiprocessors). On the H100 recordings
// (tests/data/flash_fwd_landscapes_h100.csv) the first is within 3% of the
// optimum on 27 of 31 problems and 9% at worst, the two within 3% on 29;
// the first of the plain defaults that ran was more than 10% off on 15,
// up to 4.4x on decode-like problems (MQA, 64 queries on 8192 keys).
std::vector<Config> FittedDefaults(const Problem& p,
                                   const DeviceLimits& limits) {
  const int64_t sms = limits.multiprocessors > 0 ? limits.multiprocessors : 132;
  std::vector<Config> fitted;
  for (const Config& c :
       p.seq_q <= 64 ? FitFewQueries(p) : FitManyQueries(p, sms)) {
    const Config fit = FitSharedMemory(FitRegisters(c, p), p, limits);
    if (std::find(fitted.begin(), fitted.end(), fit) == fitted.end()) {
      fitted.push_back(fit);
    }
  }
  return fitted;
}

// The constraints of the parameter space.
std::vector<Constraint> Constraints() {
  return {
      {"BLOCK_M % (16 * NUM_WARPS) == 0",
       [](const Config& c, const Problem&) {
         return c.at("BLOCK_M") % (16 * c.at("NUM_WARPS")) == 0;
       }},
      {"BLOCK_M <= 32 * NUM_WARPS",
       [](const Config& c, const Problem&) {
         return c.at("BLOCK_M") <= 32 * c.at("NUM_WARPS");
       }},
      // The output's accumulators, CEIL64(HEAD_DIM_V) / 2 floats a thread
      // for each of its 16-row tiles, at most 128 (above head_dim 128: one
      // tile), and as many of Q's fragments.
      {"BLOCK_M / (16 * NUM_WARPS) * CEIL64(max(HEAD_DIM, HEAD_DIM_V)) <= 256",
       [](const Config& c, const Problem& p) {
         return c.at("BLOCK_M") / (16 * c.at("NUM_WARPS")) *
                    HeadDimIn64s(std::max(p.head_dim, HeadDimV(p))) <=
                256;
       }},
      // Otherwise the register cap 65536 / (threads * MIN_BLOCKS) is above
      // 255 and the config duplicates MIN_BLOCKS == 1.
      {"MIN_BLOCKS == 1 || 32 * NUM_WARPS * MIN_BLOCKS > 256",
       [](const Config& c, const Problem&) {
         return c.at("MIN_BLOCKS") == 1 ||
                32 * c.at("NUM_WARPS") * c.at("MIN_BLOCKS") > 256;
       }},
      // FP8 attention: 64- or 128-byte rows of e4m3, swizzled as 16-bit
      // pairs.
      {"Q_FP8 == 0 || (HEAD_DIM in {64, 128} && HEAD_DIM_V == HEAD_DIM)",
       [](const Config&, const Problem& p) {
         return !p.q_fp8 || ((p.head_dim == 64 || p.head_dim == 128) &&
                             HeadDimV(p) == p.head_dim);
       }},
      // FP8 attention's registers (RegistersFit).
      {"Q_FP8 == 0 || (BLOCK_M == 16 * NUM_WARPS && MIN_BLOCKS == 1 && "
       "(MODS == 0 || Q_IN_REGS == 0) && (KV_SPLITS == 1 || BLOCK_N <= 64))",
       RegistersFit},
      // Rows of whole 32-byte sectors; the kernel computes up to the next
      // multiple of 64 (HeadDimIn64s).
      {"HEAD_DIM % 16 == 0 && HEAD_DIM_V % 16 == 0",
       [](const Config&, const Problem& p) {
         return p.head_dim % 16 == 0 && HeadDimV(p) % 16 == 0;
       }},
  };
}

// FlashAttention 2's choices (128x64 tiles for head_dim 128, 128x128 for
// 64, four warps) and a smaller tile for problems with few query blocks.
std::vector<Config> Defaults() {
  auto config = [](int64_t m, int64_t n, int64_t warps, int64_t stages,
                   int64_t q_in_regs) {
    Config c = FlashConfig(m, n, warps, stages, 1);
    c["Q_IN_REGS"] = q_in_regs;
    return c;
  };
  Config split = config(64, 128, 4, 3, 1);
  split["KV_SPLITS"] = 2;
  return {config(128, 64, 4, 2, 0), config(128, 128, 4, 2, 0),
          config(128, 128, 8, 3, 1), config(64, 128, 4, 2, 1), split};
}

// Grid (split over keys, combined through a workspace), threads and shared
// memory.
LaunchGeometry Geometry(const Config& c, const Problem& p) {
  LaunchGeometry g =
      SplitKvGeometry(p, c.at("BLOCK_M"), c.at("BLOCK_N"), c.at("KV_SPLITS"),
                      SplitCombine::kWorkspace);
  g.block_threads = static_cast<int>(32 * c.at("NUM_WARPS"));
  g.smem_bytes = SmemBytes(c, p);
  return g;
}

}  // namespace

KernelTemplate EVOTUNE_TEMPLATE_SPEC(flash_fwd)(std::string source,
                                                std::string hash) {
  KernelTemplate t;
  t.name = "flash_fwd";
  t.description =
      "FlashAttention-2-style forward: mma.sync m16n8k16 (FP8: m16n8k32 "
      "e4m3 for both products, on sm_89) with ldmatrix, "
      "cp.async K/V pipeline, swizzled shared memory, online softmax in "
      "registers with fp32 accumulation.";
  t.source = std::move(source);
  t.hash = std::move(hash);
  t.space = ParamSpace({
      {"BLOCK_M", {16, 32, 64, 128}, "query rows per block"},
      {"BLOCK_N", {32, 64, 128}, "keys per K/V tile"},
      {"NUM_WARPS", {1, 2, 4, 8}, "warps per block, split along BLOCK_M"},
      {"STAGES", {1, 2, 3}, "K/V tiles in flight in shared memory"},
      {"Q_IN_REGS", {0, 1}, "keep Q fragments in registers for the pass"},
      {"KV_SPLITS", {1, 2, 4}, "blocks sharing one query block's keys"},
      {"MIN_BLOCKS",
       {1, 2},
       "resident blocks per SM to allocate registers for"},
  });
  t.head_dims = {32, 64, 80, 96, 128, 192, 256};
  t.value_head_dims = KernelTemplate::ValueHeadDims::kAny;
  t.dtypes = {DType::kFp16, DType::kBf16};
  // Q, K and V in e4m3 (docs/fp8.md), where mma.sync takes e4m3 natively
  // and the kernels are checked not to spill: sm_89. sm_90 and sm_100
  // emulate it (conversions to fp16 around each instruction): on the H100
  // FP8 attention at head_dim 64 took 853 us, SDPA on the dequantized
  // tensors 529 us, the bf16 kernel 272 us
  // (bench/results/2026-12-05_h100_c54da4b_fp8-d64-hopper.json). sm_120
  // takes it natively too, and every admitted config compiles for it
  // without spilling as for sm_89 (NvrtcCompilerTest.
  // FlashFwdFp8ConfigsDoNotSpill).
  t.q_fp8 = true;
  t.q_fp8_compute_capabilities = {89, 120};
  t.layouts = {Layout::kDense, Layout::kVarlen, Layout::kKvCache,
               Layout::kPaged};
  t.constraints = Constraints();
  t.fitted_defaults = FittedDefaults;
  t.defaults = Defaults();
  t.geometry = Geometry;
  return t;
}

}  // namespace evotune
