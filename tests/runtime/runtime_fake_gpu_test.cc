// The runtime on a fake GPU (tests/common/fake_cuda_driver.h): a compiled
// kernel is loaded once for every problem it serves, however many lengths
// come, its scratch grows to the largest need and no further, and launches
// reach the kernel with the call's tensors.
#include <algorithm>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "evotune/runtime.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernel_templates/template_registry.h"
#include "tests/common/fake_cuda_driver.h"
#include "tuner/evaluator/reference.h"
#include "tuner/wire/message_convert.h"

namespace evotune {
namespace {

// Serves one compiled kernel (the naive template's defaults) for any problem,
// with that problem's geometry, and counts the questions. As a daemon
// (`every_problem`), it may hold its answers until released.
class OneKernelSource : public KernelSource {
 public:
  absl::StatusOr<v1::Kernel> Find(const Problem& problem, const std::string&,
                                  const std::string& arch) override {
    if (hold != nullptr && problem.seq_k != 1) hold->WaitForNotification();
    absl::MutexLock lock(&mu);
    ++finds;
    asked.push_back(problem.seq_k);
    if (!refusal.ok()) return refusal;
    if (bucket.has_value()) return KernelOf(*bucket, arch);
    return KernelOf(problem, arch);
  }
  v1::Kernel KernelOf(const Problem& problem, const std::string& arch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    const KernelTemplate& t = *TemplateRegistry::Builtin().Find("naive");
    v1::Kernel k;
    *k.mutable_problem() = ProblemToProto(problem);
    k.set_template_name(t.name);
    k.set_template_hash(template_hash.empty() ? t.hash : template_hash);
    // A tuned answer is another config (two warps instead of four).
    Config config = t.defaults.front();
    if (tuned) config["WARPS"] = 2;
    *k.mutable_config() = ConfigToProto(config);
    k.set_arch(arch);
    k.set_kernel_name(t.kernel_name);
    k.set_cubin(cubin);
    LaunchGeometry g = t.geometry(config, problem);
    g.workspace_floats = workspace_per_key * problem.seq_k;  // Rising needs.
    *k.mutable_geometry() = GeometryToProto(g);
    k.set_param_layout_version(kParamLayoutVersion);
    k.set_defaults(!tuned);
    return k;
  }
  absl::StatusOr<std::vector<Problem>> Recent(const std::string& device,
                                              int limit) override {
    absl::MutexLock lock(&mu);
    recent_asks.push_back({device, limit});
    return std::vector<Problem>(
        recent.begin(),
        recent.begin() + std::min<size_t>(recent.size(), limit));
  }
  bool AnswersEveryProblem() const override { return every_problem; }
  absl::Duration RefreshInterval() const override { return refresh; }
  int Finds() {
    absl::MutexLock lock(&mu);
    return finds;
  }
  absl::Mutex mu;
  std::string cubin ABSL_GUARDED_BY(mu) = "fake cubin";
  int64_t workspace_per_key = 0;
  int finds ABSL_GUARDED_BY(mu) = 0;
  std::vector<int64_t> asked ABSL_GUARDED_BY(mu);       // Each Find's seq_k.
  std::vector<Problem> recent;                          // What Recent answers,
  std::vector<std::pair<std::string, int>> recent_asks  // asked thus.
      ABSL_GUARDED_BY(mu);
  bool every_problem = false;
  absl::Notification* hold = nullptr;  // Answers wait for it (but seq_k 1).
  // Answers with this problem's kernel whatever is asked, as a bundle of
  // buckets answers for a problem within one.
  std::optional<Problem> bucket;
  std::string template_hash;  // When set, the kernel's (not this build's).
  absl::Duration refresh = absl::InfiniteDuration();
  bool tuned = false;                        // Answers are defaults until set.
  absl::Status refusal ABSL_GUARDED_BY(mu);  // When not OK, every answer.
};

// Device-sized host buffers (the fake's memory is the host's).
struct Tensors {
  explicit Tensors(const Problem& p)
      : q(Alloc(p.batch * p.heads * p.seq_q * p.head_dim)),
        k(Alloc(p.batch * p.kv_heads * p.seq_k * p.head_dim)),
        v(Alloc(p.batch * p.kv_heads * p.seq_k * p.head_dim)),
        o(Alloc(p.batch * p.heads * p.seq_q * p.head_dim)) {}
  ~Tensors() {
    for (void* t : {q, k, v, o}) std::free(t);
  }
  static void* Alloc(int64_t elems) {
    void* p = std::aligned_alloc(256, (elems * 2 + 255) / 256 * 256);
    for (int64_t i = 0; i < elems; ++i) {
      static_cast<uint16_t*>(p)[i] =
          FloatToHalfBits(0.01f * (i % 97), DType::kFp16);
    }
    return p;
  }
  void *q, *k, *v, *o;
};

// The output row 0 of head 3 (of 4, on 2 KV heads) of a dense decode
// problem `p` in `t` against the host reference (the fake's kernel writes
// the reference of what it was given).
void ExpectHead3Row0(const Problem& p, const Tensors& t) {
  const int64_t n = p.seq_k;
  std::vector<float> q(64), k(n * 64), v(n * 64), want(64);
  auto at = [](void* base, int64_t i) {
    return HalfBitsToFloat(static_cast<uint16_t*>(base)[i], DType::kFp16);
  };
  for (int64_t c = 0; c < 64; ++c) q[c] = at(t.q, 3 * 64 + c);
  for (int64_t j = 0; j < n * 64; ++j) {
    k[j] = at(t.k, n * 64 + j);  // KV head 1 serves head 3.
    v[j] = at(t.v, n * 64 + j);
  }
  ReferenceRow(p, 0, q.data(), k.data(), v.data(), want.data());
  for (int64_t c = 0; c < 64; ++c) {
    EXPECT_NEAR(at(t.o, 3 * 64 + c), want[c], 2e-3) << c;
  }
}

// What a call told to wait 20 ms for the source is seen to wait at least:
// the runtime's timed wait may end a fraction of a millisecond before the
// test's clock says 20 ms have passed.
constexpr absl::Duration kWaited = absl::Milliseconds(15);

class RuntimeFakeGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    driver_ = FakeCudaDriver::Install();
    FakeCudaDriver::state().problem = Decode(1);
    auto source = std::make_unique<OneKernelSource>();
    source_ = source.get();
    runtime_ = std::make_unique<Runtime>(std::move(source), driver_);
  }
  static Problem Decode(int64_t keys) {
    Problem p;
    p.heads = 4;
    p.kv_heads = 2;
    p.seq_q = 1;
    p.seq_k = keys;
    p.head_dim = 64;
    return p;
  }
  absl::Status Launch(const Problem& p) {
    Tensors t(p);
    return runtime_->Attention(ContiguousCall(p, t.q, t.k, t.v, t.o), nullptr);
  }

