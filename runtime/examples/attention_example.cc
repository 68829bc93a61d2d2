// Runs the tuned attention kernel of one problem the way an inference
// program would: CUDA runtime API buffers and stream, kernels from a bundle
// (`evotune export`) or a daemon, launched through evotune::Runtime. Checks
// sampled output rows against the reference and times the launches.
//
//   attention_example --bundle=kernels.evtb
//       --problem=b1_h8_kv8_q512_k512_d64_full_fp16_bhsd
//   attention_example --daemon=127.0.0.1:7433 [--tls_ca=PEM] --problem=...
#include <cuda_runtime.h>

#include <cstdio>
#include <random>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "evotune/runtime.h"
#include "runtime/daemon_source.h"
#include "tuner/cli/cli_format.h"
#include "tuner/evaluator/reference.h"

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

// Random values on the device (and their float copies for the reference).
void* RandomTensor(size_t n, DType dtype, std::mt19937& rng,
                   std::vector<float>* host) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<uint16_t> bits(n);
  host->resize(n);
  for (size_t i = 0; i < n; ++i) {
    bits[i] = FloatToHalfBits(u(rng), dtype);
    (*host)[i] = HalfBitsToFloat(bits[i], dtype);
  }
  void* dev = nullptr;
  cudaMalloc(&dev, n * 2);
  cudaMemcpy(dev, bits.data(), n * 2, cudaMemcpyHostToDevice);
  return dev;
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

// Output rows of batch 0 (each head's first and last) against the reference.
bool Check(const Problem& problem, const void* o, const std::vector<float>& q,
           const std::vector<float>& k, const std::vector<float>& v,
           cudaStream_t stream) {
  std::vector<RowIndex> rows;
  for (int64_t h = 0; h < problem.heads; ++h) {
    for (int64_t r : {int64_t{0}, problem.seq_q - 1}) rows.push_back({0, h, r});
  }
  std::vector<uint16_t> out(q.size());
  cudaMemcpyAsync(out.data(), o, out.size() * 2, cudaMemcpyDeviceToHost,
                  stream);
  cudaStreamSynchronize(stream);
  std::vector<float> got;
  for (const RowIndex& r : rows) {
    for (int64_t c = 0; c < problem.head_dim; ++c) {
      got.push_back(HalfBitsToFloat(
          out[(r.head * problem.seq_q + r.row) * problem.head_dim + c],
          problem.dtype));
    }
  }
  const ErrorStats e = CompareRows(got, ReferenceRows(problem, q, k, v, rows));
  const Tolerance tol = ToleranceFor(problem.dtype);
  const bool correct = e.max_abs <= tol.max_abs && e.rel_l2 <= tol.rel_l2;
  std::printf("%zu rows against the reference: max abs %.2e, rel l2 %.2e: %s\n",
              rows.size(), e.max_abs, e.rel_l2, correct ? "ok" : "WRONG");
  return correct;
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
              FormatConfig(kernel->config()).c_str(), kernel->arch().c_str());
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
