// Parameter space and launch geometry of
// kernel_templates/decode_fwd/decode_fwd.cu.
#include <algorithm>
#include <vector>

#include "kernel_templates/template_registry.h"

namespace evotune {
namespace {

// Query rows that share a KV head, packed into the MMA's M dimension.
int64_t PackedRows(const Problem& p) {
  return p.seq_q * (p.heads / std::max<int64_t>(1, p.kv_heads));
}

// The decode template for a few query rows per KV head, and for up to 64
// queries against keys at least 64 times as many: there the K/V stream, read
// once per KV head here and once per query head and query tile by a prefill
// template, outweighs the prefill templates' faster MMAs. A prefill
// template's defaults suit more rows better. Recorded on the H100
// (tests/data/decode_fwd_short_query_landscapes_h100.csv): 17 queries on
// 4097 keys 24.4 us against flash_fwd_tma's 30.3, MQA with 64 queries on
// 8192 keys 19.2 against 25.6; 32 queries on 512 keys 10.7 against 9.7.
int DefaultRank(const Problem& p) {
  if (p.seq_q <= 16) return 3;
  return p.seq_q <= 64 && p.seq_k >= 64 * p.seq_q ? 3 : -1;
}

Config DecodeConfig(int64_t rows, int64_t n, int64_t warps, int64_t stages,
                    int64_t splits, int64_t q_in_regs) {
  return Config{{"KV_SPLITS", splits}, {"Q_IN_REGS", q_in_regs},
                {"ROWS", rows},        {"STAGES", stages},
                {"TILE_N", n},         {"WARPS", warps}};
}

// The config fitted to the problem for blocks of `rows` packed rows: the
// most splits (a power of two, at most 64) that keep the grid within one
// block per multiprocessor, give each split more than 64 keys (a split's
// merge costs more than streaming a few tiles: on the H200, searched
// exhaustively, one split was fastest on 128 keys for 1 and 8 sequences,
// eight on 1,024 keys for 2) and keep the merge of the splits' rows within
// what one split streams. Three tiles in flight per warp; two warps per
// block where several blocks share a multiprocessor, else eight where a
// block has 16 rows or more to feed (16-key tiles at head_dim 128, where
// 32-key ones overflow shared memory), four otherwise. Q stays in registers
// only for 16-row blocks (more spill at head_dim 128).
Config FitRows(const Problem& p, int64_t sms, int64_t rows) {
  const int64_t blocks =
      p.batch * p.kv_heads * ((PackedRows(p) + rows - 1) / rows);
  // The last split's merge reads splits x merged rows partial rows: no more
  // than each split streams of K and V (4 bytes a value either way).
  const int64_t merged = std::min(PackedRows(p), rows);
  int64_t splits = 1;
  while (splits < 64 && blocks * splits * 2 <= sms && splits * 128 < p.seq_k &&
         4 * splits * splits * merged <= p.seq_k) {
    splits *= 2;
  }
  const int64_t warps = blocks >= sms ? 2 : merged >= 16 ? 8 : 4;
  const int64_t n = warps == 8 && p.head_dim > 64 ? 16 : 32;
  return DecodeConfig(rows, n, warps, 3, splits, rows == 16 ? 1 : 0);
}

// Whether key tiles of `n` keys lie in pages of `page_size` or span whole
// ones.
bool TilesFitPages(int64_t n, int64_t page_size) {
  return page_size % n == 0 || n % page_size == 0;
}

// `configs` with 16-key tiles where their tiles neither lie in pages of
// `page_size` nor span whole ones, none twice.
std::vector<Config> InPages(const std::vector<Config>& configs,
                            int64_t page_size) {
  std::vector<Config> out;
  for (Config c : configs) {
    if (!TilesFitPages(c.at("TILE_N"), page_size)) c["TILE_N"] = 16;
    if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
  }
  return out;
}

LaunchGeometry Geometry(const Config& c, const Problem& p);

// `c` made to fit the head_dim and the device. Above head_dim 128, 16-row
// blocks (the output's registers, ROWS * HEAD_DIM <= 4096) of 16-key tiles
// with Q re-read from shared memory (at 192, 32-key tiles or Q's fragments
// spill on sm_80); then fewer stages,
// smaller key tiles and fewer warps until the warps' rings fit the device's
// shared memory per block (at head_dim 256 a warp's stage of 32 keys holds
// 32 KB of K and V).
Config FitDevice(Config c, const Problem& p, const DeviceLimits& limits) {
  if (p.head_dim > 128) {
    c["ROWS"] = 16;
    c["TILE_N"] = 16;
    c["Q_IN_REGS"] = 0;
    // Two stages spilled 4 bytes at 256 with lengths on the device (sm_90a)
    // where three did not: the shared-memory fit below halves the warps
    // (down to two) before it takes a stage back.
    c["STAGES"] = std::max<int64_t>(c.at("STAGES"), 3);
  }
  while (Geometry(c, p).smem_bytes > limits.smem_per_block_bytes) {
    if (p.head_dim > 128 && c.at("WARPS") > 2) {
      c["WARPS"] /= 2;
    } else if (c.at("STAGES") > 2) {
      --c["STAGES"];
    } else if (c.at("TILE_N") > 16) {
      c["TILE_N"] /= 2;
    } else if (c.at("WARPS") > 1) {
      c["WARPS"] /= 2;
    } else {
      break;
    }
  }
  return c;
}

// Configs fitted to the problem: FitRows of blocks of 16 packed rows, or of
// 32 where 16-row blocks alone fill the GPU or where a KV head has 128 packed
// rows or more (fewer blocks re-reading each K/V tile, the splits making up
// the grid; 32 rows were measured without spilling at head_dim 128; with 96
// packed rows 16-row blocks were 5% faster). Where it splits the keys in two
// only, the unsplit grid of eight-warp blocks next: half the multiprocessors,
// each with twice the tiles in flight, and no merge (on the H100, 4 queries
// of 16 heads on 2048 keys: within 1% of the optimum timed in turns, where
// the two splits were 8% off). Then
// variants of it (four warps, fewer stages; the last two need less shared
// memory, 99 KB per block on an L4), and where 32 rows were chosen for the
// packed rows alone, FitRows of 16 rows. On the H100 the first is within 11%
// of the recorded optimum on 28 of the 30 recorded problems
// (tests/data/decode_fwd_*landscapes_h100.csv) and 14% at worst (4 queries
// of 16 heads on 2048 keys); with 16-row blocks and four warps for several
// causal queries it was 39% off (64 queries of 32 heads on 4 KV heads).
std::vector<Config> FittedDefaults(const Problem& p,
                                   const DeviceLimits& limits) {
  const int64_t sms = limits.multiprocessors > 0 ? limits.multiprocessors : 128;
  const int64_t packed = PackedRows(p);
  const bool full = p.batch * p.kv_heads * ((packed + 15) / 16) >= sms;
  const int64_t rows = packed > 16 && (full || packed >= 128) ? 32 : 16;
  const Config first = FitRows(p, sms, rows);
  const int64_t splits = first.at("KV_SPLITS");
  const int64_t q_in_regs = first.at("Q_IN_REGS");
  std::vector<Config> fitted;
  auto add = [&](const Config& c) {
    const Config fit = FitDevice(c, p, limits);
    if (std::find(fitted.begin(), fitted.end(), fit) == fitted.end()) {
      fitted.push_back(fit);
    }
  };
  add(first);
  if (splits == 2) {
    add(DecodeConfig(rows, p.head_dim > 64 ? 16 : 32, 8, 3, 1, q_in_regs));
  }
  if (first.at("WARPS") == 8) {
    add(DecodeConfig(rows, 32, 4, 3, splits, q_in_regs));
  }
  if (rows == 32 && !full) add(FitRows(p, sms, 16));
  add(DecodeConfig(rows, 32, 4, 2, splits, q_in_regs));
  add(DecodeConfig(rows, 32, 4, 3, splits, 0));
  add(DecodeConfig(rows, 16, 8, 2, splits, q_in_regs));
  add(DecodeConfig(rows, 32, 2, 2, splits, 0));
  add(DecodeConfig(rows, 16, 4, 2, splits, q_in_regs));
  if (p.layout == Layout::kPaged) return InPages(fitted, p.page_size);
  return fitted;
}

// Grid (row blocks x splits, KV heads, batch), threads, shared memory (the
// larger of Q plus the warps' rings, the merge area, whose rows are padded
// by 8 floats, and the splits' (max, sum)) and the split-KV workspace.
LaunchGeometry Geometry(const Config& c, const Problem& p) {
  const int64_t rows = c.at("ROWS");
  const int64_t splits = c.at("KV_SPLITS");
  const int64_t warps = c.at("WARPS");
  const int64_t row_blocks = (PackedRows(p) + rows - 1) / rows;
  LaunchGeometry g;
  g.grid[0] = row_blocks * splits;
  g.grid[1] = p.kv_heads;
  g.grid[2] = p.batch;
  g.block_threads = static_cast<int>(32 * warps);
  g.tile_rows = rows;
  g.tile_packs_heads = true;
  const int64_t kv_bytes = DTypeBytes(KvDType(p));
  const int64_t d = HeadDimIn64s(p.head_dim);  // The kernel's columns.
  const int64_t rings =
      (rows * 2 + warps * c.at("STAGES") * 2 * c.at("TILE_N") * kv_bytes) * d;
  const int64_t merge = warps * rows * (d + 8 + 2) * 4;
  const int64_t split_ml = splits > 8 ? rows * splits * 8 : 0;
  g.smem_bytes = std::max({rings, merge, split_ml}) + 16;  // + the flag.
  if (splits > 1) {
    const int64_t blocks = p.batch * p.kv_heads * row_blocks;
    g.workspace_floats = blocks * splits * rows * (d + 2);
    g.counters = blocks;
  }
  return g;
}

}  // namespace

KernelTemplate EVOTUNE_TEMPLATE_SPEC(decode_fwd)(std::string source,
                                                 std::string hash) {
  KernelTemplate t;
  t.name = "decode_fwd";
  t.description =
      "Decode attention (few queries, long K/V): the query heads of a KV head "
      "packed into the MMA's M so K/V stream once, split-KV over many blocks, "
      "warps streaming their own key tiles with cp.async, mma.sync m16n8k16; "
      "K/V in fp16, bf16 or e4m3 (an FP8 KV cache, dequantized in "
      "registers).";
  t.source = std::move(source);
  t.hash = std::move(hash);
  t.space = ParamSpace({
      {"ROWS", {16, 32, 64}, "packed query rows (heads x queries) per block"},
      {"TILE_N", {16, 32, 64}, "keys per warp tile"},
      {"WARPS", {1, 2, 4, 8}, "warps per block, each streaming its own keys"},
      {"STAGES", {2, 3, 4}, "key tiles in flight per warp"},
      {"KV_SPLITS",
       {1, 2, 4, 8, 16, 32, 64},
       "blocks sharing one row block's keys"},
      {"Q_IN_REGS", {1, 0}, "keep Q fragments in registers for the pass"},
  });
  t.head_dims = {32, 64, 80, 96, 128, 192, 256};
  t.dtypes = {DType::kFp16, DType::kBf16};
  t.kv_fp8 = true;
  t.layouts = {Layout::kDense, Layout::kVarlen, Layout::kKvCache,
               Layout::kPaged};
  t.constraints = {
      // Output accumulators and scores in registers: at most 128 and 64
      // floats per thread.
      {"ROWS * CEIL64(HEAD_DIM) <= 4096",
       [](const Config& c, const Problem& p) {
         return c.at("ROWS") * HeadDimIn64s(p.head_dim) <= 4096;
       }},
      {"ROWS * TILE_N <= 2048",
       [](const Config& c, const Problem&) {
         return c.at("ROWS") * c.at("TILE_N") <= 2048;
       }},
      // A larger row block than the packed rows only adds idle MMA rows.
      {"ROWS == 16 || 2 * PACKED_ROWS > ROWS",
       [](const Config& c, const Problem& p) {
         return c.at("ROWS") == 16 || 2 * PackedRows(p) > c.at("ROWS");
       },
       /*waste_only=*/true},
      // At least half of the splits get a key tile.
      {"KV_SPLITS == 1 || KV_SPLITS / 2 * TILE_N < SEQ_K",
       [](const Config& c, const Problem& p) {
         return c.at("KV_SPLITS") == 1 ||
                c.at("KV_SPLITS") / 2 * c.at("TILE_N") < p.seq_k;
       },
       /*waste_only=*/true},
      // A key tile lies in one page or spans whole ones.
      {"PAGE_SIZE % TILE_N == 0 || TILE_N % PAGE_SIZE == 0",
       [](const Config& c, const Problem& p) {
         return p.layout != Layout::kPaged ||
                TilesFitPages(c.at("TILE_N"), p.page_size);
       }},
      // Rows of whole 32-byte sectors; the kernel computes up to the next
      // multiple of 64 (HeadDimIn64s).
      {"HEAD_DIM % 16 == 0",
       [](const Config&, const Problem& p) { return p.head_dim % 16 == 0; }},
      // e4m3 K/V are read in words laid out for these two.
      {"KV_FP8 == 0 || HEAD_DIM == 64 || HEAD_DIM == 128",
       [](const Config&, const Problem& p) {
         return !p.kv_fp8 || p.head_dim == 64 || p.head_dim == 128;
       }},
  };
  auto config = [](int64_t rows, int64_t n, int64_t warps, int64_t stages,
                   int64_t splits) {
    return DecodeConfig(rows, n, warps, stages, splits, 1);
  };
  t.default_rank = DefaultRank;
  t.fitted_defaults = FittedDefaults;
  t.defaults = {config(16, 32, 4, 3, 4), config(16, 32, 4, 3, 16),
                config(16, 16, 8, 4, 8), config(32, 32, 4, 3, 8),
                config(16, 64, 4, 2, 1)};
  t.geometry = Geometry;
  return t;
}

}  // namespace evotune
