// The runtime without a GPU: bundle lookups, call validation, and a clear
// refusal where no device is (the GPU half is runtime_gpu_test).
#include "evotune/runtime.h"

#include <unistd.h>

#include <filesystem>
#include <random>

#include "absl/strings/str_cat.h"
#include "core/envelope.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launch/cuda_driver.h"
#include "tuner/wire/kernel_bundle.h"
#include "tuner/wire/message_convert.h"

namespace evotune {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

Problem Seed() {
  return *ParseProblemKey("b1_h8_kv8_q512_k512_d64_full_fp16_bhsd");
}

// A call on distinct, aligned addresses (checked, never read).
AttentionCall Call(const Problem& p) {
  auto at = [](uintptr_t a) { return reinterpret_cast<void*>(a); };
  return ContiguousCall(p, at(0x1000000), at(0x2000000), at(0x3000000),
                        at(0x4000000));
}

std::string BundleOf(const std::vector<std::pair<Problem, std::string>>& ks) {
  v1::KernelBundle bundle;
  for (const auto& [problem, arch] : ks) {
    v1::Kernel* k = bundle.add_kernels();
    *k->mutable_problem() = ProblemToProto(problem);
    k->set_arch(arch);
    k->set_template_name(arch + "-kernel");
  }
  const std::string path = (std::filesystem::path(::testing::TempDir()) /
                            ("rt" + std::to_string(getpid()) + ".evtb"))
                               .string();
  EXPECT_TRUE(WriteKernelBundle(path, bundle).ok());
  return path;
}

// A bundle says what it was made for (tune-model's `about`), its kernels'
// count and architectures, and the day it was made.
TEST(BundleSourceTest, SaysWhatItServes) {
  v1::KernelBundle bundle;
  bundle.set_about("tune-model llama: 32 heads on 8, head_dim 128");
  bundle.set_created_unix_s(1796083200);  // 2026-12-01 UTC.
  for (const char* arch : {"sm_90a", "sm_89", "sm_90a"}) {
    v1::Kernel* k = bundle.add_kernels();
    Problem p = Seed();
    p.batch = bundle.kernels_size();
    *k->mutable_problem() = ProblemToProto(p);
    k->set_arch(arch);
  }
  const std::string path = (std::filesystem::path(::testing::TempDir()) /
                            ("about" + std::to_string(getpid()) + ".evtb"))
                               .string();
  ASSERT_TRUE(WriteKernelBundle(path, bundle).ok());
  absl::StatusOr<std::unique_ptr<BundleSource>> source =
      BundleSource::Open(path);
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_EQ((*source)->About(),
            absl::StrCat("bundle ", path,
                         ": tune-model llama: 32 heads on 8, head_dim 128 (3 "
                         "kernels for sm_89, sm_90a, made 2026-12-01)"));
  Runtime runtime(*std::move(source));
  EXPECT_THAT(runtime.About(), HasSubstr("(3 kernels for sm_89, sm_90a"));
  // Without an `about` (evotune export's) nor a date: the kernels.
  EXPECT_THAT((*BundleSource::Open(BundleOf({{Seed(), "sm_80"}})))->About(),
              ::testing::EndsWith(": 1 kernels for sm_80"));
}

TEST(BundleSourceTest, FindsKernelsByProblemAndArchitecture) {
  Problem causal = Seed();
  causal.causal = true;
  absl::StatusOr<std::unique_ptr<BundleSource>> source = BundleSource::Open(
      BundleOf({{Seed(), "sm_90a"}, {Seed(), "sm_89"}, {causal, "sm_90a"}}));
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_EQ((*source)->Find(Seed(), "any GPU", "sm_89")->template_name(),
            "sm_89-kernel");
  EXPECT_EQ((*source)->Find(causal, "", "sm_90a")->template_name(),
            "sm_90a-kernel");
  absl::StatusOr<v1::Kernel> missing = (*source)->Find(causal, "", "sm_89");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr("no kernel for b1_h8_kv8_q512_k512_d64_causal_fp16"));
}

// A bucket's kernel (lengths on the device) is found for that bucket only:
// the dense problem of the same sizes is another problem.
TEST(BundleSourceTest, FindsABucketsKernelByItsLayout) {
  Problem bucket = Seed();
  bucket.layout = Layout::kVarlen;
  Problem cache = Seed();
  cache.layout = Layout::kKvCache;
  absl::StatusOr<std::unique_ptr<BundleSource>> source =
      BundleSource::Open(BundleOf({{bucket, "sm_90a"}, {cache, "sm_89"}}));
  ASSERT_TRUE(source.ok()) << source.status();
  absl::StatusOr<v1::Kernel> found = (*source)->Find(bucket, "", "sm_90a");
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->problem().layout(), v1::LAYOUT_VARLEN);
  EXPECT_EQ((*source)->Find(cache, "", "sm_89")->template_name(),
            "sm_89-kernel");
  absl::StatusOr<v1::Kernel> dense = (*source)->Find(Seed(), "", "sm_90a");
  EXPECT_EQ(dense.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(
      std::string(dense.status().message()),
      HasSubstr("no kernel for b1_h8_kv8_q512_k512_d64_full_fp16_bhsd"));
}

