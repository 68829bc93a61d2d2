#include "kernel_templates/kernel_template.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace evotune {

int64_t HeadDimIn64s(int64_t head_dim) { return (head_dim + 63) / 64 * 64; }

LaunchGeometry SplitKvGeometry(const Problem& p, int64_t block_m,
                               int64_t block_n, int64_t splits,
                               SplitCombine combine) {
  const int64_t q_blocks = (p.seq_q + block_m - 1) / block_m;
  LaunchGeometry g;
  g.grid[0] = q_blocks * splits;
  g.grid[1] = p.heads;
  g.grid[2] = p.batch;
  g.tile_rows = block_m;
  g.tile_keys = block_n;
  if (combine == SplitCombine::kCluster) g.cluster_x = static_cast<int>(splits);
  if (splits > 1 && combine == SplitCombine::kWorkspace) {
    const int64_t heads = p.batch * p.heads;
    g.workspace_floats =
        heads * splits * q_blocks * block_m * (HeadDimIn64s(HeadDimV(p)) + 2);
    g.counters = heads * q_blocks;
  }
  return g;
}

namespace {

absl::Status CheckValueHeadDim(const KernelTemplate& t, const Problem& p) {
  using Dims = KernelTemplate::ValueHeadDims;
  const int64_t dv = HeadDimV(p);
  if (dv == p.head_dim) return absl::OkStatus();
  auto refuse = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "problem.head_dim_v: template ", t.name, " ", why, ", got ", dv));
  };
  if (t.value_head_dims == Dims::kSame) {
    return refuse(absl::StrCat("computes a value head dim equal to head_dim (",
                               p.head_dim, ") only"));
  }
  if (std::find(t.head_dims.begin(), t.head_dims.end(), dv) ==
      t.head_dims.end()) {
    return refuse(absl::StrCat("supports head_dim_v {",
                               absl::StrJoin(t.head_dims, ", "), "}"));
  }
  if (t.value_head_dims == Dims::kNarrower &&
      HeadDimIn64s(dv) > HeadDimIn64s(p.head_dim)) {
    return refuse(absl::StrCat("computes value head dims up to head_dim's ",
                               HeadDimIn64s(p.head_dim), " columns"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckSupports(const KernelTemplate& t, const Problem& problem) {
  if (std::find(t.head_dims.begin(), t.head_dims.end(), problem.head_dim) ==
      t.head_dims.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "problem.head_dim: template ", t.name, " supports head_dim {",
        absl::StrJoin(t.head_dims, ", "), "}, got ", problem.head_dim));
  }
  if (absl::Status s = CheckValueHeadDim(t, problem); !s.ok()) return s;
  if (std::find(t.dtypes.begin(), t.dtypes.end(), problem.dtype) ==
      t.dtypes.end()) {
    return absl::InvalidArgumentError(absl::StrCat("problem.dtype: template ",
                                                   t.name, " does not support ",
                                                   DTypeName(problem.dtype)));
  }
  if (problem.q_fp8 && !t.q_fp8) {
    return absl::InvalidArgumentError(
        absl::StrCat("problem.q_dtype: template ", t.name,
                     " does not read e4m3 Q, K and V (FP8 attention)"));
  }
  if (problem.kv_fp8 && !problem.q_fp8 && !t.kv_fp8) {
    return absl::InvalidArgumentError(
        absl::StrCat("problem.kv_dtype: template ", t.name,
                     " does not read e4m3 K and V beside 16-bit Q (an FP8 KV "
                     "cache)"));
  }
  if (std::find(t.layouts.begin(), t.layouts.end(), problem.layout) ==
      t.layouts.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("problem.layout: template ", t.name,
                     " does not support layout ", LayoutName(problem.layout)));
  }
  return absl::OkStatus();
}

absl::Status CheckDevice(const KernelTemplate& t, const DeviceLimits& limits) {
  const int need = t.only_compute_capability;
  if (need != 0 && limits.compute_capability != 0 &&
      limits.compute_capability != need) {
    return absl::FailedPreconditionError(absl::StrCat(
        "template ", t.name, " runs only on compute capability ", need / 10,
        ".", need % 10, " devices; this one is ",
        limits.compute_capability / 10, ".", limits.compute_capability % 10));
  }
  return absl::OkStatus();
}

std::array<int64_t, 3> LaunchGrid(const LaunchGeometry& g,
                                  int multiprocessors) {
  if (!g.persistent) return {g.grid[0], g.grid[1], g.grid[2]};
  const int64_t blocks = g.grid[0] * g.grid[1] * g.grid[2];
  return {
      multiprocessors > 0 ? std::min<int64_t>(blocks, multiprocessors) : blocks,
      1, 1};
}

