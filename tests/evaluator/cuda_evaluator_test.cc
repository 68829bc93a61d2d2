// GPU test (ctest label "gpu"): skipped where no CUDA device is present.
#include "tuner/evaluator/cuda_evaluator.h"

#include <algorithm>
#include <cstdlib>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernel_templates/serving_defaults.h"
#include "kernel_templates/template_registry.h"

namespace evotune {
namespace {

// The naive template with one piece of its source replaced; NOT_FOUND when
// the piece is not there (the template changed under the test).
absl::StatusOr<KernelTemplate> EditedNaive(const std::string& from,
                                           const std::string& to) {
  KernelTemplate t = *TemplateRegistry::Builtin().Find("naive");
  const size_t at = t.source.find(from);
  if (at == std::string::npos) {
    return absl::NotFoundError(absl::StrCat("not in naive: ", from));
  }
  t.source.replace(at, from.size(), to);
  t.hash += "-edited";  // Another version: compiled and cached apart.
  return t;
}

class CudaEvaluatorTest : public ::testing::Test {
 protected:
  void SetUp() override { MakeEvaluator(""); }
  // The evaluator, compiling for `compile_arch` (empty: the device's).
  void MakeEvaluator(const std::string& compile_arch) {
    CudaEvaluatorOptions options;
    // The sweeps below hand every config to Prefetch first: compile on all
    // cores while the GPU runs.
    options.compile_threads =
        std::max(4, static_cast<int>(std::thread::hardware_concurrency()));
    options.compile_arch = compile_arch;
    absl::StatusOr<std::unique_ptr<Evaluator>> e = MakeCudaEvaluator(options);
    if (!e.ok()) GTEST_SKIP() << e.status().message();
    evaluator_ = *std::move(e);
  }
  // Evaluates one config and expects it correct.
  void ExpectOk(const KernelTemplate& t, const Config& c, const Problem& p) {
    absl::StatusOr<TrialResult> r = evaluator_->Evaluate(t, c, p);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status, TrialStatus::kOk)
        << t.name << " " << ProblemKey(p) << " " << ConfigKey(c) << ": "
        << r->error;
  }
  // Evaluates every config (compiled ahead) and expects each that is not
  // rejected for its resources correct; returns how many were.
  int ExpectEveryOk(const KernelTemplate& t, const std::vector<Config>& configs,
                    const Problem& p) {
    evaluator_->Prefetch(t, configs, p);
    return ExpectOkUntil(t, configs, p, static_cast<int>(configs.size()));
  }
  // As ExpectEveryOk, in order and without compiling ahead, until `want`
  // configs were not rejected for their resources.
  int ExpectOkUntil(const KernelTemplate& t, const std::vector<Config>& configs,
                    const Problem& p, int want) {
    int ok = 0;
    for (const Config& c : configs) {
      if (ok == want) break;
      absl::StatusOr<TrialResult> r = evaluator_->Evaluate(t, c, p);
      if (!r.ok()) {
        ADD_FAILURE() << r.status();
        return ok;
      }
      if (r->status == TrialStatus::kResourceRejected) continue;
      EXPECT_EQ(r->status, TrialStatus::kOk)
          << t.name << " " << ProblemKey(p) << " " << ConfigKey(c) << ": "
          << r->error;
      ++ok;
    }
    return ok;
  }
  // The config an untuned `p` is served (RankedDefaults' first) runs and is
  // correct, and so is one random feasible config besides.
  void ExpectServedAndOneMoreCorrect(const KernelTemplate& t, const Problem& p,
                                     std::mt19937& gen) {
    const DeviceLimits& limits = evaluator_->device().limits;
    ASSERT_TRUE(ValidateProblem(p).ok()) << ProblemKey(p);
    if (!CheckSupports(t, p).ok()) return;
    std::vector<DefaultChoice> served = RankedDefaults({&t}, p, limits, 1);
    ASSERT_EQ(served.size(), 1u) << t.name << " " << ProblemKey(p);
    absl::StatusOr<TrialResult> r =
        evaluator_->Evaluate(t, served[0].config, p);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status, TrialStatus::kOk)
        << t.name << " " << ProblemKey(p) << " " << ConfigKey(served[0].config)
        << ": " << r->error;
    std::vector<Config> feasible = FeasibleConfigs(t, p, limits);
    std::shuffle(feasible.begin(), feasible.end(), gen);
    EXPECT_EQ(ExpectOkUntil(t, feasible, p, 1), 1)
        << t.name << " " << ProblemKey(p);
  }
  void ExpectFp8AttentionOk(const std::string& name, size_t sample,
                            int64_t head_dim = 128);
  std::unique_ptr<Evaluator> evaluator_;
};

// Random configs of every template over dtypes, head dims, masks, lengths
// (seq_q != seq_k, tails of every size) and GQA. The evaluator compares each
// output with a float64-accumulated host reference.
// Problems over dtypes, head dims, masks and lengths, each with the
// template's feasible configs in a random order.
std::vector<std::pair<Problem, std::vector<Config>>> ShapeCases(
    const KernelTemplate& t, const DeviceLimits& limits) {
  const std::vector<std::pair<int64_t, int64_t>> lengths = {
      {1, 17},      {17, 1},      {128, 129},  {129, 128},
      {1000, 4096}, {4096, 1000}, {1000, 1000}};
  std::mt19937 gen(42);
  std::vector<std::pair<Problem, std::vector<Config>>> cases;
  for (DType dtype : {DType::kFp16, DType::kBf16}) {
    for (int64_t d : {64, 128}) {
      for (bool causal : {false, true}) {
        for (auto [sq, sk] : lengths) {
          Problem p;
          p.batch = 2;
          p.heads = 4;
          p.kv_heads = 2;  // GQA.
          p.seq_q = sq;
          p.seq_k = sk;
          p.head_dim = d;
          p.causal = causal;
          p.dtype = dtype;
          std::vector<Config> feasible = FeasibleConfigs(t, p, limits);
          std::shuffle(feasible.begin(), feasible.end(), gen);
          cases.push_back({p, std::move(feasible)});
        }
      }
    }
  }
  return cases;
}

TEST_F(CudaEvaluatorTest, EveryTemplateIsCorrectAcrossShapes) {
  for (const KernelTemplate& t : TemplateRegistry::Builtin().templates()) {
    const auto cases = ShapeCases(t, evaluator_->device().limits);
    for (const auto& [p, feasible] : cases) {
      evaluator_->Prefetch(t, {feasible.begin(), feasible.begin() + 1}, p);
    }
    int checked = 0;
    for (const auto& [p, feasible] : cases) {
      ASSERT_FALSE(feasible.empty()) << t.name << " " << ProblemKey(p);
      // The first config that is not rejected for spilling.
      for (const Config& c : feasible) {
        absl::StatusOr<TrialResult> r = evaluator_->Evaluate(t, c, p);
        ASSERT_TRUE(r.ok()) << r.status();
        if (r->status == TrialStatus::kResourceRejected) continue;
        EXPECT_EQ(r->status, TrialStatus::kOk)
            << t.name << " " << ProblemKey(p) << " " << ConfigKey(c) << ": "
            << r->error;
        EXPECT_GT(r->median_us, 0);
        EXPECT_LE(r->min_us, r->median_us);
        EXPECT_LE(r->median_us, r->p90_us);
        ++checked;
        break;
      }
    }
    EXPECT_EQ(checked, static_cast<int>(cases.size())) << t.name;
  }
}

