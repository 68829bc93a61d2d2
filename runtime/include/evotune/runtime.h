// The evotune runtime: runs the tuned attention kernel for a problem in an
// inference program. Kernels come from a KernelSource (a bundle file that
// `evotune export` wrote, or a daemon); each compiled kernel is loaded once
// per CUDA context with the driver API, whatever number of problems it
// serves, and launched on the caller's stream. No NVRTC compile happens
// here.
//
//   auto source = evotune::BundleSource::Open("kernels.evtb");
//   evotune::Runtime runtime(*std::move(source));
//   evotune::AttentionCall call = evotune::ContiguousCall(problem, q, k, v, o);
//   absl::Status s = runtime.Attention(call, stream);
#ifndef EVOTUNE_RUNTIME_INCLUDE_EVOTUNE_RUNTIME_H_
#define EVOTUNE_RUNTIME_INCLUDE_EVOTUNE_RUNTIME_H_

#include <cuda.h>

#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/problem.h"
#include "core/trial.h"
#include "evotune/attention_call.h"
#include "evotune/attention_plan.h"
#include "evotune/v1/evotune.pb.h"

namespace evotune {

struct CudaDriver;      // launch/cuda_driver.h
struct LaunchGeometry;  // kernel_templates/kernel_template.h
struct LoadedKernel;    // launch/launcher.h

// Where kernels come from. Implementations must be thread-safe.
class KernelSource {
 public:
  virtual ~KernelSource() = default;
  // The kernel for `problem` with configs tuned on the GPU named `device`,
  // compiled for `arch` ("sm_90a"). NOT_FOUND when the source has none.
  virtual absl::StatusOr<v1::Kernel> Find(const Problem& problem,
                                          const std::string& device,
                                          const std::string& arch) = 0;
  // Whether Find answers for problems it was never told of (a daemon
  // tunes or transfers them): the runtime then serves a new length at
  // once with the kernel of its class and asks for its own in the
  // background. A bundle answers for what it holds only.
  virtual bool AnswersEveryProblem() const { return false; }
  // Up to `limit` problems whose kernels programs on the GPU named `device`
  // asked for lately, the most recent first: what Runtime::Prefetch loads
  // ahead of a program's first calls. None by default.
  virtual absl::StatusOr<std::vector<Problem>> Recent(const std::string& device,
                                                      int limit) {
    return std::vector<Problem>{};
  }
  // How often the runtime asks again for the problems launched since it
  // last asked whose kernel was not tuned (defaults or a transfer): a daemon
  // tunes problems while the program runs. A new answer takes over at a
  // later launch outside stream capture (if it needs no more scratch).
  // Infinite: never (a bundle's answers do not change).
  virtual absl::Duration RefreshInterval() const {
    return absl::InfiniteDuration();
  }
  // What it serves, in one line for people (a bundle: what it was made for,
  // its kernels and date); "" where it does not say.
  virtual std::string About() const { return ""; }
};

// The kernels of a bundle file, by problem and architecture (the GPU name
// does not matter: the bundle was exported for the GPUs it is deployed on).
// A problem the bundle lacks is served by the kernel of its smallest bucket
// there: a problem of the same heads, KV heads, head_dim, dtype, layout and
// score mods (or mods serving them alike: a decode call's causal flag, a
// window that reaches past the call's keys) with at least its batch, seq_q
// and seq_k (the runtime computes the launch for the problem itself), so
// that a bundle of buckets serves every shape within them.
class BundleSource : public KernelSource {
 public:
  // Errors as ReadKernelBundle's (tuner/wire/kernel_bundle.h).
  static absl::StatusOr<std::unique_ptr<BundleSource>> Open(
      const std::string& path);

  absl::StatusOr<v1::Kernel> Find(const Problem& problem,
                                  const std::string& device,
                                  const std::string& arch) override;
  // "bundle PATH: ABOUT (N kernels for ARCHS, made YYYY-MM-DD)", ABOUT
  // what the bundle says it was made for (`evotune tune-model`'s model and
  // envelope) where it says, the date where it has one.
  std::string About() const override { return about_; }

 private:
  BundleSource(std::string path, std::map<std::string, v1::Kernel> kernels,
               std::vector<std::pair<Problem, std::string>> problems,
               std::string about)
      : path_(std::move(path)),
        kernels_(std::move(kernels)),
        problems_(std::move(problems)),
        about_(std::move(about)) {}
  // The key in kernels_ of the smallest bucket holding `problem`, of its
  // score mods, else of mods serving them (ServesScoreMods), or "".
  std::string BucketKey(const Problem& problem, const std::string& arch) const;

