#include "evotune/runtime.h"

#include <algorithm>
#include <functional>
#include <utility>
#include <vector>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "kernel_templates/kernel_template.h"
#include "kernel_templates/template_registry.h"
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
  p.cu_seqlens_q = call.cu_seqlens_q;
  p.cu_seqlens_k = call.cu_seqlens_k;
  p.seqused_k = call.seqused_k;
  p.rows_q = static_cast<int>(call.q.seq);
  p.rows_k = static_cast<int>(call.k.seq);
  if (call.problem.layout == Layout::kPaged) {  // K and V are the pages.
    p.rows_k = static_cast<int>(call.k.batch * call.k.seq);
    p.block_table = call.block_table;
    p.block_table_stride = static_cast<int>(call.block_table_stride);
  }
  // Packed tensors are one batch whose rows start at cu_seqlens: the kernels
  // step no batch stride.
  if (PackedQ(call)) p.q_batch_stride = p.o_batch_stride = 0;
  if (call.problem.layout == Layout::kVarlen) {
    p.k_batch_stride = p.v_batch_stride = 0;
  }
  if (call.scale > 0) p.scale_log2 = call.scale * 1.4426950408889634f;
  p.q_descale = call.q_descale;
  p.k_descale = call.k_descale;
  p.v_descale = call.v_descale;
  p.descale_batch_stride = static_cast<int>(call.descale_batch_stride);
  p.descale_head_stride = static_cast<int>(call.descale_head_stride);
  p.sinks = call.sinks;
  p.alibi_slopes = call.alibi_slopes;
  p.alibi_batch_stride = static_cast<int>(call.alibi_batch_stride);
  return p;
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

// The problems one kernel may serve provisionally: all but seq_k alike.
std::string ClassKey(const Problem& p) {
  return absl::StrCat(p.batch, " ", p.heads, " ", p.kv_heads, " ", p.seq_q, " ",
                      p.head_dim, " ", HeadDimV(p), " ", p.causal, " ",
                      DTypesName(p), " ", LayoutName(p.layout), p.page_size,
                      ScoreModsName(p));
}

// OK when the runtime can launch `kernel` on a device of `arch`.
absl::Status CheckServable(const v1::Kernel& kernel,
                           const std::string& problem_key,
                           const std::string& arch) {
  if (kernel.param_layout_version() != kParamLayoutVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("the kernel for ", problem_key, " has parameter layout ",
                     kernel.param_layout_version(), ", this runtime launches ",
                     kParamLayoutVersion, "; export or fetch it again"));
  }
  if (kernel.arch() != arch) {
    return absl::FailedPreconditionError(
        absl::StrCat("the kernel for ", problem_key, " is compiled for ",
                     kernel.arch(), ", the device is ", arch));
  }
  return absl::OkStatus();
}

// The geometry of `kernel`'s config on another problem (a length of its
// class, a problem within its bucket), computed by the template it was
// compiled from; INVALID_ARGUMENT where this build lacks that template or
// the config does not run on the problem.
absl::StatusOr<LaunchGeometry> GeometryOn(const v1::Kernel& kernel,
                                          const Problem& problem,
                                          const DeviceLimits& limits) {
  const KernelTemplate* t =
      TemplateRegistry::Builtin().Find(kernel.template_name());
  if (t == nullptr || t->hash != kernel.template_hash()) {
    return absl::InvalidArgumentError(
        absl::StrCat("this runtime lacks the version of template ",
                     kernel.template_name(), " the kernel was compiled from"));
  }
  absl::StatusOr<Config> config = ConfigFromProto(kernel.config());
  if (!config.ok()) return config.status();
  if (absl::Status s = CheckServes(*t, *config, problem, limits); !s.ok()) {
    return s;
  }
  return t->geometry(*config, problem);
}

// `kernel` (for another problem) as served for `problem`: its geometry there.
absl::Status Rebase(const Problem& problem, const DeviceLimits& limits,
                    v1::Kernel* kernel) {
  absl::StatusOr<LaunchGeometry> g = GeometryOn(*kernel, problem, limits);
  if (!g.ok()) return g.status();
  *kernel->mutable_source_problem() = kernel->problem();
  *kernel->mutable_problem() = ProblemToProto(problem);
  *kernel->mutable_geometry() = GeometryToProto(*g);
  kernel->set_transferred(true);
  kernel->set_defaults(false);
  return absl::OkStatus();
}

