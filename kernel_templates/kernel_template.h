// A parameterized attention kernel: its embedded source, parameter space,
// constraints and launch geometry.
#ifndef EVOTUNE_KERNEL_TEMPLATES_KERNEL_TEMPLATE_H_
#define EVOTUNE_KERNEL_TEMPLATES_KERNEL_TEMPLATE_H_

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/config.h"
#include "core/param_space.h"
#include "core/problem.h"
#include "core/trial.h"

namespace evotune {

struct LaunchGeometry {
  // 64-bit so that an oversized grid is caught by CheckConfig, never
  // wrapped.
  int64_t grid[3] = {1, 1, 1};
  // Blocks per thread block cluster along x (the kernel's __cluster_dims__);
  // divides grid[0].
  int cluster_x = 1;
  int block_threads = 32;
  int64_t smem_bytes = 0;  // Dynamic shared memory.
  // Scratch the launcher provides (AttentionParams::workspace, ::counters):
  // fp32 values and zero-initialised ints.
  int64_t workspace_floats = 0;
  int64_t counters = 0;
  // Rows of the boxes of the tensor maps the kernel takes as its second
  // parameter (AttentionTensorMaps in common/attention_params.cuh): Q, K and
  // V, and O, 64 columns each. All zero when it takes none.
  struct TmaBoxes {
    int q_rows = 0, kv_rows = 0, o_rows = 0;
  } tma;
  bool uses_tma() const { return tma.q_rows > 0; }
  // The kernel walks the blocks of `grid` itself (a persistent kernel):
  // launch it with LaunchGrid's blocks.
  bool persistent = false;
  // Query rows of one head a work block computes (its tile), for cost models
  // (tuner/model/sm_load.h); 0 when the template does not say.
  int64_t tile_rows = 0;
  // Keys a block takes at once (its K/V tile): it works through whole tiles,
  // masked columns too. 0 when the template does not say.
  int64_t tile_keys = 0;
  // The tile's rows are of the query heads sharing a KV head (heads /
  // kv_heads times seq_q of them, the decode template's packing).
  bool tile_packs_heads = false;
};

// The grid of a launch of `g`: g.grid, or for a persistent kernel one block
// per multiprocessor along x, at most as many as g.grid has (all of them
// when the count is unknown, 0).
std::array<int64_t, 3> LaunchGrid(const LaunchGeometry& g, int multiprocessors);

// The version of the launch parameters' layout (AttentionParams and
// AttentionTensorMaps of common/attention_params.cuh, and how LaunchGeometry
// describes a launch). Raise it with every change there: served kernels
// carry it, and loaders refuse a kernel of another version.
inline constexpr int kParamLayoutVersion = 5;

// The first compute capability with FP8 (e4m3) conversions and MMAs.
inline constexpr int kFp8ComputeCapability = 89;

// The most rows a tensor map's box may have.
inline constexpr int kMaxTmaBoxRows = 256;

// A constraint between parameters and the problem: `expression` is the
// machine-readable statement (shown by ListTemplates), `holds` checks it.
struct Constraint {
  std::string expression;
  std::function<bool(const Config&, const Problem&)> holds;
  // Broken only by configs that run correctly but waste the GPU on the
  // problem (idle rows, splits without keys): a kernel compiled for a larger
  // problem still serves it (CheckServes), as a bucket's kernel serves the
  // lengths within it.
  bool waste_only = false;
};

struct KernelTemplate {
  std::string name;
  std::string description;
  std::string source;  // CUDA C++; includes the shared headers by file name.
  std::string hash;    // Version: changes whenever source or a header does.
  std::string kernel_name = "attention_fwd";
  // A parameter added to an existing template must reproduce the old kernel
  // at its first (smallest) value: recordings made before it existed are
  // replayed as that value.
  ParamSpace space;
  // When nonzero, the only compute capability (10 * major + minor) whose
  // devices run the template: it uses that architecture's own instructions
  // (sm_90a's wgmma for 90).
  int only_compute_capability = 0;
  // Registered only when the environment has EVOTUNE_TEST_TEMPLATES=1
  // (TemplateRegistry::Builtin).
  bool test_only = false;
  std::vector<int64_t> head_dims;
  // The value head dims (Problem::head_dim_v, HEAD_DIM_V in the source) it
  // computes beside a head_dim: that one only, or any of head_dims (at
  // most as many 64-column blocks as head_dim's, with kNarrower).
  enum class ValueHeadDims { kSame, kNarrower, kAny };
  ValueHeadDims value_head_dims = ValueHeadDims::kSame;
  std::vector<DType> dtypes;
  // Reads e4m3 K and V beside 16-bit Q (Problem::kv_fp8; EVT_KV_FP8 in the
  // source), which needs compute capability 8.9 or newer.
  bool kv_fp8 = false;
  // Reads e4m3 Q, K and V (Problem::q_fp8; EVT_Q_FP8 and EVT_KV_FP8).
  bool q_fp8 = false;
  // With q_fp8: the compute capabilities (10 * major + minor) whose devices
  // it serves FP8 attention on, where others would emulate its instructions
  // slower than SDPA runs on the dequantized tensors. Empty: every device
  // with FP8 (kFp8ComputeCapability and newer).
  std::vector<int> q_fp8_compute_capabilities;
  // Where its kernels may find the lengths (core/problem.h): every template
  // reads each sequence's lengths through common/sequence.cuh.
  std::vector<Layout> layouts = {Layout::kDense};
  std::vector<Constraint> constraints;
  // Every config the constraints admit fits its registers (no spill) at
  // every head_dim and dtype, as a compile test checks: a config that ran on
  // one problem runs on any other the constraints admit it for. Unset, a
  // config is trusted only at the head_dim and dtype it ran at.
  bool fits_every_form = false;
  // Configs known to do well, tried first by searches (those a problem or
  // device cannot run are skipped).
  std::vector<Config> defaults;
  // Configs fitted to a problem on a device (a split count that fills its
  // multiprocessors, say), used before `defaults` wherever those are:
  // search seeds and answers made of defaults (serving_defaults.h). Unset:
  // none.
  std::function<std::vector<Config>(const Problem&, const DeviceLimits&)>
      fitted_defaults;
  // How well the defaults suit a problem, for answers made of defaults
  // when nothing tuned runs on it: higher ranks first (ties in registry
  // order); unset is 0. A decode template ranks itself high for a few query
  // rows, a device-specific prefill template above a portable one.
  std::function<int(const Problem&)> default_rank;
  std::function<LaunchGeometry(const Config&, const Problem&)> geometry;
};

// Where the split-KV blocks of one query block combine their partial rows:
// through a global workspace (the last block to finish combines), or in
// the shared memory of the thread block cluster they form.
enum class SplitCombine { kWorkspace, kCluster };

// The head_dim a template computes that pads it to whole 64-column blocks
// (rows of 128-byte swizzled 16-bit values; the columns past the problem's
// zero-filled, never stored): 32 as 64, 80 and 96 as 128.
int64_t HeadDimIn64s(int64_t head_dim);

// The grid and split-KV scratch of the FlashAttention-style templates
// (kernel_templates/common/flash_common.cuh): grid (ceil(seq_q / block_m) *
// splits, heads, batch), and with splits > 1 combined through the workspace
// the fp32 workspace of partial rows and the per-query-block counters;
// tile_rows block_m, tile_keys block_n. Threads and shared memory are left
// to the caller. The workspace holds output rows of HeadDimIn64s of the
// value head dim columns.
LaunchGeometry SplitKvGeometry(const Problem& p, int64_t block_m,
                               int64_t block_n, int64_t splits,
                               SplitCombine combine);

// OK when the template supports the problem's head_dim (and head_dim_v),
// dtype and layout; otherwise INVALID_ARGUMENT naming "problem.head_dim",
// "problem.head_dim_v", "problem.dtype", "problem.kv_dtype" or
// "problem.layout".
absl::Status CheckSupports(const KernelTemplate& t, const Problem& problem);

// OK when the device can run the template at all; otherwise
// FAILED_PRECONDITION naming the compute capability it needs.
absl::Status CheckDevice(const KernelTemplate& t, const DeviceLimits& limits);

// The CUDA launch limits every config must meet (the same on sm_80 to
// sm_90): grid x below 2^31, grid y and z at most 65535, at most 8 blocks
// per portable cluster.
inline constexpr int64_t kMaxGridX = (int64_t{1} << 31) - 1;
inline constexpr int64_t kMaxGridYZ = 65535;
inline constexpr int kMaxClusterBlocks = 8;

// OK when a launch of geometry `g` fits the device and the launch limits
// above (threads, a multiple of 32; dynamic shared memory; grid; cluster;
// tensor map boxes); otherwise RESOURCE_EXHAUSTED saying which limit.
absl::Status CheckGeometry(const LaunchGeometry& g, const DeviceLimits& limits);

// The gates before compiling: CheckDevice, config in the space, the
// template's constraints, CheckGeometry. Errors are INVALID_ARGUMENT for a
// config outside the space or breaking a constraint and RESOURCE_EXHAUSTED
// for device limits; the message says which.
absl::Status CheckConfig(const KernelTemplate& t, const Config& config,
                         const Problem& problem, const DeviceLimits& limits);

// CheckConfig without the waste_only constraints: OK when a kernel of
// `config`, compiled for a problem holding `problem` (its bucket, or its
// class served provisionally), runs correctly on it.
absl::Status CheckServes(const KernelTemplate& t, const Config& config,
                         const Problem& problem, const DeviceLimits& limits);

// Whether `config` of `t` can serve `problem` on a device of `limits`: the
// template supports the problem (CheckSupports) and the config passes
// CheckConfig there. What every answer that moves a config to another
// problem checks first.
bool RunsOn(const KernelTemplate& t, const Config& config,
            const Problem& problem, const DeviceLimits& limits);

// Every config of the space that passes CheckConfig, in enumeration order.
std::vector<Config> FeasibleConfigs(const KernelTemplate& t,
                                    const Problem& problem,
                                    const DeviceLimits& limits);

// The NVRTC options that instantiate the template: -D for each parameter,
// HEAD_DIM (and HEAD_DIM_V where the value head dim differs), EVT_BF16,
// EVT_KV_FP8 (for an FP8 KV cache), EVT_DEVICE_LENGTHS (0
// for a dense problem: its kernel reads no lengths from the device;
// common/sequence.cuh), for a paged problem EVT_PAGE_SIZE, and EVT_WINDOW
// EVT_SOFTCAP, EVT_SINKS and EVT_ALIBI for a problem with a sliding
// window, softcapping, sinks or ALiBi.
std::vector<std::string> CompileDefines(const Config& config,
                                        const Problem& problem);

}  // namespace evotune

#endif  // EVOTUNE_KERNEL_TEMPLATES_KERNEL_TEMPLATE_H_
