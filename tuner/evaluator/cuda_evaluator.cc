#include "tuner/evaluator/cuda_evaluator.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernel_templates/common/attention_params.cuh"
#include "launch/cuda_driver.h"
#include "launch/launcher.h"
#include "launch/tensor_maps.h"
#include "tuner/evaluator/cache_scrub.h"
#include "tuner/evaluator/cubin_cache.h"
#include "tuner/evaluator/input_layout.h"
#include "tuner/evaluator/nvrtc_compiler.h"
#include "tuner/evaluator/random_inputs.h"
#include "tuner/evaluator/reference.h"

namespace evotune {
namespace {

// Registers one block may use on sm_80 to sm_90.
constexpr int64_t kRegistersPerBlock = 65536;

constexpr double kMinSampleUs = 100.0;
constexpr int kCheckedRows = 192;
constexpr int kCheckedHeads = 4;
constexpr float kVOffset = 0.5f;

struct InputSeeds {
  uint64_t q, k, v;
};

// Device memory owned by one evaluation's problem.
class DeviceBuffer {
 public:
  DeviceBuffer(const CudaDriver* d) : d_(d) {}
  ~DeviceBuffer() {
    if (ptr_ != 0) d_->cuMemFree(ptr_);
  }
  absl::Status Allocate(size_t bytes) {
    return d_->Check(d_->cuMemAlloc(&ptr_, std::max<size_t>(bytes, 2)),
                     "cuMemAlloc");
  }
  CUdeviceptr get() const { return ptr_; }

 private:
  const CudaDriver* d_;
  CUdeviceptr ptr_ = 0;
};

// The inputs and output of one problem's runs, shared by the candidates
// timed on it.
struct ProblemBuffers {
  ProblemBuffers(const CudaDriver* d, const Problem& p)
      : q(d),
        k(d),
        v(d),
        o(d),
        lengths(d),
        descale(d),
        sinks(d),
        alibi(d),
        layout(p) {}
  DeviceBuffer q, k, v, o;
  DeviceBuffer lengths;  // InputLayout::LengthArrays, when it has any.
  // An FP8 KV cache's descale factors, [batch, kv_heads] for K then V; on
  // the host too, for the reference.
  DeviceBuffer descale;
  std::vector<float> descale_host;
  // Attention sinks: each query head's logit, on the host too.
  DeviceBuffer sinks;
  std::vector<float> sinks_host;
  // ALiBi's slopes per (batch, query head), on the host too.
  DeviceBuffer alibi;
  std::vector<float> alibi_host;
  InputLayout layout;
  AttentionParams params{};  // Without scratch.
  InputSeeds seeds{};
  size_t o_elems = 0;
  uint16_t nan_bits = 0;  // A NaN of the problem's dtype.
};

// One compiled candidate, ready to launch on a problem's buffers: its
// module, geometry, scratch and launch parameters.
struct Candidate {
  explicit Candidate(const CudaDriver* d) : d(d), workspace(d), counters(d) {}
  ~Candidate() {
    if (module != nullptr) d->cuModuleUnload(module);
  }
  CUresult Launch() { return LaunchAttention(*d, kernel, args, nullptr); }

  const CudaDriver* d;
  CUmodule module = nullptr;
  LoadedKernel kernel;  // Its function, geometry and the multiprocessors.
  DeviceBuffer workspace, counters;
  LaunchArgs args;
};

// A candidate that failed a gate: `status`, and why.
TrialResult Rejected(TrialStatus status, std::string why) {
  TrialResult r;
  r.status = status;
  r.error = std::move(why);
  return r;
}

// The latencies of one kernel's timing samples (per launch).
TrialResult Summary(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  TrialResult r;
  r.status = TrialStatus::kOk;
  r.samples = static_cast<int>(samples.size());
  r.median_us = samples[samples.size() / 2];
  r.min_us = samples.front();
  r.p90_us = samples[(samples.size() * 9) / 10];
  double mean = 0, var = 0;
  for (double x : samples) mean += x;
  mean /= samples.size();
  for (double x : samples) var += (x - mean) * (x - mean);
  r.cv = mean > 0 ? std::sqrt(var / samples.size()) / mean : 0;
  return r;
}

class CudaEvaluator : public Evaluator {
 public:
  CudaEvaluator(const CudaDriver* d, CUcontext ctx, DeviceInfo info,
                const CudaEvaluatorOptions& options)
      : d_(d),
        ctx_(ctx),
        info_(std::move(info)),
        repeat_runs_(options.repeat_runs),
        compile_threads_(options.compile_threads),
        cold_l2_(options.cold_l2),
        cubins_(options.cache_dir,
                options.compile_arch.empty()
                    ? ArchName(info_.cc_major, info_.cc_minor)
                    : options.compile_arch,
                options.compile_threads),
        scrub_(d),
        sink_(d) {}

  const DeviceInfo& device() const override { return info_; }
  int CompileAhead() const override { return compile_threads_; }