// Whether two answers are one compiled kernel (the config of one template
// version for one architecture).
bool SameKernel(const v1::Kernel& a, const v1::Kernel& b) {
  absl::StatusOr<Config> x = ConfigFromProto(a.config());
  absl::StatusOr<Config> y = ConfigFromProto(b.config());
  return a.template_name() == b.template_name() &&
         a.template_hash() == b.template_hash() && a.arch() == b.arch() &&
         x.ok() && y.ok() && *x == *y;
}

// A cubin serves every problem of its head_dim and dtype: one module for
// all of them, known by the kernel's name and the cubin's bytes.
std::string ModuleIdentity(const v1::Kernel& kernel) {
  return absl::StrCat(kernel.kernel_name(), " ", kernel.cubin().size(), " ",
                      absl::Hash<std::string>()(kernel.cubin()));
}

bool Capturing(const CudaDriver& d, CUstream stream) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  return d.cuStreamIsCapturing == nullptr ||
         d.cuStreamIsCapturing(stream, &status) != CUDA_SUCCESS ||
         status != CU_STREAM_CAPTURE_STATUS_NONE;
}

}  // namespace

absl::StatusOr<std::unique_ptr<BundleSource>> BundleSource::Open(
    const std::string& path) {
  absl::StatusOr<v1::KernelBundle> bundle = ReadKernelBundle(path);
  if (!bundle.ok()) return bundle.status();
  std::map<std::string, v1::Kernel> kernels;
  std::map<std::string, Problem> problems;
  for (v1::Kernel& k : *bundle->mutable_kernels()) {
    absl::StatusOr<Problem> p = ProblemFromProto(k.problem());
    if (!p.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": a kernel's ", p.status().message()));
    }
    const std::string key = BundleKey(ProblemKey(*p), k.arch());
    problems[key] = *p;
    kernels[key] = std::move(k);
  }
  std::vector<std::pair<Problem, std::string>> listed;
  std::set<std::string> archs;
  for (const auto& [key, k] : kernels) {
    listed.push_back({problems[key], k.arch()});
    archs.insert(k.arch());
  }
  const int64_t created = bundle->created_unix_s();  // 0: not dated.
  const std::string made = absl::StrCat(
      kernels.size(), " kernels for ",
      archs.empty() ? "no GPU" : absl::StrJoin(archs, ", "),
      created == 0 ? ""
                   : absl::StrCat(", made ", absl::FormatTime(
                                                 "%Y-%m-%d",
                                                 absl::FromUnixSeconds(created),
                                                 absl::UTCTimeZone())));
  std::string about = bundle->about().empty()
                          ? absl::StrCat("bundle ", path, ": ", made)
                          : absl::StrCat("bundle ", path, ": ", bundle->about(),
                                         " (", made, ")");
  return std::unique_ptr<BundleSource>(new BundleSource(
      path, std::move(kernels), std::move(listed), std::move(about)));
}

std::string BundleSource::BucketKey(const Problem& problem,
                                    const std::string& arch) const {
  auto size = [](const Problem& p) { return p.batch * p.seq_q * p.seq_k; };
  // The smallest of the score mods acting on the problem, else of mods
  // serving them alike.
  const Problem active = ActiveScoreMods(problem);
  auto same = [&](const Problem& p) { return SameScoreMods(p, active); };
  auto serves = [&](const Problem& p) { return ServesScoreMods(p, problem); };
  const std::function<bool(const Problem&)> passes[] = {same, serves};
  for (const auto& mods : passes) {
    const Problem* best = nullptr;
    for (const auto& [p, a] : problems_) {
      const bool holds =
          a == arch && p.heads == problem.heads &&
          p.kv_heads == problem.kv_heads && p.head_dim == problem.head_dim &&
          HeadDimV(p) == HeadDimV(problem) && mods(p) &&
          p.dtype == problem.dtype && p.kv_fp8 == problem.kv_fp8 &&
          p.q_fp8 == problem.q_fp8 && p.layout == problem.layout &&
          p.page_size == problem.page_size && p.batch >= problem.batch &&
          p.seq_q >= problem.seq_q && p.seq_k >= problem.seq_k;
      if (holds && (best == nullptr || size(p) < size(*best))) best = &p;
    }
    if (best != nullptr) return BundleKey(ProblemKey(*best), arch);
  }
  return "";
}

absl::StatusOr<v1::Kernel> BundleSource::Find(const Problem& problem,
                                              const std::string& device,
                                              const std::string& arch) {
  auto it = kernels_.find(BundleKey(ProblemKey(problem), arch));
  if (it == kernels_.end()) it = kernels_.find(BucketKey(problem, arch));
  if (it == kernels_.end()) {
    return absl::NotFoundError(
        absl::StrCat(path_, " has no kernel for ", ProblemKey(problem), " on ",
                     arch, " nor for a problem holding it (", kernels_.size(),
                     " kernels; evotune export adds problems)"));
  }
  return it->second;
}

