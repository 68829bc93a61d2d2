// Runs the tuned attention kernel of one problem the way an inference
// program would: CUDA runtime API buffers and stream, kernels from a bundle
// (`evotune export`) or a daemon, launched through evotune::Runtime. Checks
// sampled output rows against a host reference and times the launches. It
// includes the public headers only (runtime/include/evotune/), so it can be
// copied into a program as it is.
//
//   attention_example --bundle=kernels.evtb
//       --problem=b1_h8_kv8_q512_k512_d64_full_fp16_bhsd
//   attention_example --daemon=127.0.0.1:7433 [--tls_ca=PEM] --problem=...
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "evotune/daemon_source.h"
#include "evotune/runtime.h"

ABSL_FLAG(std::string, bundle, "", "kernel bundle written by evotune export");
ABSL_FLAG(std::string, daemon, "", "or: address of evotuned");
ABSL_FLAG(std::string, token, "", "the daemon's bearer token");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM of the CA that signed a TLS daemon's certificate");
ABSL_FLAG(std::string, problem, "b1_h8_kv8_q512_k512_d64_full_fp16_bhsd",
          "problem key");
ABSL_FLAG(int, iters, 200, "timed launches");

namespace evotune {
namespace {

int Fail(const std::string& why) {
  std::fprintf(stderr, "attention_example: %s\n", why.c_str());
  return 1;
}

uint16_t ToBits(float f, DType dtype) {
  uint16_t bits;
  if (dtype == DType::kBf16) {
    const __nv_bfloat16 h = __float2bfloat16(f);
    std::memcpy(&bits, &h, 2);
  } else {
    const __half h = __float2half(f);
    std::memcpy(&bits, &h, 2);
  }
  return bits;
}

float FromBits(uint16_t bits, DType dtype) {
  if (dtype == DType::kBf16) {
    __nv_bfloat16 h;
    std::memcpy(static_cast<void*>(&h), &bits, 2);
    return __bfloat162float(h);
  }
  __half h;
  std::memcpy(static_cast<void*>(&h), &bits, 2);
  return __half2float(h);
}

// Random values on the device (and their float copies for the reference).
void* RandomTensor(size_t n, DType dtype, std::mt19937& rng,
                   std::vector<float>* host) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<uint16_t> bits(n);
  host->resize(n);
  for (size_t i = 0; i < n; ++i) {
    bits[i] = ToBits(u(rng), dtype);
    (*host)[i] = FromBits(bits[i], dtype);
  }
  void* dev = nullptr;
  cudaMalloc(&dev, n * 2);
  cudaMemcpy(dev, bits.data(), n * 2, cudaMemcpyHostToDevice);
  return dev;
}

// Row `row` of head `head` (batch 0) of the output, in double precision:
// softmax(q k^T / sqrt(head_dim)) v over the keys the row sees (causal:
// bottom-right aligned), K/V head shared by heads / kv_heads query heads.
std::vector<double> ReferenceRow(const Problem& p, const std::vector<float>& q,
                                 const std::vector<float>& k,
                                 const std::vector<float>& v, int64_t head,
                                 int64_t row) {
  const int64_t d = p.head_dim, kv_head = head / (p.heads / p.kv_heads);
  const int64_t keys =
      p.causal ? std::min(p.seq_k, row + p.seq_k - p.seq_q + 1) : p.seq_k;
  const float* qr = &q[(head * p.seq_q + row) * d];
  std::vector<double> score(std::max<int64_t>(keys, 0));
  double top = -INFINITY, sum = 0;
  for (int64_t j = 0; j < keys; ++j) {
    const float* kr = &k[(kv_head * p.seq_k + j) * d];
    double dot = 0;
    for (int64_t c = 0; c < d; ++c) dot += double(qr[c]) * kr[c];
    score[j] = dot / std::sqrt(double(d));
    top = std::max(top, score[j]);
  }
  std::vector<double> out(d, 0.0);
  for (int64_t j = 0; j < keys; ++j) {
    const double w = std::exp(score[j] - top);
    sum += w;
    const float* vr = &v[(kv_head * p.seq_k + j) * d];
    for (int64_t c = 0; c < d; ++c) out[c] += w * vr[c];
  }
  for (double& x : out) x = sum > 0 ? x / sum : 0;
  return out;
}

// The kernel source the flags name.
absl::StatusOr<std::unique_ptr<KernelSource>> Source() {
  const std::string bundle_path = absl::GetFlag(FLAGS_bundle);
  if (!bundle_path.empty()) {
    auto source = evotune::BundleSource::Open(bundle_path);
    if (!source.ok()) return source.status();
    return std::unique_ptr<KernelSource>(*std::move(source));
  }
  if (absl::GetFlag(FLAGS_daemon).empty()) {
    return absl::InvalidArgumentError("--bundle or --daemon is required");
  }
  auto source = evotune::DaemonSource::Connect(
      absl::GetFlag(FLAGS_daemon), absl::GetFlag(FLAGS_token),
      {absl::GetFlag(FLAGS_tls_ca), "", ""});
  if (!source.ok()) return source.status();
  return std::unique_ptr<KernelSource>(*std::move(source));
}

// Output rows of batch 0 (each head's first and last) against the
// reference: the largest error and the error's L2 norm relative to the
// reference's, within the rounding of the dtype.
bool Check(const Problem& problem, const void* o, const std::vector<float>& q,
           const std::vector<float>& k, const std::vector<float>& v,
           cudaStream_t stream) {
  std::vector<uint16_t> out(q.size());
  cudaMemcpyAsync(out.data(), o, out.size() * 2, cudaMemcpyDeviceToHost,
                  stream);
  cudaStreamSynchronize(stream);
  double max_abs = 0, err2 = 0, ref2 = 0;
  int rows = 0;
  for (int64_t h = 0; h < problem.heads; ++h) {
    for (int64_t r : {int64_t{0}, problem.seq_q - 1}) {
      const std::vector<double> want = ReferenceRow(problem, q, k, v, h, r);
      for (int64_t c = 0; c < problem.head_dim; ++c) {
        const double got = FromBits(
            out[(h * problem.seq_q + r) * problem.head_dim + c], problem.dtype);
        max_abs = std::max(max_abs, std::abs(got - want[c]));
        err2 += (got - want[c]) * (got - want[c]);
        ref2 += want[c] * want[c];
      }
      ++rows;
    }
  }
  const double rel_l2 = std::sqrt(err2 / std::max(ref2, 1e-30));
  const bool bf16 = problem.dtype == DType::kBf16;
  const bool correct =
      max_abs <= (bf16 ? 5e-2 : 1e-2) && rel_l2 <= (bf16 ? 2e-2 : 4e-3);
  std::printf("%d rows against the reference: max abs %.2e, rel l2 %.2e: %s\n",
              rows, max_abs, rel_l2, correct ? "ok" : "WRONG");
  return correct;
}

// "NAME=value,..." of a served kernel's config.
std::string ConfigText(const v1::Config& config) {
  std::string text;
  for (const auto& p : config.params()) {
    text +=
        (text.empty() ? "" : ",") + p.name() + "=" + std::to_string(p.value());
  }
  return text;
}

// Mean time per call of back-to-back launches.
absl::StatusOr<double> TimeUs(Runtime& runtime, const AttentionCall& call,
                              cudaStream_t stream, int iters) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start, stream);
  for (int i = 0; i < iters; ++i) {
    if (absl::Status s = runtime.Attention(call, stream); !s.ok()) return s;
  }
  cudaEventRecord(stop, stream);
  cudaEventSynchronize(stop);
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  return ms * 1000.0 / iters;
}