  const std::string path_;
  // By "<problem key> <arch>".
  const std::map<std::string, v1::Kernel> kernels_;
  // Each kernel's problem and arch, in kernels_' order.
  const std::vector<std::pair<Problem, std::string>> problems_;
  const std::string about_;
};

// Thread-safe: a launch of a problem already served never waits for the
// source to answer for another. With a source that answers every problem,
// a problem whose class (all but seq_k) was served before is served at once
// by that kernel, its geometry computed here, while its own kernel is
// fetched in the background and is loaded and takes over at a later launch
// outside stream capture (if it needs no more scratch). The first problem
// of a class waits for the source's answer, or as long as
// WaitForNewClasses says (the caller serves it another way meanwhile).
// Destroying it unloads its modules and frees its scratch; the contexts it used
// must still exist then.
class Runtime {
 public:
  // `driver`: the driver API it calls; null: the machine's
  // (CudaDriver::Get()). A test's fake GPU goes here.
  explicit Runtime(std::unique_ptr<KernelSource> source,
                   const CudaDriver* driver = nullptr);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // How long Attention and Plan wait for the source's answer for a problem
  // of a class the runtime serves nothing of yet: until it comes (infinite,
  // the default), or with a source that answers every problem (a daemon) at
  // most `most` (zero: not at all), after which the call is refused with
  // UNAVAILABLE while the kernel is fetched in the background. Only the
  // class's first call waits: later ones (the same problem asked again,
  // another length of the class) are refused at once while the answer is
  // on its way. A call after it came (outside stream capture, where no
  // kernel changes) is served by it, or gets the source's error once.
  // KernelFor always waits.
  void WaitForNewClasses(absl::Duration most);

  // Fetches and loads in the background, in the stream's context, the
  // kernels of up to `limit` problems the source says programs on this GPU
  // asked for lately (KernelSource::Recent), so that a first call of one
  // of them finds its kernel loaded instead of waiting for the source.
  // Returns at once; the calls' own questions go first. FAILED_PRECONDITION
  // when there is no CUDA context or device; what the source does not
  // answer is left to the calls.
  absl::Status Prefetch(CUstream stream, int limit);

  // Launches the kernel for call.problem on `stream` (in the stream's
  // context; 0 is the current context's legacy stream). Errors:
  // INVALID_ARGUMENT naming the field ("problem.kv_heads", "q.data",
  // "k.row_stride", "v.seq", "scale"; CheckAttentionCall's, before any
  // driver call); NOT_FOUND when the source has no kernel for the
  // problem; FAILED_PRECONDITION when there is no CUDA context or device,
  // or the kernel is for another architecture or parameter layout;
  // INTERNAL for a driver error; UNAVAILABLE as WaitForNewClasses says.
  absl::Status Attention(const AttentionCall& call, CUstream stream);

  // The kernel that serves `problem` in the stream's context (loaded on
  // first use, waiting for the source), e.g. to size scratch the caller
  // provides.
  absl::StatusOr<v1::Kernel> KernelFor(const Problem& problem, CUstream stream);

  // A plan of the kernel that serves `problem` in the stream's context
  // (loaded now; errors as Attention's): what Run launches, on streams of
  // that context. A plan made while a new length is served by its class's
  // kernel keeps that kernel.
  absl::StatusOr<AttentionPlan> Plan(const Problem& problem, CUstream stream);

  // Launches the plan's kernel for `call` on `stream` (of the plan's
  // context): no lookup, lock, allocation or host sync, so also under stream
  // capture. call.problem is within the plan's (CheckWithinPlan); call's
  // scratch is the plan's size (the runtime has none to give). Errors:
  // INVALID_ARGUMENT naming the field (CheckAttentionCall's,
  // CheckWithinPlan's, "workspace", "counters"); INTERNAL for a driver error.
  absl::Status Run(const AttentionPlan& plan, const AttentionCall& call,
                   CUstream stream) const;

  // What its source serves (KernelSource::About).
  std::string About() const { return source_->About(); }