struct Runtime::Module {
  CUmodule module = nullptr;
  CUfunction function = nullptr;
  int64_t smem_limit = 0;  // The dynamic shared memory allowed so far.
};

struct Runtime::Loaded {
  std::string problem_key;
  v1::Kernel kernel;    // Without its cubin and PTX.
  LoadedKernel launch;  // Its module's function, this problem's geometry.
  Module* module = nullptr;
  CUcontext ctx = nullptr;
  // Served by its class's kernel until its own is fetched.
  bool provisional = false;
  uint64_t used_round = 0;  // The refresh round it was last launched in.
  bool asked = false;       // A refresh of it is queued or in flight.
  // Whether its kernel is the one tuned for it (no refresh needed).
  bool Settled() const {
    return !provisional && !kernel.defaults() && !kernel.transferred();
  }
};

struct Runtime::Fetch {
  CUcontext ctx;
  Problem problem;
  DeviceInfo device;
  v1::Kernel kernel;  // The source's answer, once it came.
};

// Scratch for the launches on one stream: the largest any kernel asked for
// so far, grown at least twofold. Buffers it outgrew stay allocated (a
// launch queued on the stream may still use them) until the runtime goes:
// together at most twice the largest, which is under twice the largest need.
struct Runtime::Scratch {
  CUdeviceptr workspace = 0, counters = 0;
  int64_t workspace_floats = 0, counter_count = 0;
  std::vector<CUdeviceptr> outgrown;
};

Runtime::Runtime(std::unique_ptr<KernelSource> source, const CudaDriver* driver)
    : source_(std::move(source)), driver_(driver) {}

Runtime::~Runtime() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (fetcher_.joinable()) fetcher_.join();
  absl::StatusOr<const CudaDriver*> d = Driver();
  if (!d.ok()) return;
  for (auto& [key, s] : scratch_) {
    ScopedContext current(**d, key.first);
    s->outgrown.push_back(s->workspace);
    s->outgrown.push_back(s->counters);
    for (CUdeviceptr p : s->outgrown) {
      if (p != 0) (*d)->cuMemFree(p);
    }
  }
  for (auto& [key, m] : modules_) {
    ScopedContext current(**d, key.first);
    (*d)->cuModuleUnload(m->module);
  }
}

absl::StatusOr<const CudaDriver*> Runtime::Driver() const {
  if (driver_ != nullptr) return driver_;
  absl::StatusOr<const CudaDriver*> d = CudaDriver::Get();
  if (!d.ok()) return absl::FailedPreconditionError(d.status().message());
  return d;
}

absl::StatusOr<v1::Kernel> Runtime::KernelFor(const Problem& problem,
                                              CUstream stream) {
  absl::StatusOr<AttentionPlan> plan = Plan(problem, stream, /*wait=*/true);
  if (!plan.ok()) return plan.status();
  return plan->kernel();
}

absl::Status Runtime::Prefetch(CUstream stream, int limit) {
  absl::StatusOr<const CudaDriver*> d = Driver();
  if (!d.ok()) return d.status();
  absl::StatusOr<CUcontext> ctx = StreamContext(**d, stream);
  if (!ctx.ok()) return ctx.status();
  absl::MutexLock lock(&mu_);
  absl::StatusOr<DeviceInfo> device = ContextDevice(**d, *ctx);
  if (!device.ok()) return device.status();
  if (limit > 0) {
    recent_asks_.push_back({*ctx, *std::move(device), limit});
    StartFetcher();
  }
  return absl::OkStatus();
}

absl::StatusOr<DeviceInfo> Runtime::ContextDevice(const CudaDriver& d,
                                                  CUcontext ctx) {
  auto it = devices_.find(ctx);
  if (it != devices_.end()) return it->second;
  ScopedContext current(d, ctx);
  CUdevice dev;
  if (!current.ok() || d.cuCtxGetDevice(&dev) != CUDA_SUCCESS) {
    return absl::FailedPreconditionError("no CUDA device in the context");
  }
  absl::StatusOr<DeviceInfo> device = ProbeCudaDevice(d, static_cast<int>(dev));
  if (device.ok()) devices_[ctx] = *device;
  return device;
}