  void Prefetch(const KernelTemplate& t, const std::vector<Config>& configs,
                const Problem& problem) override {
    for (const Config& c : configs) {
      if (CheckConfig(t, c, problem, info_.limits).ok()) {
        cubins_.Prefetch(t, c, problem);
      }
    }
  }

  absl::StatusOr<TrialResult> Evaluate(const KernelTemplate& t,
                                       const Config& config,
                                       const Problem& problem) override {
    return Run(t, config, problem, kFullTimingSamples);
  }

  absl::StatusOr<TrialResult> QuickEvaluate(const KernelTemplate& t,
                                            const Config& config,
                                            const Problem& problem) override {
    return Run(t, config, problem, kQuickTimingSamples);
  }

  // Every candidate on the same fresh inputs, held loaded at once.
  absl::StatusOr<std::vector<TrialResult>> TimeInTurns(
      const std::vector<TemplateConfig>& configs, const Problem& problem,
      int turns) override {
    if (turns < 1) return absl::InvalidArgumentError("turns must be >= 1");
    if (absl::Status s = Ready(); !s.ok()) return s;
    for (const TemplateConfig& c : configs) Prefetch(*c.t, {c.config}, problem);
    ProblemBuffers in(d_, problem);
    if (absl::Status s = PrepareInputs(problem, &in); !s.ok()) return s;
    std::vector<TrialResult> results(configs.size());
    std::vector<std::unique_ptr<Candidate>> ready;
    std::vector<size_t> index;  // Of each ready candidate in `configs`.
    for (size_t i = 0; i < configs.size(); ++i) {
      auto c = std::make_unique<Candidate>(d_);
      Gate gate = Load(*configs[i].t, configs[i].config, problem, c.get());
      if (gate.ok() && !gate->has_value()) gate = Arm(problem, in, c.get());
      if (!gate.ok()) return gate.status();
      if (gate->has_value()) {
        if (!broken_.ok()) {  // It faulted: none of the others can run.
          return absl::InternalError(
              absl::StrCat(ConfigKey(configs[i].config), ": ", (*gate)->error));
        }
        results[i] = **std::move(gate);
        continue;
      }
      ready.push_back(std::move(c));
      index.push_back(i);
    }
    size_t failed = 0;
    absl::StatusOr<std::vector<TrialResult>> timed =
        TimeTogether(ready, turns, &failed);
    if (!timed.ok()) {
      return absl::InternalError(
          absl::StrCat("timing ", ConfigKey(configs[index[failed]].config),
                       ": ", timed.status().message()));
    }
    for (size_t j = 0; j < index.size(); ++j) results[index[j]] = (*timed)[j];
    return results;
  }

 private:
  // The gates after the evaluator's own checks, in order; each either ends
  // the trial (a result), lets it go on (nullopt), or fails the evaluator
  // itself (an error).
  using Gate = absl::StatusOr<std::optional<TrialResult>>;

  static absl::StatusOr<TrialResult> Ended(Gate gate) {
    if (!gate.ok()) return gate.status();
    return **std::move(gate);
  }

  // OK when the evaluator can run kernels now (no kernel broke its context).
  absl::Status Ready() {
    if (!broken_.ok()) return broken_;
    return d_->Check(d_->cuCtxSetCurrent(ctx_), "cuCtxSetCurrent");
  }

  absl::StatusOr<TrialResult> Run(const KernelTemplate& t, const Config& config,
                                  const Problem& problem, int samples) {
    if (absl::Status s = Ready(); !s.ok()) return s;
    auto c = std::make_unique<Candidate>(d_);
    Gate loaded = Load(t, config, problem, c.get());
    if (!loaded.ok() || loaded->has_value()) return Ended(std::move(loaded));
    ProblemBuffers in(d_, problem);
    if (absl::Status s = PrepareInputs(problem, &in); !s.ok()) return s;
    Gate correct = Arm(problem, in, c.get());
    if (!correct.ok() || correct->has_value()) return Ended(std::move(correct));
    std::vector<std::unique_ptr<Candidate>> one;
    one.push_back(std::move(c));
    size_t failed = 0;
    absl::StatusOr<std::vector<TrialResult>> timed =
        TimeTogether(one, samples, &failed);
    if (!timed.ok()) {
      return Rejected(TrialStatus::kCrashed, timed.status().ToString());
    }
    return timed->front();
  }