  // What a source's answers may wait for: it outlives the runtime, whose
  // fetcher may still ask after a test's body.
  absl::Notification hold_;
  const CudaDriver* driver_;
  OneKernelSource* source_;
  std::unique_ptr<Runtime> runtime_;
  FakeGpuState& gpu_ = FakeCudaDriver::state();
};

TEST_F(RuntimeFakeGpuTest, OneModuleServesEveryLength) {
  for (int64_t keys = 1; keys <= 300; ++keys) {
    ASSERT_TRUE(Launch(Decode(keys)).ok()) << keys;
  }
  EXPECT_EQ(gpu_.module_loads, 1);
  EXPECT_EQ(gpu_.attention_launches, 300);
  EXPECT_EQ(source_->Finds(), 300);  // Each problem asked once ...
  for (int64_t keys = 1; keys <= 300; ++keys) {
    ASSERT_TRUE(Launch(Decode(keys)).ok());
  }
  EXPECT_EQ(source_->Finds(), 300);  // ... and only once.
  EXPECT_EQ(gpu_.module_loads, 1);
}

TEST_F(RuntimeFakeGpuTest, AnotherCubinIsAnotherModule) {
  ASSERT_TRUE(Launch(Decode(10)).ok());
  {
    absl::MutexLock lock(&source_->mu);
    source_->cubin = "another fake cubin";
  }
  ASSERT_TRUE(Launch(Decode(11)).ok());
  ASSERT_TRUE(Launch(Decode(10)).ok());  // Still the first kernel.
  EXPECT_EQ(gpu_.module_loads, 2);
}

TEST_F(RuntimeFakeGpuTest, ScratchGrowsToTheLargestNeedAndNoFurther) {
  source_->workspace_per_key = 1024;
  const int64_t most = 1000 * 1024 * 4;  // Bytes of the longest's workspace.
  for (int64_t keys = 1; keys <= 1000; ++keys) {
    ASSERT_TRUE(Launch(Decode(keys)).ok()) << keys;
  }
  // Rising needs, each step at least doubling: about log2(1000)
  // allocations; together at most twice the largest, which is under twice
  // the largest need.
  EXPECT_LE(gpu_.allocations, 12);
  EXPECT_LE(gpu_.bytes_allocated, 4 * most);
  const int64_t held = gpu_.bytes_allocated;
  for (int64_t keys = 1000; keys >= 1; keys -= 7) {
    ASSERT_TRUE(Launch(Decode(keys)).ok());
  }
  EXPECT_EQ(gpu_.bytes_allocated, held);  // Shorter ones need nothing new.
  runtime_.reset();
  EXPECT_EQ(gpu_.bytes_allocated, 0);  // Freed with the runtime.
}