absl::StatusOr<Runtime::Loaded*> Runtime::Load(const CudaDriver& d,
                                               const Problem& problem,
                                               CUcontext ctx, CUstream stream,
                                               bool wait) {
  const std::string problem_key = ProblemKey(problem);
  DeviceInfo device;
  {
    absl::MutexLock lock(&mu_);
    auto it = loaded_.find({ctx, problem_key});
    if (it != loaded_.end()) {
      Loaded* current = it->second.get();
      current->used_round = round_;
      return current->provisional || !fetched_.empty()
                 ? TakeOver(d, current, stream)
                 : current;
    }
    absl::StatusOr<DeviceInfo> found = ContextDevice(d, ctx);
    if (!found.ok()) return found.status();
    device = *std::move(found);
    // An answer that came for it while its class had nothing served (the
    // class may have since): taken as it is, never asked for again.
    auto arrived = arrived_.find({ctx, problem_key});
    if (arrived != arrived_.end() && !Capturing(d, stream)) {
      absl::StatusOr<v1::Kernel> kernel = std::move(arrived->second);
      arrived_.erase(arrived);
      return Install(d, problem, device, ctx, std::move(kernel));
    }
    auto sibling = latest_by_class_.find({ctx, ClassKey(problem)});
    if (source_->AnswersEveryProblem() && sibling != latest_by_class_.end()) {
      std::unique_ptr<Loaded> now =
          Provisional(d, *sibling->second, problem, device, ctx);
      if (now != nullptr) {
        // Its own kernel: asked for now, unless a fetch of it is on its way.
        if (pending_.count({ctx, problem_key}) == 0) {
          fetches_.push_back(
              std::make_unique<Fetch>(Fetch{ctx, problem, device, {}}));
          StartFetcher();
        } else {
          Promote({ctx, problem_key});
        }
        Loaded* out = now.get();
        out->used_round = round_;
        loaded_[{ctx, problem_key}] = std::move(now);
        return out;
      }
    }
    if (source_->AnswersEveryProblem() && !wait &&
        new_class_wait_ < absl::InfiniteDuration()) {
      return Unwaited(d, problem, device, ctx, stream);
    }
  }
  // Asked without the lock: launches of problems already served go on
  // while the source answers (a daemon may take seconds to compile).
  const std::string arch = ArchName(device.cc_major, device.cc_minor);
  absl::StatusOr<v1::Kernel> kernel = source_->Find(problem, device.name, arch);
  absl::MutexLock lock(&mu_);
  return Install(d, problem, device, ctx, std::move(kernel));
}

absl::StatusOr<Runtime::Loaded*> Runtime::Install(
    const CudaDriver& d, const Problem& problem, const DeviceInfo& device,
    CUcontext ctx, absl::StatusOr<v1::Kernel> kernel) {
  const std::string problem_key = ProblemKey(problem);
  // Another thread's, loaded while this one waited: launches may hold it.
  auto it = loaded_.find({ctx, problem_key});
  if (it != loaded_.end()) return it->second.get();
  if (!kernel.ok()) return kernel.status();
  const std::string arch = ArchName(device.cc_major, device.cc_minor);
  if (absl::Status s = CheckServable(*kernel, problem_key, arch); !s.ok()) {
    return s;
  }
  absl::StatusOr<Problem> served = ProblemFromProto(kernel->problem());
  if (served.ok() && *served != problem) {
    // A bucket's kernel (a bundle's for a problem holding this one): of
    // score mods serving this problem's (their presence is compiled in).
    absl::Status s = ServesScoreMods(*served, problem)
                         ? Rebase(problem, device.limits, &*kernel)
                         : absl::InvalidArgumentError(
                               "another causal mask, window or softcap");
    if (!s.ok()) {
      return absl::NotFoundError(
          absl::StrCat("the kernel for ", ProblemKey(*served),
                       " does not serve ", problem_key, ": ", s.message()));
    }
  }
  absl::StatusOr<std::unique_ptr<Loaded>> loaded =
      Make(d, *std::move(kernel), device, ctx);
  if (!loaded.ok()) return loaded.status();
  Loaded* out = loaded->get();
  out->problem_key = problem_key;
  out->used_round = round_;
  loaded_[{ctx, problem_key}] = *std::move(loaded);
  latest_by_class_[{ctx, ClassKey(problem)}] = out;
  if (source_->RefreshInterval() < absl::InfiniteDuration()) StartFetcher();
  return out;
}