  // Gates 1 to 3: constraints, compile, load, resources as compiled.
  Gate Load(const KernelTemplate& t, const Config& config, const Problem& p,
            Candidate* c) {
    if (absl::Status s = CheckConfig(t, config, p, info_.limits); !s.ok()) {
      return Rejected(TrialStatus::kResourceRejected, std::string(s.message()));
    }
    absl::StatusOr<CompileResult> compiled = cubins_.Get(t, config, p);
    if (!compiled.ok()) return compiled.status();
    if (!compiled->ok) {
      return Rejected(TrialStatus::kCompileError, compiled->log);
    }
    // PTX (a virtual compile_arch) is compiled for the device here.
    const std::string& image =
        compiled->cubin.empty() ? compiled->ptx : compiled->cubin;
    if (CUresult r = d_->cuModuleLoadData(&c->module, image.data());
        r != CUDA_SUCCESS) {
      c->module = nullptr;
      return Rejected(TrialStatus::kCompileError,
                      d_->Check(r, "cuModuleLoadData").ToString());
    }
    LoadedKernel& k = c->kernel;
    if (absl::Status s =
            d_->Check(d_->cuModuleGetFunction(&k.function, c->module,
                                              t.kernel_name.c_str()),
                      "cuModuleGetFunction");
        !s.ok()) {
      return Rejected(TrialStatus::kCompileError, std::string(s.message()));
    }
    k.geometry = t.geometry(config, p);
    k.multiprocessors = info_.limits.multiprocessors;
    return CheckResources(k.function, k.geometry);
  }

  // Registers, local and shared memory as compiled, against the device;
  // raises the function's dynamic shared memory limit.
  Gate CheckResources(CUfunction fn, const LaunchGeometry& g) {
    int regs = 0, local_bytes = 0, static_smem = 0;
    d_->cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, fn);
    d_->cuFuncGetAttribute(&local_bytes, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES,
                           fn);
    d_->cuFuncGetAttribute(&static_smem, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
                           fn);
    if (local_bytes > 0) {
      return Rejected(
          TrialStatus::kResourceRejected,
          absl::StrCat("spills: ", local_bytes,
                       " B of local memory per thread (", regs, " registers)"));
    }
    // A block's registers come from one SM's file of 64K (every template
    // caps them with __launch_bounds__; this holds that promise).
    if (int64_t{regs} * g.block_threads > kRegistersPerBlock) {
      return Rejected(
          TrialStatus::kResourceRejected,
          absl::StrCat(regs, " registers x ", g.block_threads,
                       " threads exceed ", kRegistersPerBlock, " per block"));
    }
    // Static shared memory (a kernel's own __shared__ variables) counts
    // against the same per-block limit as the dynamic amount, and the
    // dynamic limit must be raised whenever the two exceed the default 48 KB
    // together, so it is always set.
    if (g.smem_bytes + static_smem > info_.limits.smem_per_block_bytes) {
      return Rejected(
          TrialStatus::kResourceRejected,
          absl::StrCat(g.smem_bytes, " B of dynamic and ", static_smem,
                       " B of static shared memory exceed the limit ",
                       info_.limits.smem_per_block_bytes, " B per block"));
    }
    if (absl::Status s =
            d_->Check(d_->cuFuncSetAttribute(
                          fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                          static_cast<int>(g.smem_bytes)),
                      "cuFuncSetAttribute");
        !s.ok()) {
      return Rejected(TrialStatus::kResourceRejected, std::string(s.message()));
    }
    return std::nullopt;
  }

  // Fresh random inputs, generated on the GPU (V has a nonzero mean so that
  // a dropped term shows), and the output.
  absl::Status PrepareInputs(const Problem& p, ProblemBuffers* b) {
    const size_t q_elems = b->layout.q_elems();
    b->o_elems = b->layout.o_elems();
    const size_t k_elems = b->layout.kv_elems();
    const size_t v_elems = b->layout.v_elems();
    const DType kv_dtype = KvDType(p);
    const size_t kv_bytes = DTypeBytes(kv_dtype);
    const size_t q_bytes = DTypeBytes(QDType(p));
    const uint64_t seed = rng_();
    b->seeds = {seed, seed ^ 0x5555555555555555ull,
                seed ^ 0xaaaaaaaaaaaaaaaaull};
    for (auto [buf, n] : {std::pair{&b->q, q_elems * q_bytes},
                          {&b->k, k_elems * kv_bytes},
                          {&b->v, v_elems * kv_bytes},
                          {&b->o, b->o_elems * 2}}) {
      if (absl::Status s = buf->Allocate(n); !s.ok()) return s;
    }
    for (auto [buf, n, s, offset, dtype] :
         {std::tuple{&b->q, q_elems, b->seeds.q, 0.f, QDType(p)},
          {&b->k, k_elems, b->seeds.k, 0.f, kv_dtype},
          {&b->v, v_elems, b->seeds.v, kVOffset, kv_dtype}}) {
      if (absl::Status st = Fill(buf->get(), n, s, offset, dtype); !st.ok()) {
        return st;
      }
    }
    b->nan_bits = p.dtype == DType::kBf16 ? 0x7fc0 : 0x7e00;  // RunOnce's.
    // Ranges are whole rows, an even number of elements from an even one.
    const uint16_t kv_nan = p.kv_fp8 ? 0x7f7f : b->nan_bits;
    for (auto [buf, cols] :
         {std::pair{&b->k, p.head_dim}, {&b->v, HeadDimV(p)}}) {
      for (const InputLayout::Range& r : b->layout.UnusedKv(cols)) {
        d_->cuMemsetD16(buf->get() + r.begin * kv_bytes, kv_nan,
                        r.count * kv_bytes / 2);
      }
    }
    b->params = b->layout.Params();
    if (p.kv_fp8) {
      if (absl::Status s = PrepareDescale(p, b); !s.ok()) return s;
    }
    if (p.sinks) {
      if (absl::Status s = PrepareSinks(p, b); !s.ok()) return s;
    }
    if (p.alibi) {
      if (absl::Status s = PrepareAlibi(p, b); !s.ok()) return s;
    }
    const std::vector<int32_t>& lengths = b->layout.LengthArrays();
    if (!lengths.empty()) {
      if (absl::Status s = b->lengths.Allocate(lengths.size() * 4); !s.ok()) {
        return s;
      }
      if (absl::Status s =
              d_->Check(d_->cuMemcpyHtoD(b->lengths.get(), lengths.data(),
                                         lengths.size() * 4),
                        "copy lengths");
          !s.ok()) {
        return s;
      }
      b->layout.SetLengthPointers(
          reinterpret_cast<const int32_t*>(b->lengths.get()), &b->params);
    }
    b->params.q = reinterpret_cast<const void*>(b->q.get());
    b->params.k = reinterpret_cast<const void*>(b->k.get());
    b->params.v = reinterpret_cast<const void*>(b->v.get());
    b->params.o = reinterpret_cast<void*>(b->o.get());
    return absl::OkStatus();
  }

