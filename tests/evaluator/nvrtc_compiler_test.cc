// Configs that the constraints allow compile with NVRTC for the architectures
// evotune targets. Runs without a GPU.
//
// The full set takes over ten minutes on two cores, so by default each
// (template, architecture, problem) compiles a fixed random sample of
// kSamplePerCell configs (kSamplePerOtherHeadDim at head dims other than 64
// and 128); EVOTUNE_COMPILE_ALL=1 compiles every one.
#include "tuner/evaluator/nvrtc_compiler.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <random>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernel_templates/serving_defaults.h"
#include "kernel_templates/template_registry.h"

namespace evotune {
namespace {

struct Arch {
  std::string name;
  DeviceLimits limits;
};

std::vector<Arch> Targets() {
  // Per-block limits of the A100, L4 and H100.
  return {{ArchName(8, 0), {166912, 1024, 80}},
          {ArchName(8, 9), {101376, 1024, 89}},
          {ArchName(9, 0), {232448, 1024, 90}}};
}

constexpr size_t kSamplePerCell = 16;
// At head dims other than 64 and 128 (whose code differs from theirs in
// tile sizes and the padded columns' copies and stores), fewer.
constexpr size_t kSamplePerOtherHeadDim = 6;

struct Job {
  const KernelTemplate* t;
  Config config;
  Problem problem;
  std::string arch;
};

// Compiles the jobs on every core; returns a line per job that fails to
// compile, has no cubin, or whose result `accept` refuses.
std::vector<std::string> CompileAll(
    const std::vector<Job>& jobs,
    const std::function<bool(const CompileResult&)>& accept) {
  std::atomic<size_t> next{0};
  std::mutex mu;
  std::vector<std::string> failures;
  auto worker = [&] {
    for (size_t i = next++; i < jobs.size(); i = next++) {
      const Job& j = jobs[i];
      absl::StatusOr<CompileResult> r =
          CompileTemplate(*j.t, j.config, j.problem, j.arch);
      if (!r.ok() || !r->ok || r->cubin.empty() || !accept(*r)) {
        std::lock_guard<std::mutex> lock(mu);
        failures.push_back(j.t->name + " " + ConfigKey(j.config) + " " +
                           ProblemKey(j.problem) + " " + j.arch + ": " +
                           (r.ok() ? r->log : r.status().ToString()));
      }
    }
  };
  std::vector<std::thread> threads;
  const unsigned n = std::max(2u, std::thread::hardware_concurrency());
  for (unsigned i = 0; i < n; ++i) threads.emplace_back(worker);
  for (auto& t : threads) t.join();
  return failures;
}

// Whether ptxas -v reports no spills ("N bytes stack frame, N bytes spill
// stores, N bytes spill loads").
bool NoSpill(const CompileResult& r) {
  return r.log.find(", 0 bytes spill stores, 0 bytes spill loads") !=
         std::string::npos;
}

// `p` against a paged KV cache of `page_size` keys a page.
Problem Paged(Problem p, int64_t page_size) {
  p.layout = Layout::kPaged;
  p.page_size = page_size;
  return p;
}

// `p` with a causal sliding window of 256 keys, a softcap of 50, sinks and
// ALiBi: every score mod at once, the most registers.
Problem WithScoreMods(Problem p) {
  p.causal = true;
  p.window_left = 256;
  p.softcap = 50;
  p.sinks = true;
  p.alibi = true;
  return p;
}

TEST(NvrtcCompilerTest, ArchNamesSayTheirComputeCapability) {
  EXPECT_EQ(ArchComputeCapability("compute_89"), 89);
  EXPECT_EQ(ArchComputeCapability("sm_90a"), 90);
  EXPECT_EQ(ArchComputeCapability(VirtualArchName("sm_120")), 120);
  EXPECT_EQ(ArchComputeCapability("sm_100f"), 100);
  for (const char* bad : {"", "89", "sm_", "compute_x9", "sm_90b"}) {
    EXPECT_EQ(ArchComputeCapability(bad), 0) << bad;
  }
}

TEST(NvrtcCompilerTest, EveryFeasibleConfigCompilesForEveryTarget) {
  std::vector<Job> jobs;
  for (const KernelTemplate& t : TemplateRegistry::Builtin().templates()) {
    for (const Arch& arch : Targets()) {
      if (!CheckDevice(t, arch.limits).ok()) continue;
      // Each dtype and each head_dim at least once, alternating.
      for (size_t i = 0; i < t.head_dims.size(); ++i) {
        Problem p;
        p.heads = p.kv_heads = 8;
        p.seq_q = p.seq_k = 512;
        p.head_dim = t.head_dims[i];
        p.dtype = t.dtypes[i % t.dtypes.size()];
        // The second form paged (pages of 32 keys) where the template
        // serves paged caches.
        if (i == 1 && CheckSupports(t, Paged(p, 32)).ok()) p = Paged(p, 32);
        // The first with a causal sliding window and softcapping.
        if (i == 0) p = WithScoreMods(p);
        std::vector<Config> configs = FeasibleConfigs(t, p, arch.limits);
        ASSERT_FALSE(configs.empty()) << t.name << " " << arch.name;
        const char* all = std::getenv("EVOTUNE_COMPILE_ALL");
        if (all == nullptr || std::string(all) != "1") {
          std::mt19937 gen(1234);
          std::shuffle(configs.begin(), configs.end(), gen);
          const bool usual = p.head_dim == 64 || p.head_dim == 128;
          configs.resize(std::min(
              configs.size(), usual ? kSamplePerCell : kSamplePerOtherHeadDim));
        }
        for (const Config& c : configs) jobs.push_back({&t, c, p, arch.name});
      }
    }
  }
  ASSERT_FALSE(jobs.empty());
  // C7508: ptxas ignored a setmaxnreg; every template that reallocates
  // registers must do it where ptxas honours it.
  const std::vector<std::string> failures =
      CompileAll(jobs, [](const CompileResult& r) {
        return r.log.find("C7508") == std::string::npos;
      });
  EXPECT_THAT(failures, ::testing::IsEmpty());
}

// flash_fwd_tma's register constraint admits only configs whose consumers
// fit their reallocated registers: none of them spills, at any head_dim or
// dtype (which the template claims: fits_every_form). Registers do not
// depend on STAGES, so one stage count covers the space. Paged kernels
// (pages of 16 keys, the most page lookups a tile; registers do not depend
// on the dtype) are held to it too.
TEST(NvrtcCompilerTest, FlashFwdTmaConfigsDoNotSpill) {
  const KernelTemplate& t = *TemplateRegistry::Builtin().Find("flash_fwd_tma");
  ASSERT_TRUE(t.fits_every_form);
  const DeviceLimits h100{232448, 1024, 90};
  std::vector<Job> jobs;
  for (int64_t head_dim : t.head_dims) {
    std::vector<Problem> forms;
    for (DType dtype : t.dtypes) {
      Problem p;
      p.seq_q = p.seq_k = 512;
      p.head_dim = head_dim;
      p.dtype = dtype;
      forms.push_back(p);
    }
    forms.push_back(Paged(forms.back(), 16));  // Of the last dtype.
    // A window and softcapping (their masks and tanh) on lengths on the
    // device.
    Problem mods = WithScoreMods(forms.front());
    mods.layout = Layout::kVarlen;
    forms.push_back(mods);
    if (t.q_fp8 && head_dim == 128) {
      // FP8 attention: dense, paged, and causal varlen with fp16 output
      // (lengths on the device load the transposer warps most), a window
      // and softcapping.
      Problem fp8 = forms.front();
      fp8.dtype = DType::kBf16;
      fp8.kv_fp8 = fp8.q_fp8 = true;
      forms.push_back(fp8);
      forms.push_back(Paged(fp8, 16));
      fp8.dtype = DType::kFp16;
      fp8 = WithScoreMods(fp8);
      fp8.layout = Layout::kVarlen;
      forms.push_back(fp8);
    }
    // Head dims computed as the next multiple of 64 (32 as 64, 80 and 96
    // as 128) differ from it only in their copies' bounds and stores: one
    // form, every third config.
    const int every = head_dim % 64 != 0 ? 3 : 1;
    if (head_dim % 64 != 0) forms.resize(1);
    for (const Problem& p : forms) {
      int n = 0;
      for (const Config& c : FeasibleConfigs(t, p, h100)) {
        if (c.at("STAGES") == 2 && n++ % every == 0) {
          jobs.push_back({&t, c, p, "sm_90a"});
        }
      }
    }
  }
  // MLA's prefill (192/128): fewer output registers than 192's, other
  // instructions; every third two-stage config.
  Problem mla;
  mla.seq_q = mla.seq_k = 512;
  mla.head_dim = 192;
  mla.head_dim_v = 128;
  mla.causal = true;
  mla.dtype = DType::kBf16;
  int n = 0;
  for (const Config& c : FeasibleConfigs(t, mla, h100)) {
    if (c.at("STAGES") == 2 && n++ % 3 == 1) {
      jobs.push_back({&t, c, mla, "sm_90a"});
    }
  }
  ASSERT_FALSE(jobs.empty());
  EXPECT_THAT(CompileAll(jobs, NoSpill), ::testing::IsEmpty());
}

// decode_fwd over an FP8 KV cache compiles for sm_89 (the L4, the first
// with e4m3 conversions) and sm_90 without spilling at every config the
// constraints admit, dense and paged. Registers depend on the tile shape,
// Q_IN_REGS and whether the keys are split (the merge), not on the stage
// count or the number of splits, so one of each covers the space.
TEST(NvrtcCompilerTest, DecodeFwdFp8KvConfigsDoNotSpill) {
  const KernelTemplate& t = *TemplateRegistry::Builtin().Find("decode_fwd");
  ASSERT_TRUE(t.kv_fp8);
  std::vector<Job> jobs;
  for (const Arch& arch : {Targets()[1], Targets()[2]}) {
    for (int64_t head_dim : t.head_dims) {
      for (DType dtype : t.dtypes) {
        Problem p;
        p.heads = 32;
        p.kv_heads = 8;
        p.seq_q = 1;
        p.seq_k = 4096;
        p.head_dim = head_dim;
        p.dtype = dtype;
        p.kv_fp8 = true;
        for (const Problem& form : {p, Paged(p, 16)}) {
          for (const Config& c : FeasibleConfigs(t, form, arch.limits)) {
            if (c.at("STAGES") == 2 && c.at("KV_SPLITS") <= 2 &&
                (form.layout == Layout::kDense || c.at("WARPS") == 4)) {
              jobs.push_back({&t, c, form, arch.name});
            }
          }
        }
      }
    }
  }
  ASSERT_FALSE(jobs.empty());
  EXPECT_THAT(CompileAll(jobs, NoSpill), ::testing::IsEmpty());
}

// flash_fwd's FP8 attention (both products on e4m3 mma.sync, V transposed
// in shared memory; served on sm_89 and sm_120) compiles for both without
// spilling at head_dim 64 and 128: dense bf16, paged (pages of 16 keys) and
// causal varlen fp16 with a window and softcapping.
// Registers do not depend on the stage count or the number of splits past
// two: one stage count and up to two splits cover the space.
TEST(NvrtcCompilerTest, FlashFwdFp8ConfigsDoNotSpill) {
  const KernelTemplate& t = *TemplateRegistry::Builtin().Find("flash_fwd");
  ASSERT_TRUE(t.q_fp8);
  std::vector<Job> jobs;
  for (int64_t head_dim : {64, 128}) {
    Problem p;
    p.heads = p.kv_heads = 8;
    p.seq_q = p.seq_k = 1024;
    p.head_dim = head_dim;
    p.dtype = DType::kBf16;
    p.q_fp8 = p.kv_fp8 = true;
    Problem mods = WithScoreMods(p);
    mods.dtype = DType::kFp16;
    mods.layout = Layout::kVarlen;
    // sm_89 and sm_120 (GeForce Blackwell: 99 KB of shared memory a
    // block, as the L4).
    const Arch sm120 = {ArchName(12, 0), {101376, 1024, 120}};
    for (const Arch& arch : {Targets()[1], sm120}) {
      for (const Problem& form : {p, Paged(p, 16), mods}) {
        for (const Config& c : FeasibleConfigs(t, form, arch.limits)) {
          if (c.at("STAGES") == 2 && c.at("KV_SPLITS") <= 2) {
            jobs.push_back({&t, c, form, arch.name});
          }
        }
      }
    }
  }
  ASSERT_FALSE(jobs.empty());
  EXPECT_THAT(CompileAll(jobs, NoSpill), ::testing::IsEmpty());
}

// What an untuned problem is served (RankedDefaults' first config, as the
// daemon answers it) compiles without spilling for every template, target
// and head_dim, prefill and decode alike: above head_dim 128 the fitted
// defaults shrink tiles to fit registers and shared memory, and a spilling
// kernel would be served at a fraction of its speed.
TEST(NvrtcCompilerTest, ServedDefaultsDoNotSpillAtAnyHeadDim) {
  std::vector<Job> jobs;
  for (const KernelTemplate& t : TemplateRegistry::Builtin().templates()) {
    for (const Arch& arch : Targets()) {
      if (!CheckDevice(t, arch.limits).ok()) continue;
      for (int64_t head_dim : t.head_dims) {
        Problem prefill;
        prefill.heads = prefill.kv_heads = 8;
        prefill.seq_q = prefill.seq_k = 512;
        prefill.head_dim = head_dim;
        prefill.dtype = DType::kBf16;
        Problem decode = prefill;
        decode.batch = 4;
        decode.heads = 32;
        decode.seq_q = 1;
        decode.seq_k = 4096;
        decode.dtype = DType::kFp16;
        std::vector<Problem> forms = {prefill, decode};
        if (head_dim == 192 &&
            t.value_head_dims != KernelTemplate::ValueHeadDims::kSame) {
          // MLA's prefill, dense and packed.
          Problem mla = prefill;
          mla.head_dim_v = 128;
          mla.causal = true;
          forms.push_back(mla);
          mla.layout = Layout::kVarlen;
          forms.push_back(mla);
        }
        if (head_dim == 64 &&
            t.value_head_dims == KernelTemplate::ValueHeadDims::kAny) {
          Problem wider = prefill;  // Values wider than keys.
          wider.head_dim_v = 128;
          forms.push_back(wider);
        }
        if (head_dim != 64 && head_dim != 128) {
          // Lengths on the device, and a cache with every score mod: the
          // most registers (CudaEvaluatorTest.OtherHeadDimsAreCorrect's
          // shapes).
          Problem varlen = prefill;
          varlen.batch = 2;
          varlen.heads = 4;
          varlen.kv_heads = 2;
          varlen.seq_q = 300;
          varlen.seq_k = 700;
          varlen.layout = Layout::kVarlen;
          varlen.causal = true;
          Problem cache = WithScoreMods(varlen);
          cache.kv_heads = 1;
          cache.seq_q = 1;
          cache.seq_k = 3000;
          cache.layout = Layout::kKvCache;
          cache.causal = false;
          forms.push_back(varlen);
          forms.push_back(cache);
        }
        if (head_dim != 64 && head_dim != 128) {
          // A decode step of one query head a KV head (Phi-3's d96): the
          // fewest rows a block, as served untuned (at 32, unhinted ptxas
          // traded 8 bytes of spills for occupancy that shared memory
          // does not allow).
          Problem mha = decode;
          mha.batch = 8;
          mha.kv_heads = mha.heads;
          mha.dtype = DType::kBf16;
          forms.push_back(mha);
        }
        for (const Problem& p : forms) {
          std::vector<DefaultChoice> served =
              RankedDefaults({&t}, p, arch.limits, 1);
          ASSERT_EQ(served.size(), 1u)
              << t.name << " " << arch.name << " " << ProblemKey(p);
          jobs.push_back({&t, served[0].config, p, arch.name});
        }
      }
    }
  }
  EXPECT_THAT(CompileAll(jobs, NoSpill), ::testing::IsEmpty());
}

// A template that claims its configs fit every head_dim and dtype needs a
// no-spill test above; only flash_fwd_tma has one.
TEST(NvrtcCompilerTest, OnlyCheckedTemplatesFitEveryForm) {
  for (const KernelTemplate& t : TemplateRegistry::Builtin().templates()) {
    EXPECT_EQ(t.fits_every_form, t.name == "flash_fwd_tma") << t.name;
  }
}

// Kernels compiled with a window or softcap are other instantiations: a
// cache keyed without them would serve one for the other.
TEST(NvrtcCompilerTest, TheCompileKeyNamesWindowsSoftcapsAndSinks) {
  const KernelTemplate& t = *TemplateRegistry::Builtin().Find("naive");
  const Config c = t.defaults.front();
  Problem p;
  Problem window = p;
  window.window_left = 8;
  Problem cap = p;
  cap.softcap = 30;
  const std::string plain = CompileKey(t, c, p, "sm_90a");
  EXPECT_NE(CompileKey(t, c, window, "sm_90a"), plain);
  EXPECT_NE(CompileKey(t, c, cap, "sm_90a"), plain);
  EXPECT_NE(CompileKey(t, c, cap, "sm_90a"),
            CompileKey(t, c, window, "sm_90a"));
  Problem sinks = p;
  sinks.sinks = true;
  EXPECT_NE(CompileKey(t, c, sinks, "sm_90a"), plain);
  Problem alibi = p;
  alibi.alibi = true;
  EXPECT_NE(CompileKey(t, c, alibi, "sm_90a"), plain);
  EXPECT_NE(CompileKey(t, c, alibi, "sm_90a"),
            CompileKey(t, c, sinks, "sm_90a"));
  Problem mla = p;
  mla.head_dim = 192;
  mla.head_dim_v = 128;
  Problem d192 = mla;
  d192.head_dim_v = 0;
  EXPECT_NE(CompileKey(t, c, mla, "sm_90a"), CompileKey(t, c, d192, "sm_90a"));
  // The values are launch data: one kernel serves every window.
  Problem other = window;
  other.window_left = 4096;
  EXPECT_EQ(CompileKey(t, c, other, "sm_90a"),
            CompileKey(t, c, window, "sm_90a"));
}

TEST(NvrtcCompilerTest, ACompileErrorIsDataWithTheLog) {
  KernelTemplate broken = *TemplateRegistry::Builtin().Find("naive");
  broken.source += "\nthis is not C++;\n";
  Problem p;
  absl::StatusOr<CompileResult> r =
      CompileTemplate(broken, {{"KV_TILE", 64}, {"WARPS", 4}}, p, "sm_90");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->ok);
  EXPECT_THAT(r->log, ::testing::HasSubstr("error"));
}

}  // namespace
}  // namespace evotune
