// The runtime on a fake GPU (tests/common/fake_cuda_driver.h): a compiled
// kernel is loaded once for every problem it serves, however many lengths
// come, its scratch grows to the largest need and no further, and launches
// reach the kernel with the call's tensors.
#include <cstdlib>
#include <memory>

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
// with that problem's geometry, and counts the questions.
class OneKernelSource : public KernelSource {
 public:
  absl::StatusOr<v1::Kernel> Find(const Problem& problem, const std::string&,
                                  const std::string& arch) override {
    ++finds;
    const KernelTemplate& t = *TemplateRegistry::Builtin().Find("naive");
    v1::Kernel k;
    *k.mutable_problem() = ProblemToProto(problem);
    k.set_template_name(t.name);
    k.set_template_hash(t.hash);
    *k.mutable_config() = ConfigToProto(t.defaults.front());
    k.set_arch(arch);
    k.set_kernel_name(t.kernel_name);
    k.set_cubin(cubin);
    LaunchGeometry g = t.geometry(t.defaults.front(), problem);
    g.workspace_floats = workspace_per_key * problem.seq_k;  // Rising needs.
    *k.mutable_geometry() = GeometryToProto(g);
    k.set_param_layout_version(kParamLayoutVersion);
    return k;
  }
  std::string cubin = "fake cubin";
  int64_t workspace_per_key = 0;
  int finds = 0;
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
  EXPECT_EQ(source_->finds, 300);  // Each problem asked once ...
  for (int64_t keys = 1; keys <= 300; ++keys) {
    ASSERT_TRUE(Launch(Decode(keys)).ok());
  }
  EXPECT_EQ(source_->finds, 300);  // ... and only once.
  EXPECT_EQ(gpu_.module_loads, 1);
}

TEST_F(RuntimeFakeGpuTest, AnotherCubinIsAnotherModule) {
  ASSERT_TRUE(Launch(Decode(10)).ok());
  source_->cubin = "another fake cubin";
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
  std::vector<float> q(64), k(77 * 64), v(77 * 64), want(64);
  auto at = [](void* base, int64_t i) {
    return HalfBitsToFloat(static_cast<uint16_t*>(base)[i], DType::kFp16);
  };
  const int64_t kv_head = 1;  // Head 3 of 4 on 2 KV heads.
  for (int64_t c = 0; c < 64; ++c) q[c] = at(t.q, 3 * 64 + c);
  for (int64_t j = 0; j < 77 * 64; ++j) {
    k[j] = at(t.k, kv_head * 77 * 64 + j);
    v[j] = at(t.v, kv_head * 77 * 64 + j);
  }
  ReferenceRow(p, 0, q.data(), k.data(), v.data(), want.data());
  for (int64_t c = 0; c < 64; ++c) {
    EXPECT_NEAR(at(t.o, 3 * 64 + c), want[c], 2e-3) << c;
  }
}

}  // namespace
}  // namespace evotune