  // An FP8 KV cache's descale factors (and FP8 attention's Q's after
  // them), per (batch, KV head) from the seeds: 0.5, 0.75, 1 or 1.25 (exact
  // in fp32), so a factor applied to the wrong head or tensor shows.
  absl::Status PrepareDescale(const Problem& p, ProblemBuffers* b) {
    const int64_t per_tensor = p.batch * p.kv_heads;
    const int64_t tensors = p.q_fp8 ? 3 : 2;
    b->descale_host.resize(tensors * per_tensor);
    for (int64_t i = 0; i < tensors * per_tensor; ++i) {
      const uint16_t bits =
          RandomInputBits(b->seeds.k ^ b->seeds.v, i, 0.f, DType::kFp16);
      b->descale_host[i] = 0.5f + 0.25f * static_cast<float>(bits & 3);
    }
    if (absl::Status s = b->descale.Allocate(tensors * per_tensor * 4);
        !s.ok()) {
      return s;
    }
    if (absl::Status s =
            d_->Check(d_->cuMemcpyHtoD(b->descale.get(), b->descale_host.data(),
                                       tensors * per_tensor * 4),
                      "copy descale factors");
        !s.ok()) {
      return s;
    }
    const float* k = reinterpret_cast<const float*>(b->descale.get());
    b->params.k_descale = k;
    b->params.v_descale = k + per_tensor;
    if (p.q_fp8) b->params.q_descale = k + 2 * per_tensor;
    b->params.descale_batch_stride = static_cast<int>(p.kv_heads);
    b->params.descale_head_stride = 1;
    return absl::OkStatus();
  }

  // Attention sinks per query head from the seeds: -1 to 6 in steps of 1,
  // about the scores' own range, so that a sink taken from the wrong head,
  // or added twice, shows.
  absl::Status PrepareSinks(const Problem& p, ProblemBuffers* b) {
    b->sinks_host.resize(p.heads);
    for (int64_t h = 0; h < p.heads; ++h) {
      const uint16_t bits =
          RandomInputBits(b->seeds.q ^ b->seeds.k, h, 0.f, DType::kFp16);
      b->sinks_host[h] = static_cast<float>(bits & 7) - 1.f;
    }
    if (absl::Status s = Upload(b->sinks_host, &b->sinks, "sinks"); !s.ok()) {
      return s;
    }
    b->params.sinks = reinterpret_cast<const float*>(b->sinks.get());
    return absl::OkStatus();
  }

  // ALiBi slopes per (batch, query head) from the seeds: 2^-1 to 2^-8 (the
  // range of BLOOM's), so that a slope taken from the wrong head or
  // sequence, or a distance off by one, shows.
  absl::Status PrepareAlibi(const Problem& p, ProblemBuffers* b) {
    b->alibi_host.resize(p.batch * p.heads);
    for (size_t i = 0; i < b->alibi_host.size(); ++i) {
      const uint16_t bits =
          RandomInputBits(b->seeds.q ^ b->seeds.v, i, 0.f, DType::kFp16);
      b->alibi_host[i] = std::ldexp(1.f, -1 - (bits & 7));
    }
    if (absl::Status s = Upload(b->alibi_host, &b->alibi, "ALiBi slopes");
        !s.ok()) {
      return s;
    }
    b->params.alibi_slopes = reinterpret_cast<const float*>(b->alibi.get());
    b->params.alibi_batch_stride = static_cast<int>(p.heads);
    return absl::OkStatus();
  }