TEST_F(RuntimeFakeGpuTest, TheKernelSeesTheCallsTensors) {
  const Problem p = Decode(77);
  Tensors t(p);
  ASSERT_TRUE(
      runtime_->Attention(ContiguousCall(p, t.q, t.k, t.v, t.o), nullptr).ok());
  // The fake writes the reference of what it was given: row 0 of head 3.
  ExpectHead3Row0(p, t);
}

// A packed varlen call reaches the kernel as one batch of all its rows with
// the lengths' arrays: sequence b's rows start at cu_seqlens[b], its keys
// are its own (the fake reads them as the kernels do).
TEST_F(RuntimeFakeGpuTest, APackedCallReachesTheKernelWithItsLengths) {
  Problem p = Decode(64);  // The bucket: up to 16 queries, 64 keys.
  p.batch = 3;
  p.seq_q = 16;
  p.layout = Layout::kVarlen;
  p.causal = true;
  const int32_t cu_q[4] = {0, 1, 17, 21}, cu_k[4] = {0, 40, 56, 120};
  const int64_t rows_q = 21, rows_k = 120;
  void* q = Tensors::Alloc(rows_q * 4 * 64);
  void* k = Tensors::Alloc(rows_k * 2 * 64);
  void* v = Tensors::Alloc(rows_k * 2 * 64);
  void* o = Tensors::Alloc(rows_q * 4 * 64);
  auto packed = [](void* data, int64_t heads, int64_t rows) {
    return AttentionTensor{
        data, rows * heads * 64, 64, heads * 64, 1, heads, rows, 64};
  };
  AttentionCall call;
  call.problem = p;
  call.q = packed(q, 4, rows_q);
  call.k = packed(k, 2, rows_k);
  call.v = packed(v, 2, rows_k);
  call.o = packed(o, 4, rows_q);
  call.cu_seqlens_q = cu_q;
  call.cu_seqlens_k = cu_k;
  ASSERT_TRUE(runtime_->Attention(call, nullptr).ok());
  auto at = [](void* base, int64_t i) {
    return HalfBitsToFloat(static_cast<uint16_t*>(base)[i], DType::kFp16);
  };
  // Sequence 1 (16 queries on 16 keys), query 5 of head 3 (kv head 1).
  Problem seq = p;
  seq.seq_q = 16;
  seq.seq_k = 16;
  std::vector<float> qr(64), kr(16 * 64), vr(16 * 64), want(64);
  for (int64_t c = 0; c < 64; ++c) qr[c] = at(q, ((1 + 5) * 4 + 3) * 64 + c);
  for (int64_t j = 0; j < 16; ++j) {
    for (int64_t c = 0; c < 64; ++c) {
      kr[j * 64 + c] = at(k, ((40 + j) * 2 + 1) * 64 + c);
      vr[j * 64 + c] = at(v, ((40 + j) * 2 + 1) * 64 + c);
    }
  }
  ReferenceRow(seq, 5, qr.data(), kr.data(), vr.data(), want.data());
  for (int64_t c = 0; c < 64; ++c) {
    EXPECT_NEAR(at(o, ((1 + 5) * 4 + 3) * 64 + c), want[c], 2e-3) << c;
  }
  for (void* t : {q, k, v, o}) std::free(t);
}

// A KV-cache call: sequence b uses its first seqused_k[b] slots.
TEST_F(RuntimeFakeGpuTest, ACacheCallUsesEachSequencesSlots) {
  Problem p = Decode(100);  // 100 slots a sequence.
  p.batch = 2;
  p.layout = Layout::kKvCache;
  Tensors t(p);
  const int32_t used[2] = {100, 7};
  AttentionCall call = ContiguousCall(p, t.q, t.k, t.v, t.o);
  call.seqused_k = used;
  ASSERT_TRUE(runtime_->Attention(call, nullptr).ok());
  auto at = [](void* base, int64_t i) {
    return HalfBitsToFloat(static_cast<uint16_t*>(base)[i], DType::kFp16);
  };
  // Sequence 1, head 2 (kv head 1): 7 keys.
  Problem seq = p;
  seq.seq_k = 7;
  std::vector<float> qr(64), kr(7 * 64), vr(7 * 64), want(64);
  for (int64_t c = 0; c < 64; ++c) qr[c] = at(t.q, (4 + 2) * 64 + c);
  for (int64_t j = 0; j < 7 * 64; ++j) {
    kr[j] = at(t.k, (2 + 1) * 100 * 64 + j);
    vr[j] = at(t.v, (2 + 1) * 100 * 64 + j);
  }
  ReferenceRow(seq, 0, qr.data(), kr.data(), vr.data(), want.data());
  for (int64_t c = 0; c < 64; ++c) {
    EXPECT_NEAR(at(t.o, (4 + 2) * 64 + c), want[c], 2e-3) << c;
  }
}

