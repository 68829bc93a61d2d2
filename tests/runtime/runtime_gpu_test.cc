// The runtime on a GPU: every template that runs on the device, compiled
// into a bundle, launched through BundleSource and Runtime on a stream of
// the caller's, checked against the independent reference on fresh random
// inputs, in the contiguous layout and a strided one ([batch, seq, heads,
// head_dim] storage), with repeated and concurrent launches.
#include <unistd.h>

#include <random>
#include <thread>

#include "core/problem.h"
#include "evotune/runtime.h"
#include "gtest/gtest.h"
#include "kernel_templates/template_registry.h"
#include "launch/cuda_driver.h"
#include "tuner/evaluator/nvrtc_compiler.h"
#include "tuner/evaluator/reference.h"
#include "tuner/wire/kernel_bundle.h"
#include "tuner/wire/message_convert.h"

namespace evotune {
namespace {

// Host copies of one call's tensors: Q, K, V as floats in bhsd order (what
// the reference reads) and their 16-bit device images in the call's layout.
struct Inputs {
  std::vector<float> q, k, v;
  CUdeviceptr dq = 0, dk = 0, dv = 0, d_o = 0;
};

class RuntimeGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<DeviceInfo> info = ProbeCudaDevice(0);
    if (!info.ok()) GTEST_SKIP() << info.status().message();
    device_ = *info;
    d_ = *CudaDriver::Get();
    CUdevice dev;
    ASSERT_EQ(d_->cuDeviceGet(&dev, 0), CUDA_SUCCESS);
    ASSERT_EQ(d_->cuDevicePrimaryCtxRetain(&ctx_, dev), CUDA_SUCCESS);
    ASSERT_EQ(d_->cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
    ASSERT_EQ(d_->cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING),
              CUDA_SUCCESS);
  }
  void TearDown() override {
    for (CUdeviceptr p : allocations_) d_->cuMemFree(p);
    if (stream_ != nullptr) d_->cuStreamDestroy(stream_);
  }

  // A bundle of one config of `t` for each problem, compiled here.
  std::string Bundle(const KernelTemplate& t, const Config& config,
                     const std::vector<Problem>& problems) {
    v1::KernelBundle bundle;
    const std::string arch = ArchName(device_.cc_major, device_.cc_minor);
    for (const Problem& p : problems) {
      absl::StatusOr<CompileResult> r = CompileTemplate(t, config, p, arch);
      EXPECT_TRUE(r.ok() && r->ok) << t.name << ": " << r->log;
      v1::Kernel* k = bundle.add_kernels();
      *k->mutable_problem() = ProblemToProto(p);
      k->set_template_name(t.name);
      k->set_arch(arch);
      k->set_kernel_name(t.kernel_name);
      k->set_cubin(r->cubin);
      *k->mutable_geometry() = GeometryToProto(t.geometry(config, p));
      k->set_param_layout_version(kParamLayoutVersion);
    }
    const std::string path =
        ::testing::TempDir() + "/gpu_" + t.name + std::to_string(getpid());
    EXPECT_TRUE(WriteKernelBundle(path, bundle).ok());
    return path;
  }

  CUdeviceptr Alloc(size_t bytes) {
    CUdeviceptr p = 0;
    EXPECT_EQ(d_->cuMemAlloc(&p, bytes), CUDA_SUCCESS);
    allocations_.push_back(p);
    return p;
  }