  // `host` into a new device buffer `out`.
  absl::Status Upload(const std::vector<float>& host, DeviceBuffer* out,
                      absl::string_view what) {
    if (absl::Status s = out->Allocate(host.size() * 4); !s.ok()) return s;
    return d_->Check(d_->cuMemcpyHtoD(out->get(), host.data(), host.size() * 4),
                     absl::StrCat("copy ", what));
  }

  // The candidate's launch parameters on the problem's buffers and the
  // scratch its template asks for (counters start at zero and every launch
  // leaves them at zero); then gate 4, correctness.
  Gate Arm(const Problem& p, const ProblemBuffers& in, Candidate* c) {
    AttentionParams params = in.params;
    const LaunchGeometry& g = c->kernel.geometry;
    if (g.workspace_floats > 0) {
      if (absl::Status s = c->workspace.Allocate(g.workspace_floats * 4);
          !s.ok()) {
        return s;
      }
      params.workspace = reinterpret_cast<float*>(c->workspace.get());
    }
    if (g.counters > 0) {
      if (absl::Status s = c->counters.Allocate(g.counters * 4); !s.ok()) {
        return s;
      }
      d_->cuMemsetD16(c->counters.get(), 0, g.counters * 2);
      params.counters = reinterpret_cast<int*>(c->counters.get());
    }
    absl::StatusOr<LaunchArgs> args =
        MakeLaunchArgs(d_->cuTensorMapEncodeTiled, g, params, p);
    if (!args.ok()) return args.status();
    c->args = *args;
    return CheckOutput(p, in, *c);
  }

  // One launch on a re-poisoned output, copied back. A launch the driver
  // refuses ends the trial; a kernel that faults also breaks the evaluator.
  Gate RunOnce(Candidate& c, const ProblemBuffers& b,
               std::vector<uint16_t>* out) {
    d_->cuMemsetD16(b.o.get(), b.nan_bits, b.o_elems);
    if (CUresult r = c.Launch(); r != CUDA_SUCCESS) {
      return Rejected(TrialStatus::kResourceRejected,
                      d_->Check(r, "launch").ToString());
    }
    if (CUresult r = d_->cuCtxSynchronize(); r != CUDA_SUCCESS) {
      broken_ = absl::InternalError(absl::StrCat(
          "the CUDA context is unusable after a faulting kernel (",
          d_->Check(r, "kernel").message(), "); restart the evaluator"));
      return Rejected(TrialStatus::kCrashed, d_->Check(r, "kernel").ToString());
    }
    out->resize(b.o_elems);
    if (absl::Status s = d_->Check(
            d_->cuMemcpyDtoH(out->data(), b.o.get(), b.o_elems * 2), "copy O");
        !s.ok()) {
      broken_ = s;
      return Rejected(TrialStatus::kCrashed, s.ToString());
    }
    return std::nullopt;
  }

  // Correctness: every element written and finite, the same bits on every
  // run (a race shows as output that changes between runs on the same
  // inputs), sampled rows within tolerance of the host reference.
  Gate CheckOutput(const Problem& p, const ProblemBuffers& b, Candidate& c) {
    std::vector<uint16_t> ho;
    Gate first = RunOnce(c, b, &ho);
    if (!first.ok() || first->has_value()) return first;
    for (size_t i = 0; i < ho.size(); ++i) {
      if (!std::isfinite(HalfBitsToFloat(ho[i], p.dtype))) {
        return Rejected(
            TrialStatus::kIncorrect,
            absl::StrCat("output element ", i,
                         " is NaN or infinite (unwritten or overflowed)"));
      }
    }
    for (int repeat = 0; repeat < repeat_runs_; ++repeat) {
      std::vector<uint16_t> again;
      Gate run = RunOnce(c, b, &again);
      if (!run.ok() || run->has_value()) return run;
      if (again != ho) {
        size_t at = 0;
        while (again[at] == ho[at]) ++at;
        return Rejected(
            TrialStatus::kIncorrect,
            absl::StrCat("output differs between runs on the same inputs "
                         "(first at element ",
                         at, "): a race"));
      }
    }
    return CompareWithReference(b, ho);
  }

  Gate CompareWithReference(const ProblemBuffers& b,
                            const std::vector<uint16_t>& ho) {
    const InputLayout& layout = b.layout;
    const Problem& p = layout.problem();
    std::vector<RowIndex> rows = SampleRows(layout);
    std::vector<float> want = Reference(b, rows);
    std::vector<float> got;
    got.reserve(want.size());
    const int64_t dv = HeadDimV(p);
    for (const RowIndex& r : rows) {
      const size_t base = layout.OIndex(r.batch, r.head, r.row);
      for (int64_t c = 0; c < dv; ++c) {
        got.push_back(HalfBitsToFloat(ho[base + c], p.dtype));
      }
    }
    const ErrorStats err = CompareRows(got, want);
    const Tolerance tol = ToleranceFor(p);
    if (err.max_abs > tol.max_abs || err.rel_l2 > tol.rel_l2) {
      return Rejected(
          TrialStatus::kIncorrect,
          absl::StrFormat("max abs error %.3g (limit %.3g), relative L2 error "
                          "%.3g (limit %.3g) over %d sampled rows",
                          err.max_abs, tol.max_abs, err.rel_l2, tol.rel_l2,
                          static_cast<int>(rows.size())));
    }
    return std::nullopt;
  }

