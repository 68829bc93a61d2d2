#include "tuner/model/features.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <set>

#include "tuner/model/sm_load.h"

namespace evotune {
namespace {

constexpr float kMissing = std::numeric_limits<float>::quiet_NaN();

// The launch-derived figures, in the order of kLaunchNames.
constexpr const char* kLaunchNames[] = {
    "log2_blocks",          "threads",        "smem_kib",
    "blocks_per_sm",        "waves",          "last_wave",
    "log2_flops_per_block", "persistent",     "cluster_x",
    "log2_workspace",       "row_fill",       "sm_imbalance",
    "log2_sm_flops",        "log2_kv_passes", "unsplit_per_sm",
};

constexpr const char* kProblemNames[] = {
    "template",   "log2_batch", "log2_heads", "gqa_group",
    "log2_seq_q", "log2_seq_k", "head_dim",   "causal",
    "bf16",       "log2_flops", "log2_bytes",
};

// Threads a multiprocessor holds: 1536 on sm_86 and sm_89, else 2048.
int ThreadsPerSm(int compute_capability) {
  return compute_capability == 86 || compute_capability == 89 ? 1536 : 2048;
}

// Resident blocks per multiprocessor by threads and shared memory (the
// driver reserves 1 KiB per block; a multiprocessor holds 1 KiB more than
// one block may opt in to).
int BlocksPerSm(const LaunchGeometry& g, const DeviceLimits& limits) {
  int blocks = std::min(32, ThreadsPerSm(limits.compute_capability) /
                                std::max(32, g.block_threads));
  const int64_t smem_per_sm = limits.smem_per_block_bytes + 1024;
  blocks = std::min<int64_t>(blocks, smem_per_sm / (g.smem_bytes + 1024));
  return std::max(blocks, 1);
}

// How full the query tiles are, how much busier than the average the
// busiest multiprocessor is, and its flops (sm_load.h); NaN where the
// template does not give its tile rows.
void AppendSmLoad(const LaunchGeometry& g, const Problem& p,
                  const DeviceLimits& limits, std::vector<float>* out) {
  float fill = kMissing, imbalance = kMissing, busiest = kMissing;
  if (g.tile_rows > 0) {
    const int64_t rows = TileHeadRows(g, p);
    const int64_t tiles = (rows + g.tile_rows - 1) / g.tile_rows;
    fill = static_cast<float>(double(rows) / double(tiles * g.tile_rows));
  }
  if (std::optional<SmLoad> load =
          EstimateSmLoad(g, p, limits.multiprocessors)) {
    imbalance = static_cast<float>(load->busiest / load->mean);
    // Flops of the busiest multiprocessor's (query, key) pairs.
    busiest = static_cast<float>(
        std::log2(2.0 * (p.head_dim + HeadDimV(p)) * load->busiest));
  }
  out->insert(out->end(), {fill, imbalance, busiest});
}

// How often the blocks read each K/V element (once per query tile of every
// query head sharing the KV head, or once per packed tile: log2), and the
// grid those tiles make before any KV split, in blocks per multiprocessor;
// NaN where the template does not give its tile rows. What splitting the
// keys buys depends on both: two launches of as many blocks and flops per
// block differ by 13% (decode_fwd, b4 h32 kv8 q8 k4096 causal on the H100:
// 16-row tiles read twice in 2 splits beat 32-row ones read once in 4), and
// where the unsplit grid already fills the GPU more splits only add merges
// (b32 h16 q1 k2048: 16 splits 11% slower than none).
void AppendKvReads(const LaunchGeometry& g, const Problem& p,
                   const DeviceLimits& limits, std::vector<float>* out) {
  float passes = kMissing, unsplit = kMissing;
  if (g.tile_rows > 0) {
    const int64_t tiles = (TileHeadRows(g, p) + g.tile_rows - 1) / g.tile_rows;
    const int64_t group = g.tile_packs_heads ? 1 : p.heads / p.kv_heads;
    const double reads = double(tiles) * group;
    passes = static_cast<float>(std::log2(reads));
    if (limits.multiprocessors > 0) {
      unsplit = static_cast<float>(reads * p.batch * p.kv_heads /
                                   limits.multiprocessors);
    }
  }
  out->insert(out->end(), {passes, unsplit});
}

void AppendLaunch(const LaunchGeometry& g, const Problem& p,
                  const DeviceLimits& limits, std::vector<float>* out) {
  const std::array<int64_t, 3> grid = LaunchGrid(g, limits.multiprocessors);
  const double blocks = double(grid[0]) * grid[1] * grid[2];
  const int per_sm = BlocksPerSm(g, limits);
  float waves = kMissing, last_wave = kMissing;
  if (limits.multiprocessors > 0) {
    const double slots = double(per_sm) * limits.multiprocessors;
    waves = static_cast<float>(blocks / slots);
    last_wave =
        static_cast<float>(blocks / (std::ceil(blocks / slots) * slots));
  }
  const double work_blocks = double(g.grid[0]) * g.grid[1] * g.grid[2];
  out->insert(out->end(),
              {static_cast<float>(std::log2(blocks)),
               static_cast<float>(g.block_threads),
               static_cast<float>(g.smem_bytes / 1024.0),
               static_cast<float>(per_sm), waves, last_wave,
               static_cast<float>(std::log2(ProblemFlops(p) / work_blocks)),
               g.persistent ? 1.0f : 0.0f, static_cast<float>(g.cluster_x),
               static_cast<float>(std::log2(1.0 + g.workspace_floats))});
  AppendSmLoad(g, p, limits, out);
  AppendKvReads(g, p, limits, out);
}

}  // namespace

FeatureMap::FeatureMap(const TemplateRegistry& templates) {
  std::set<std::string> params;
  for (const KernelTemplate& t : templates.templates()) {
    const int index = static_cast<int>(template_index_.size());
    template_index_[t.name] = index;
    for (const Param& p : t.space.params()) params.insert(p.name);
  }
  params_.assign(params.begin(), params.end());
  names_.assign(std::begin(kProblemNames), std::end(kProblemNames));
  names_.insert(names_.end(), params_.begin(), params_.end());
  names_.insert(names_.end(), std::begin(kLaunchNames), std::end(kLaunchNames));
  for (int i = 0; i < size(); ++i) {
    if (names_[i] == "log2_sm_flops") sm_flops_column_ = i;
    if (names_[i] == "log2_flops") flops_column_ = i;
  }
}

double FeatureMap::Log2Work(const float* row, int multiprocessors) const {
  const float sm_flops = row[sm_flops_column_];
  if (!std::isnan(sm_flops)) return sm_flops;
  return row[flops_column_] - std::log2(std::max(1, multiprocessors));
}

void FeatureMap::Append(const KernelTemplate& t, const Config& config,
                        const Problem& p, const DeviceLimits& limits,
                        std::vector<float>* out) const {
  auto it = template_index_.find(t.name);
  // Q and O, K and V once each, 2 bytes an element (V and O of the value
  // head dim).
  const double bytes =
      2.0 * p.batch * (p.head_dim + HeadDimV(p)) *
      (double(p.heads) * p.seq_q + double(p.kv_heads) * p.seq_k);
  out->insert(
      out->end(),
      {it == template_index_.end() ? kMissing : static_cast<float>(it->second),
       static_cast<float>(std::log2(p.batch)),
       static_cast<float>(std::log2(p.heads)),
       static_cast<float>(p.heads / p.kv_heads),
       static_cast<float>(std::log2(p.seq_q)),
       static_cast<float>(std::log2(p.seq_k)), static_cast<float>(p.head_dim),
       p.causal ? 1.0f : 0.0f, p.dtype == DType::kBf16 ? 1.0f : 0.0f,
       static_cast<float>(std::log2(std::max(1.0, ProblemFlops(p)))),
       static_cast<float>(std::log2(bytes))});
  // Both sorted by name: one walk, not a lookup per parameter.
  auto v = config.begin();
  for (const std::string& name : params_) {
    while (v != config.end() && v->first < name) ++v;
    out->push_back(v != config.end() && v->first == name
                       ? static_cast<float>(v->second)
                       : kMissing);
  }
  AppendLaunch(t.geometry(config, p), p, limits, out);
}

}  // namespace evotune
