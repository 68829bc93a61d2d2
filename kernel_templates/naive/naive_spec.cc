// Parameter space and launch geometry of kernel_templates/naive/naive.cu.
#include "kernel_templates/template_registry.h"

namespace evotune {

KernelTemplate EVOTUNE_TEMPLATE_SPEC(naive)(std::string source,
                                            std::string hash) {
  KernelTemplate t;
  t.name = "naive";
  t.description =
      "Scalar attention forward: one warp per query row, K/V tiles staged in "
      "shared memory, online softmax in fp32, no tensor cores.";
  t.source = std::move(source);
  t.hash = std::move(hash);
  t.space = ParamSpace({
      {"WARPS", {1, 2, 4, 8, 16}, "query rows (one warp each) per block"},
      {"KV_TILE",
       {16, 32, 64, 128, 256},
       "keys staged in shared memory per step"},
  });
  t.head_dims = {32, 64, 96, 128, 192, 256};
  t.value_head_dims = KernelTemplate::ValueHeadDims::kAny;
  t.dtypes = {DType::kFp16, DType::kBf16};
  t.layouts = {Layout::kDense, Layout::kVarlen, Layout::kKvCache,
               Layout::kPaged};
  t.constraints = {
      {"HEAD_DIM % 32 == 0 && HEAD_DIM_V % 32 == 0",
       [](const Config&, const Problem& p) {
         return p.head_dim % 32 == 0 && HeadDimV(p) % 32 == 0;
       }},
  };
  // A baseline, never the kernel to serve when another runs.
  t.default_rank = [](const Problem&) { return -2; };
  t.defaults = {{{"KV_TILE", 64}, {"WARPS", 4}}};
  t.geometry = [](const Config& c, const Problem& p) {
    const int64_t warps = c.at("WARPS");
    LaunchGeometry g;
    g.grid[0] = (p.seq_q + warps - 1) / warps;
    g.grid[1] = p.heads;
    g.grid[2] = p.batch;
    g.block_threads = static_cast<int>(32 * warps);
    g.smem_bytes = c.at("KV_TILE") * (p.head_dim + HeadDimV(p)) * 2;
    return g;
  };
  return t;
}

}  // namespace evotune