// A paged call: K and V are pages of 16 rows, sequence b's keys in the
// pages its block table row names (the fake reads them as the kernels do),
// each page [page_size, kv_heads, head_dim] or, head-major (FlashInfer's
// HND), [kv_heads, page_size, head_dim]: the same call with other strides.
void ExpectPagesRead(Runtime& runtime, bool head_major) {
  Problem p;
  p.batch = 2;
  p.heads = 4;
  p.kv_heads = 2;
  p.seq_q = 1;
  p.seq_k = 64;  // Up to 4 pages of 16 keys a sequence.
  p.head_dim = 64;
  p.layout = Layout::kPaged;
  p.page_size = 16;
  constexpr int64_t kPages = 6, kPage = 16 * 2 * 64;
  const int64_t row_stride = head_major ? 64 : 2 * 64;
  const int64_t head_stride = head_major ? 16 * 64 : 64;
  void* q = Tensors::Alloc(2 * 4 * 64);
  void* k = Tensors::Alloc(kPages * kPage);
  void* v = Tensors::Alloc(kPages * kPage);
  void* o = Tensors::Alloc(2 * 4 * 64);
  const int32_t used[2] = {64, 20};
  // Rows of 5 (wider than the 4 pages read); sequence 1 in pages 5 and 0.
  const int32_t table[10] = {1, 2, 3, 4, -1, 5, 0, 9, 9, 9};
  AttentionCall call = ContiguousCall(p, q, k, v, o);
  for (AttentionTensor* t : {&call.k, &call.v}) {
    *t = {t->data, kPage, head_stride, row_stride, kPages, 2, 16, 64};
  }
  call.seqused_k = used;
  call.block_table = table;
  call.block_table_stride = 5;
  FakeCudaDriver::state().problem.page_size = 16;  // The kernel's define.
  const absl::Status launched = runtime.Attention(call, nullptr);
  ASSERT_TRUE(launched.ok()) << launched;
  auto at = [](void* base, int64_t i) {
    return HalfBitsToFloat(static_cast<uint16_t*>(base)[i], DType::kFp16);
  };
  // Sequence 1, head 2 (kv head 1): 16 keys of page 5, 4 of page 0.
  Problem seq = p;
  seq.batch = 1;
  seq.seq_k = 20;
  seq.layout = Layout::kDense;
  seq.page_size = 0;
  std::vector<float> qr(64), kr(20 * 64), vr(20 * 64), want(64);
  for (int64_t c = 0; c < 64; ++c) qr[c] = at(q, (4 + 2) * 64 + c);
  for (int64_t j = 0; j < 20; ++j) {
    const int64_t page = j < 16 ? 5 : 0;
    const int64_t row = page * kPage + 1 * head_stride + (j % 16) * row_stride;
    for (int64_t c = 0; c < 64; ++c) {
      kr[j * 64 + c] = at(k, row + c);
      vr[j * 64 + c] = at(v, row + c);
    }
  }
  ReferenceRow(seq, 0, qr.data(), kr.data(), vr.data(), want.data());
  for (int64_t c = 0; c < 64; ++c) {
    EXPECT_NEAR(at(o, (4 + 2) * 64 + c), want[c], 2e-3) << c;
  }
  for (void* t : {q, k, v, o}) std::free(t);
}

TEST_F(RuntimeFakeGpuTest, APagedCallReadsEachSequencesPages) {
  ExpectPagesRead(*runtime_, /*head_major=*/false);
}

TEST_F(RuntimeFakeGpuTest, HeadMajorPagesAreTheSameCallWithOtherStrides) {
  ExpectPagesRead(*runtime_, /*head_major=*/true);
}

