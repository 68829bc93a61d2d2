#include "tuner/model/sm_load.h"

#include <algorithm>
#include <array>
#include <map>
#include <numeric>
#include <vector>

namespace evotune {
namespace {

// Keys' worth of work a block spends on its prologue and epilogue (loading
// Q, storing O).
constexpr double kBlockOverheadKeys = 64;

// Only the first blocks (tiles, persistent) are dealt one by one; the work
// of the rest is spread evenly over the multiprocessors. With 8192 / 132 = 62
// blocks on each, the busiest one's lead is small against its load.
constexpr int64_t kMaxWalked = 8192;

// The work of a head's query blocks, one of `splits` shares of their keys
// each: with `tile_keys` given, whole key tiles, the first split the most
// (flash_common.cuh's split ranges). Packed heads' rows are taken to see
// every key (a few query rows against many keys).
struct BlockWork {
  const Problem& p;
  bool packed;
  int64_t rows, q_blocks, splits, tile_keys;

  // The block of rank `rank` (0: the last query block, which runs first).
  double At(int64_t rank) const {
    const int64_t q0 = (q_blocks - 1 - rank) * rows;
    int64_t keys = p.seq_k;
    if (p.causal && !packed) {  // Bottom-right: the keys its last row sees.
      const int64_t last_row = std::min<int64_t>(p.seq_q - 1, q0 + rows - 1);
      keys = std::clamp<int64_t>(last_row + 1 + p.seq_k - p.seq_q, 0, p.seq_k);
    }
    return double(rows) * (double(SplitKeys(keys)) + kBlockOverheadKeys);
  }
  // The keys the busiest of `splits` shares of `keys` works through.
  int64_t SplitKeys(int64_t keys) const {
    if (tile_keys <= 0) return (keys + splits - 1) / splits;
    const int64_t tiles = (keys + tile_keys - 1) / tile_keys;
    return (tiles + splits - 1) / splits * tile_keys;
  }
  double Head() const {  // All of one head's blocks.
    double sum = 0;
    for (int64_t r = 0; r < q_blocks; ++r) sum += At(r);
    return sum * splits;
  }
};

// The busiest multiprocessor of `load` once `rest` more work is spread
// evenly.
double Busiest(const std::vector<double>& load, double rest) {
  return *std::max_element(load.begin(), load.end()) + rest / load.size();
}

// Blocks in launch order (x fastest; block x of a row has rank x / splits),
// dealt to the multiprocessors in turn.
double BusiestDealt(const BlockWork& w, int64_t row_blocks, int64_t blocks,
                    double total, int multiprocessors) {
  std::vector<double> load(multiprocessors, 0.0);
  double dealt = 0;
  int sm = 0;
  for (int64_t b = 0, x = 0; b < std::min(blocks, kMaxWalked); ++b) {
    const double work = w.At(x / w.splits);
    load[sm] += work;
    dealt += work;
    if (++sm == multiprocessors) sm = 0;
    if (++x == row_blocks) x = 0;
  }
  return Busiest(load, total - dealt);
}

// A persistent kernel's `walkers` blocks take the tiles (rank: tile modulo
// q_blocks) in a snake: block v takes the v-th tile of even waves and the
// v-th from the end of odd ones.
double BusiestSnake(const BlockWork& w, int64_t tiles, int64_t walkers,
                    double total) {
  std::vector<double> load(walkers, 0.0);
  double dealt = 0;
  for (int64_t n = 0; n * walkers < std::min(tiles, kMaxWalked); ++n) {
    for (int64_t v = 0; v < walkers; ++v) {
      const int64_t tile = n * walkers + (n % 2 ? walkers - 1 - v : v);
      if (tile >= tiles) continue;
      const double work = w.At(tile % w.q_blocks);
      load[v] += work;
      dealt += work;
    }
  }
  return Busiest(load, total - dealt);
}

}  // namespace

int64_t TileHeadRows(const LaunchGeometry& g, const Problem& p) {
  return g.tile_packs_heads
             ? int64_t(p.seq_q) * (p.heads / std::max<int64_t>(1, p.kv_heads))
             : p.seq_q;
}

namespace {

// What EstimateSmLoad's answer depends on.
using LoadKey = std::array<int64_t, 14>;

LoadKey KeyOf(const LaunchGeometry& g, const Problem& p, int multiprocessors) {
  return {g.tile_rows, g.tile_packs_heads, g.persistent,    g.grid[0],
          g.grid[1],   g.grid[2],          multiprocessors, p.batch,
          p.heads,     p.kv_heads,         p.seq_q,         p.seq_k,
          p.causal,    g.tile_keys};
}

SmLoad Estimate(const LaunchGeometry& g, const Problem& p,
                int multiprocessors) {
  const bool packed = g.tile_packs_heads;
  const int64_t heads = int64_t(p.batch) * (packed ? p.kv_heads : p.heads);
  const int64_t q_blocks = (TileHeadRows(g, p) + g.tile_rows - 1) / g.tile_rows;
  const int64_t blocks = g.grid[0] * g.grid[1] * g.grid[2];
  const BlockWork w{p,
                    packed,
                    g.tile_rows,
                    q_blocks,
                    std::max<int64_t>(1, blocks / (q_blocks * heads)),
                    g.tile_keys};
  const double total = w.Head() * double(heads);
  SmLoad load;
  load.mean = total / multiprocessors;
  load.busiest =
      g.persistent
          ? BusiestSnake(w, blocks, std::min<int64_t>(blocks, multiprocessors),
                         total)
          : BusiestDealt(w, g.grid[0], blocks, total, multiprocessors);
  return load;
}

}  // namespace

std::optional<SmLoad> EstimateSmLoad(const LaunchGeometry& g, const Problem& p,
                                     int multiprocessors) {
  if (g.tile_rows <= 0 || multiprocessors <= 0) return std::nullopt;
  // A ranking asks for a thousand configs of one problem, most of them of a
  // few dozen launches (the configs differ in what the load ignores): each
  // thread keeps its recent answers.
  thread_local std::map<LoadKey, SmLoad> recent;
  const LoadKey key = KeyOf(g, p, multiprocessors);
  if (auto it = recent.find(key); it != recent.end()) return it->second;
  if (recent.size() >= 256) recent.clear();
  return recent[key] = Estimate(g, p, multiprocessors);
}

}  // namespace evotune