// A problem the bundle lacks finds the kernel of the smallest problem there
// that holds it: the same form with at least its batch and lengths.
TEST(BundleSourceTest, AProblemWithinABucketFindsTheSmallestHoldingIt) {
  auto bucket = [](int64_t batch, int64_t seq_q, int64_t seq_k) {
    Problem p = Seed();
    p.batch = batch;
    p.seq_q = seq_q;
    p.seq_k = seq_k;
    p.layout = Layout::kVarlen;
    return p;
  };
  absl::StatusOr<std::unique_ptr<BundleSource>> source =
      BundleSource::Open(BundleOf({{bucket(4, 16, 2048), "sm_90a"},
                                   {bucket(4, 16, 1024), "sm_90a"},
                                   {bucket(8, 16, 1024), "sm_90a"},
                                   {bucket(4, 16, 512), "sm_89"}}));
  ASSERT_TRUE(source.ok()) << source.status();
  auto found = [&](const Problem& p) {
    absl::StatusOr<v1::Kernel> k = (*source)->Find(p, "", "sm_90a");
    return k.ok() ? ProblemKey(*ProblemFromProto(k->problem()))
                  : std::string(k.status().message());
  };
  EXPECT_EQ(found(bucket(3, 5, 700)), ProblemKey(bucket(4, 16, 1024)));
  EXPECT_EQ(found(bucket(4, 16, 1025)), ProblemKey(bucket(4, 16, 2048)));
  EXPECT_EQ(found(bucket(5, 1, 1)), ProblemKey(bucket(8, 16, 1024)));
  EXPECT_THAT(found(bucket(4, 16, 4096)), HasSubstr("nor for a problem"));
  EXPECT_THAT(found(bucket(16, 1, 1)), HasSubstr("nor for a problem"));
  Problem other_heads = bucket(1, 1, 1);
  other_heads.heads = 16;
  EXPECT_THAT(found(other_heads), HasSubstr("nor for a problem"));
  Problem dense = bucket(1, 1, 1);
  dense.layout = Layout::kDense;
  EXPECT_THAT(found(dense), HasSubstr("nor for a problem"));
}

// A call whose score mods differ from a bucket's only where they do
// nothing (a decode step's causal flag, a window past its keys) finds that
// bucket; a bucket of its own mods comes first.
TEST(BundleSourceTest, ABucketServesCallsItsModsComputeAlike) {
  auto bucket = [](int64_t seq_q, bool causal, int64_t window_left) {
    Problem p = Seed();
    p.batch = 8;
    p.seq_q = seq_q;
    p.seq_k = 4096;
    p.causal = causal;
    p.window_left = window_left;
    return p;
  };
  absl::StatusOr<std::unique_ptr<BundleSource>> source =
      BundleSource::Open(BundleOf({{bucket(1, false, -1), "sm_90a"},
                                   {bucket(1, false, 1023), "sm_90a"},
                                   {bucket(512, true, -1), "sm_90a"}}));
  ASSERT_TRUE(source.ok()) << source.status();
  auto found = [&](const Problem& p) {
    absl::StatusOr<v1::Kernel> k = (*source)->Find(p, "", "sm_90a");
    return k.ok() ? ProblemKey(*ProblemFromProto(k->problem()))
                  : std::string(k.status().message());
  };
  Problem step = bucket(1, true, -1);  // Causal, as an engine may call it.
  step.batch = 3;
  step.seq_k = 700;
  EXPECT_EQ(found(step), ProblemKey(bucket(1, false, -1)));
  step.window_left = 1023;  // A window past the step's 700 keys: none.
  EXPECT_EQ(found(step), ProblemKey(bucket(1, false, -1)));
  step.seq_k = 2000;  // One that acts: the windowed layers' bucket.
  EXPECT_EQ(found(step), ProblemKey(bucket(1, false, 1023)));
  step.window_left = 255;  // Another window: a windowed kernel takes it.
  EXPECT_EQ(found(step), ProblemKey(bucket(1, false, 1023)));
  Problem prompt = bucket(300, true, 1023);  // The window reaches past 300.
  prompt.seq_k = 300;
  EXPECT_EQ(found(prompt), ProblemKey(bucket(512, true, -1)));
  prompt.seq_q = prompt.seq_k = 2000;
  EXPECT_THAT(found(prompt), HasSubstr("nor for a problem"));
}

