#include "evotune/runtime.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "kernel_templates/kernel_template.h"
#include "launch/cuda_driver.h"
#include "launch/launcher.h"
#include "launch/tensor_maps.h"
#include "tuner/wire/kernel_bundle.h"
#include "tuner/wire/message_convert.h"

namespace evotune {
namespace {

std::string BundleKey(const std::string& problem_key, const std::string& arch) {
  return absl::StrCat(problem_key, " ", arch);
}

// Makes `ctx` current for its lifetime (modules load into, and kernels
// launch in, the current context).
class ScopedContext {
 public:
  ScopedContext(const CudaDriver& d, CUcontext ctx) : d_(d) {
    pushed_ = d_.cuCtxPushCurrent(ctx) == CUDA_SUCCESS;
  }
  ~ScopedContext() {
    CUcontext popped;
    if (pushed_) d_.cuCtxPopCurrent(&popped);
  }
  bool ok() const { return pushed_; }

 private:
  const CudaDriver& d_;
  bool pushed_ = false;
};

AttentionParams CallParams(const AttentionCall& call) {
  AttentionParams p = ContiguousParams(call.problem);
  p.q = call.q.data;
  p.k = call.k.data;
  p.v = call.v.data;
  p.o = call.o.data;
  p.q_batch_stride = call.q.batch_stride;
  p.q_head_stride = call.q.head_stride;
  p.q_row_stride = call.q.row_stride;
  p.k_batch_stride = call.k.batch_stride;
  p.k_head_stride = call.k.head_stride;
  p.k_row_stride = call.k.row_stride;
  p.v_batch_stride = call.v.batch_stride;
  p.v_head_stride = call.v.head_stride;
  p.v_row_stride = call.v.row_stride;
  p.o_batch_stride = call.o.batch_stride;
  p.o_head_stride = call.o.head_stride;
  p.o_row_stride = call.o.row_stride;
  if (call.scale > 0) p.scale_log2 = call.scale * 1.4426950408889634f;
  return p;
}

absl::StatusOr<const CudaDriver*> Driver() {
  absl::StatusOr<const CudaDriver*> d = CudaDriver::Get();
  if (!d.ok()) return absl::FailedPreconditionError(d.status().message());
  return d;
}

// The context of `stream` (for stream 0, the current one).
absl::StatusOr<CUcontext> StreamContext(const CudaDriver& d, CUstream stream) {
  CUcontext ctx = nullptr;
  if (d.cuStreamGetCtx(stream, &ctx) != CUDA_SUCCESS || ctx == nullptr) {
    return absl::FailedPreconditionError(
        "no CUDA context: the stream has none and none is current");
  }
  return ctx;
}

}  // namespace

absl::StatusOr<std::unique_ptr<BundleSource>> BundleSource::Open(
    const std::string& path) {
  absl::StatusOr<v1::KernelBundle> bundle = ReadKernelBundle(path);
  if (!bundle.ok()) return bundle.status();
  std::map<std::string, v1::Kernel> kernels;
  for (v1::Kernel& k : *bundle->mutable_kernels()) {
    absl::StatusOr<Problem> p = ProblemFromProto(k.problem());
    if (!p.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": a kernel's ", p.status().message()));
    }
    kernels[BundleKey(ProblemKey(*p), k.arch())] = std::move(k);
  }
  return std::unique_ptr<BundleSource>(
      new BundleSource(path, std::move(kernels)));
}

absl::StatusOr<v1::Kernel> BundleSource::Find(const Problem& problem,
                                              const std::string& device,
                                              const std::string& arch) {
  auto it = kernels_.find(BundleKey(ProblemKey(problem), arch));
  if (it == kernels_.end()) {
    return absl::NotFoundError(absl::StrCat(
        path_, " has no kernel for ", ProblemKey(problem), " on ", arch, " (",
        kernels_.size(), " kernels; evotune export adds problems)"));
  }
  return it->second;
}