  // Rows of at most kCheckedHeads (batch, head) pairs: the first and the
  // last head always, and in each head its first and last row, row 17 and
  // random ones. Few heads keep the reference's K/V small.
  std::vector<RowIndex> SampleRows(const InputLayout& layout) {
    const Problem& p = layout.problem();
    std::uniform_int_distribution<int64_t> b(0, p.batch - 1), h(0, p.heads - 1);
    std::vector<std::pair<int64_t, int64_t>> heads = {
        {0, 0}, {p.batch - 1, p.heads - 1}};
    while (static_cast<int>(heads.size()) < kCheckedHeads) {
      heads.push_back({b(rng_), h(rng_)});
    }
    std::sort(heads.begin(), heads.end());
    heads.erase(std::unique(heads.begin(), heads.end()), heads.end());
    std::vector<RowIndex> rows;
    for (auto [batch, head] : heads) {
      const int64_t seq_q = layout.lengths().q[batch];
      if (seq_q == 0) continue;
      const int64_t per_head = std::min<int64_t>(
          kCheckedRows / static_cast<int64_t>(heads.size()), seq_q);
      std::uniform_int_distribution<int64_t> r(0, seq_q - 1);
      std::vector<int64_t> picked = {0, seq_q - 1,
                                     std::min<int64_t>(17, seq_q - 1)};
      while (static_cast<int64_t>(picked.size()) < per_head) {
        picked.push_back(r(rng_));
      }
      for (int64_t row : picked) rows.push_back({batch, head, row});
    }
    return rows;
  }

  // The reference output of `rows`, from inputs recomputed on the host
  // (e4m3 K and V dequantized by PrepareDescale's factors; PrepareSinks's
  // sinks, PrepareAlibi's slopes).
  std::vector<float> Reference(const ProblemBuffers& b,
                               const std::vector<RowIndex>& rows) {
    const InputLayout& layout = b.layout;
    const InputSeeds& seeds = b.seeds;
    const std::vector<float>& descale = b.descale_host;
    const Problem& p = layout.problem();
    const int64_t d = p.head_dim;
    const int64_t dv = HeadDimV(p);
    auto element = [&](uint64_t seed, uint64_t index, float offset,
                       DType dtype) {
      return HalfBitsToFloat(RandomInputBits(seed, index, offset, dtype),
                             dtype);
    };
    const DType kv_dtype = KvDType(p);
    const int64_t per_tensor = p.batch * p.kv_heads;
    std::map<std::pair<int64_t, int64_t>,
             std::pair<std::vector<float>, std::vector<float>>>
        kv_heads;
    std::vector<float> out(rows.size() * dv);
    std::vector<float> q_row(d);
    for (size_t i = 0; i < rows.size(); ++i) {
      const RowIndex& r = rows[i];
      const int64_t kvh = r.head / (p.heads / p.kv_heads);
      // The sequence as a problem of its own lengths.
      Problem seq = p;
      seq.seq_q = layout.lengths().q[r.batch];
      seq.seq_k = layout.lengths().k[r.batch];
      auto& [k, v] = kv_heads[{r.batch, kvh}];
      if (k.empty()) {
        const int64_t at = r.batch * p.kv_heads + kvh;
        const float k_scale = descale.empty() ? 1.f : descale[at];
        const float v_scale = descale.empty() ? 1.f : descale[per_tensor + at];
        k.resize(seq.seq_k * d);
        v.resize(seq.seq_k * dv);
        for (int64_t j = 0; j < seq.seq_k; ++j) {
          const uint64_t k_base = layout.KIndex(r.batch, kvh, j);
          for (int64_t c = 0; c < d; ++c) {
            k[j * d + c] =
                k_scale * element(seeds.k, k_base + c, 0.f, kv_dtype);
          }
          const uint64_t v_base = layout.VIndex(r.batch, kvh, j);
          for (int64_t c = 0; c < dv; ++c) {
            v[j * dv + c] =
                v_scale * element(seeds.v, v_base + c, kVOffset, kv_dtype);
          }
        }
      }
      const uint64_t q_base = layout.QIndex(r.batch, r.head, r.row);
      const float q_scale =
          p.q_fp8 ? descale[2 * per_tensor + r.batch * p.kv_heads + kvh] : 1.f;
      for (int64_t c = 0; c < d; ++c) {
        q_row[c] = q_scale * element(seeds.q, q_base + c, 0.f, QDType(p));
      }
      ReferenceRow(seq, r.row, q_row.data(), k.data(), v.data(), &out[i * dv],
                   p.sinks ? b.sinks_host[r.head] : 0.f,
                   p.alibi ? b.alibi_host[r.batch * p.heads + r.head] : 0.f);
    }
    return out;
  }

