// Runs the tuned attention kernel of one problem the way an inference
// program would: CUDA runtime API buffers and stream, kernels from a bundle
// (`evotune export`) or a daemon, launched through evotune::Runtime. Checks
// sampled output rows against the reference and times the launches.
//
//   attention_example --bundle=kernels.evtb \
//     --problem=b1_h8_kv8_q512_k512_d64_full_fp16_bhsd
//   attention_example --daemon=127.0.0.1:7433 --problem=...
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

int Run() {
  absl::StatusOr<Problem> p = ParseProblemKey(absl::GetFlag(FLAGS_problem));
  if (!p.ok()) return Fail(std::string(p.status().message()));
  std::unique_ptr<KernelSource> source;
  if (!absl::GetFlag(FLAGS_bundle).empty()) {
    absl::StatusOr<std::unique_ptr<BundleSource>> b =
        BundleSource::Open(absl::GetFlag(FLAGS_bundle));
    if (!b.ok()) return Fail(std::string(b.status().message()));
    source = *std::move(b);
  } else if (!absl::GetFlag(FLAGS_daemon).empty()) {
    source = DaemonSource::Connect(absl::GetFlag(FLAGS_daemon),
                                   absl::GetFlag(FLAGS_token));
  } else {
    return Fail("--bundle or --daemon is required");
  }
  Runtime runtime(std::move(source));
  cudaStream_t stream;
  if (cudaSetDevice(0) != cudaSuccess || cudaStreamCreate(&stream) != 0) {
    return Fail("no CUDA device");
  }
  std::mt19937 rng(1);
  std::vector<float> q, k, v, unused;
  const size_t q_elems = p->batch * p->heads * p->seq_q * p->head_dim;
  const size_t kv_elems = p->batch * p->kv_heads * p->seq_k * p->head_dim;
  void* dq = RandomTensor(q_elems, p->dtype, rng, &q);
  void* dk = RandomTensor(kv_elems, p->dtype, rng, &k);
  void* dv = RandomTensor(kv_elems, p->dtype, rng, &v);
  void* d_o = RandomTensor(q_elems, p->dtype, rng, &unused);
  const AttentionCall call = ContiguousCall(*p, dq, dk, dv, d_o);

  absl::StatusOr<v1::Kernel> kernel = runtime.KernelFor(*p, stream);
  if (!kernel.ok()) return Fail(std::string(kernel.status().message()));
  std::printf("%s: %s %s on %s\n", absl::GetFlag(FLAGS_problem).c_str(),
              kernel->template_name().c_str(),
              FormatConfig(kernel->config()).c_str(), kernel->arch().c_str());
  if (absl::Status s = runtime.Attention(call, stream); !s.ok()) {
    return Fail(std::string(s.message()));
  }
  std::vector<RowIndex> rows;
  for (int64_t h = 0; h < p->heads; ++h) {
    for (int64_t r : {int64_t{0}, p->seq_q - 1}) rows.push_back({0, h, r});
  }
  std::vector<uint16_t> out(q_elems);
  cudaMemcpyAsync(out.data(), d_o, q_elems * 2, cudaMemcpyDeviceToHost, stream);
  cudaStreamSynchronize(stream);
  std::vector<float> got;
  for (const RowIndex& r : rows) {
    for (int64_t c = 0; c < p->head_dim; ++c) {
      got.push_back(HalfBitsToFloat(
          out[((r.head * p->seq_q) + r.row) * p->head_dim + c], p->dtype));
    }
  }
  const ErrorStats e = CompareRows(got, ReferenceRows(*p, q, k, v, rows));
  const Tolerance tol = ToleranceFor(p->dtype);
  const bool correct = e.max_abs <= tol.max_abs && e.rel_l2 <= tol.rel_l2;
  std::printf("%zu rows against the reference: max abs %.2e, rel l2 %.2e: %s\n",
              rows.size(), e.max_abs, e.rel_l2, correct ? "ok" : "WRONG");

  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start, stream);
  for (int i = 0; i < absl::GetFlag(FLAGS_iters); ++i) {
    if (!runtime.Attention(call, stream).ok()) return Fail("launch failed");
  }
  cudaEventRecord(stop, stream);
  cudaEventSynchronize(stop);
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  std::printf("%.2f us per call (%d back-to-back launches)\n",
              ms * 1000 / absl::GetFlag(FLAGS_iters),
              absl::GetFlag(FLAGS_iters));
  return correct ? 0 : 1;
}

}  // namespace
}  // namespace evotune

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return evotune::Run();
}