  // Random Q, K, V uploaded in the layout of `call` (bshd when `strided`);
  // K row j scaled by 1 + rise * j / seq_k.
  Inputs Upload(const Problem& p, bool strided, AttentionCall* call,
                uint64_t seed, float rise = 0.f) {
    Inputs in;
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    auto make = [&](std::vector<float>* host, int64_t heads, int64_t seq,
                    CUdeviceptr* dev, AttentionTensor* t, float rise) {
      const int64_t d = p.head_dim;
      host->resize(p.batch * heads * seq * d);
      *t = strided ? AttentionTensor{nullptr, seq * heads * d, d, heads * d}
                   : AttentionTensor{nullptr, heads * seq * d, seq * d, d};
      t->batch = p.batch;
      t->heads = heads;
      t->seq = seq;
      t->head_dim = d;
      std::vector<uint16_t> bits(host->size());
      for (int64_t b = 0; b < p.batch; ++b)
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t s = 0; s < seq; ++s)
            for (int64_t c = 0; c < d; ++c) {
              const uint16_t x =
                  FloatToHalfBits(u(rng) * (1.f + rise * s / seq), p.dtype);
              (*host)[((b * heads + h) * seq + s) * d + c] =
                  HalfBitsToFloat(x, p.dtype);
              bits[b * t->batch_stride + h * t->head_stride +
                   s * t->row_stride + c] = x;
            }
      *dev = Alloc(bits.size() * 2);
      d_->cuMemcpyHtoD(*dev, bits.data(), bits.size() * 2);
      t->data = reinterpret_cast<void*>(*dev);
    };
    call->problem = p;
    make(&in.q, p.heads, p.seq_q, &in.dq, &call->q, 0.f);
    make(&in.k, p.kv_heads, p.seq_k, &in.dk, &call->k, rise);
    make(&in.v, p.kv_heads, p.seq_k, &in.dv, &call->v, 0.f);
    std::vector<float> o;
    make(&o, p.heads, p.seq_q, &in.d_o, &call->o, 0.f);
    return in;
  }

  // Output rows of `call` (every head's first, middle and last rows).
  std::vector<float> Rows(const AttentionCall& call,
                          const std::vector<RowIndex>& rows) {
    const Problem& p = call.problem;
    std::vector<uint16_t> bits(p.batch * p.heads * p.seq_q * p.head_dim);
    EXPECT_EQ(d_->cuStreamSynchronize(stream_), CUDA_SUCCESS);
    d_->cuMemcpyDtoH(bits.data(), reinterpret_cast<CUdeviceptr>(call.o.data),
                     bits.size() * 2);
    std::vector<float> out;
    for (const RowIndex& r : rows) {
      for (int64_t c = 0; c < p.head_dim; ++c) {
        out.push_back(HalfBitsToFloat(
            bits[r.batch * call.o.batch_stride + r.head * call.o.head_stride +
                 r.row * call.o.row_stride + c],
            p.dtype));
      }
    }
    return out;
  }

  static std::vector<RowIndex> SampleRows(const Problem& p) {
    std::vector<RowIndex> rows;
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t h = 0; h < p.heads; ++h)
        for (int64_t r : {int64_t{0}, p.seq_q / 2, p.seq_q - 1})
          rows.push_back({b, h, r});
    return rows;
  }

  DeviceInfo device_;
  const CudaDriver* d_ = nullptr;
  CUcontext ctx_ = nullptr;
  CUstream stream_ = nullptr;
  std::vector<CUdeviceptr> allocations_;
};

std::vector<Problem> Problems() {
  auto make = [](int64_t b, int64_t h, int64_t kv, int64_t q, int64_t k,
                 int64_t d, bool causal, DType dtype) {
    Problem p;
    p.batch = b;
    p.heads = h;
    p.kv_heads = kv;
    p.seq_q = q;
    p.seq_k = k;
    p.head_dim = d;
    p.causal = causal;
    p.dtype = dtype;
    return p;
  };
  return {make(1, 8, 8, 512, 512, 64, false, DType::kFp16),
          make(2, 8, 2, 300, 700, 128, true, DType::kBf16),
          make(2, 16, 4, 1, 4097, 128, false, DType::kBf16),
          make(2, 4, 4, 256, 256, 64, true, DType::kFp16)};
}

TEST_F(RuntimeGpuTest, EveryTemplateRunsCorrectlyThroughABundle) {
  int checked = 0;
  for (const KernelTemplate& t : TemplateRegistry::Builtin().templates()) {
    if (t.test_only || !CheckDevice(t, device_.limits).ok()) continue;
    for (const Problem& p : Problems()) {
      std::vector<Config> configs = FeasibleConfigs(t, p, device_.limits);
      if (!CheckSupports(t, p).ok() || configs.empty()) continue;
      // The last feasible config: the largest tiles, splits and stages.
      const Config config = configs.back();
      Runtime runtime(*BundleSource::Open(Bundle(t, config, {p})));
      for (bool strided : {false, true}) {
        AttentionCall call;
        Inputs in = Upload(p, strided, &call, 7 + checked);
        for (int launch = 0; launch < 2; ++launch) {
          absl::Status s = runtime.Attention(call, stream_);
          ASSERT_TRUE(s.ok()) << t.name << " " << ConfigKey(config) << " "
                              << ProblemKey(p) << ": " << s;
        }
        const std::vector<RowIndex> rows = SampleRows(p);
        const ErrorStats e = CompareRows(
            Rows(call, rows), ReferenceRows(p, in.q, in.k, in.v, rows));
        const Tolerance tol = ToleranceFor(p.dtype);
        EXPECT_LE(e.max_abs, tol.max_abs)
            << t.name << " " << ConfigKey(config) << " " << ProblemKey(p)
            << (strided ? " bshd" : " bhsd");
        EXPECT_LE(e.rel_l2, tol.rel_l2) << t.name << " " << ProblemKey(p);
        ++checked;
      }
    }
  }
  EXPECT_GE(checked, 8);
}