struct Runtime::Loaded {
  std::string problem_key;
  v1::Kernel kernel;  // Without its cubin and PTX.
  CUmodule module = nullptr;
  LoadedKernel launch;  // Its function, geometry and multiprocessors.
};

struct Runtime::Scratch {
  CUdeviceptr workspace = 0;
  CUdeviceptr counters = 0;
};

Runtime::Runtime(std::unique_ptr<KernelSource> source)
    : source_(std::move(source)) {}

Runtime::~Runtime() {
  absl::StatusOr<const CudaDriver*> d = CudaDriver::Get();
  if (!d.ok()) return;
  for (auto& [key, s] : scratch_) {
    ScopedContext current(**d, std::get<0>(key));
    if (s->workspace != 0) (*d)->cuMemFree(s->workspace);
    if (s->counters != 0) (*d)->cuMemFree(s->counters);
  }
  for (auto& [key, k] : loaded_) {
    ScopedContext current(**d, key.first);
    (*d)->cuModuleUnload(k->module);
  }
}

absl::StatusOr<v1::Kernel> Runtime::KernelFor(const Problem& problem,
                                              CUstream stream) {
  if (absl::Status s = ValidateProblem(problem); !s.ok()) return s;
  absl::StatusOr<const CudaDriver*> d = Driver();
  if (!d.ok()) return d.status();
  absl::StatusOr<CUcontext> ctx = StreamContext(**d, stream);
  if (!ctx.ok()) return ctx.status();
  absl::StatusOr<Loaded*> k = Load(problem, *ctx);
  if (!k.ok()) return k.status();
  return (*k)->kernel;
}

absl::StatusOr<Runtime::Loaded*> Runtime::Load(const Problem& problem,
                                               CUcontext ctx) {
  const std::string problem_key = ProblemKey(problem);
  absl::MutexLock lock(&mu_);
  auto it = loaded_.find({ctx, problem_key});
  if (it != loaded_.end()) return it->second.get();
  const CudaDriver& d = **CudaDriver::Get();
  ScopedContext current(d, ctx);
  CUdevice dev;
  if (!current.ok() || d.cuCtxGetDevice(&dev) != CUDA_SUCCESS) {
    return absl::FailedPreconditionError("no CUDA device in the context");
  }
  absl::StatusOr<DeviceInfo> device = ProbeCudaDevice(static_cast<int>(dev));
  if (!device.ok()) return device.status();
  const std::string arch = ArchName(device->cc_major, device->cc_minor);
  absl::StatusOr<v1::Kernel> kernel =
      source_->Find(problem, device->name, arch);
  if (!kernel.ok()) return kernel.status();
  if (kernel->param_layout_version() != kParamLayoutVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("the kernel for ", problem_key, " has parameter layout ",
                     kernel->param_layout_version(), ", this runtime launches ",
                     kParamLayoutVersion, "; export or fetch it again"));
  }
  if (kernel->arch() != arch) {
    return absl::FailedPreconditionError(
        absl::StrCat("the kernel for ", problem_key, " is compiled for ",
                     kernel->arch(), ", the device is ", arch));
  }
  auto loaded = std::make_unique<Loaded>();
  loaded->problem_key = problem_key;
  if (absl::Status s =
          d.Check(d.cuModuleLoadData(&loaded->module, kernel->cubin().data()),
                  "cuModuleLoadData");
      !s.ok()) {
    return s;
  }
  loaded->launch.geometry = GeometryFromProto(kernel->geometry());
  loaded->launch.multiprocessors = device->limits.multiprocessors;
  absl::Status s =
      d.Check(d.cuModuleGetFunction(&loaded->launch.function, loaded->module,
                                    kernel->kernel_name().c_str()),
              "cuModuleGetFunction");
  // Static shared memory adds to the dynamic amount: always raise the limit.
  if (s.ok() && loaded->launch.geometry.smem_bytes > 0) {
    s = d.Check(d.cuFuncSetAttribute(
                    loaded->launch.function,
                    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    static_cast<int>(loaded->launch.geometry.smem_bytes)),
                "cuFuncSetAttribute");
  }
  if (!s.ok()) {
    d.cuModuleUnload(loaded->module);
    return s;
  }
  kernel->clear_cubin();
  kernel->clear_ptx();
  loaded->kernel = *std::move(kernel);
  Loaded* out = loaded.get();
  loaded_[{ctx, problem_key}] = std::move(loaded);
  return out;
}