absl::StatusOr<Runtime::Loaded*> Runtime::Unwaited(const CudaDriver& d,
                                                   const Problem& problem,
                                                   const DeviceInfo& device,
                                                   CUcontext ctx,
                                                   CUstream stream) {
  const std::pair<CUcontext, std::string> key{ctx, ProblemKey(problem)};
  // Installed outside capture only (a fetched kernel never changes there).
  const bool capturing = Capturing(d, stream);
  if (arrived_.count(key) == 0) {
    if (pending_.insert(key).second) {
      fetches_.push_back(
          std::make_unique<Fetch>(Fetch{ctx, problem, device, {}}));
      StartFetcher();
    } else {
      Promote(key);
    }
  }
  // One wait per class: later calls of it (retries, its other lengths)
  // while the answer is on its way are refused at once, never each made
  // to wait again.
  if (!capturing && new_class_wait_ > absl::ZeroDuration() &&
      waited_classes_.insert({ctx, ClassKey(problem)}).second) {
    auto came = [this, &key]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return arrived_.count(key) > 0 || stopping_;
    };
    mu_.AwaitWithTimeout(absl::Condition(&came), new_class_wait_);
  }
  auto arrived = arrived_.find(key);
  if (arrived != arrived_.end() && !capturing) {
    absl::StatusOr<v1::Kernel> kernel = std::move(arrived->second);
    arrived_.erase(arrived);
    return Install(d, problem, device, ctx, std::move(kernel));
  }
  return absl::UnavailableError(absl::StrCat(
      "the kernel for ", key.second,
      " is being fetched: serve this call another way and ask again"));
}

void Runtime::WaitForNewClasses(absl::Duration most) {
  absl::MutexLock lock(&mu_);
  new_class_wait_ = std::max(most, absl::ZeroDuration());
}

void Runtime::StartFetcher() {
  if (!fetcher_.joinable()) {
    fetcher_ = std::thread([this] { FetchInBackground(); });
  }
}

void Runtime::QueueRefreshes() {
  // Bounded per round: a program of many lengths asks for its busiest.
  constexpr size_t kMostPerRound = 64;
  size_t queued = 0;
  for (auto& [key, loaded] : loaded_) {
    Loaded& l = *loaded;
    if (queued == kMostPerRound) break;
    if (l.Settled() || l.provisional || l.asked || l.used_round != round_) {
      continue;
    }
    absl::StatusOr<Problem> problem = ProblemFromProto(l.kernel.problem());
    auto device = devices_.find(key.first);
    if (!problem.ok() || device == devices_.end()) continue;
    l.asked = true;
    fetches_.push_back(std::make_unique<Fetch>(
        Fetch{key.first, *problem, device->second, {}}));
    ++queued;
  }
  ++round_;
}

absl::StatusOr<std::unique_ptr<Runtime::Loaded>> Runtime::Make(
    const CudaDriver& d, v1::Kernel kernel, const DeviceInfo& device,
    CUcontext ctx) {
  absl::StatusOr<Module*> module = LoadModule(d, kernel, ctx);
  if (!module.ok()) return module.status();
  auto loaded = std::make_unique<Loaded>();
  loaded->module = *module;
  loaded->ctx = ctx;
  loaded->launch.function = (*module)->function;
  loaded->launch.geometry = GeometryFromProto(kernel.geometry());
  loaded->launch.multiprocessors = device.limits.multiprocessors;
  // Static shared memory adds to the dynamic amount: always raise the
  // limit, to the most any problem of the module asks.
  if (const int64_t smem = loaded->launch.geometry.smem_bytes;
      smem > (*module)->smem_limit) {
    ScopedContext current(d, ctx);
    if (absl::Status s =
            d.Check(d.cuFuncSetAttribute(
                        (*module)->function,
                        CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                        static_cast<int>(smem)),
                    "cuFuncSetAttribute");
        !s.ok()) {
      return s;
    }
    (*module)->smem_limit = smem;
  }
  kernel.clear_cubin();
  kernel.clear_ptx();
  loaded->kernel = std::move(kernel);
  return loaded;
}

std::unique_ptr<Runtime::Loaded> Runtime::Provisional(const CudaDriver& d,
                                                      const Loaded& sibling,
                                                      const Problem& problem,
                                                      const DeviceInfo& device,
                                                      CUcontext ctx) {
  // The geometry is the template's for this problem: only where this build
  // has the template the kernel was compiled from.
  auto loaded = std::make_unique<Loaded>();
  loaded->kernel = sibling.kernel;
  if (!Rebase(problem, device.limits, &loaded->kernel).ok()) return nullptr;
  loaded->problem_key = ProblemKey(problem);
  loaded->module = sibling.module;
  loaded->ctx = ctx;
  loaded->provisional = true;
  loaded->launch = sibling.launch;
  loaded->launch.geometry = GeometryFromProto(loaded->kernel.geometry());
  if (const int64_t smem = loaded->launch.geometry.smem_bytes;
      smem > sibling.module->smem_limit) {
    ScopedContext current(d, ctx);
    if (d.cuFuncSetAttribute(sibling.module->function,
                             CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                             static_cast<int>(smem)) != CUDA_SUCCESS) {
      return nullptr;
    }
    sibling.module->smem_limit = smem;
  }
  return loaded;
}