// A bundle of a model's buckets (tune-model's: two kinds of layers, one
// with a 1,024-key window) serves every call within its envelope, as
// engines make them: decode steps called causal or not, windows passed on
// every call or dropped where they reach past the keys.
TEST(BundleSourceTest, AModelsBucketsServeEveryCallInItsEnvelope) {
  Envelope e;
  e.max_batch = 16;
  e.max_context = 4096;
  e.prefill_chunk = 512;
  e.max_prefill_tokens = 4096;
  LayerKind windowed;
  windowed.window_left = 1023;
  std::vector<std::pair<Problem, std::string>> kernels;
  for (const LayerKind& kind : {LayerKind(), windowed}) {
    for (const Problem& p :
         EnvelopeBuckets(e, 32, 8, 128, DType::kBf16, kind)) {
      kernels.push_back({p, "sm_90a"});
    }
  }
  absl::StatusOr<std::unique_ptr<BundleSource>> source =
      BundleSource::Open(BundleOf(kernels));
  ASSERT_TRUE(source.ok()) << source.status();
  std::mt19937 rng(5);
  auto upto = [&](int64_t n) {
    return std::uniform_int_distribution<int64_t>(1, n)(rng);
  };
  for (int i = 0; i < 1000; ++i) {
    Problem call = kernels.front().first;
    call.batch = upto(e.max_batch);
    call.seq_q = i % 3 == 0 ? upto(e.prefill_chunk) : i % 3 == 1 ? 1 : 4;
    call.seq_k = std::max(call.seq_q, upto(e.max_context));
    call.causal = call.seq_q > 1 || i % 2 == 0;
    const bool window = i % 4 < 2;
    const bool passed = window && (i % 8 < 4 || call.seq_k > 1024);
    call.window_left = passed ? 1023 : -1;
    absl::StatusOr<v1::Kernel> k = (*source)->Find(call, "", "sm_90a");
    ASSERT_TRUE(k.ok()) << ProblemKey(call) << ": " << k.status();
    const Problem served = *ProblemFromProto(k->problem());
    EXPECT_TRUE(ServesScoreMods(served, call))
        << ProblemKey(served) << " for " << ProblemKey(call);
    EXPECT_EQ(HasWindow(served), window && call.seq_k > 1024)
        << ProblemKey(served) << " for " << ProblemKey(call);
  }
}

TEST(GeometryTest, SurvivesTheWire) {
  LaunchGeometry g;
  g.grid[0] = 132;
  g.grid[1] = 16;
  g.grid[2] = 4;
  g.cluster_x = 2;
  g.block_threads = 384;
  g.smem_bytes = 200000;
  g.workspace_floats = 1 << 20;
  g.counters = 77;
  g.tma = {128, 128, 64};
  g.persistent = true;
  const LaunchGeometry back = GeometryFromProto(GeometryToProto(g));
  EXPECT_EQ(back.grid[0], 132);
  EXPECT_EQ(back.grid[1], 16);
  EXPECT_EQ(back.grid[2], 4);
  EXPECT_EQ(back.cluster_x, 2);
  EXPECT_EQ(back.block_threads, 384);
  EXPECT_EQ(back.smem_bytes, 200000);
  EXPECT_EQ(back.workspace_floats, 1 << 20);
  EXPECT_EQ(back.counters, 77);
  EXPECT_EQ(back.tma.q_rows, 128);
  EXPECT_EQ(back.tma.kv_rows, 128);
  EXPECT_EQ(back.tma.o_rows, 64);
  EXPECT_TRUE(back.persistent);
}

TEST(RuntimeTest, ContiguousCallHasTheStridesOfBhsd) {
  Problem p = Seed();
  p.kv_heads = 2;
  p.seq_k = 300;
  const AttentionCall call = Call(p);
  EXPECT_EQ(call.q.row_stride, 64);
  EXPECT_EQ(call.q.head_stride, 512 * 64);
  EXPECT_EQ(call.q.batch_stride, 8 * 512 * 64);
  EXPECT_EQ(call.k.head_stride, 300 * 64);
  EXPECT_EQ(call.k.batch_stride, 2 * 300 * 64);
  EXPECT_EQ(call.o.batch_stride, call.q.batch_stride);
}

TEST(RuntimeTest, BadCallsNameTheField) {
  Runtime runtime(*BundleSource::Open(BundleOf({{Seed(), "sm_90a"}})));
  AttentionCall call = Call(Seed());
  call.problem.kv_heads = 3;
  EXPECT_THAT(std::string(runtime.Attention(call, nullptr).message()),
              StartsWith("problem.kv_heads"));
  call = Call(Seed());
  call.k.data = nullptr;
  EXPECT_THAT(std::string(runtime.Attention(call, nullptr).message()),
              StartsWith("k.data: null"));
  call = Call(Seed());
  call.v.row_stride = 32;
  absl::Status s = runtime.Attention(call, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), StartsWith("v.row_stride"));
}

TEST(RuntimeTest, WithoutADeviceLaunchesAreRefusedPlainly) {
  if (CudaDriver::Get().ok()) GTEST_SKIP() << "this machine has a GPU";
  Runtime runtime(*BundleSource::Open(BundleOf({{Seed(), "sm_90a"}})));
  absl::Status s = runtime.Attention(Call(Seed()), nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), StartsWith("no CUDA device"));
}

}  // namespace
}  // namespace evotune