// Queries packed by cu_seqlens_q over pages (an engine's mixed batch): one
// batch of rows, each sequence's from its offset, causal to its own keys.
TEST_F(RuntimeFakeGpuTest, PackedQueriesReadTheirPages) {
  Problem p = Decode(32);  // Up to 2 pages of 16 keys a sequence.
  p.batch = 2;
  p.seq_q = 4;
  p.causal = true;
  p.layout = Layout::kPaged;
  p.page_size = 16;
  constexpr int64_t kPages = 4, kRow = 2 * 64, kRowsQ = 1 + 3;
  void* q = Tensors::Alloc(kRowsQ * 4 * 64);  // [rows, heads, head_dim]
  void* k = Tensors::Alloc(kPages * 16 * kRow);
  void* v = Tensors::Alloc(kPages * 16 * kRow);
  void* o = Tensors::Alloc(kRowsQ * 4 * 64);
  const int32_t cu_q[3] = {0, 1, 4}, used[2] = {30, 20};
  const int32_t table[4] = {0, 1, 3, 2};  // Sequence 1: pages 3 and 2.
  AttentionCall call = ContiguousCall(p, q, k, v, o);
  for (AttentionTensor* t : {&call.q, &call.o}) {
    *t = {t->data, kRowsQ * 4 * 64, 64, 4 * 64, 1, 4, kRowsQ, 64};
  }
  for (AttentionTensor* t : {&call.k, &call.v}) {
    *t = {t->data, 16 * kRow, 64, kRow, kPages, 2, 16, 64};
  }
  call.cu_seqlens_q = cu_q;
  call.seqused_k = used;
  call.block_table = table;
  call.block_table_stride = 2;
  const absl::Status launched = runtime_->Attention(call, nullptr);
  ASSERT_TRUE(launched.ok()) << launched;
  auto at = [](void* base, int64_t i) {
    return HalfBitsToFloat(static_cast<uint16_t*>(base)[i], DType::kFp16);
  };
  // Sequence 1's last query (packed row 3), head 2 (kv head 1): it sees
  // all 20 keys, 16 of page 3 and 4 of page 2.
  Problem seq = Decode(20);
  seq.seq_q = 3;
  seq.causal = true;
  std::vector<float> qr(64), kr(20 * 64), vr(20 * 64), want(64);
  for (int64_t c = 0; c < 64; ++c) qr[c] = at(q, (3 * 4 + 2) * 64 + c);
  for (int64_t j = 0; j < 20; ++j) {
    const int64_t row = (j < 16 ? 3 * 16 + j : 2 * 16 + j - 16) * kRow + 64;
    for (int64_t c = 0; c < 64; ++c) {
      kr[j * 64 + c] = at(k, row + c);
      vr[j * 64 + c] = at(v, row + c);
    }
  }
  ReferenceRow(seq, 2, qr.data(), kr.data(), vr.data(), want.data());
  for (int64_t c = 0; c < 64; ++c) {
    EXPECT_NEAR(at(o, (3 * 4 + 2) * 64 + c), want[c], 2e-3) << c;
  }
  for (void* t : {q, k, v, o}) std::free(t);
}