absl::StatusOr<Runtime::Scratch*> Runtime::ScratchFor(const Loaded& kernel,
                                                      CUcontext ctx,
                                                      CUstream stream) {
  const std::tuple<CUcontext, std::string, CUstream> key = {
      ctx, kernel.problem_key, stream};
  absl::MutexLock lock(&mu_);
  std::unique_ptr<Scratch>& scratch = scratch_[key];
  if (scratch != nullptr) return scratch.get();
  const CudaDriver& d = **CudaDriver::Get();
  ScopedContext current(d, ctx);
  auto fresh = std::make_unique<Scratch>();
  const LaunchGeometry& g = kernel.launch.geometry;
  absl::Status s;
  if (g.workspace_floats > 0) {
    s = d.Check(d.cuMemAlloc(&fresh->workspace, g.workspace_floats * 4),
                "cuMemAlloc (workspace)");
  }
  if (s.ok() && g.counters > 0) {
    s = d.Check(d.cuMemAlloc(&fresh->counters, g.counters * 4),
                "cuMemAlloc (counters)");
    // On the stream, so that the first launch there sees them zero.
    if (s.ok()) {
      s = d.Check(d.cuMemsetD32Async(fresh->counters, 0, g.counters, stream),
                  "cuMemsetD32Async (counters)");
    }
  }
  if (!s.ok()) {
    if (fresh->workspace != 0) d.cuMemFree(fresh->workspace);
    if (fresh->counters != 0) d.cuMemFree(fresh->counters);
    scratch_.erase(key);
    return s;
  }
  scratch = std::move(fresh);
  return scratch.get();
}

absl::Status Runtime::Attention(const AttentionCall& call, CUstream stream) {
  if (absl::Status s = CheckAttentionCall(call); !s.ok()) return s;
  absl::StatusOr<const CudaDriver*> driver = Driver();
  if (!driver.ok()) return driver.status();
  const CudaDriver& d = **driver;
  absl::StatusOr<CUcontext> context = StreamContext(d, stream);
  if (!context.ok()) return context.status();
  const CUcontext ctx = *context;
  absl::StatusOr<Loaded*> kernel = Load(call.problem, ctx);
  if (!kernel.ok()) return kernel.status();
  const LaunchGeometry& g = (*kernel)->launch.geometry;
  AttentionParams params = CallParams(call);
  params.workspace = call.workspace;
  params.counters = call.counters;
  const bool own_scratch =
      (g.workspace_floats > 0 && call.workspace == nullptr) ||
      (g.counters > 0 && call.counters == nullptr);
  if (own_scratch) {
    absl::StatusOr<Scratch*> scratch = ScratchFor(**kernel, ctx, stream);
    if (!scratch.ok()) return scratch.status();
    params.workspace = reinterpret_cast<float*>((*scratch)->workspace);
    params.counters = reinterpret_cast<int*>((*scratch)->counters);
  }
  absl::StatusOr<LaunchArgs> args =
      MakeLaunchArgs(d.cuTensorMapEncodeTiled, g, params, call.problem);
  if (!args.ok()) return args.status();
  ScopedContext current(d, ctx);
  return d.Check(LaunchAttention(d, (*kernel)->launch, *args, stream),
                 "cuLaunchKernel");
}

}  // namespace evotune
