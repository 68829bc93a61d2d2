#include "kernel_templates/kernel_template.h"

#include <cstdlib>
#include <fstream>
#include <set>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernel_templates/embedded_sources.h"
#include "kernel_templates/template_registry.h"

namespace evotune {
namespace {

Problem SeedProblem() {
  Problem p;
  p.heads = p.kv_heads = 8;
  p.seq_q = p.seq_k = 512;
  p.head_dim = 64;
  return p;
}

TEST(TemplateRegistryTest, EveryEmbeddedTemplateHasASpecAndAHash) {
  const TemplateRegistry& registry = TemplateRegistry::Builtin();
  // Test-only templates only with EVOTUNE_TEST_TEMPLATES=1.
  const char* env = std::getenv("EVOTUNE_TEST_TEMPLATES");
  const bool test_only = env != nullptr && std::string(env) == "1";
  size_t listed = 0;
  for (const EmbeddedFile& file : EmbeddedTemplates()) {
    ASSERT_NE(file.spec, nullptr) << file.name;
    const KernelTemplate t = file.spec(file.source, file.hash);
    // A template is its folder: the spec names it after it.
    EXPECT_EQ(t.name, file.name);
    EXPECT_EQ(t.hash, file.hash);
    if (t.name == "fault_test") EXPECT_TRUE(t.test_only);
    const bool registered = !t.test_only || test_only;
    EXPECT_EQ(registry.Find(t.name) != nullptr, registered) << t.name;
    listed += registered ? 1 : 0;
  }
  EXPECT_EQ(registry.templates().size(), listed);
  for (const KernelTemplate& t : registry.templates()) {
    EXPECT_EQ(t.hash.size(), 16u) << t.name;
    EXPECT_FALSE(t.source.empty()) << t.name;
    EXPECT_GT(t.space.Size(), 1) << t.name;
    EXPECT_FALSE(t.head_dims.empty()) << t.name;
    EXPECT_EQ(registry.Find(t.name), &t);
  }
  EXPECT_NE(registry.Find("naive"), nullptr);
  EXPECT_EQ(registry.Find("missing"), nullptr);
}

// docs/extending.md's "## Templates" list describes exactly the registered
// templates (and the test-only ones): a bullet "- `NAME`" each.
TEST(TemplateRegistryTest, TheDocsListEveryTemplate) {
  std::ifstream in(std::string(EVOTUNE_SOURCE_DIR) + "/docs/extending.md");
  ASSERT_TRUE(in) << "docs/extending.md not found";
  std::set<std::string> listed;
  bool in_section = false;
  for (std::string line; std::getline(in, line);) {
    if (absl::StartsWith(line, "## ")) in_section = line == "## Templates";
    if (!in_section || !absl::StartsWith(line, "- `")) continue;
    listed.insert(line.substr(3, line.find('`', 3) - 3));
  }
  std::set<std::string> embedded;
  for (const EmbeddedFile& file : EmbeddedTemplates()) {
    embedded.insert(file.name);
  }
  EXPECT_EQ(listed, embedded);
}

TEST(TemplateRegistryTest, TemplatesAreSortedByName) {
  const std::vector<KernelTemplate>& all =
      TemplateRegistry::Builtin().templates();
  for (size_t i = 1; i < all.size(); ++i) {
    EXPECT_LT(all[i - 1].name, all[i].name);
  }
}

TEST(TemplateRegistryTest, VersionsNameEveryTemplateInOrder) {
  const TemplateRegistry& registry = TemplateRegistry::Builtin();
  const std::vector<std::pair<std::string, std::string>> versions =
      registry.Versions();
  ASSERT_EQ(versions.size(), registry.templates().size());
  for (size_t i = 0; i < versions.size(); ++i) {
    EXPECT_EQ(versions[i].first, registry.templates()[i].name);
    EXPECT_EQ(versions[i].second, registry.templates()[i].hash);
  }
}

TEST(KernelTemplateTest, DeviceLimitsRejectBeforeCompiling) {
  const KernelTemplate& t = *TemplateRegistry::Builtin().Find("naive");
  Problem p = SeedProblem();
  p.head_dim = 128;
  DeviceLimits l4;  // 99 KB per block.
  l4.smem_per_block_bytes = 99 * 1024;
  // 2 * 256 * 128 * 2 B = 128 KB of shared memory.
  absl::Status s = CheckConfig(t, {{"KV_TILE", 256}, {"WARPS", 4}}, p, l4);
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  DeviceLimits h100;
  h100.smem_per_block_bytes = 232448;
  EXPECT_TRUE(CheckConfig(t, {{"KV_TILE", 256}, {"WARPS", 4}}, p, h100).ok());
  DeviceLimits few_threads;
  few_threads.max_threads_per_block = 256;
  EXPECT_TRUE(absl::IsResourceExhausted(
      CheckConfig(t, {{"KV_TILE", 16}, {"WARPS", 16}}, p, few_threads)));
  // Outside the space.
  EXPECT_TRUE(absl::IsInvalidArgument(
      CheckConfig(t, {{"KV_TILE", 17}, {"WARPS", 4}}, p, h100)));

  const std::vector<Config> on_l4 = FeasibleConfigs(t, p, l4);
  const std::vector<Config> on_h100 = FeasibleConfigs(t, p, h100);
  EXPECT_LT(on_l4.size(), on_h100.size());
  for (const Config& c : on_l4) EXPECT_TRUE(CheckConfig(t, c, p, l4).ok());
}

// A config runs on a problem when the template supports the problem and the
// config passes every gate there.
TEST(KernelTemplateTest, RunsOnNeedsSupportAndTheGates) {
  const KernelTemplate& t = *TemplateRegistry::Builtin().Find("decode_fwd");
  DeviceLimits h100;
  h100.smem_per_block_bytes = 227 * 1024;
  h100.compute_capability = 90;
  Problem p;
  p.heads = 32;
  p.kv_heads = 8;
  p.seq_q = 1;
  p.seq_k = 4096;
  p.head_dim = 128;
  const Config c = {{"KV_SPLITS", 4}, {"Q_IN_REGS", 1}, {"ROWS", 16},
                    {"STAGES", 3},    {"TILE_N", 32},   {"WARPS", 4}};
  EXPECT_TRUE(RunsOn(t, c, p, h100));
  Problem unsupported = p;
  unsupported.head_dim = 40;
  EXPECT_FALSE(RunsOn(t, c, unsupported, h100));
  Problem few_keys = p;  // Half the splits would get no key tile.
  few_keys.seq_k = 40;
  EXPECT_FALSE(RunsOn(t, c, few_keys, h100));
  // But a kernel of it compiled for more keys serves them: the constraint
  // is one of waste only.
  EXPECT_TRUE(CheckServes(t, c, few_keys, h100).ok());
  Problem one_key = few_keys;
  one_key.seq_k = 1;
  EXPECT_TRUE(CheckServes(t, c, one_key, h100).ok());
  DeviceLimits small = h100;
  small.smem_per_block_bytes = 48 * 1024;  // The rings do not fit.
  EXPECT_FALSE(RunsOn(t, c, p, small));
}

// flash_fwd_sm90 uses sm_90a's own instructions: other devices refuse it
// before anything compiles; a device of unknown capability does not.
TEST(KernelTemplateTest, ArchitectureSpecificTemplatesNeedTheirDevice) {
  const KernelTemplate& t = *TemplateRegistry::Builtin().Find("flash_fwd_sm90");
  const Problem p = SeedProblem();
  DeviceLimits l4;
  l4.smem_per_block_bytes = 99 * 1024;
  l4.compute_capability = 89;
  const absl::Status s = CheckDevice(t, l4);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_NE(s.message().find("compute capability 9.0"), std::string::npos) << s;
  EXPECT_TRUE(FeasibleConfigs(t, p, l4).empty());
  DeviceLimits h100;
  h100.smem_per_block_bytes = 227 * 1024;
  h100.compute_capability = 90;
  EXPECT_TRUE(CheckDevice(t, h100).ok());
  EXPECT_FALSE(FeasibleConfigs(t, p, h100).empty());
  h100.compute_capability = 0;
  EXPECT_FALSE(FeasibleConfigs(t, p, h100).empty());
  // Templates without such instructions run anywhere.
  EXPECT_TRUE(
      CheckDevice(*TemplateRegistry::Builtin().Find("flash_fwd"), l4).ok());
}

// Every config a template accepts can be launched: over problems up to the
// API's limits and the per-block limits of the A100, L4 and H100, each
// accepted config's geometry meets the CUDA launch limits (restated here),
// and every problem a template supports has configs it accepts.
TEST(KernelTemplateTest, EveryAcceptedConfigMeetsTheLaunchLimits) {
  const std::vector<DeviceLimits> devices = {
      {166912, 1024, 80}, {101376, 1024, 89}, {232448, 1024, 90}};
  std::vector<Problem> problems;
  for (int64_t batch : {1, 4096}) {
    for (auto [heads, kv_heads] :
         std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {32, 8}, {1024, 1}}) {
      for (auto [sq, sk] : std::vector<std::pair<int64_t, int64_t>>{
               {1, 1}, {17, 4097}, {1 << 20, 1 << 20}, {1, 1 << 20}}) {
        for (auto [d, dv] :
             std::vector<std::pair<int64_t, int64_t>>{{32, 0},
                                                      {64, 0},
                                                      {80, 0},
                                                      {96, 0},
                                                      {128, 0},
                                                      {192, 0},
                                                      {256, 0},
                                                      {192, 128},
                                                      {128, 64},
                                                      {64, 128}}) {
          for (bool causal : {false, true}) {
            Problem p;
            p.batch = batch;
            p.heads = heads;
            p.kv_heads = kv_heads;
            p.seq_q = sq;
            p.seq_k = sk;
            p.head_dim = d;
            p.head_dim_v = dv;
            p.causal = causal;
            if (ValidateProblem(p).ok()) problems.push_back(p);
          }
        }
      }
    }
  }
  ASSERT_GT(problems.size(), 20u);
  int checked = 0;
  for (const KernelTemplate& t : TemplateRegistry::Builtin().templates()) {
    for (const DeviceLimits& device : devices) {
      if (!CheckDevice(t, device).ok()) continue;
      for (const Problem& p : problems) {
        if (!CheckSupports(t, p).ok()) continue;
        const std::vector<Config> accepted = FeasibleConfigs(t, p, device);
        EXPECT_FALSE(accepted.empty())
            << t.name << " sm_" << device.compute_capability << " "
            << ProblemKey(p);
        for (const Config& c : accepted) {
          const LaunchGeometry g = t.geometry(c, p);
          const std::string what =
              absl::StrCat(t.name, " sm_", device.compute_capability, " ",
                           ProblemKey(p), " ", ConfigKey(c));
          EXPECT_TRUE(g.block_threads >= 32 && g.block_threads <= 1024 &&
                      g.block_threads % 32 == 0)
              << what;
          EXPECT_LE(g.smem_bytes, device.smem_per_block_bytes) << what;
          EXPECT_TRUE(g.grid[0] >= 1 && g.grid[0] <= 2147483647) << what;
          EXPECT_TRUE(g.grid[1] >= 1 && g.grid[1] <= 65535) << what;
          EXPECT_TRUE(g.grid[2] >= 1 && g.grid[2] <= 65535) << what;
          EXPECT_TRUE(g.cluster_x >= 1 && g.cluster_x <= 8 &&
                      g.grid[0] % g.cluster_x == 0)
              << what;
          EXPECT_TRUE(g.workspace_floats >= 0 && g.counters >= 0) << what;
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 1000);
}

// A grid past the launch limits is refused before anything compiles.
TEST(KernelTemplateTest, OversizedGridsAreRefused) {
  LaunchGeometry g;
  g.block_threads = 128;
  const DeviceLimits h100{232448, 1024, 90};
  EXPECT_TRUE(CheckGeometry(g, h100).ok());
  g.grid[0] = int64_t{1} << 31;
  EXPECT_EQ(CheckGeometry(g, h100).code(),
            absl::StatusCode::kResourceExhausted);
  g.grid[0] = 8;
  g.grid[1] = 65536;
  EXPECT_THAT(std::string(CheckGeometry(g, h100).message()),
              ::testing::HasSubstr("launch limits"));
  g.grid[1] = 1;
  g.cluster_x = 3;  // Does not divide 8.
  EXPECT_FALSE(CheckGeometry(g, h100).ok());
  g.cluster_x = 4;
  EXPECT_TRUE(CheckGeometry(g, h100).ok());
  g.block_threads = 100;  // Not whole warps.
  EXPECT_FALSE(CheckGeometry(g, h100).ok());
}

// Grid over query blocks x splits, heads, batch; scratch only with splits
// that combine through it.
TEST(KernelTemplateTest, SplitKvGeometrySizesGridAndScratch) {
  Problem p = SeedProblem();
  p.batch = 2;
  p.seq_q = 100;  // Two query blocks of 64.
  LaunchGeometry one = SplitKvGeometry(p, 64, 0, 1, SplitCombine::kWorkspace);
  EXPECT_EQ(one.grid[0], 2);
  EXPECT_EQ(one.grid[1], 8);
  EXPECT_EQ(one.grid[2], 2);
  EXPECT_EQ(one.workspace_floats, 0);
  EXPECT_EQ(one.counters, 0);
  LaunchGeometry four = SplitKvGeometry(p, 64, 0, 4, SplitCombine::kWorkspace);
  EXPECT_EQ(four.grid[0], 8);
  // Partial rows (head_dim) plus max and sum per row of every split.
  EXPECT_EQ(four.workspace_floats, 2 * 8 * 4 * 2 * 64 * (64 + 2));
  EXPECT_EQ(four.counters, 2 * 8 * 2);
  LaunchGeometry cluster = SplitKvGeometry(p, 64, 0, 4, SplitCombine::kCluster);
  EXPECT_EQ(cluster.grid[0], 8);
  EXPECT_EQ(cluster.cluster_x, 4);
  EXPECT_EQ(four.cluster_x, 1);
  EXPECT_EQ(cluster.workspace_floats, 0);
  EXPECT_EQ(cluster.counters, 0);
}

// A persistent kernel runs one block per multiprocessor, never more blocks
// than it has tiles; other kernels get their grid as it is.
TEST(KernelTemplateTest, PersistentGridsHaveABlockPerMultiprocessor) {
  LaunchGeometry g;
  g.grid[0] = 8;
  g.grid[1] = 16;
  g.grid[2] = 2;
  EXPECT_EQ(LaunchGrid(g, 132), (std::array<int64_t, 3>{8, 16, 2}));
  g.persistent = true;
  EXPECT_EQ(LaunchGrid(g, 132), (std::array<int64_t, 3>{132, 1, 1}));
  EXPECT_EQ(LaunchGrid(g, 1000), (std::array<int64_t, 3>{256, 1, 1}));
  EXPECT_EQ(LaunchGrid(g, 0), (std::array<int64_t, 3>{256, 1, 1}));
}

// flash_fwd_tma's persistent configs walk every tile from a 1-D grid and
// keep O in shared memory of its own; the tensor map boxes match the tiles;
// split-KV configs launch clusters and cannot be persistent.
TEST(KernelTemplateTest, FlashFwdTmaGeometry) {
  const KernelTemplate& t = *TemplateRegistry::Builtin().Find("flash_fwd_tma");
  Problem p;
  p.batch = 2;
  p.heads = 16;
  p.seq_q = p.seq_k = 1000;
  p.head_dim = 128;
  Config c = *ParseConfigKey(
      "BLOCK_N=128,CONSUMERS=2,KV_SPLITS=1,OVERLAP=1,PERSISTENT=0,PINGPONG=1,"
      "STAGES=2");
  LaunchGeometry g = t.geometry(c, p);
  EXPECT_EQ(g.grid[0], 8);
  EXPECT_EQ(g.grid[1], 16);
  EXPECT_EQ(g.grid[2], 2);
  EXPECT_FALSE(g.persistent);
  EXPECT_EQ(g.block_threads, 384);
  EXPECT_EQ(g.smem_bytes, (128 + 2 * 2 * 128) * 128 * 2 + 1024 + 256);
  EXPECT_EQ(g.tma.q_rows, 128);
  EXPECT_EQ(g.tma.kv_rows, 128);
  EXPECT_EQ(g.tma.o_rows, 64);
  c["PERSISTENT"] = 1;
  g = t.geometry(c, p);
  EXPECT_EQ(g.grid[0], 8 * 16 * 2);
  EXPECT_EQ(g.grid[1], 1);
  EXPECT_TRUE(g.persistent);
  EXPECT_EQ(g.smem_bytes, (2 * 128 + 2 * 2 * 128) * 128 * 2 + 1024 + 256);
  // Split-KV: a cluster of KV_SPLITS blocks per query block.
  c["PERSISTENT"] = 0;
  c["KV_SPLITS"] = 4;
  g = t.geometry(c, p);
  EXPECT_EQ(g.grid[0], 8 * 4);
  EXPECT_EQ(g.cluster_x, 4);
  EXPECT_EQ(g.workspace_floats, 0);
  EXPECT_FALSE(g.persistent);
  c["PERSISTENT"] = 1;
  EXPECT_TRUE(
      absl::IsInvalidArgument(CheckConfig(t, c, p, {232448, 1024, 90})));
}

// MLA's prefill (192/128): K's ring of 192 columns, V's and O of 128; Q's
// buffer, wider than O, holds O when not persistent. A value head dim
// wider than head_dim is refused before compiling.
TEST(KernelTemplateTest, FlashFwdTmaSizesVAndOByTheValueHeadDim) {
  const KernelTemplate& t = *TemplateRegistry::Builtin().Find("flash_fwd_tma");
  Problem p;
  p.heads = 16;
  p.seq_q = p.seq_k = 4096;
  p.head_dim = 192;
  p.head_dim_v = 128;
  Config c = *ParseConfigKey(
      "BLOCK_N=64,CONSUMERS=2,KV_SPLITS=1,OVERLAP=1,PERSISTENT=0,PINGPONG=1,"
      "STAGES=2");
  EXPECT_EQ(t.geometry(c, p).smem_bytes,
            128 * 192 * 2 + 2 * 64 * (192 + 128) * 2 + 1024 + 256);
  c["PERSISTENT"] = 1;
  EXPECT_EQ(t.geometry(c, p).smem_bytes,
            128 * (192 + 128) * 2 + 2 * 64 * (192 + 128) * 2 + 1024 + 256);
  EXPECT_TRUE(CheckConfig(t, c, p, {232448, 1024, 90}).ok());
  p.head_dim = 64;
  absl::Status s = CheckSupports(t, p);
  EXPECT_EQ(s.message().rfind("problem.head_dim_v:", 0), 0u) << s;
}

TEST(KernelTemplateTest, AValueHeadDimNeedsATemplateThatComputesIt) {
  Problem p = SeedProblem();
  p.head_dim = 192;
  p.head_dim_v = 128;
  const TemplateRegistry& registry = TemplateRegistry::Builtin();
  absl::Status s = CheckSupports(*registry.Find("decode_fwd"), p);
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_EQ(s.message().rfind("problem.head_dim_v:", 0), 0u) << s;
  for (const char* name : {"flash_fwd", "flash_fwd_tma", "naive"}) {
    EXPECT_TRUE(CheckSupports(*registry.Find(name), p).ok()) << name;
  }
  p.head_dim_v = 80;  // Not one of naive's head dims.
  s = CheckSupports(*registry.Find("naive"), p);
  EXPECT_EQ(s.message().rfind("problem.head_dim_v:", 0), 0u) << s;
  // The split-KV workspace holds rows of the value head dim.
  p.head_dim_v = 128;
  p.seq_q = 100;
  EXPECT_EQ(
      SplitKvGeometry(p, 64, 0, 2, SplitCombine::kWorkspace).workspace_floats,
      8 * 2 * 2 * 64 * (128 + 2));
  // Compiled in only where it differs.
  const Config config = {{"KV_TILE", 64}, {"WARPS", 4}};
  EXPECT_THAT(CompileDefines(config, p), testing::Contains("-DHEAD_DIM_V=128"));
  p.head_dim_v = 0;
  for (const std::string& d : CompileDefines(config, p)) {
    EXPECT_EQ(d.find("HEAD_DIM_V"), std::string::npos);
  }
}

TEST(KernelTemplateTest, UnsupportedProblemsNameTheField) {
  const KernelTemplate& t = *TemplateRegistry::Builtin().Find("naive");
  Problem p = SeedProblem();
  p.head_dim = 80;
  absl::Status s = CheckSupports(t, p);
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_EQ(s.message().rfind("problem.head_dim:", 0), 0u) << s;
}

TEST(KernelTemplateTest, AnFp8KvCacheNeedsATemplateAndADeviceThatReadIt) {
  Problem p = SeedProblem();
  p.kv_fp8 = true;
  const TemplateRegistry& registry = TemplateRegistry::Builtin();
  absl::Status s = CheckSupports(*registry.Find("flash_fwd"), p);
  EXPECT_EQ(s.message().rfind("problem.kv_dtype:", 0), 0u) << s;
  const KernelTemplate& decode = *registry.Find("decode_fwd");
  ASSERT_TRUE(CheckSupports(decode, p).ok());
  const Config c = decode.defaults.front();
  EXPECT_TRUE(CheckConfig(decode, c, p, {232448, 1024, 90}).ok());
  EXPECT_TRUE(CheckConfig(decode, c, p, {101376, 1024, 89}).ok());
  s = CheckConfig(decode, c, p, {166912, 1024, 80});
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_EQ(s.message().rfind("problem.kv_dtype:", 0), 0u) << s;
  EXPECT_THAT(CompileDefines({}, p), testing::Contains("-DEVT_KV_FP8=1"));
  // K and V rings of one byte an element: less shared memory.
  Problem bf16 = p;
  bf16.kv_fp8 = false;
  EXPECT_LT(decode.geometry(c, p).smem_bytes,
            decode.geometry(c, bf16).smem_bytes);
}

// FP8 attention (e4m3 Q, K and V): flash_fwd_tma reads it at head_dim 128
// with 128-key tiles and up to two consumers; decode_fwd (16-bit Q) does
// not.
TEST(KernelTemplateTest, Fp8AttentionNeedsATemplateThatReadsIt) {
  Problem p = SeedProblem();
  p.head_dim = 128;
  p.dtype = DType::kBf16;
  p.kv_fp8 = p.q_fp8 = true;
  const TemplateRegistry& registry = TemplateRegistry::Builtin();
  absl::Status s = CheckSupports(*registry.Find("decode_fwd"), p);
  EXPECT_EQ(s.message().rfind("problem.q_dtype:", 0), 0u) << s;
  const KernelTemplate& tma = *registry.Find("flash_fwd_tma");
  ASSERT_TRUE(CheckSupports(tma, p).ok());
  const DeviceLimits h200{232448, 1024, 90};
  const std::vector<Config> fitted = tma.fitted_defaults(p, h200);
  ASSERT_FALSE(fitted.empty());
  for (const Config& c : fitted) {
    EXPECT_TRUE(CheckConfig(tma, c, p, h200).ok()) << ConfigKey(c);
  }
  Config wide = fitted.front();
  wide["BLOCK_N"] = 192;
  EXPECT_FALSE(CheckConfig(tma, wide, p, h200).ok());
  Problem d64 = p;
  d64.head_dim = 64;
  EXPECT_FALSE(CheckConfig(tma, fitted.front(), d64, h200).ok());
  // Two consumers keep each tile's P V in registers of its own: no room
  // for OVERLAP beside it.
  Problem large = p;
  large.heads = large.kv_heads = 16;
  large.seq_q = large.seq_k = 4096;
  Config two = tma.fitted_defaults(large, h200).front();
  EXPECT_EQ(two.at("CONSUMERS"), 2);
  EXPECT_EQ(two.at("OVERLAP"), 0);
  EXPECT_TRUE(CheckConfig(tma, two, large, h200).ok()) << ConfigKey(two);
  two["OVERLAP"] = 1;
  EXPECT_FALSE(CheckConfig(tma, two, large, h200).ok());
  EXPECT_THAT(CompileDefines({}, p), testing::Contains("-DEVT_Q_FP8=1"));
  EXPECT_THAT(CompileDefines({}, p), testing::Contains("-DEVT_KV_FP8=1"));
}

// Under a window of up to 513 keys a row, flash_fwd_tma serves three
// consumers of 64-key tiles, so that each computes only the tiles its own
// rows see (3 of the block's 5 at gpt-oss's 128); wider windows, head dims
// whose registers do not fit three, and FP8 (one tile shape) keep two
// consumers of 128-key tiles.
TEST(KernelTemplateTest, FlashFwdTmaTakesNarrowTilesUnderANarrowWindow) {
  const KernelTemplate& tma =
      *TemplateRegistry::Builtin().Find("flash_fwd_tma");
  const DeviceLimits h200{232448, 1024, 90};
  Problem gptoss;
  gptoss.heads = 64;
  gptoss.kv_heads = 8;
  gptoss.seq_q = gptoss.seq_k = 4096;
  gptoss.head_dim = 64;
  gptoss.dtype = DType::kBf16;
  gptoss.causal = true;
  gptoss.window_left = 128;
  ASSERT_TRUE(ValidateProblem(gptoss).ok());
  const Config c = tma.fitted_defaults(gptoss, h200).front();
  EXPECT_EQ(c.at("CONSUMERS"), 3);
  EXPECT_EQ(c.at("BLOCK_N"), 64);
  EXPECT_TRUE(CheckConfig(tma, c, gptoss, h200).ok()) << ConfigKey(c);
  Problem both = gptoss;
  both.causal = false;
  both.window_right = 100;
  both.head_dim = 128;
  const Config d128 = tma.fitted_defaults(both, h200).front();
  EXPECT_EQ(d128.at("BLOCK_N"), 64);
  EXPECT_TRUE(CheckConfig(tma, d128, both, h200).ok()) << ConfigKey(d128);
  auto block_n = [&](const Problem& p) {
    return tma.fitted_defaults(p, h200).front().at("BLOCK_N");
  };
  Problem mistral = gptoss;  // 32 heads on 8, head_dim 128, 32k keys.
  mistral.heads = 32;
  mistral.seq_q = mistral.seq_k = 32768;
  mistral.head_dim = 128;
  mistral.window_left = 1024;
  EXPECT_EQ(block_n(mistral), 64);
  mistral.window_left = 2048;
  EXPECT_EQ(block_n(mistral), 128);
  Problem wide = gptoss;
  wide.window_left = 4096;
  EXPECT_EQ(block_n(wide), 128);
  Problem open_right = both;
  open_right.window_right = -1;
  EXPECT_EQ(block_n(open_right), 128);
  Problem d256 = gptoss;
  d256.head_dim = 256;
  const Config two = tma.fitted_defaults(d256, h200).front();
  EXPECT_EQ(two.at("CONSUMERS"), 2);
  EXPECT_TRUE(CheckConfig(tma, two, d256, h200).ok()) << ConfigKey(two);
  Problem fp8 = gptoss;
  fp8.head_dim = 128;
  fp8.q_fp8 = fp8.kv_fp8 = true;
  EXPECT_EQ(block_n(fp8), 128);
}

// flash_fwd serves FP8 attention on sm_89, where mma.sync takes e4m3
// natively, and refuses it, naming the field, where it would be emulated
// (sm_90, sm_100); its 16-bit attention runs everywhere.
TEST(KernelTemplateTest, FlashFwdServesFp8OnlyWhereE4m3MmaIsNative) {
  const KernelTemplate& t = *TemplateRegistry::Builtin().Find("flash_fwd");
  Problem p = SeedProblem();
  p.dtype = DType::kBf16;
  p.kv_fp8 = p.q_fp8 = true;
  const Config c = t.fitted_defaults(p, {101376, 1024, 89}).front();
  EXPECT_TRUE(CheckConfig(t, c, p, {101376, 1024, 89}).ok());
  Problem bf16 = p;
  bf16.kv_fp8 = bf16.q_fp8 = false;
  for (int cc : {90, 100}) {
    absl::Status s = CheckConfig(t, c, p, {232448, 1024, cc});
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << cc;
    EXPECT_EQ(s.message().rfind("problem.q_dtype:", 0), 0u) << s;
    EXPECT_TRUE(CheckConfig(t, c, bf16, {232448, 1024, cc}).ok()) << cc;
  }
}

TEST(KernelTemplateTest, DefinesInstantiateEveryParameter) {
  Problem p = SeedProblem();
  p.dtype = DType::kBf16;
  std::vector<std::string> defines =
      CompileDefines({{"KV_TILE", 64}, {"WARPS", 4}}, p);
  EXPECT_EQ(defines, (std::vector<std::string>{"-DKV_TILE=64", "-DWARPS=4",
                                               "-DHEAD_DIM=64", "-DEVT_BF16=1",
                                               "-DEVT_DEVICE_LENGTHS=0"}));
  p.layout = Layout::kVarlen;
  EXPECT_EQ(CompileDefines({}, p).back(), "-DEVT_DEVICE_LENGTHS=1");
  p.layout = Layout::kPaged;
  p.page_size = 32;
  EXPECT_THAT(
      CompileDefines({}, p),
      testing::ElementsAre("-DHEAD_DIM=64", "-DEVT_BF16=1",
                           "-DEVT_DEVICE_LENGTHS=1", "-DEVT_PAGE_SIZE=32"));
}

}  // namespace
}  // namespace evotune