// With a daemon, a new length of a class served before launches at once on
// that kernel (its geometry computed here) while its own kernel is fetched;
// the fetched one takes over at a later launch, but not under capture.
TEST_F(RuntimeFakeGpuTest, ANewLengthNeverWaitsForTheDaemon) {
  absl::Notification& hold = hold_;
  source_->every_problem = true;
  source_->hold = &hold;
  ASSERT_TRUE(Launch(Decode(1)).ok());  // The class's first: asked.
  for (int64_t keys = 2; keys <= 50; ++keys) {
    ASSERT_TRUE(Launch(Decode(keys)).ok()) << keys;  // While the daemon holds.
  }
  EXPECT_EQ(source_->Finds(), 1);
  EXPECT_EQ(gpu_.attention_launches, 50);
  absl::StatusOr<v1::Kernel> served = runtime_->KernelFor(Decode(7), nullptr);
  ASSERT_TRUE(served.ok());
  EXPECT_TRUE(served->transferred());
  EXPECT_EQ(served->problem().seq_k(), 7);
  EXPECT_EQ(served->source_problem().seq_k(), 1);
  {
    absl::MutexLock lock(&source_->mu);
    source_->cubin = "the daemon's own kernel";
    source_->tuned = true;  // Another config: another compiled kernel.
  }
  hold.Notify();
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (source_->Finds() < 50 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(source_->Finds(), 50);         // Every length, in the background.
  absl::SleepFor(absl::Milliseconds(50));  // The last one made ready.
  gpu_.capturing = true;  // No kernel changes inside a capture.
  ASSERT_TRUE(Launch(Decode(7)).ok());
  EXPECT_TRUE(runtime_->KernelFor(Decode(7), nullptr)->transferred());
  gpu_.capturing = false;
  ASSERT_TRUE(Launch(Decode(7)).ok());
  served = runtime_->KernelFor(Decode(7), nullptr);
  EXPECT_FALSE(served->transferred());
  EXPECT_EQ(gpu_.module_loads, 2);          // The daemon's kernel, loaded once,
  EXPECT_EQ(gpu_.relaxed_module_loads, 1);  // in the background.
}

// Told not to wait, the first problem of a class is refused at once while
// its kernel is fetched (once) in the background; a launch after the answer
// came loads it, but not under capture.
TEST_F(RuntimeFakeGpuTest, ANewClassNeverWaitsWhenToldNotTo) {
  absl::Notification& hold = hold_;
  source_->every_problem = true;
  source_->hold = &hold;
  runtime_->WaitForNewClasses(absl::ZeroDuration());
  EXPECT_EQ(Launch(Decode(5)).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Launch(Decode(5)).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(runtime_->Plan(Decode(5), nullptr).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(gpu_.attention_launches, 0);
  hold.Notify();
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (source_->Finds() < 1 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  absl::SleepFor(absl::Milliseconds(50));  // The answer taken in.
  // Its module loaded in the background, never breaking a capture.
  EXPECT_EQ(gpu_.module_loads, 1);
  EXPECT_EQ(gpu_.relaxed_module_loads, 1);
  EXPECT_EQ(gpu_.function_loads, 1);  // Not left to the first launch.
  gpu_.capturing = true;
  EXPECT_EQ(Launch(Decode(5)).code(), absl::StatusCode::kUnavailable);
  gpu_.capturing = false;
  ASSERT_TRUE(Launch(Decode(5)).ok());
  EXPECT_EQ(source_->Finds(), 1);  // Asked once for all those calls.
  EXPECT_EQ(gpu_.module_loads, 1);
  ASSERT_TRUE(Launch(Decode(6)).ok());  // Its class's kernel, at once.
  EXPECT_EQ(gpu_.attention_launches, 2);
}

// Prefetch asks the source which problems programs on this GPU asked for
// lately, and fetches and loads their kernels in the background: a first
// call of one, told not to wait, then runs at once on its own kernel.
TEST_F(RuntimeFakeGpuTest, PrefetchedKernelsAreReadyForTheirFirstCalls) {
  source_->every_problem = true;
  source_->recent = {Decode(5), Decode(9), Decode(12)};
  runtime_->WaitForNewClasses(absl::ZeroDuration());
  ASSERT_TRUE(runtime_->Prefetch(nullptr, 2).ok());
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (source_->Finds() < 2 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  absl::SleepFor(absl::Milliseconds(50));  // The answers taken in.
  EXPECT_EQ(gpu_.module_loads, 1);         // One kernel, in the background,
  EXPECT_EQ(gpu_.relaxed_module_loads, 1);
  EXPECT_EQ(gpu_.function_loads, 1);  // its function too.
  ASSERT_TRUE(Launch(Decode(9)).ok());
  ASSERT_TRUE(Launch(Decode(5)).ok());
  EXPECT_FALSE(runtime_->KernelFor(Decode(9), nullptr)->transferred());
  EXPECT_EQ(source_->Finds(), 2);  // Not asked again; 12 not at all.
  absl::MutexLock lock(&source_->mu);
  EXPECT_EQ(source_->recent_asks,
            (std::vector<std::pair<std::string, int>>{{"Fake H100", 2}}));
}

// A call's question goes before the prefetches queued: a problem asked for
// by a call while its prefetch waits behind others is fetched next.
TEST_F(RuntimeFakeGpuTest, ACallsQuestionGoesBeforePrefetches) {
  absl::Notification& hold = hold_;
  source_->every_problem = true;
  source_->hold = &hold;
  source_->recent = {Decode(2), Decode(3), Decode(4), Decode(5)};
  runtime_->WaitForNewClasses(absl::ZeroDuration());
  ASSERT_TRUE(runtime_->Prefetch(nullptr, 10).ok());
  absl::SleepFor(absl::Milliseconds(50));  // The fetcher holds at 2.
  Problem other = Decode(7);
  other.heads = 8;  // A class of its own, not among the recent.
  EXPECT_EQ(Launch(Decode(5)).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Launch(other).code(), absl::StatusCode::kUnavailable);
  hold.Notify();
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (source_->Finds() < 5 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  absl::MutexLock lock(&source_->mu);
  EXPECT_EQ(source_->asked, (std::vector<int64_t>{2, 5, 7, 3, 4}));
}

// A prefetch with nothing to fetch, or a limit of 0, asks nothing.
TEST_F(RuntimeFakeGpuTest, PrefetchOfNothingLoadsNothing) {
  source_->every_problem = true;
  ASSERT_TRUE(runtime_->Prefetch(nullptr, 0).ok());
  ASSERT_TRUE(runtime_->Prefetch(nullptr, 8).ok());  // Recent: none.
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(source_->Finds(), 0);
  EXPECT_EQ(gpu_.module_loads, 0);
  absl::MutexLock lock(&source_->mu);
  EXPECT_EQ(source_->recent_asks.size(), 1u);
}

// Told to wait a while, a new class's first problem is served when the
// answer comes within it, and refused with UNAVAILABLE when it does not.
TEST_F(RuntimeFakeGpuTest, ANewClassWaitsAsLongAsToldAndNoLonger) {
  source_->every_problem = true;
  runtime_->WaitForNewClasses(absl::Seconds(10));
  ASSERT_TRUE(Launch(Decode(5)).ok());  // The answer came at once.
  EXPECT_EQ(source_->Finds(), 1);
  absl::Notification& hold = hold_;
  source_->hold = &hold;
  runtime_->WaitForNewClasses(absl::Milliseconds(20));
  Problem other = Decode(5);
  other.heads = 8;  // Another class.
  const absl::Time start = absl::Now();
  EXPECT_EQ(Launch(other).code(), absl::StatusCode::kUnavailable);
  EXPECT_GE(absl::Now() - start, kWaited);
  hold.Notify();
  // The held answer given before `hold` goes.
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (source_->Finds() < 2 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(source_->Finds(), 2);
}

// A class waits once: while its first call's answer is on its way, that
// problem asked again and the class's other lengths are refused at once
// (a program asking every few milliseconds is never held each time).
TEST_F(RuntimeFakeGpuTest, AClassWaitsOnceWhileItsAnswerIsOnItsWay) {
  absl::Notification& hold = hold_;
  source_->every_problem = true;
  source_->hold = &hold;
  runtime_->WaitForNewClasses(absl::Milliseconds(20));
  absl::Time start = absl::Now();
  EXPECT_EQ(Launch(Decode(5)).code(), absl::StatusCode::kUnavailable);
  EXPECT_GE(absl::Now() - start, kWaited);
  // Were these to wait, each would take the minute.
  runtime_->WaitForNewClasses(absl::Minutes(1));
  start = absl::Now();
  EXPECT_EQ(Launch(Decode(5)).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Launch(Decode(9)).code(), absl::StatusCode::kUnavailable);
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  Problem other = Decode(5);
  other.heads = 8;  // Another class waits its own first time.
  runtime_->WaitForNewClasses(absl::Milliseconds(20));
  start = absl::Now();
  EXPECT_EQ(Launch(other).code(), absl::StatusCode::kUnavailable);
  EXPECT_GE(absl::Now() - start, kWaited);
  hold.Notify();
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (source_->Finds() < 3 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  absl::SleepFor(absl::Milliseconds(50));  // The answers taken in.
  ASSERT_TRUE(Launch(Decode(5)).ok());
  ASSERT_TRUE(Launch(Decode(9)).ok());
  ASSERT_TRUE(Launch(other).ok());
  EXPECT_EQ(source_->Finds(), 3);  // Each problem asked once.
}

// Told not to wait, a source's refusal of a new class's problem is the
// call's after it came; KernelFor waits for the answer.
TEST_F(RuntimeFakeGpuTest, AnUnwaitedRefusalComesOnceAndKernelForWaits) {
  source_->every_problem = true;
  {
    absl::MutexLock lock(&source_->mu);
    source_->refusal = absl::NotFoundError("no kernel for it");
  }
  runtime_->WaitForNewClasses(absl::ZeroDuration());
  EXPECT_EQ(Launch(Decode(5)).code(), absl::StatusCode::kUnavailable);
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (source_->Finds() < 1 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(Launch(Decode(5)).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(runtime_->KernelFor(Decode(5), nullptr).status().code(),
            absl::StatusCode::kNotFound);
  {
    absl::MutexLock lock(&source_->mu);
    source_->refusal = absl::OkStatus();
  }
  absl::StatusOr<v1::Kernel> kernel = runtime_->KernelFor(Decode(5), nullptr);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  EXPECT_EQ(source_->Finds(), 3);
  ASSERT_TRUE(Launch(Decode(5)).ok());
}

// A length served provisionally whose answer is the kernel it runs already
// (the same template version, config and architecture) is settled in
// place: no module is loaded and the launches go on as they were.
TEST_F(RuntimeFakeGpuTest, AnAnswerOfTheKernelServingALengthSettlesIt) {
  source_->every_problem = true;
  for (int64_t keys = 1; keys <= 5; ++keys) {
    ASSERT_TRUE(Launch(Decode(keys)).ok()) << keys;
  }
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (source_->Finds() < 5 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  absl::SleepFor(absl::Milliseconds(50));  // The last answer taken in.
  for (int64_t keys = 1; keys <= 5; ++keys) {
    ASSERT_TRUE(Launch(Decode(keys)).ok()) << keys;
    absl::StatusOr<v1::Kernel> served =
        runtime_->KernelFor(Decode(keys), nullptr);
    ASSERT_TRUE(served.ok());
    EXPECT_FALSE(served->transferred()) << keys;  // The daemon's own answer.
    EXPECT_EQ(served->problem().seq_k(), keys);
  }
  EXPECT_EQ(source_->Finds(), 5);
  EXPECT_EQ(gpu_.module_loads, 1);
  EXPECT_EQ(gpu_.attention_launches, 10);
}

// A fetched kernel that needs more scratch than the caller sized for the
// provisional one never takes over: the length stays on its class's kernel.
TEST_F(RuntimeFakeGpuTest, AFetchedKernelNeedingMoreScratchDoesNotTakeOver) {
  source_->every_problem = true;
  ASSERT_TRUE(Launch(Decode(1)).ok());  // Needs none: the template's own.
  source_->workspace_per_key = 64;      // The daemon's answers need some.
  ASSERT_TRUE(Launch(Decode(2)).ok());
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (source_->Finds() < 2 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  absl::SleepFor(absl::Milliseconds(50));
  ASSERT_TRUE(Launch(Decode(2)).ok());
  absl::StatusOr<v1::Kernel> served = runtime_->KernelFor(Decode(2), nullptr);
  EXPECT_TRUE(served->transferred());
  EXPECT_EQ(served->geometry().workspace_floats(), 0);
}

// A plan for a bucket's longest problem runs every shorter one on its
// kernel, with no question to the source and no module load, and the kernel
// sees each run's own length.
TEST_F(RuntimeFakeGpuTest, APlanRunsEveryLengthWithinIt) {
  absl::StatusOr<AttentionPlan> plan = runtime_->Plan(Decode(300), nullptr);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->kernel().template_name(), "naive");
  for (int64_t keys = 1; keys <= 300; ++keys) {
    const Problem p = Decode(keys);
    Tensors t(p);
    ASSERT_TRUE(
        runtime_->Run(*plan, ContiguousCall(p, t.q, t.k, t.v, t.o), nullptr)
            .ok())
        << keys;
    if (keys != 77) continue;
    ExpectHead3Row0(p, t);
  }
  EXPECT_EQ(source_->Finds(), 1);
  EXPECT_EQ(gpu_.module_loads, 1);
  EXPECT_EQ(gpu_.attention_launches, 300);
  const Problem longer = Decode(301);
  Tensors t(longer);
  absl::Status s =
      runtime_->Run(*plan, ContiguousCall(longer, t.q, t.k, t.v, t.o), nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), testing::HasSubstr("problem.seq_k"));
  EXPECT_EQ(gpu_.attention_launches, 300);
}

// A run allocates nothing: a kernel that needs scratch runs on the caller's,
// refused without it (naming it); under stream capture too.
TEST_F(RuntimeFakeGpuTest, ARunTakesThePlansScratchFromTheCaller) {
  source_->workspace_per_key = 16;
  absl::StatusOr<AttentionPlan> plan = runtime_->Plan(Decode(64), nullptr);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->workspace_floats(), 16 * 64);
  const Problem p = Decode(40);
  Tensors t(p);
  AttentionCall call = ContiguousCall(p, t.q, t.k, t.v, t.o);
  absl::Status s = runtime_->Run(*plan, call, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), testing::HasSubstr("workspace"));
  std::vector<float> workspace(plan->workspace_floats());
  call.workspace = workspace.data();
  gpu_.capturing = true;
  EXPECT_TRUE(runtime_->Run(*plan, call, nullptr).ok());
  EXPECT_EQ(gpu_.allocations, 0);
  EXPECT_EQ(gpu_.attention_launches, 1);
}

// A bucket's kernel serves a problem within it with the launch computed
// for that problem; a kernel of a template version this build lacks cannot
// be rebased and is not served.
TEST_F(RuntimeFakeGpuTest, ABucketsKernelServesAProblemWithinIt) {
  source_->bucket = Decode(1024);
  const Problem p = Decode(77);
  Tensors t(p);
  ASSERT_TRUE(
      runtime_->Attention(ContiguousCall(p, t.q, t.k, t.v, t.o), nullptr).ok());
  absl::StatusOr<v1::Kernel> served = runtime_->KernelFor(p, nullptr);
  ASSERT_TRUE(served.ok()) << served.status();
  EXPECT_TRUE(served->transferred());
  EXPECT_EQ(served->problem().seq_k(), 77);
  EXPECT_EQ(served->source_problem().seq_k(), 1024);
  ExpectHead3Row0(p, t);
  source_->template_hash = "another version";
  absl::Status s = Launch(Decode(78));
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), testing::HasSubstr("does not serve"));
}

// With a source whose answers change (a daemon tuning), the problems
// launched since the last round whose kernel was not tuned are asked again
// each round; a new kernel takes over at a later launch, and a problem
// whose kernel is tuned is not asked again.
TEST_F(RuntimeFakeGpuTest, KernelsTunedSinceTakeOverAtALaterLaunch) {
  source_->every_problem = true;
  source_->refresh = absl::Milliseconds(5);
  ASSERT_TRUE(Launch(Decode(5)).ok());
  EXPECT_TRUE(runtime_->KernelFor(Decode(5), nullptr)->defaults());
  {
    absl::MutexLock lock(&source_->mu);
    source_->cubin = "the kernel tuned since";
    source_->tuned = true;
  }
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (runtime_->KernelFor(Decode(5), nullptr)->defaults() &&
         absl::Now() < give_up) {
    ASSERT_TRUE(Launch(Decode(5)).ok());
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_FALSE(runtime_->KernelFor(Decode(5), nullptr)->defaults());
  EXPECT_EQ(gpu_.module_loads, 2);
  // Settled: launches go on without questions.
  const int finds = source_->Finds();
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(Launch(Decode(5)).ok());
    absl::SleepFor(absl::Milliseconds(2));
  }
  EXPECT_EQ(source_->Finds(), finds);
}

// A bundle holds what it holds: another length is its own question.
TEST_F(RuntimeFakeGpuTest, ABundleIsAskedForEveryLength) {
  ASSERT_TRUE(Launch(Decode(1)).ok());
  ASSERT_TRUE(Launch(Decode(2)).ok());
  EXPECT_EQ(source_->Finds(), 2);
  EXPECT_FALSE(runtime_->KernelFor(Decode(2), nullptr)->transferred());
}

}  // namespace
}  // namespace evotune
