// Parameter space and launch geometry of
// kernel_templates/flash_fwd/flash_fwd.cu.
#include "kernel_templates/template_registry.h"

namespace evotune {

KernelTemplate EVOTUNE_TEMPLATE_SPEC(flash_fwd)(std::string source,
                                                std::string hash) {
  KernelTemplate t;
  t.name = "flash_fwd";
  t.description =
      "FlashAttention-2-style forward: mma.sync m16n8k16 with ldmatrix, "
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
  t.head_dims = {64, 128};
  t.dtypes = {DType::kFp16, DType::kBf16};
  t.constraints = {
      {"BLOCK_M % (16 * NUM_WARPS) == 0",
       [](const Config& c, const Problem&) {
         return c.at("BLOCK_M") % (16 * c.at("NUM_WARPS")) == 0;
       }},
      {"BLOCK_M <= 32 * NUM_WARPS",
       [](const Config& c, const Problem&) {
         return c.at("BLOCK_M") <= 32 * c.at("NUM_WARPS");
       }},
      // Otherwise the register cap 65536 / (threads * MIN_BLOCKS) is above
      // 255 and the config duplicates MIN_BLOCKS == 1.
      {"MIN_BLOCKS == 1 || 32 * NUM_WARPS * MIN_BLOCKS > 256",
       [](const Config& c, const Problem&) {
         return c.at("MIN_BLOCKS") == 1 ||
                32 * c.at("NUM_WARPS") * c.at("MIN_BLOCKS") > 256;
       }},
      {"HEAD_DIM % 16 == 0",
       [](const Config&, const Problem& p) { return p.head_dim % 16 == 0; }},
  };
  // FlashAttention 2's choices (128x64 tiles for head_dim 128, 128x128 for
  // 64, four warps) and a smaller tile for problems with few query blocks.
  auto config = [](int64_t m, int64_t n, int64_t warps, int64_t stages,
                   int64_t q_in_regs) {
    return Config{{"BLOCK_M", m},       {"BLOCK_N", n},
                  {"KV_SPLITS", 1},     {"MIN_BLOCKS", 1},
                  {"NUM_WARPS", warps}, {"Q_IN_REGS", q_in_regs},
                  {"STAGES", stages}};
  };
  Config split = config(64, 128, 4, 3, 1);
  split["KV_SPLITS"] = 2;
  t.defaults = {config(128, 64, 4, 2, 0), config(128, 128, 4, 2, 0),
                config(128, 128, 8, 3, 1), config(64, 128, 4, 2, 1), split};
  t.geometry = [](const Config& c, const Problem& p) {
    const int64_t block_m = c.at("BLOCK_M");
    LaunchGeometry g =
        SplitKvGeometry(p, block_m, c.at("BLOCK_N"), c.at("KV_SPLITS"),
                        SplitCombine::kWorkspace);
    g.block_threads = static_cast<int>(32 * c.at("NUM_WARPS"));
    g.smem_bytes =
        (block_m + 2 * c.at("STAGES") * c.at("BLOCK_N")) * p.head_dim * 2;
    return g;
  };
  return t;
}

}  // namespace evotune