Runtime::Loaded* Runtime::TakeOver(const CudaDriver& d, Loaded* current,
                                   CUstream stream) {
  auto fetched = fetched_.find({current->ctx, current->problem_key});
  if (fetched == fetched_.end() || Capturing(d, stream)) return current;
  // Taken over here, on the launching thread outside capture (its module was
  // loaded in the background, or is loaded now).
  std::unique_ptr<Fetch> f = std::move(fetched->second);
  fetched_.erase(fetched);
  absl::StatusOr<std::unique_ptr<Loaded>> own =
      Make(d, std::move(f->kernel), f->device, f->ctx);
  // Scratch the caller sized for the provisional kernel must still do.
  const LaunchGeometry& now = current->launch.geometry;
  if (!own.ok() ||
      (*own)->launch.geometry.workspace_floats > now.workspace_floats ||
      (*own)->launch.geometry.counters > now.counters) {
    current->provisional = false;  // It stays on its class's kernel.
    return current;
  }
  (*own)->problem_key = current->problem_key;
  std::unique_ptr<Loaded>& slot = loaded_[{current->ctx, current->problem_key}];
  replaced_.push_back(std::move(slot));  // A launch may still hold it.
  slot = *std::move(own);
  return slot.get();
}

void Runtime::Promote(const std::pair<CUcontext, std::string>& key) {
  for (auto it = prefetches_.begin(); it != prefetches_.end(); ++it) {
    if ((*it)->ctx == key.first && ProblemKey((*it)->problem) == key.second) {
      fetches_.push_back(std::move(*it));
      prefetches_.erase(it);
      return;
    }
  }
}

void Runtime::AskRecent() {
  const RecentAsk ask = std::move(recent_asks_.front());
  recent_asks_.pop_front();
  mu_.Unlock();
  absl::StatusOr<std::vector<Problem>> recent =
      source_->Recent(ask.device.name, ask.limit);
  mu_.Lock();
  if (!recent.ok()) return;  // Left to the calls.
  for (const Problem& p : *recent) {
    const std::pair<CUcontext, std::string> key{ask.ctx, ProblemKey(p)};
    if (loaded_.count(key) > 0 || arrived_.count(key) > 0 ||
        !pending_.insert(key).second) {
      continue;
    }
    prefetches_.push_back(
        std::make_unique<Fetch>(Fetch{ask.ctx, p, ask.device, {}}));
  }
}

void Runtime::FetchInBackground() {
  absl::MutexLock lock(&mu_);
  const absl::Duration every = source_->RefreshInterval();
  absl::Time next_round = absl::Now() + every;
  while (true) {
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stopping_ || !fetches_.empty() || !recent_asks_.empty() ||
             !prefetches_.empty();
    };
    if (every == absl::InfiniteDuration()) {
      mu_.Await(absl::Condition(&ready));
    } else if (!mu_.AwaitWithDeadline(absl::Condition(&ready), next_round)) {
      QueueRefreshes();
      next_round = absl::Now() + every;
      continue;
    }
    if (stopping_) return;
    if (fetches_.empty() && !recent_asks_.empty()) {
      AskRecent();
      continue;
    }
    // The calls' questions first, then Prefetch's.
    auto& queue = fetches_.empty() ? prefetches_ : fetches_;
    std::unique_ptr<Fetch> f = std::move(queue.front());
    queue.pop_front();
    const std::string key = ProblemKey(f->problem);
    const std::string arch = ArchName(f->device.cc_major, f->device.cc_minor);
    mu_.Unlock();
    absl::StatusOr<v1::Kernel> kernel =
        source_->Find(f->problem, f->device.name, arch);
    // Its module loaded here, so that the launch taking it over does not.
    if (kernel.ok() && CheckServable(*kernel, key, arch).ok()) {
      Preload(*kernel, f->ctx);
    }
    mu_.Lock();
    const bool pending = pending_.erase({f->ctx, key}) > 0;
    auto current = loaded_.find({f->ctx, key});
    if (current == loaded_.end()) {
      // A new class's first problem: loaded at its next launch.
      if (pending) arrived_.insert_or_assign({f->ctx, key}, std::move(kernel));
      continue;
    }
    Loaded& now = *current->second;
    now.asked = false;
    if (!kernel.ok() || !CheckServable(*kernel, key, arch).ok()) {
      // Nothing launchable of its own: it stays on its class's kernel.
      now.provisional = false;
      continue;
    }
    if (SameKernel(*kernel, now.kernel) &&
        kernel->geometry().SerializeAsString() ==
            now.kernel.geometry().SerializeAsString()) {
      // The kernel and launch it runs already (its class's, or a refresh's
      // answer): its own now, with no module to load.
      now.provisional = false;
      now.kernel.set_defaults(kernel->defaults());
      now.kernel.set_transferred(kernel->transferred());
      continue;
    }
    f->kernel = *std::move(kernel);
    fetched_[{f->ctx, key}] = std::move(f);
  }
}