int Run() {
  absl::StatusOr<Problem> parsed =
      ParseProblemKey(absl::GetFlag(FLAGS_problem));
  if (!parsed.ok()) return Fail(std::string(parsed.status().message()));
  const Problem problem = *parsed;
  auto source = Source();
  if (!source.ok()) return Fail(std::string(source.status().message()));
  evotune::Runtime runtime(*std::move(source));
  cudaStream_t stream;
  if (cudaSetDevice(0) != cudaSuccess || cudaStreamCreate(&stream) != 0) {
    return Fail("no CUDA device");
  }
  std::mt19937 rng(1);
  std::vector<float> q_host, k_host, v_host, unused;
  const size_t q_elems =
      problem.batch * problem.heads * problem.seq_q * problem.head_dim;
  const size_t kv_elems =
      problem.batch * problem.kv_heads * problem.seq_k * problem.head_dim;
  void* q = RandomTensor(q_elems, problem.dtype, rng, &q_host);
  void* k = RandomTensor(kv_elems, problem.dtype, rng, &k_host);
  void* v = RandomTensor(kv_elems, problem.dtype, rng, &v_host);
  void* o = RandomTensor(q_elems, problem.dtype, rng, &unused);

  absl::StatusOr<v1::Kernel> kernel = runtime.KernelFor(problem, stream);
  if (!kernel.ok()) return Fail(std::string(kernel.status().message()));
  std::printf("%s: %s %s on %s\n", absl::GetFlag(FLAGS_problem).c_str(),
              kernel->template_name().c_str(),
              ConfigText(kernel->config()).c_str(), kernel->arch().c_str());
  evotune::AttentionCall call = evotune::ContiguousCall(problem, q, k, v, o);
  absl::Status s = runtime.Attention(call, stream);
  if (!s.ok()) return Fail(std::string(s.message()));
  const bool correct = Check(problem, o, q_host, k_host, v_host, stream);
  absl::StatusOr<double> us =
      TimeUs(runtime, call, stream, absl::GetFlag(FLAGS_iters));
  if (!us.ok()) return Fail(std::string(us.status().message()));
  std::printf("%.2f us per call (%d back-to-back launches)\n", *us,
              absl::GetFlag(FLAGS_iters));
  return correct ? 0 : 1;
}

}  // namespace
}  // namespace evotune

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return evotune::Run();
}