absl::Status CheckGeometry(const LaunchGeometry& g,
                           const DeviceLimits& limits) {
  if (g.block_threads > limits.max_threads_per_block ||
      g.block_threads % 32 != 0 || g.block_threads <= 0) {
    return absl::ResourceExhaustedError(absl::StrCat(
        g.block_threads, " threads per block: must be a multiple of 32 up to ",
        limits.max_threads_per_block));
  }
  if (g.smem_bytes > limits.smem_per_block_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat(g.smem_bytes, " B of shared memory exceed the limit ",
                     limits.smem_per_block_bytes, " B per block"));
  }
  if (g.grid[0] < 1 || g.grid[0] > kMaxGridX || g.grid[1] < 1 ||
      g.grid[1] > kMaxGridYZ || g.grid[2] < 1 || g.grid[2] > kMaxGridYZ) {
    return absl::ResourceExhaustedError(
        absl::StrCat("grid (", g.grid[0], ", ", g.grid[1], ", ", g.grid[2],
                     ") is outside the launch limits (", kMaxGridX, ", ",
                     kMaxGridYZ, ", ", kMaxGridYZ, ")"));
  }
  if (g.cluster_x < 1 || g.cluster_x > kMaxClusterBlocks ||
      g.grid[0] % g.cluster_x != 0) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "clusters of ", g.cluster_x, " blocks: must divide grid x (", g.grid[0],
        ") and be at most ", kMaxClusterBlocks));
  }
  for (int rows : {g.tma.q_rows, g.tma.kv_rows, g.tma.o_rows}) {
    if (g.uses_tma() && (rows < 1 || rows > kMaxTmaBoxRows)) {
      return absl::ResourceExhaustedError(
          absl::StrCat("tensor map boxes of ", rows, " rows: must be 1 to ",
                       kMaxTmaBoxRows));
    }
  }
  return absl::OkStatus();
}

namespace {

// FP8 attention on a device the template serves it on (its
// q_fp8_compute_capabilities).
absl::Status CheckFp8Device(const KernelTemplate& t, const Problem& problem,
                            const DeviceLimits& limits) {
  const std::vector<int>& on = t.q_fp8_compute_capabilities;
  const int cc = limits.compute_capability;
  if (!problem.q_fp8 || on.empty() || cc == 0 ||
      std::find(on.begin(), on.end(), cc) != on.end()) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(
      absl::StrCat("problem.q_dtype: template ", t.name,
                   " serves FP8 attention only on compute capability ",
                   absl::StrJoin(on, ", ",
                                 [](std::string* out, int c) {
                                   absl::StrAppend(out, c / 10, ".", c % 10);
                                 }),
                   " devices; this one is ", cc / 10, ".", cc % 10));
}

absl::Status CheckConstraints(const KernelTemplate& t, const Config& config,
                              const Problem& problem,
                              const DeviceLimits& limits, bool waste_too) {
  if (absl::Status s = CheckDevice(t, limits); !s.ok()) return s;
  if (problem.kv_fp8 && limits.compute_capability != 0 &&
      limits.compute_capability < kFp8ComputeCapability) {
    return absl::FailedPreconditionError(absl::StrCat(
        "problem.kv_dtype: e4m3 K and V need compute capability 8.9 or newer; "
        "this device is ",
        limits.compute_capability / 10, ".", limits.compute_capability % 10));
  }
  if (absl::Status s = CheckFp8Device(t, problem, limits); !s.ok()) return s;
  if (absl::Status s = t.space.Contains(config); !s.ok()) return s;
  for (const Constraint& c : t.constraints) {
    if ((waste_too || !c.waste_only) && !c.holds(config, problem)) {
      return absl::InvalidArgumentError(
          absl::StrCat("constraint violated: ", c.expression));
    }
  }
  return CheckGeometry(t.geometry(config, problem), limits);
}

}  // namespace

absl::Status CheckConfig(const KernelTemplate& t, const Config& config,
                         const Problem& problem, const DeviceLimits& limits) {
  return CheckConstraints(t, config, problem, limits, /*waste_too=*/true);
}

absl::Status CheckServes(const KernelTemplate& t, const Config& config,
                         const Problem& problem, const DeviceLimits& limits) {
  return CheckConstraints(t, config, problem, limits, /*waste_too=*/false);
}

bool RunsOn(const KernelTemplate& t, const Config& config,
            const Problem& problem, const DeviceLimits& limits) {
  return CheckSupports(t, problem).ok() &&
         CheckConfig(t, config, problem, limits).ok();
}

std::vector<Config> FeasibleConfigs(const KernelTemplate& t,
                                    const Problem& problem,
                                    const DeviceLimits& limits) {
  std::vector<Config> all = t.space.Enumerate();
  all.erase(std::remove_if(all.begin(), all.end(),
                           [&](const Config& c) {
                             return !CheckConfig(t, c, problem, limits).ok();
                           }),
            all.end());
  return all;
}

std::vector<std::string> CompileDefines(const Config& config,
                                        const Problem& problem) {
  std::vector<std::string> out;
  for (const auto& [name, value] : config) {
    out.push_back(absl::StrCat("-D", name, "=", value));
  }
  out.push_back(absl::StrCat("-DHEAD_DIM=", problem.head_dim));
  if (HeadDimV(problem) != problem.head_dim) {
    out.push_back(absl::StrCat("-DHEAD_DIM_V=", problem.head_dim_v));
  }
  out.push_back(
      absl::StrCat("-DEVT_BF16=", problem.dtype == DType::kBf16 ? 1 : 0));
  if (problem.kv_fp8) out.push_back("-DEVT_KV_FP8=1");
  if (problem.q_fp8) out.push_back("-DEVT_Q_FP8=1");
  out.push_back(absl::StrCat("-DEVT_DEVICE_LENGTHS=",
                             problem.layout == Layout::kDense ? 0 : 1));
  if (problem.layout == Layout::kPaged) {
    out.push_back(absl::StrCat("-DEVT_PAGE_SIZE=", problem.page_size));
  }
  if (HasWindow(problem)) out.push_back("-DEVT_WINDOW=1");
  if (problem.softcap > 0) out.push_back("-DEVT_SOFTCAP=1");
  if (problem.sinks) out.push_back("-DEVT_SINKS=1");
  if (problem.alibi) out.push_back("-DEVT_ALIBI=1");
  return out;
}

}  // namespace evotune