absl::StatusOr<std::unique_ptr<Runtime::Module>> Runtime::NewModule(
    const CudaDriver& d, const v1::Kernel& kernel, CUcontext ctx) {
  ScopedContext current(d, ctx);
  auto fresh = std::make_unique<Module>();
  if (absl::Status s =
          d.Check(d.cuModuleLoadData(&fresh->module, kernel.cubin().data()),
                  "cuModuleLoadData");
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          d.Check(d.cuModuleGetFunction(&fresh->function, fresh->module,
                                        kernel.kernel_name().c_str()),
                  "cuModuleGetFunction");
      !s.ok()) {
    d.cuModuleUnload(fresh->module);
    return s;
  }
  return fresh;
}

absl::StatusOr<Runtime::Module*> Runtime::LoadModule(const CudaDriver& d,
                                                     const v1::Kernel& kernel,
                                                     CUcontext ctx) {
  std::unique_ptr<Module>& module = modules_[{ctx, ModuleIdentity(kernel)}];
  if (module != nullptr) return module.get();
  absl::StatusOr<std::unique_ptr<Module>> fresh = NewModule(d, kernel, ctx);
  if (!fresh.ok()) {
    modules_.erase({ctx, ModuleIdentity(kernel)});
    return fresh.status();
  }
  module = *std::move(fresh);
  return module.get();
}

void Runtime::Preload(const v1::Kernel& kernel, CUcontext ctx) {
  absl::StatusOr<const CudaDriver*> d = Driver();
  if (!d.ok() || (*d)->cuThreadExchangeStreamCaptureMode == nullptr) return;
  const std::pair<CUcontext, std::string> key{ctx, ModuleIdentity(kernel)};
  {
    absl::MutexLock lock(&mu_);
    if (modules_.count(key) > 0) return;
  }
  // Relaxed, so that loading never breaks another thread's capture in
  // global mode; a failure is left to the launching thread to report.
  // Its function loaded too: a module loads lazily, at the first launch or
  // attribute set otherwise (milliseconds).
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  (*d)->cuThreadExchangeStreamCaptureMode(&mode);
  absl::StatusOr<std::unique_ptr<Module>> fresh = NewModule(**d, kernel, ctx);
  if (fresh.ok() && (*d)->cuFuncLoad != nullptr) {
    ScopedContext current(**d, ctx);
    (*d)->cuFuncLoad((*fresh)->function);
  }
  (*d)->cuThreadExchangeStreamCaptureMode(&mode);
  if (!fresh.ok()) return;
  absl::MutexLock lock(&mu_);
  std::unique_ptr<Module>& module = modules_[key];
  if (module == nullptr) {
    module = *std::move(fresh);
  } else {  // Another thread's came first.
    ScopedContext current(**d, ctx);
    (*d)->cuModuleUnload((*fresh)->module);
  }
}

absl::StatusOr<Runtime::Scratch*> Runtime::ScratchFor(const CudaDriver& d,
                                                      const LaunchGeometry& g,
                                                      CUcontext ctx,
                                                      CUstream stream) {
  absl::MutexLock lock(&mu_);
  std::unique_ptr<Scratch>& scratch = scratch_[{ctx, stream}];
  if (scratch == nullptr) scratch = std::make_unique<Scratch>();
  Scratch& s = *scratch;
  if (g.workspace_floats <= s.workspace_floats &&
      g.counters <= s.counter_count) {
    return &s;
  }
  ScopedContext current(d, ctx);
  // Grown at least twofold, so that rising needs allocate few times.
  auto grow = [](int64_t have, int64_t need) {
    return need <= have ? have : std::max(need, 2 * have);
  };
  const int64_t floats = grow(s.workspace_floats, g.workspace_floats);
  const int64_t counters = grow(s.counter_count, g.counters);
  CUdeviceptr workspace = s.workspace, counter = s.counters;
  absl::Status st;
  if (floats > s.workspace_floats) {
    st =
        d.Check(d.cuMemAlloc(&workspace, floats * 4), "cuMemAlloc (workspace)");
  }
  if (st.ok() && counters > s.counter_count) {
    st = d.Check(d.cuMemAlloc(&counter, counters * 4), "cuMemAlloc (counters)");
    // On the stream, so that the first launch there sees them zero.
    if (st.ok()) {
      st = d.Check(d.cuMemsetD32Async(counter, 0, counters, stream),
                   "cuMemsetD32Async (counters)");
    }
  }
  if (!st.ok()) {
    if (workspace != s.workspace) d.cuMemFree(workspace);
    if (counter != s.counters && counter != 0) d.cuMemFree(counter);
    return st;
  }
  if (workspace != s.workspace) {
    s.outgrown.push_back(s.workspace);
    s.workspace = workspace;
    s.workspace_floats = floats;
  }
  if (counter != s.counters) {
    s.outgrown.push_back(s.counters);
    s.counters = counter;
    s.counter_count = counters;
  }
  return &s;
}