  absl::Status Fill(CUdeviceptr out, uint64_t n, uint64_t seed, float offset,
                    DType dtype) {
    if (fill_ == nullptr) {
      if (absl::Status s = LoadFillKernel(); !s.ok()) return s;
    }
    unsigned long long count = n, seed_arg = seed;
    int format = dtype == DType::kE4m3 ? 2 : dtype == DType::kBf16 ? 1 : 0;
    void* args[] = {&out, &count, &seed_arg, &offset, &format};
    const unsigned blocks =
        static_cast<unsigned>(std::clamp<uint64_t>((n + 255) / 256, 1, 8192));
    return d_->Check(d_->cuLaunchKernel(fill_, blocks, 1, 1, 256, 1, 1, 0,
                                        nullptr, args, nullptr),
                     "random fill");
  }

  absl::Status LoadFillKernel() {
    return LoadKernel(kRandomFillSource, "random_fill.cu",
                      "evotune_random_fill", &fill_cubin_, &fill_module_,
                      &fill_);
  }

  // Compiles `source` for this device, loads it and looks up `name`; the
  // cubin is kept beside its module.
  absl::Status LoadKernel(const char* source, const char* file,
                          const char* name, std::string* cubin_out,
                          CUmodule* module, CUfunction* fn) {
    absl::StatusOr<std::string> cubin =
        CompileSource(source, file, ArchName(info_.cc_major, info_.cc_minor));
    if (!cubin.ok()) return cubin.status();
    *cubin_out = *std::move(cubin);
    if (absl::Status s =
            d_->Check(d_->cuModuleLoadData(module, cubin_out->data()),
                      absl::StrCat("load ", file));
        !s.ok()) {
      return s;
    }
    return d_->Check(d_->cuModuleGetFunction(fn, *module, name),
                     absl::StrCat("function ", name));
  }

  // Warm-up, and an estimate of one launch to size each kernel's samples;
  // then `turns` turns, each kernel one sample per turn in a new random
  // order, each sample of several kernels after the cache scrub (with
  // cold_l2, each launch). A launch that fails (a kernel that faults) breaks
  // the evaluator: an error, with the kernel's index in *failed.
  absl::StatusOr<std::vector<TrialResult>> TimeTogether(
      const std::vector<std::unique_ptr<Candidate>>& cs, int turns,
      size_t* failed) {
    const bool scrub = cold_l2_ || cs.size() > 1;
    if (scrub) {
      if (absl::Status s = LoadScrub(); !s.ok()) return s;
    }
    CUevent start, stop;
    d_->cuEventCreate(&start, CU_EVENT_DEFAULT);
    d_->cuEventCreate(&stop, CU_EVENT_DEFAULT);
    auto time_launches = [&](Candidate& c, int n, double* us) {
      *us = 0;
      // Cold: n launches, each timed alone after the scrub; else one scrub
      // (when kernels take turns) and n launches back to back.
      const int timings = cold_l2_ ? n : 1;
      for (int t = 0; t < timings; ++t) {
        if (scrub) {
          if (absl::Status s = Scrub(); !s.ok()) return s;
        }
        double one = 0;
        if (absl::Status s = TimeLaunches(c, n / timings, start, stop, &one);
            !s.ok()) {
          return s;
        }
        *us += one;
      }
      return absl::OkStatus();
    };
    std::vector<int> per_sample(cs.size());
    std::vector<std::vector<double>> samples(cs.size());
    std::vector<size_t> order(cs.size());
    std::iota(order.begin(), order.end(), 0);
    absl::Status s;
    for (int turn = -1; s.ok() && turn < turns; ++turn) {
      std::shuffle(order.begin(), order.end(), rng_);
      for (size_t i : order) {
        const bool warm_up = turn < 0;
        double us = 0;
        s = time_launches(*cs[i], warm_up ? 3 : per_sample[i], &us);
        if (!s.ok()) {
          *failed = i;
          break;
        }
        if (warm_up) {
          per_sample[i] = std::clamp(
              static_cast<int>(std::ceil(kMinSampleUs / std::max(us / 3, 0.5))),
              1, 10000);
        } else {
          samples[i].push_back(us / per_sample[i]);
        }
      }
    }
    d_->cuEventDestroy(start);
    d_->cuEventDestroy(stop);
    if (!s.ok()) {
      broken_ = s;
      return s;
    }
    std::vector<TrialResult> results;
    for (std::vector<double>& v : samples) results.push_back(Summary(v));
    return results;
  }

  // The GPU time of n launches of c back to back, in *us.
  absl::Status TimeLaunches(Candidate& c, int n, CUevent start, CUevent stop,
                            double* us) {
    d_->cuEventRecord(start, nullptr);
    for (int i = 0; i < n; ++i) {
      if (absl::Status s = d_->Check(c.Launch(), "launch"); !s.ok()) return s;
    }
    d_->cuEventRecord(stop, nullptr);
    absl::Status s =
        d_->Check(d_->cuEventSynchronize(stop), "cuEventSynchronize");
    float ms = 0;
    d_->cuEventElapsedTime(&ms, start, stop);
    *us = ms * 1000.0;
    return s;
  }