 private:
  struct Module;   // One cubin loaded in one context.
  struct Loaded;   // A problem's kernel: its module, geometry and message.
  struct Scratch;  // Per context and stream, grown to what kernels ask.
  absl::StatusOr<const CudaDriver*> Driver() const;
  struct Fetch;       // A problem's own kernel, asked for in the background.
  struct RecentAsk {  // Prefetch's question to the source.
    CUcontext ctx;
    DeviceInfo device;
    int limit;
  };
  absl::StatusOr<Loaded*> Load(const CudaDriver& d, const Problem& problem,
                               CUcontext ctx, CUstream stream, bool wait);
  absl::StatusOr<AttentionPlan> Plan(const Problem& problem, CUstream stream,
                                     bool wait);
  // The source's answer for a problem of a new class made its Loaded (or
  // the one another thread made of it meanwhile).
  absl::StatusOr<Loaded*> Install(const CudaDriver& d, const Problem& problem,
                                  const DeviceInfo& device, CUcontext ctx,
                                  absl::StatusOr<v1::Kernel> kernel)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // UNAVAILABLE for a problem of a new class, its kernel asked for in the
  // background (once), or what the answer that came makes of it.
  absl::StatusOr<Loaded*> Unwaited(const CudaDriver& d, const Problem& problem,
                                   const DeviceInfo& device, CUcontext ctx,
                                   CUstream stream)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::unique_ptr<Loaded>> Make(const CudaDriver& d,
                                               v1::Kernel kernel,
                                               const DeviceInfo& device,
                                               CUcontext ctx)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::unique_ptr<Loaded> Provisional(const CudaDriver& d,
                                      const Loaded& sibling,
                                      const Problem& problem,
                                      const DeviceInfo& device, CUcontext ctx)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes over a fetched kernel for a provisional one, outside capture.
  Loaded* TakeOver(const CudaDriver& d, Loaded* current, CUstream stream)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FetchInBackground();
  // Asks the source for the problems of recent_asks_' first, and queues
  // prefetches of those neither loaded nor asked for.
  void AskRecent() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves a queued prefetch of `key` ahead, to fetches_ (a call needs it).
  void Promote(const std::pair<CUcontext, std::string>& key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues fetches of the problems launched in the round that ended whose
  // kernel was not tuned (KernelSource::RefreshInterval), and starts the
  // next round.
  void QueueRefreshes() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartFetcher() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<Module*> LoadModule(const CudaDriver& d,
                                     const v1::Kernel& kernel, CUcontext ctx)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static absl::StatusOr<std::unique_ptr<Module>> NewModule(
      const CudaDriver& d, const v1::Kernel& kernel, CUcontext ctx);
  // Loads the module of a fetched kernel on the fetcher's thread, unless
  // loaded, so that the launch taking it over finds it.
  void Preload(const v1::Kernel& kernel, CUcontext ctx)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<DeviceInfo> ContextDevice(const CudaDriver& d, CUcontext ctx)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Launches `kernel` for `call` in `ctx` with the scratch given.
  static absl::Status Launch(const CudaDriver& d, const LoadedKernel& kernel,
                             CUcontext ctx, const AttentionCall& call,
                             float* workspace, int* counters, CUstream stream);
  absl::StatusOr<Scratch*> ScratchFor(const CudaDriver& d,
                                      const LaunchGeometry& g, CUcontext ctx,
                                      CUstream stream);

  const std::unique_ptr<KernelSource> source_;
  const CudaDriver* const driver_;  // Null: CudaDriver::Get().
  absl::Mutex mu_;
  std::map<CUcontext, DeviceInfo> devices_ ABSL_GUARDED_BY(mu_);
  // By context and the kernel's identity (its name and cubin).
  std::map<std::pair<CUcontext, std::string>, std::unique_ptr<Module>> modules_
      ABSL_GUARDED_BY(mu_);
  // By context and problem key.
  std::map<std::pair<CUcontext, std::string>, std::unique_ptr<Loaded>> loaded_
      ABSL_GUARDED_BY(mu_);
  std::map<std::pair<CUcontext, CUstream>, std::unique_ptr<Scratch>> scratch_
      ABSL_GUARDED_BY(mu_);
  // The kernel served last in each context and class, for new lengths.
  std::map<std::pair<CUcontext, std::string>, Loaded*> latest_by_class_
      ABSL_GUARDED_BY(mu_);
  // Fetched kernels waiting to take over provisional ones, by problem key;
  // and those taken over (launches may still hold them).
  std::map<std::pair<CUcontext, std::string>, std::unique_ptr<Fetch>> fetched_
      ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Loaded>> replaced_ ABSL_GUARDED_BY(mu_);
  // Problems of new classes asked for in the background, and the answers
  // that came for them (WaitForNewClasses).
  std::set<std::pair<CUcontext, std::string>> pending_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<CUcontext, std::string>, absl::StatusOr<v1::Kernel>>
      arrived_ ABSL_GUARDED_BY(mu_);
  // The classes whose first call waited for the source already.
  std::set<std::pair<CUcontext, std::string>> waited_classes_
      ABSL_GUARDED_BY(mu_);
  absl::Duration new_class_wait_ ABSL_GUARDED_BY(mu_) =
      absl::InfiniteDuration();
  std::deque<std::unique_ptr<Fetch>> fetches_ ABSL_GUARDED_BY(mu_);
  // Prefetch's questions, and the fetches they queued (after fetches_').
  std::deque<RecentAsk> recent_asks_ ABSL_GUARDED_BY(mu_);
  std::deque<std::unique_ptr<Fetch>> prefetches_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t round_ ABSL_GUARDED_BY(mu_) = 0;  // Refresh rounds begun.
  std::thread fetcher_;                      // Started with the first fetch.
};

}  // namespace evotune

#endif  // EVOTUNE_RUNTIME_INCLUDE_EVOTUNE_RUNTIME_H_