// Lengths on the device: packed varlen batches, KV caches and paged KV
// caches (shuffled pages of several sizes), with mixed lengths per sequence
// (core/batch_lengths.h), the cache slots past each sequence's length, the
// pages no block table names and the rows after a packed K/V poisoned with
// NaN (so a kernel that lets them into its output fails). Several random
// configs of each template, persistent and split-KV ones among them.
class LengthsOnTheDeviceTest
    : public CudaEvaluatorTest,
      public ::testing::WithParamInterface<const char*> {};

TEST_P(LengthsOnTheDeviceTest, IsCorrect) {
  const KernelTemplate& t = *TemplateRegistry::Builtin().Find(GetParam());
  if (!CheckDevice(t, evaluator_->device().limits).ok()) GTEST_SKIP();
  std::mt19937 gen(7);
  const std::vector<std::pair<int64_t, int64_t>> lengths = {
      {1, 300}, {4, 1000}, {129, 700}, {700, 300}, {1000, 2048}};
  constexpr int64_t kPageSizes[3] = {16, 48, 128};
  int case_index = 0;
  for (Layout layout : {Layout::kVarlen, Layout::kKvCache, Layout::kPaged}) {
    for (int64_t d : {64, 128}) {
      for (bool causal : {false, true}) {
        for (auto [sq, sk] : lengths) {
          Problem p;
          p.batch = 5;
          p.heads = 4;
          p.kv_heads = 2;
          p.seq_q = sq;
          p.seq_k = sk;
          p.head_dim = d;
          p.causal = causal;
          // Both dtypes, over the cases rather than within each.
          p.dtype = (d == 64) == causal ? DType::kFp16 : DType::kBf16;
          p.layout = layout;
          if (layout == Layout::kPaged) {
            // Whole pages of 16, 48 or 128 keys: the TMA kernel's tiles in
            // parts of one page (gcd 16 or 48) and whole in one (128).
            p.page_size = kPageSizes[case_index++ % 3];
            p.seq_k = (sk + p.page_size - 1) / p.page_size * p.page_size;
          }
          if (!CheckSupports(t, p).ok()) continue;
          std::vector<Config> feasible =
              FeasibleConfigs(t, p, evaluator_->device().limits);
          ASSERT_FALSE(feasible.empty()) << t.name << " " << ProblemKey(p);
          std::shuffle(feasible.begin(), feasible.end(), gen);
          // Two configs that are not rejected for their resources.
          EXPECT_GT(ExpectOkUntil(t, feasible, p, 2), 0)
              << t.name << " " << ProblemKey(p);
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Templates, LengthsOnTheDeviceTest,
                         ::testing::Values("flash_fwd_tma", "decode_fwd",
                                           "flash_fwd_sm90", "flash_fwd",
                                           "naive"));

// Split-KV: every split count, including splits that get no key tile
// (seq_k 1, causal rows that see few keys), with its workspace reused by the
// repeat and timing launches.
TEST_F(CudaEvaluatorTest, SplitKvIsCorrect) {
  const TemplateRegistry& registry = TemplateRegistry::Builtin();
  const std::vector<std::pair<const KernelTemplate*, Config>> cases = {
      {registry.Find("flash_fwd"),
       {{"BLOCK_M", 64},
        {"BLOCK_N", 64},
        {"MIN_BLOCKS", 1},
        {"NUM_WARPS", 4},
        {"Q_IN_REGS", 0},
        {"STAGES", 2}}},
      {registry.Find("flash_fwd_sm90"),
       {{"BLOCK_N", 64}, {"MIN_BLOCKS", 1}, {"STAGES", 2}, {"WARPGROUPS", 1}}},
  };
  for (const auto& [t, base] : cases) {
    if (!CheckDevice(*t, evaluator_->device().limits).ok()) continue;
    for (int64_t splits : {2, 4}) {
      for (DType dtype : {DType::kFp16, DType::kBf16}) {
        for (int64_t d : {64, 128}) {
          for (bool causal : {false, true}) {
            for (auto [sq, sk] : std::vector<std::pair<int64_t, int64_t>>{
                     {1, 1}, {17, 1000}, {1000, 17}, {512, 512}, {129, 4096}}) {
              Problem p;
              p.batch = 1;
              p.heads = 8;
              p.kv_heads = 2;
              p.seq_q = sq;
              p.seq_k = sk;
              p.head_dim = d;
              p.causal = causal;
              p.dtype = dtype;
              Config c = base;
              c["KV_SPLITS"] = splits;
              ExpectOk(*t, c, p);
            }
          }
        }
      }
    }
  }
}

// Configs with exactly 48 KB of dynamic shared memory plus the split-KV
// flag's static shared memory once failed at launch (invalid argument): the
// dynamic limit was raised only above 48 KB.
TEST_F(CudaEvaluatorTest, ConfigsAtTheDefaultSharedMemoryLimitLaunch) {
  const KernelTemplate& t = *TemplateRegistry::Builtin().Find("flash_fwd");
  Problem a;
  a.batch = 4;
  a.heads = a.kv_heads = 16;
  a.seq_q = a.seq_k = 1024;
  Problem b;
  b.batch = 2;
  b.heads = b.kv_heads = 16;
  b.seq_q = b.seq_k = 4096;
  b.head_dim = 128;
  b.dtype = DType::kBf16;
  const std::vector<std::pair<Problem, std::string>> cases = {
      {a,
       "BLOCK_M=128,BLOCK_N=64,KV_SPLITS=2,MIN_BLOCKS=1,NUM_WARPS=4,"
       "Q_IN_REGS=0,STAGES=2"},
      {b,
       "BLOCK_M=64,BLOCK_N=32,KV_SPLITS=2,MIN_BLOCKS=1,NUM_WARPS=4,"
       "Q_IN_REGS=0,STAGES=2"},
  };
  for (const auto& [p, key] : cases) {
    const Config c = *ParseConfigKey(key);
    ASSERT_EQ(t.geometry(c, p).smem_bytes, 48 * 1024);
    ExpectOk(t, c, p);
  }
}

// Two causal queries per head against `seq_k` keys, GQA 8:1, head_dim 128,
// bf16: a decode step with a long context.
Problem LongDecode(int64_t seq_k) {
  Problem p;
  p.heads = 16;
  p.kv_heads = 2;
  p.seq_q = 2;
  p.seq_k = seq_k;
  p.causal = true;
  p.head_dim = 128;
  p.dtype = DType::kBf16;
  return p;
}

// A decode_fwd config that runs on every head_dim, with `splits` KV splits.
Config DecodeWithSplits(int64_t splits) {
  return {{"KV_SPLITS", splits}, {"Q_IN_REGS", 1}, {"ROWS", 16},
          {"STAGES", 3},         {"TILE_N", 32},   {"WARPS", 4}};
}

// decode_fwd on the shapes it is for: MHA, GQA and MQA packing, 1 to 16
// queries (causal bottom-right), key counts from 1 to past a split's range,
// every split count, both dtypes and head dims.
TEST_F(CudaEvaluatorTest, DecodeFwdIsCorrectOnDecodeShapes) {
  const KernelTemplate& t = *TemplateRegistry::Builtin().Find("decode_fwd");
  std::mt19937 gen(11);
  int checked = 0;
  int problems = 0;
  for (auto [heads, kv_heads] :
       std::vector<std::pair<int64_t, int64_t>>{{8, 8}, {8, 2}, {8, 1}}) {
    for (int64_t sq : {1, 5, 16}) {
      for (int64_t sk : {1, 17, 4097}) {
        for (bool causal : {false, true}) {
          Problem p;
          p.batch = 2;
          p.heads = heads;
          p.kv_heads = kv_heads;
          p.seq_q = sq;
          p.seq_k = sk;
          p.causal = causal;
          p.head_dim = (problems % 2) ? 128 : 64;
          p.dtype = (problems / 2 % 2) ? DType::kBf16 : DType::kFp16;
          ++problems;
          std::vector<Config> feasible =
              FeasibleConfigs(t, p, evaluator_->device().limits);
          std::shuffle(feasible.begin(), feasible.end(), gen);
          for (const Config& c : feasible) {
            absl::StatusOr<TrialResult> r = evaluator_->Evaluate(t, c, p);
            ASSERT_TRUE(r.ok()) << r.status();
            if (r->status == TrialStatus::kResourceRejected) continue;
            EXPECT_EQ(r->status, TrialStatus::kOk)
                << ProblemKey(p) << " " << ConfigKey(c) << ": " << r->error;
            ++checked;
            break;
          }
        }
      }
    }
  }
  EXPECT_EQ(checked, problems);
  // Every split count on a long context, the last split partial.
  const Problem p = LongDecode(131072 - 5);
  for (int64_t splits : {1, 2, 4, 8, 16, 32, 64}) {
    ExpectOk(t, DecodeWithSplits(splits), p);
  }
}

// FP8 attention in template `name` (e4m3 Q, K and V, per-(sequence, KV
// head) descale factors) against the reference on the dequantized inputs,
// within FP8's tolerance: every config the constraints admit on one GQA
// problem (a random `sample` of them where nonzero), then dense, varlen, KV
// cache and paged problems over both output dtypes, masks and odd lengths
// with a few configs each.
void CudaEvaluatorTest::ExpectFp8AttentionOk(const std::string& name,
                                             size_t sample, int64_t head_dim) {
  SCOPED_TRACE(absl::StrCat(name, " at head_dim ", head_dim));
  const KernelTemplate& t = *TemplateRegistry::Builtin().Find(name);
  const DeviceLimits& limits = evaluator_->device().limits;
  Problem gqa;
  gqa.batch = 2;
  gqa.heads = 8;
  gqa.kv_heads = 2;
  gqa.seq_q = 300;
  gqa.seq_k = 1000;
  gqa.head_dim = head_dim;
  gqa.causal = true;
  gqa.dtype = DType::kBf16;
  gqa.kv_fp8 = gqa.q_fp8 = true;
  std::mt19937 gen(90);
  std::vector<Config> every = FeasibleConfigs(t, gqa, limits);
  ASSERT_GE(every.size(), 8u);
  if (sample != 0 && every.size() > sample) {
    std::shuffle(every.begin(), every.end(), gen);
    every.resize(sample);
  }
  ExpectEveryOk(t, every, gqa);
  int problems = 0;
  for (Layout layout :
       {Layout::kDense, Layout::kVarlen, Layout::kKvCache, Layout::kPaged}) {
    for (auto [sq, sk] : std::vector<std::pair<int64_t, int64_t>>{
             {1, 17}, {113, 1023}, {1023, 113}, {640, 640}}) {
      Problem p = gqa;
      p.heads = problems % 2 ? 4 : 8;
      p.kv_heads = problems % 2 ? 4 : 1;
      p.seq_q = sq;
      p.seq_k = sk;
      p.causal = problems % 3 != 0;
      p.dtype = problems % 2 ? DType::kFp16 : DType::kBf16;
      p.layout = layout;
      if (layout == Layout::kPaged) {
        p.page_size = problems % 2 ? 16 : 128;
        p.seq_k = (sk + p.page_size - 1) / p.page_size * p.page_size;
      }
      if (!CheckSupports(t, p).ok()) continue;
      ++problems;
      std::vector<Config> feasible = FeasibleConfigs(t, p, limits);
      std::shuffle(feasible.begin(), feasible.end(), gen);
      EXPECT_EQ(ExpectOkUntil(t, feasible, p, 3), 3) << ProblemKey(p);
    }
  }
}

// flash_fwd_tma: e4m3 wgmma for both products, P rounded to e4m3.
TEST_F(CudaEvaluatorTest, FlashFwdTmaRunsFp8Attention) {
  if (evaluator_->device().limits.compute_capability != 90) {
    GTEST_SKIP() << "needs sm_90";
  }
  ExpectFp8AttentionOk("flash_fwd_tma", 0);
}

// flash_fwd (head_dim 64 and 128): both products on e4m3 mma.sync, V
// transposed in shared memory; on the devices it serves FP8 on (sm_89,
// sm_120);
// elsewhere CudaEvaluatorAsSm89Test runs its code.
TEST_F(CudaEvaluatorTest, FlashFwdRunsFp8Attention) {
  const std::vector<int>& on =
      TemplateRegistry::Builtin().Find("flash_fwd")->q_fp8_compute_capabilities;
  if (std::find(on.begin(), on.end(),
                evaluator_->device().limits.compute_capability) == on.end()) {
    GTEST_SKIP() << "flash_fwd serves no FP8 attention on this device";
  }
  for (int64_t head_dim : {64, 128}) {
    ExpectFp8AttentionOk("flash_fwd", 24, head_dim);
  }
}

// The same as sm_89 (the L4) compiles it on any GPU of compute capability
// 8.9 or newer: compute_89 PTX, which the driver compiles for the device as
// it loads it (configs judged as for sm_89).
class CudaEvaluatorAsSm89Test : public CudaEvaluatorTest {
 protected:
  void SetUp() override { MakeEvaluator("compute_89"); }
};

// SetUp skips it on a GPU older than 8.9 (the evaluator refuses the arch).
TEST_F(CudaEvaluatorAsSm89Test, FlashFwdRunsFp8Attention) {
  for (int64_t head_dim : {64, 128}) {
    ExpectFp8AttentionOk("flash_fwd", 24, head_dim);
  }
}

// Sliding windows (one side, both, causal, a window of the diagonal alone),
// logit softcapping, attention sinks and ALiBi, alone and together, over
// every layout, on every template the device runs: two random configs each
// (the split-KV and persistent ones among them), each checked against the
// reference.
TEST_F(CudaEvaluatorTest, EveryTemplateRunsWindowsSoftcapsSinksAndAlibi) {
  struct Case {
    int64_t sq, sk;
    bool causal;
    int64_t left, right;
    float softcap;
    Layout layout;
    bool sinks = false;
    bool alibi = false;
  };
  const std::vector<Case> cases = {
      {1000, 1000, true, 256, -1, 0, Layout::kDense},
      {129, 4096, false, 100, 50, 0, Layout::kDense},
      {1024, 1024, false, -1, -1, 2, Layout::kDense},
      {17, 1, false, 0, 3, 0, Layout::kDense},
      {640, 640, true, 0, -1, 0, Layout::kDense},
      {300, 700, true, 64, -1, 30, Layout::kVarlen},
      {1, 4097, true, 1000, -1, 0, Layout::kKvCache},
      {4, 2048, true, 512, -1, 50, Layout::kPaged},
      {1, 3000, false, -1, -1, 5, Layout::kKvCache},
      {512, 512, true, 128, -1, 0, Layout::kDense, true},
      {1000, 1000, false, -1, -1, 0, Layout::kDense, true},
      {1, 4097, false, -1, -1, 0, Layout::kKvCache, true},
      {300, 700, true, -1, -1, 20, Layout::kVarlen, true},
      {4, 2048, true, 512, -1, 0, Layout::kPaged, true},
      // ALiBi: causal, both sides of the diagonal (seq_q below and above
      // seq_k), with every other mod, decode rows of grouped heads.
      {1000, 1000, true, -1, -1, 0, Layout::kDense, false, true},
      {129, 4096, false, -1, -1, 0, Layout::kDense, false, true},
      {1023, 113, false, -1, -1, 0, Layout::kDense, false, true},
      {300, 700, true, 64, -1, 30, Layout::kVarlen, true, true},
      {1, 4097, false, -1, -1, 0, Layout::kKvCache, false, true},
      {4, 2048, true, -1, -1, 0, Layout::kPaged, false, true},
  };
  const DeviceLimits& limits = evaluator_->device().limits;
  std::mt19937 gen(67);
  for (const KernelTemplate& t : TemplateRegistry::Builtin().templates()) {
    if (t.test_only || !CheckDevice(t, limits).ok()) continue;
    for (size_t i = 0; i < cases.size(); ++i) {
      const Case& c = cases[i];
      Problem p;
      p.batch = 2;
      p.heads = 8;
      p.kv_heads = i % 2 ? 2 : 8;
      p.seq_q = c.sq;
      p.seq_k = c.sk;
      p.head_dim = i % 2 ? 128 : 64;
      p.dtype = i % 3 ? DType::kBf16 : DType::kFp16;
      p.causal = c.causal;
      p.window_left = c.left;
      p.window_right = c.right;
      p.softcap = c.softcap;
      p.layout = c.layout;
      p.sinks = c.sinks;
      p.alibi = c.alibi;
      if (c.layout == Layout::kPaged) p.page_size = 16;
      ASSERT_TRUE(ValidateProblem(p).ok()) << ProblemKey(p);
      if (!CheckSupports(t, p).ok()) continue;
      std::vector<Config> feasible = FeasibleConfigs(t, p, limits);
      std::shuffle(feasible.begin(), feasible.end(), gen);
      EXPECT_EQ(ExpectOkUntil(t, feasible, p, 2), 2)
          << t.name << " " << ProblemKey(p);
    }
  }
  // FP8 attention and an FP8 KV cache with all four (descale factors
  // folded into the softcap's scale and ALiBi's slope).
  if (limits.compute_capability != 90) return;
  Problem fp8;
  fp8.batch = 2;
  fp8.heads = 8;
  fp8.kv_heads = 2;
  fp8.seq_q = 700;
  fp8.seq_k = 1500;
  fp8.head_dim = 128;
  fp8.dtype = DType::kBf16;
  fp8.causal = true;
  fp8.window_left = 300;
  fp8.softcap = 20;
  fp8.sinks = true;
  fp8.alibi = true;
  fp8.kv_fp8 = fp8.q_fp8 = true;
  const KernelTemplate& tma =
      *TemplateRegistry::Builtin().Find("flash_fwd_tma");
  std::vector<Config> feasible = FeasibleConfigs(tma, fp8, limits);
  std::shuffle(feasible.begin(), feasible.end(), gen);
  EXPECT_EQ(ExpectOkUntil(tma, feasible, fp8, 3), 3);
  fp8.q_fp8 = false;
  fp8.seq_q = 2;
  fp8.layout = Layout::kKvCache;
  const KernelTemplate& decode =
      *TemplateRegistry::Builtin().Find("decode_fwd");
  feasible = FeasibleConfigs(decode, fp8, limits);
  std::shuffle(feasible.begin(), feasible.end(), gen);
  EXPECT_EQ(ExpectOkUntil(decode, feasible, fp8, 2), 2);
}

// Head dims other than 64 and 128 (80 and 96, computed as 128 with the pad
// zero-filled; 192 and 256, Gemma's and DeepSeek's): each template that
// claims one, over causal and not, GQA and MQA, odd lengths (1, 17, 113,
// 1023; seq_q != seq_k), lengths on the device and paged caches, a window
// with softcapping and sinks; the config an untuned problem is served
// (RankedDefaults' first) must run and be correct, and one random feasible
// config besides.
struct HeadDimCase {
  int64_t sq, sk;
  bool causal;
  int64_t kv_heads;
  Layout layout;
  bool mods = false;
};

const std::vector<HeadDimCase>& HeadDimCases() {
  static const auto* const cases = new std::vector<HeadDimCase>{
      {1, 17, false, 4, Layout::kDense},
      {17, 1, true, 2, Layout::kDense},
      {113, 1023, true, 1, Layout::kDense},
      {1023, 113, false, 2, Layout::kDense},
      {1023, 1023, true, 2, Layout::kDense},
      {300, 700, true, 2, Layout::kVarlen},
      {1, 4097, false, 1, Layout::kKvCache},
      {4, 2048, true, 2, Layout::kPaged},
      {700, 700, true, 2, Layout::kDense, true},
      {1, 3000, false, 1, Layout::kKvCache, true},
  };
  return *cases;
}

// HeadDimCases()[i] at head dims d and dv (0: d), of 2 sequences of 4
// heads, fp16 or bf16 by turns.
Problem HeadDimProblem(size_t i, int64_t d, int64_t dv) {
  const HeadDimCase& c = HeadDimCases()[i];
  Problem p;
  p.batch = 2;
  p.heads = 4;
  p.kv_heads = c.kv_heads;
  p.seq_q = c.sq;
  p.seq_k = c.sk;
  p.head_dim = d;
  p.head_dim_v = dv;
  p.dtype = i % 2 ? DType::kBf16 : DType::kFp16;
  p.causal = c.causal;
  p.layout = c.layout;
  if (c.layout == Layout::kPaged) p.page_size = 16;
  if (c.mods) {
    p.window_left = 200;
    p.softcap = 30;
    p.sinks = true;
    p.alibi = true;
  }
  return p;
}

TEST_F(CudaEvaluatorTest, OtherHeadDimsAreCorrect) {
  const DeviceLimits& limits = evaluator_->device().limits;
  std::mt19937 gen(192);
  for (const KernelTemplate& t : TemplateRegistry::Builtin().templates()) {
    if (t.test_only || !CheckDevice(t, limits).ok()) continue;
    for (int64_t d : t.head_dims) {
      if (d == 64 || d == 128) continue;
      for (size_t i = 0; i < HeadDimCases().size(); ++i) {
        ExpectServedAndOneMoreCorrect(t, HeadDimProblem(i, d, 0), gen);
      }
    }
  }
}

// A value head dim other than the query/key one, in every template that
// computes one: DeepSeek's MLA prefill (192/128), and values narrower
// (128/64) and wider (64/128) than keys, over the cases above.
TEST_F(CudaEvaluatorTest, ValueHeadDimsAreCorrect) {
  const DeviceLimits& limits = evaluator_->device().limits;
  std::mt19937 gen(128);
  int checked = 0;
  for (const KernelTemplate& t : TemplateRegistry::Builtin().templates()) {
    if (t.test_only || !CheckDevice(t, limits).ok()) continue;
    for (auto [d, dv] : std::vector<std::pair<int64_t, int64_t>>{
             {192, 128}, {128, 64}, {64, 128}}) {
      for (size_t i = 0; i < HeadDimCases().size(); ++i) {
        const Problem p = HeadDimProblem(i, d, dv);
        if (!CheckSupports(t, p).ok()) continue;
        ExpectServedAndOneMoreCorrect(t, p, gen);
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 40);
}

// decode_fwd over an FP8 KV cache (e4m3 K and V, per-(sequence, KV head)
// descale factors) against the reference on the dequantized inputs: both
// head dims and dtypes, dense, cache and paged layouts, GQA and MQA, decode
// and speculative (causal) queries, odd lengths; two configs each (they
// differ in how the lanes read the tiles only by tile shape and Q_IN_REGS).
TEST_F(CudaEvaluatorTest, DecodeFwdReadsAnFp8KvCache) {
  const KernelTemplate& t = *TemplateRegistry::Builtin().Find("decode_fwd");
  const DeviceLimits& limits = evaluator_->device().limits;
  if (limits.compute_capability < kFp8ComputeCapability) {
    GTEST_SKIP() << "e4m3 needs compute capability 8.9";
  }
  std::mt19937 gen(89);
  int problems = 0;
  for (Layout layout : {Layout::kDense, Layout::kKvCache, Layout::kPaged}) {
    for (auto [heads, kv_heads] :
         std::vector<std::pair<int64_t, int64_t>>{{8, 2}, {8, 1}}) {
      for (auto [sq, sk] :
           std::vector<std::pair<int64_t, int64_t>>{{1, 17}, {4, 4097}}) {
        Problem p;
        p.batch = 3;
        p.heads = heads;
        p.kv_heads = kv_heads;
        p.seq_q = sq;
        p.seq_k = sk;
        p.causal = sq > 1;
        p.head_dim = (problems % 2) ? 128 : 64;
        p.dtype = (problems / 2 % 2) ? DType::kBf16 : DType::kFp16;
        p.kv_fp8 = true;
        p.layout = layout;
        if (layout == Layout::kPaged) {
          p.page_size = problems % 3 == 0 ? 16 : 64;
          p.seq_k = (sk + p.page_size - 1) / p.page_size * p.page_size;
        }
        ++problems;
        std::vector<Config> feasible = FeasibleConfigs(t, p, limits);
        std::shuffle(feasible.begin(), feasible.end(), gen);
        EXPECT_EQ(ExpectOkUntil(t, feasible, p, 2), 2) << ProblemKey(p);
      }
    }
  }
  // Key tiles spanning pages of 16 keys (two and four pages a tile), 16-bit
  // and FP8, the last page of each sequence partial.
  for (bool fp8 : {false, true}) {
    for (int64_t n : {32, 64}) {
      Problem paged = LongDecode(16 * 70);
      paged.batch = 3;
      paged.layout = Layout::kPaged;
      paged.page_size = 16;
      paged.kv_fp8 = fp8;
      Config c = DecodeWithSplits(4);
      c["TILE_N"] = n;
      c["WARPS"] = n == 64 ? 2 : 4;  // 16-bit 64-key tiles: shared memory.
      ExpectOk(t, c, paged);
    }
  }
  // Every split count on a long context, the last split partial.
  Problem p = LongDecode(131072 - 5);
  p.kv_fp8 = true;
  for (int64_t splits : {1, 2, 4, 8, 16, 32, 64}) {
    ExpectOk(t, DecodeWithSplits(splits), p);
  }
}

// Every config of the wgmma templates (each tile shape is its own
// instruction and register schedule; flash_fwd_tma's pipeline modes each
// their own synchronisation) on problems with several key tiles, tails and
// GQA.
TEST_F(CudaEvaluatorTest, EveryConfigOfTheHopperTemplatesIsCorrect) {
  for (const char* name : {"flash_fwd_tma", "flash_fwd_sm90"}) {
    const KernelTemplate& t = *TemplateRegistry::Builtin().Find(name);
    if (!CheckDevice(t, evaluator_->device().limits).ok()) {
      GTEST_SKIP() << "needs a compute capability 9.0 device";
    }
    for (int64_t d : {64, 128}) {
      Problem p;
      p.batch = 2;
      p.heads = 4;
      p.kv_heads = 2;
      p.seq_q = 300;
      p.seq_k = 700;
      p.head_dim = d;
      p.causal = d == 64;
      p.dtype = d == 64 ? DType::kFp16 : DType::kBf16;
      const int ok = ExpectEveryOk(
          t, FeasibleConfigs(t, p, evaluator_->device().limits), p);
      EXPECT_GT(ok, 20) << name << " " << ProblemKey(p);
    }
  }
}

// Persistent flash_fwd_tma blocks walking several tiles each (more tiles
// than multiprocessors): the next tile's Q loaded during this tile's
// epilogue, the K/V ring and (at head_dim 64) the ping-pong turns running on
// across tiles, and tiles that see no key at all (causal rows before the
// first key), for every persistent config.
TEST_F(CudaEvaluatorTest, PersistentBlocksOfSeveralTilesAreCorrect) {
  const KernelTemplate& t = *TemplateRegistry::Builtin().Find("flash_fwd_tma");
  if (!CheckDevice(t, evaluator_->device().limits).ok()) {
    GTEST_SKIP() << "needs a compute capability 9.0 device";
  }
  for (int64_t d : {64, 128}) {
    Problem p;
    p.batch = 2;
    p.heads = 16;
    p.kv_heads = 4;
    p.seq_q = 1100;  // 9 tiles of 128 rows a head, the last partial.
    p.seq_k = 700;
    p.head_dim = d;
    p.causal = true;  // The first 400 rows see no key.
    p.dtype = d == 64 ? DType::kFp16 : DType::kBf16;
    std::vector<Config> persistent;
    for (const Config& c : FeasibleConfigs(t, p, evaluator_->device().limits)) {
      if (c.at("PERSISTENT") == 1) persistent.push_back(c);
    }
    EXPECT_GT(ExpectEveryOk(t, persistent, p), 10) << ProblemKey(p);
  }
}

// Pipeline races (a stage refilled before every warp read it, a wait count
// off by one, a missing barrier) show as output that changes between runs:
// 100 runs of configs of the tensor-core templates, on problems long enough
// for the K/V ring of every config to wrap several times, give the same bits.
TEST(CudaEvaluatorStressTest, AHundredRunsGiveTheSameBits) {
  CudaEvaluatorOptions options;
  options.repeat_runs = 100;
  absl::StatusOr<std::unique_ptr<Evaluator>> e = MakeCudaEvaluator(options);
  if (!e.ok()) GTEST_SKIP() << e.status().message();
  Evaluator& evaluator = **e;
  const TemplateRegistry& registry = TemplateRegistry::Builtin();
  for (const char* name :
       {"flash_fwd", "flash_fwd_sm90", "flash_fwd_tma", "decode_fwd"}) {
    const KernelTemplate& t = *registry.Find(name);
    if (!CheckDevice(t, evaluator.device().limits).ok()) continue;
    std::mt19937 gen(7);
    for (int64_t d : {64, 128}) {
      Problem p;
      p.heads = 4;
      p.kv_heads = 2;
      p.seq_q = 300;
      p.seq_k = 2000;  // > 3 rings of the largest tiles (3 x 192 keys).
      p.head_dim = d;
      p.causal = d == 128;
      p.dtype = d == 64 ? DType::kFp16 : DType::kBf16;
      std::vector<Config> feasible =
          FeasibleConfigs(t, p, evaluator.device().limits);
      std::shuffle(feasible.begin(), feasible.end(), gen);
      int checked = 0;
      for (const Config& c : feasible) {
        absl::StatusOr<TrialResult> r = evaluator.Evaluate(t, c, p);
        ASSERT_TRUE(r.ok()) << r.status();
        if (r->status == TrialStatus::kResourceRejected) continue;
        EXPECT_EQ(r->status, TrialStatus::kOk)
            << name << " " << ProblemKey(p) << " " << ConfigKey(c) << ": "
            << r->error;
        if (++checked == 4) break;
      }
      EXPECT_EQ(checked, 4) << name << " " << ProblemKey(p);
    }
  }
}

// Small problems for compute-sanitizer (tests/evaluator/sanitizer_test.sh
// runs this test under racecheck and memcheck): every template, split and
// unsplit, with a ring that wraps and a tail tile, and with a window,
// softcap and sinks.
// Three packed causal sequences of up to 100 queries and 450 keys (seven
// key tiles of 64, the last partial) of 2 heads on 1 KV head.
Problem SmallVarlenBatch(int64_t head_dim) {
  Problem p;
  p.batch = 3;
  p.heads = 2;
  p.kv_heads = 1;
  p.seq_q = 100;
  p.seq_k = 450;
  p.head_dim = head_dim;
  p.causal = true;
  p.layout = Layout::kVarlen;
  return p;
}

TEST_F(CudaEvaluatorTest, SmallProblemsForTheSanitizers) {
  const TemplateRegistry& registry = TemplateRegistry::Builtin();
  const std::vector<std::pair<const char*, Config>> cases = {
      {"naive", {{"KV_TILE", 32}, {"WARPS", 4}}},
      {"flash_fwd",
       {{"BLOCK_M", 64},
        {"BLOCK_N", 64},
        {"KV_SPLITS", 1},
        {"MIN_BLOCKS", 1},
        {"NUM_WARPS", 4},
        {"Q_IN_REGS", 1},
        {"STAGES", 2}}},
      {"flash_fwd",
       {{"BLOCK_M", 128},
        {"BLOCK_N", 32},
        {"KV_SPLITS", 2},
        {"MIN_BLOCKS", 1},
        {"NUM_WARPS", 8},
        {"Q_IN_REGS", 0},
        {"STAGES", 3}}},
      {"flash_fwd_sm90",
       {{"BLOCK_N", 64},
        {"KV_SPLITS", 1},
        {"MIN_BLOCKS", 1},
        {"STAGES", 2},
        {"WARPGROUPS", 2}}},
      {"flash_fwd_sm90",
       {{"BLOCK_N", 64},
        {"KV_SPLITS", 2},
        {"MIN_BLOCKS", 1},
        {"STAGES", 3},
        {"WARPGROUPS", 1}}},
      {"flash_fwd_tma",
       *ParseConfigKey(
           "BLOCK_N=64,CONSUMERS=2,KV_SPLITS=1,OVERLAP=1,PERSISTENT=0,"
           "PINGPONG=1,STAGES=2")},
      {"flash_fwd_tma",
       *ParseConfigKey(
           "BLOCK_N=64,CONSUMERS=2,KV_SPLITS=1,OVERLAP=1,PERSISTENT=1,"
           "PINGPONG=1,STAGES=2")},
      {"flash_fwd_tma",
       *ParseConfigKey(
           "BLOCK_N=64,CONSUMERS=3,KV_SPLITS=1,OVERLAP=0,PERSISTENT=0,"
           "PINGPONG=0,STAGES=3")},
      {"flash_fwd_tma",
       *ParseConfigKey("BLOCK_N=64,CONSUMERS=2,KV_SPLITS=4,OVERLAP=1,"
                       "PERSISTENT=0,PINGPONG=1,STAGES=2")},
      // FP8 attention's shape (128-key tiles), with V's transposes.
      {"flash_fwd_tma",
       *ParseConfigKey("BLOCK_N=128,CONSUMERS=2,KV_SPLITS=1,OVERLAP=1,"
                       "PERSISTENT=1,PINGPONG=1,STAGES=2")},
      {"flash_fwd_tma",
       *ParseConfigKey("BLOCK_N=128,CONSUMERS=1,KV_SPLITS=2,OVERLAP=0,"
                       "PERSISTENT=0,PINGPONG=0,STAGES=3")},
      // Configs that pass the spill gate in every layout below: ptxas,
      // left to choose (no minimum blocks hint), spilled 4-8 bytes at 96
      // and 168 registers on sm_90a with two stages of 16-key tiles under
      // Q held in registers, and with 64-key tiles over pages of 32.
      {"decode_fwd",
       *ParseConfigKey(
           "KV_SPLITS=1,Q_IN_REGS=1,ROWS=16,STAGES=3,TILE_N=16,WARPS=4")},
      {"decode_fwd",
       *ParseConfigKey(
           "KV_SPLITS=4,Q_IN_REGS=1,ROWS=32,STAGES=3,TILE_N=32,WARPS=2")},
      // Key tiles of 64 over pages of 32: each tile spans two pages.
      {"decode_fwd",
       *ParseConfigKey(
           "KV_SPLITS=2,Q_IN_REGS=0,ROWS=16,STAGES=2,TILE_N=64,WARPS=2")},
      // More splits than one merge batch: the (max, sum) of every split go
      // through shared memory first.
      {"decode_fwd",
       *ParseConfigKey(
           "KV_SPLITS=16,Q_IN_REGS=0,ROWS=16,STAGES=2,TILE_N=16,WARPS=4")},
  };
  for (const auto& [name, c] : cases) {
    const KernelTemplate& t = *registry.Find(name);
    if (!CheckDevice(t, evaluator_->device().limits).ok()) continue;
    // Dense, and batches of mixed lengths on the device (packed, a KV
    // cache, and packed queries over pages in a shuffled order with spare
    // ones), whose lengths and block tables memcheck sees the kernels keep
    // inside the tensors.
    for (Layout layout :
         {Layout::kDense, Layout::kVarlen, Layout::kKvCache, Layout::kPaged}) {
      // 16-bit, e4m3 K and V, and e4m3 Q, K and V (at head_dim 128 and
      // 64), where served.
      for (int fp8 = 0; fp8 < 4; ++fp8) {
        Problem p;
        p.kv_fp8 = fp8 > 0;
        p.q_fp8 = fp8 >= 2;
        p.head_dim = fp8 == 2 ? 128 : 64;
        p.batch = layout == Layout::kDense ? 1 : 3;
        p.heads = 2;
        p.kv_heads = 1;
        p.seq_q = 100;
        p.seq_k = 450;  // Seven tiles of 64, the last one partial.
        p.causal = true;
        p.layout = layout;
        if (layout == Layout::kPaged) {
          p.page_size = 32;
          p.seq_k = 480;  // 15 pages a sequence; the last key tile partial.
        }
        if (CheckSupports(t, p).ok() &&
            CheckConfig(t, c, p, evaluator_->device().limits).ok()) {
          ExpectOk(t, c, p);
        }
      }
    }
    // A window (its first tiles skipped), softcapping and sinks, on
    // lengths on the device.
    Problem p = SmallVarlenBatch(64);
    p.window_left = 60;
    p.softcap = 20;
    p.sinks = true;
    if (CheckConfig(t, c, p, evaluator_->device().limits).ok()) {
      ExpectOk(t, c, p);
    }
  }
  // A head dim computed with zero-filled columns (96 as 128), packed so
  // that a store past it would land in the next head's row, 256, and MLA's
  // 192/128 (V and O narrower than Q and K), each at the config it is
  // served (the configs above are 64's and 128's).
  const DeviceLimits& limits = evaluator_->device().limits;
  for (const KernelTemplate& t : registry.templates()) {
    if (t.test_only || !CheckDevice(t, limits).ok()) continue;
    for (auto [d, dv] : std::vector<std::pair<int64_t, int64_t>>{
             {96, 0}, {256, 0}, {192, 128}}) {
      Problem p = SmallVarlenBatch(d);
      p.head_dim_v = dv;
      if (!CheckSupports(t, p).ok()) continue;
      std::vector<DefaultChoice> served = RankedDefaults({&t}, p, limits, 1);
      ASSERT_EQ(served.size(), 1u) << t.name << " " << ProblemKey(p);
      ExpectOk(t, served[0].config, p);
    }
  }
}

// Not run by itself: one config of one problem, for a profiler
// (EVOTUNE_PROFILE_TEMPLATE, EVOTUNE_PROFILE_CONFIG as a config key and
// EVOTUNE_PROFILE_PROBLEM as a problem key), e.g.
//   ncu --kernel-name attention_fwd cuda_evaluator_test
//   --gtest_also_run_disabled_tests --gtest_filter=*OneConfigForAProfiler
TEST_F(CudaEvaluatorTest, DISABLED_OneConfigForAProfiler) {
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return std::string(v == nullptr ? "" : v);
  };
  const KernelTemplate* t =
      TemplateRegistry::Builtin().Find(env("EVOTUNE_PROFILE_TEMPLATE"));
  ASSERT_NE(t, nullptr) << "EVOTUNE_PROFILE_TEMPLATE";
  absl::StatusOr<Config> c = ParseConfigKey(env("EVOTUNE_PROFILE_CONFIG"));
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<Problem> p = ParseProblemKey(env("EVOTUNE_PROFILE_PROBLEM"));
  ASSERT_TRUE(p.ok()) << p.status();
  ExpectOk(*t, *c, *p);
}

// Not run by itself: sanitizer_test.sh runs it under racecheck and requires
// the planted race (naive without the barrier before a K/V tile is
// overwritten) to be reported, so a racecheck that sees nothing fails.
TEST_F(CudaEvaluatorTest, DISABLED_PlantedRaceForTheSanitizer) {
  absl::StatusOr<KernelTemplate> racy =
      EditedNaive("__syncthreads();\n    for (int idx", "for (int idx");
  ASSERT_TRUE(racy.ok()) << racy.status();
  Problem p;
  p.heads = p.kv_heads = 2;
  p.seq_q = p.seq_k = 100;
  absl::StatusOr<TrialResult> r =
      evaluator_->Evaluate(*racy, {{"KV_TILE", 32}, {"WARPS", 4}}, p);
  ASSERT_TRUE(r.ok()) << r.status();
}

// Several kernels timed in turns on one problem's inputs, each with its own
// scratch (split-KV workspaces and counters): every correct one timed with a
// sample per turn, a config the device cannot run rejected in its place, and
// the evaluator still usable afterwards.
TEST_F(CudaEvaluatorTest, TimesSeveralKernelsInTurns) {
  const KernelTemplate& t = *TemplateRegistry::Builtin().Find("decode_fwd");
  const Problem p = LongDecode(8192 - 5);
  std::vector<Config> configs;
  for (int64_t splits : {1, 8, 64}) configs.push_back(DecodeWithSplits(splits));
  configs.insert(configs.begin() + 1, configs[0]);
  configs[1]["ROWS"] = 3;  // Not in the space.
  constexpr int kTurns = 20;
  for (int call = 0; call < 2; ++call) {
    absl::StatusOr<std::vector<TrialResult>> r =
        evaluator_->TimeInTurns(OfTemplate(t, configs), p, kTurns);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->size(), configs.size());
    EXPECT_EQ((*r)[1].status, TrialStatus::kResourceRejected);
    for (size_t i : {0, 2, 3}) {
      const TrialResult& x = (*r)[i];
      EXPECT_EQ(x.status, TrialStatus::kOk) << ConfigKey(configs[i]) << x.error;
      EXPECT_EQ(x.samples, kTurns);
      EXPECT_GT(x.min_us, 0);
      EXPECT_LE(x.min_us, x.median_us);
      EXPECT_LE(x.median_us, x.p90_us);
    }
  }
  EXPECT_TRUE(absl::IsInvalidArgument(
      evaluator_->TimeInTurns(OfTemplate(t, configs), p, 0).status()));
}

// With cold_l2 every launch is timed alone after the L2 read, alone and in
// turns alike; the kernels are still checked first.
TEST(CudaEvaluatorColdL2Test, TimesEachLaunchAfterTheRead) {
  CudaEvaluatorOptions options;
  options.cold_l2 = true;
  absl::StatusOr<std::unique_ptr<Evaluator>> e = MakeCudaEvaluator(options);
  if (!e.ok()) GTEST_SKIP() << e.status().message();
  const KernelTemplate& t = *TemplateRegistry::Builtin().Find("decode_fwd");
  const Problem p = LongDecode(8192 - 5);
  absl::StatusOr<TrialResult> alone = (*e)->Evaluate(t, DecodeWithSplits(8), p);
  ASSERT_TRUE(alone.ok()) << alone.status();
  EXPECT_EQ(alone->status, TrialStatus::kOk) << alone->error;
  EXPECT_EQ(alone->samples, kFullTimingSamples);
  EXPECT_GT(alone->min_us, 0);
  std::vector<Config> configs;
  for (int64_t splits : {1, 8}) configs.push_back(DecodeWithSplits(splits));
  absl::StatusOr<std::vector<TrialResult>> turns =
      (*e)->TimeInTurns(OfTemplate(t, configs), p, 5);
  ASSERT_TRUE(turns.ok()) << turns.status();
  for (const TrialResult& r : *turns) {
    EXPECT_EQ(r.status, TrialStatus::kOk) << r.error;
    EXPECT_EQ(r.samples, 5);
    EXPECT_GT(r.min_us, 0);
    EXPECT_LE(r.median_us, r.p90_us);
  }
  Config wrong = DecodeWithSplits(8);
  wrong["ROWS"] = 3;  // Not in the space: rejected before anything is timed.
  absl::StatusOr<TrialResult> rejected = (*e)->Evaluate(t, wrong, p);
  ASSERT_TRUE(rejected.ok()) << rejected.status();
  EXPECT_EQ(rejected->status, TrialStatus::kResourceRejected);
}

// Tensor maps are encoded per kernel: flash_fwd_tma configs of different
// tiles timed in turns are each correct.
TEST_F(CudaEvaluatorTest, TmaKernelsInTurnsAreCorrect) {
  const KernelTemplate& t = *TemplateRegistry::Builtin().Find("flash_fwd_tma");
  if (!CheckDevice(t, evaluator_->device().limits).ok()) {
    GTEST_SKIP() << "needs a compute capability 9.0 device";
  }
  Problem p;
  p.batch = 2;
  p.heads = 4;
  p.kv_heads = 2;
  p.seq_q = 300;
  p.seq_k = 700;
  p.head_dim = 128;
  std::vector<Config> configs =
      FeasibleConfigs(t, p, evaluator_->device().limits);
  std::shuffle(configs.begin(), configs.end(), std::mt19937(5));
  configs.resize(std::min<size_t>(configs.size(), 8));
  absl::StatusOr<std::vector<TrialResult>> r =
      evaluator_->TimeInTurns(OfTemplate(t, configs), p, 5);
  ASSERT_TRUE(r.ok()) << r.status();
  int ok = 0;
  for (size_t i = 0; i < configs.size(); ++i) {
    if ((*r)[i].status == TrialStatus::kResourceRejected) continue;
    EXPECT_EQ((*r)[i].status, TrialStatus::kOk)
        << ConfigKey(configs[i]) << ": " << (*r)[i].error;
    ++ok;
  }
  EXPECT_GT(ok, 0);
}

// flash_fwd_tma's consumers each take the key tiles their own 64 rows see
// and pass the others' (NarrowRows, PassTiles): a narrow window (each
// consumer skips 64-key tiles of its block's), causal rows above the keys
// (seq_q > seq_k: consumer 0 of the first blocks sees none), short packed
// sequences (the later consumers of their one block have no rows), and FP8
// with a window; the fitted default and three random configs of two or
// three consumers each, of 64-key tiles where the problem admits them (FP8
// runs 128).
TEST_F(CudaEvaluatorTest, TmaConsumersPassTheKeyTilesTheirRowsDoNotSee) {
  const KernelTemplate& t = *TemplateRegistry::Builtin().Find("flash_fwd_tma");
  const DeviceLimits& limits = evaluator_->device().limits;
  if (!CheckDevice(t, limits).ok()) {
    GTEST_SKIP() << "needs a compute capability 9.0 device";
  }
  struct Case {
    int64_t sq, sk, d, left;
    bool causal;
    Layout layout;
    bool fp8 = false;
  };
  const std::vector<Case> cases = {
      {1000, 1000, 64, 128, true, Layout::kDense},
      {700, 1500, 128, 100, false, Layout::kDense},
      {300, 100, 64, -1, true, Layout::kDense},
      {70, 200, 128, -1, true, Layout::kVarlen},
      {700, 1500, 128, 200, true, Layout::kDense, true},
  };
  std::mt19937 gen(64);
  for (const Case& c : cases) {
    Problem p;
    p.batch = 3;
    p.heads = 4;
    p.kv_heads = 2;
    p.seq_q = c.sq;
    p.seq_k = c.sk;
    p.head_dim = c.d;
    p.dtype = DType::kBf16;
    p.causal = c.causal;
    p.window_left = c.left;
    p.layout = c.layout;
    p.q_fp8 = p.kv_fp8 = c.fp8;
    ASSERT_TRUE(ValidateProblem(p).ok()) << ProblemKey(p);
    std::vector<Config> several;
    for (const Config& config : FeasibleConfigs(t, p, limits)) {
      if (config.at("CONSUMERS") > 1) several.push_back(config);
    }
    std::shuffle(several.begin(), several.end(), gen);
    std::stable_partition(several.begin(), several.end(), [&](const Config& x) {
      return c.fp8 || x.at("BLOCK_N") == 64;
    });
    several.insert(several.begin(), t.fitted_defaults(p, limits).front());
    EXPECT_EQ(ExpectOkUntil(t, several, p, 4), 4) << ProblemKey(p);
  }
}

// Kernels of several templates timed in turns on one problem: each config
// runs its own template's kernel (a wrong template's config is caught while
// the others pass) and every correct one gets a sample per turn.
TEST_F(CudaEvaluatorTest, KernelsOfSeveralTemplatesInTurns) {
  absl::StatusOr<KernelTemplate> wrong =
      EditedNaive("row_sum > 0.f ? 1.f / row_sum : 0.f", "1.f");
  ASSERT_TRUE(wrong.ok()) << wrong.status();
  Problem p;
  p.batch = 2;
  p.heads = 8;
  p.kv_heads = 2;
  p.seq_q = 4;
  p.seq_k = 1000;
  std::vector<TemplateConfig> configs;
  std::vector<std::string> names;
  for (const char* name : {"naive", "flash_fwd", "decode_fwd"}) {
    const KernelTemplate& t = *TemplateRegistry::Builtin().Find(name);
    const std::vector<Config> feasible =
        FeasibleConfigs(t, p, evaluator_->device().limits);
    ASSERT_FALSE(feasible.empty()) << name;
    configs.push_back({&t, feasible.front()});
    names.push_back(name);
  }
  configs.insert(configs.begin() + 1, {&*wrong, configs[0].config});
  names.insert(names.begin() + 1, "wrong naive");
  constexpr int kTurns = 7;
  absl::StatusOr<std::vector<TrialResult>> r =
      evaluator_->TimeInTurns(configs, p, kTurns);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), configs.size());
  for (size_t i = 0; i < configs.size(); ++i) {
    const TrialResult& x = (*r)[i];
    if (i == 1) {
      EXPECT_EQ(x.status, TrialStatus::kIncorrect) << x.error;
      continue;
    }
    EXPECT_EQ(x.status, TrialStatus::kOk) << names[i] << ": " << x.error;
    EXPECT_EQ(x.samples, kTurns) << names[i];
    EXPECT_GT(x.median_us, 0) << names[i];
  }
}

// A wrong kernel is caught in turns as alone, and never timed.
TEST_F(CudaEvaluatorTest, AWrongKernelInTurnsIsIncorrect) {
  absl::StatusOr<KernelTemplate> wrong =
      EditedNaive("row_sum > 0.f ? 1.f / row_sum : 0.f", "1.f");
  ASSERT_TRUE(wrong.ok()) << wrong.status();
  Problem p;
  p.heads = p.kv_heads = 2;
  p.seq_q = p.seq_k = 64;
  absl::StatusOr<std::vector<TrialResult>> r = evaluator_->TimeInTurns(
      OfTemplate(*wrong, {{{"KV_TILE", 32}, {"WARPS", 4}},
                          {{"KV_TILE", 64}, {"WARPS", 4}}}),
      p, 5);
  ASSERT_TRUE(r.ok()) << r.status();
  for (const TrialResult& x : *r) {
    EXPECT_EQ(x.status, TrialStatus::kIncorrect) << x.error;
    EXPECT_EQ(x.samples, 0);
  }
}

TEST_F(CudaEvaluatorTest, AWrongKernelIsIncorrectNotOk) {
  // Drop the softmax normalisation: the output is off by the row sum.
  absl::StatusOr<KernelTemplate> wrong =
      EditedNaive("row_sum > 0.f ? 1.f / row_sum : 0.f", "1.f");
  ASSERT_TRUE(wrong.ok()) << wrong.status();
  Problem p;
  p.heads = p.kv_heads = 2;
  p.seq_q = p.seq_k = 64;
  absl::StatusOr<TrialResult> r =
      evaluator_->Evaluate(*wrong, {{"KV_TILE", 32}, {"WARPS", 4}}, p);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, TrialStatus::kIncorrect) << r->error;
}

TEST_F(CudaEvaluatorTest, AnUnwrittenRowIsCaught) {
  absl::StatusOr<KernelTemplate> lazy =
      EditedNaive("if (!active) return;\n  evt_elem* o",
                  "if (!active || row == p.seq_q - 1) return;\n  evt_elem* o");
  ASSERT_TRUE(lazy.ok()) << lazy.status();
  Problem p;
  p.heads = p.kv_heads = 2;
  p.seq_q = p.seq_k = 100;
  absl::StatusOr<TrialResult> r =
      evaluator_->Evaluate(*lazy, {{"KV_TILE", 32}, {"WARPS", 4}}, p);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, TrialStatus::kIncorrect) << r->error;
}

// Output that changes from run to run by less than the tolerance (as a race
// on a rarely contended value would) passes the reference comparison but
// not the repeat gate.
TEST_F(CudaEvaluatorTest, OutputThatChangesBetweenRunsIsCaught) {
  absl::StatusOr<KernelTemplate> flaky = EditedNaive(
      "evt_from_float(acc[i] * inv)",
      "evt_from_float(acc[i] * inv + ((clock() >> 4) & 1) * 2e-3f)");
  ASSERT_TRUE(flaky.ok()) << flaky.status();
  Problem p;
  p.heads = p.kv_heads = 4;
  p.seq_q = p.seq_k = 1000;
  absl::StatusOr<TrialResult> r =
      evaluator_->Evaluate(*flaky, {{"KV_TILE", 64}, {"WARPS", 4}}, p);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, TrialStatus::kIncorrect) << r->error;
  EXPECT_NE(r->error.find("differs between runs"), std::string::npos)
      << r->error;
}

}  // namespace
}  // namespace evotune