  // The cache scrub kernel and its buffer (cache_scrub.h), filled once.
  absl::Status LoadScrub() {
    if (scrub_fn_ != nullptr) return absl::OkStatus();
    if (scrub_vectors_ == 0) {
      if (absl::Status s = AllocateScrub(); !s.ok()) return s;
    }
    return LoadKernel(kCacheScrubSource, "cache_scrub.cu",
                      "evotune_cache_scrub", &scrub_cubin_, &scrub_module_,
                      &scrub_fn_);
  }

  absl::Status AllocateScrub() {
    CUdevice dev;
    int l2_bytes = 0;
    if (absl::Status s = d_->Check(d_->cuCtxGetDevice(&dev), "cuCtxGetDevice");
        !s.ok()) {
      return s;
    }
    if (absl::Status s =
            d_->Check(d_->cuDeviceGetAttribute(
                          &l2_bytes, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, dev),
                      "L2 cache size");
        !s.ok()) {
      return s;
    }
    const size_t bytes = CacheScrubBytes(l2_bytes);
    if (absl::Status s = scrub_.Allocate(bytes); !s.ok()) return s;
    if (absl::Status s = sink_.Allocate(4); !s.ok()) return s;
    if (absl::Status s =
            d_->Check(d_->cuMemsetD32Async(scrub_.get(), 1, bytes / 4, nullptr),
                      "cache scrub fill");
        !s.ok()) {
      return s;
    }
    scrub_vectors_ = bytes / 16;
    return absl::OkStatus();
  }

  absl::Status Scrub() {
    CUdeviceptr p = scrub_.get(), sink = sink_.get();
    unsigned long long n = scrub_vectors_;
    void* args[] = {&p, &n, &sink};
    const unsigned blocks =
        static_cast<unsigned>(std::max(1, info_.limits.multiprocessors) * 8);
    return d_->Check(d_->cuLaunchKernel(scrub_fn_, blocks, 1, 1, 256, 1, 1, 0,
                                        nullptr, args, nullptr),
                     "cache scrub");
  }

  const CudaDriver* d_;
  CUcontext ctx_;
  DeviceInfo info_;
  int repeat_runs_;
  int compile_threads_;
  bool cold_l2_;
  CubinCache cubins_;
  DeviceBuffer scrub_, sink_;
  size_t scrub_vectors_ = 0;
  std::string scrub_cubin_;
  CUmodule scrub_module_ = nullptr;
  CUfunction scrub_fn_ = nullptr;
  std::mt19937_64 rng_{std::random_device{}()};
  std::string fill_cubin_;
  CUmodule fill_module_ = nullptr;
  CUfunction fill_ = nullptr;
  absl::Status broken_;
};

// With a compile_arch, configs are judged for the architecture the code is
// compiled for (sm_89's runs no wgmma, and the FP8 attention of its
// templates), which must not be newer than the device.
absl::Status JudgeAsCompileArch(const std::string& compile_arch,
                                DeviceInfo& info) {
  if (compile_arch.empty()) return absl::OkStatus();
  const int cc = ArchComputeCapability(compile_arch);
  const int device = 10 * info.cc_major + info.cc_minor;
  if (cc == 0 || cc > device) {
    return absl::InvalidArgumentError(absl::StrCat(
        "compile_arch: \"", compile_arch,
        "\" is not an architecture (sm_XY or compute_XY) of compute "
        "capability ",
        info.cc_major, ".", info.cc_minor, " or older"));
  }
  info.limits.compute_capability = cc;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Evaluator>> MakeCudaEvaluator(
    const CudaEvaluatorOptions& options) {
  const CudaDriver* d = options.driver;
  if (d == nullptr) {
    absl::StatusOr<const CudaDriver*> machine = CudaDriver::Get();
    if (!machine.ok()) return machine.status();
    d = *machine;
  }
  absl::StatusOr<DeviceInfo> info = ProbeCudaDevice(*d, options.ordinal);
  if (!info.ok()) return info.status();
  if (absl::Status s = JudgeAsCompileArch(options.compile_arch, *info);
      !s.ok()) {
    return s;
  }
  info->nvrtc_version = NvrtcVersion();  // Part of the device key.
  CUdevice dev;
  if (absl::Status s =
          d->Check(d->cuDeviceGet(&dev, options.ordinal), "cuDeviceGet");
      !s.ok()) {
    return s;
  }
  CUcontext ctx;
  if (absl::Status s = d->Check(d->cuDevicePrimaryCtxRetain(&ctx, dev),
                                "cuDevicePrimaryCtxRetain");
      !s.ok()) {
    return s;
  }
  return std::unique_ptr<Evaluator>(
      new CudaEvaluator(d, ctx, *std::move(info), options));
}

}  // namespace evotune
