// Parameter space and launch geometry of
// kernel_templates/flash_fwd_sm90/flash_fwd_sm90.cu.
#include "kernel_templates/template_registry.h"

namespace evotune {

KernelTemplate EVOTUNE_TEMPLATE_SPEC(flash_fwd_sm90)(std::string source,
                                                     std::string hash) {
  KernelTemplate t;
  t.name = "flash_fwd_sm90";
  t.description =
      "Attention forward on Hopper's warpgroup tensor cores (sm_90a): wgmma "
      "m64n64k16 with K/V read from 128-byte-swizzled shared memory, cp.async "
      "K/V pipeline, online softmax in registers with fp32 accumulation.";
  t.source = std::move(source);
  t.hash = std::move(hash);
  t.only_compute_capability = 90;
  t.space = ParamSpace({
      {"WARPGROUPS", {1, 2, 3}, "warpgroups per block, 64 query rows each"},
      {"BLOCK_N", {64, 128, 192}, "keys per K/V tile"},
      {"STAGES", {2, 3}, "K/V tiles in flight in shared memory"},
      {"KV_SPLITS", {1, 2, 4}, "blocks sharing one query block's keys"},
      {"MIN_BLOCKS",
       {1, 2},
       "resident blocks per SM to allocate registers for"},
  });
  t.head_dims = {64, 128};
  t.dtypes = {DType::kFp16, DType::kBf16};
  t.layouts = {Layout::kDense, Layout::kVarlen, Layout::kKvCache,
               Layout::kPaged};
  t.constraints = {
      // The register cap 65536 / (threads * MIN_BLOCKS): above 255 (256
      // threads) the config duplicates MIN_BLOCKS == 1, below 128 (768) the
      // accumulators no longer fit.
      {"MIN_BLOCKS == 1 || 128 * WARPGROUPS * MIN_BLOCKS == 512",
       [](const Config& c, const Problem&) {
         return c.at("MIN_BLOCKS") == 1 ||
                128 * c.at("WARPGROUPS") * c.at("MIN_BLOCKS") == 512;
       }},
      {"HEAD_DIM % 64 == 0",
       [](const Config&, const Problem& p) { return p.head_dim % 64 == 0; }},
  };
  auto config = [](int64_t warpgroups, int64_t n, int64_t stages,
                   int64_t splits) {
    return Config{{"BLOCK_N", n},
                  {"KV_SPLITS", splits},
                  {"MIN_BLOCKS", 1},
                  {"STAGES", stages},
                  {"WARPGROUPS", warpgroups}};
  };
  t.default_rank = [](const Problem&) { return 1; };
  t.defaults = {config(2, 128, 2, 1), config(2, 64, 3, 1), config(1, 128, 2, 2),
                config(1, 64, 2, 4)};
  t.geometry = [](const Config& c, const Problem& p) {
    const int64_t block_m = 64 * c.at("WARPGROUPS");
    LaunchGeometry g = SplitKvGeometry(
        p, block_m, c.at("BLOCK_N"), c.at("KV_SPLITS"), SplitCombine::kCluster);
    g.block_threads = static_cast<int>(128 * c.at("WARPGROUPS"));
    // 1024 B to align the swizzled tiles.
    g.smem_bytes =
        (block_m + 2 * c.at("STAGES") * c.at("BLOCK_N")) * p.head_dim * 2 +
        1024;
    return g;
  };
  return t;
}

}  // namespace evotune