absl::Status Runtime::Attention(const AttentionCall& call, CUstream stream) {
  if (absl::Status s = CheckAttentionCall(call); !s.ok()) return s;
  absl::StatusOr<const CudaDriver*> driver = Driver();
  if (!driver.ok()) return driver.status();
  const CudaDriver& d = **driver;
  absl::StatusOr<CUcontext> context = StreamContext(d, stream);
  if (!context.ok()) return context.status();
  const CUcontext ctx = *context;
  absl::StatusOr<Loaded*> kernel =
      Load(d, call.problem, ctx, stream, /*wait=*/false);
  if (!kernel.ok()) return kernel.status();
  const LaunchGeometry& g = (*kernel)->launch.geometry;
  float* workspace = call.workspace;
  int* counters = call.counters;
  const bool own_scratch = (g.workspace_floats > 0 && workspace == nullptr) ||
                           (g.counters > 0 && counters == nullptr);
  if (own_scratch) {
    absl::StatusOr<Scratch*> scratch = ScratchFor(d, g, ctx, stream);
    if (!scratch.ok()) return scratch.status();
    workspace = reinterpret_cast<float*>((*scratch)->workspace);
    counters = reinterpret_cast<int*>((*scratch)->counters);
  }
  return Launch(d, (*kernel)->launch, ctx, call, workspace, counters, stream);
}

absl::StatusOr<AttentionPlan> Runtime::Plan(const Problem& problem,
                                            CUstream stream) {
  return Plan(problem, stream, /*wait=*/false);
}

absl::StatusOr<AttentionPlan> Runtime::Plan(const Problem& problem,
                                            CUstream stream, bool wait) {
  if (absl::Status s = ValidateProblem(problem); !s.ok()) return s;
  absl::StatusOr<const CudaDriver*> d = Driver();
  if (!d.ok()) return d.status();
  absl::StatusOr<CUcontext> ctx = StreamContext(**d, stream);
  if (!ctx.ok()) return ctx.status();
  absl::StatusOr<Loaded*> k = Load(**d, problem, *ctx, stream, wait);
  if (!k.ok()) return k.status();
  return AttentionPlan(problem, (*k)->kernel, &(*k)->launch, *ctx);
}

absl::Status Runtime::Run(const AttentionPlan& plan, const AttentionCall& call,
                          CUstream stream) const {
  if (absl::Status s = CheckAttentionCall(call); !s.ok()) return s;
  if (absl::Status s = CheckWithinPlan(plan.problem(), call.problem); !s.ok()) {
    return s;
  }
  if (plan.workspace_floats() > 0 && call.workspace == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("workspace: the plan's kernel needs ",
                     plan.workspace_floats(), " floats of scratch"));
  }
  if (plan.counters() > 0 && call.counters == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("counters: the plan's kernel needs ", plan.counters(),
                     " zeroed ints of scratch"));
  }
  absl::StatusOr<const CudaDriver*> d = Driver();
  if (!d.ok()) return d.status();
  return Launch(**d, *plan.launch_, plan.ctx_, call, call.workspace,
                call.counters, stream);
}

absl::Status Runtime::Launch(const CudaDriver& d, const LoadedKernel& kernel,
                             CUcontext ctx, const AttentionCall& call,
                             float* workspace, int* counters, CUstream stream) {
  AttentionParams params = CallParams(call);
  params.workspace = workspace;
  params.counters = counters;
  absl::StatusOr<LaunchArgs> args = MakeLaunchArgs(
      d.cuTensorMapEncodeTiled, kernel.geometry, params, call.problem);
  if (!args.ok()) return args.status();
  ScopedContext current(d, ctx);
  return d.Check(LaunchAttention(d, kernel, *args, stream), "cuLaunchKernel");
}

}  // namespace evotune