// Scores that rise along the keys (K row j scaled by 1 + 40 j / seq_k), so
// that a row's max grows far past its first key tile's many times over:
// random inputs alone leave it near the first tile's, and with it the
// online softmax's rescaling of O (flash_fwd_tma moves a row's reference
// only when a score passes it by 2^8). Every template, its fitted configs
// and its first and last feasible ones.
TEST_F(RuntimeGpuTest, ScoresRisingAlongTheKeysAreCorrect) {
  const Problem full =
      *ParseProblemKey("b1_h4_kv2_q200_k1500_d128_full_bf16_bhsd");
  const Problem causal =
      *ParseProblemKey("b1_h4_kv2_q300_k300_d64_causal_fp16_bhsd");
  int checked = 0;
  for (const KernelTemplate& t : TemplateRegistry::Builtin().templates()) {
    if (t.test_only || !CheckDevice(t, device_.limits).ok()) continue;
    for (const Problem& p : {full, causal}) {
      std::vector<Config> configs = FeasibleConfigs(t, p, device_.limits);
      if (!CheckSupports(t, p).ok() || configs.empty()) continue;
      configs = {configs.front(), configs.back()};
      if (t.fitted_defaults) {
        for (const Config& c : t.fitted_defaults(p, device_.limits)) {
          if (CheckConfig(t, c, p, device_.limits).ok()) configs.push_back(c);
        }
      }
      for (const Config& config : configs) {
        Runtime runtime(*BundleSource::Open(Bundle(t, config, {p})));
        AttentionCall call;
        Inputs in = Upload(p, false, &call, 11 + checked, /*rise=*/40.f);
        ASSERT_TRUE(runtime.Attention(call, stream_).ok());
        const std::vector<RowIndex> rows = SampleRows(p);
        const ErrorStats e = CompareRows(
            Rows(call, rows), ReferenceRows(p, in.q, in.k, in.v, rows));
        const Tolerance tol = ToleranceFor(p.dtype);
        EXPECT_LE(e.max_abs, tol.max_abs)
            << t.name << " " << ConfigKey(config) << " " << ProblemKey(p);
        EXPECT_LE(e.rel_l2, tol.rel_l2)
            << t.name << " " << ConfigKey(config) << " " << ProblemKey(p);
        ++checked;
      }
    }
  }
  EXPECT_GE(checked, 8);
}

TEST_F(RuntimeGpuTest, ConcurrentLaunchesFromThreadsAgree) {
  const Problem p = Problems()[2];  // Decode: split-KV scratch per stream.
  const KernelTemplate* t = TemplateRegistry::Builtin().Find("decode_fwd");
  if (!CheckDevice(*t, device_.limits).ok()) GTEST_SKIP();
  const std::vector<Config> configs = FeasibleConfigs(*t, p, device_.limits);
  Runtime runtime(*BundleSource::Open(Bundle(*t, configs.back(), {p})));
  AttentionCall call;
  Upload(p, false, &call, 99);
  ASSERT_TRUE(runtime.Attention(call, stream_).ok());
  const std::vector<RowIndex> rows = SampleRows(p);
  const std::vector<float> want = Rows(call, rows);
  std::vector<std::thread> threads;
  std::vector<std::vector<float>> got(4);
  for (int i = 0; i < 4; ++i) {
    AttentionCall mine = call;
    mine.o.data = reinterpret_cast<void*>(
        Alloc(p.batch * p.heads * p.seq_q * p.head_dim * 2));
    threads.emplace_back([&, i, mine] {
      d_->cuCtxSetCurrent(ctx_);
      CUstream s;
      d_->cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
      for (int n = 0; n < 20; ++n) EXPECT_TRUE(runtime.Attention(mine, s).ok());
      d_->cuStreamSynchronize(s);
      d_->cuStreamDestroy(s);
      got[i] = Rows(mine, rows);
    });
  }
  for (std::thread& th : threads) th.join();
  for (const std::vector<float>& g : got) EXPECT_EQ(g, want);
}

TEST_F(RuntimeGpuTest, KernelsForAnotherArchitectureAreRefused) {
  const Problem p = Problems()[0];
  v1::KernelBundle bundle;
  v1::Kernel* k = bundle.add_kernels();
  *k->mutable_problem() = ProblemToProto(p);
  k->set_arch(ArchName(device_.cc_major, device_.cc_minor));
  k->set_param_layout_version(kParamLayoutVersion + 1);
  const std::string path = ::testing::TempDir() + "/layout.evtb";
  ASSERT_TRUE(WriteKernelBundle(path, bundle).ok());
  Runtime runtime(*BundleSource::Open(path));
  AttentionCall call;
  Upload(p, false, &call, 1);
  absl::Status s = runtime.Attention(call, stream_);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("parameter layout"), absl::string_view::npos);

  // A problem within the refused kernel's is refused alike (the bundle
  // serves it with that kernel); one the bundle holds nothing for is not
  // found.
  Problem within = p;
  within.seq_q = 77;
  call.problem = within;
  call.q.seq = call.o.seq = 77;  // The first 77 of the uploaded rows.
  s = runtime.Attention(call, stream_);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  Problem other = within;
  other.causal = !p.causal;
  call.problem = other;
  s = runtime.Attention(call, stream_);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
}

}  // namespace
}  // namespace evotune
