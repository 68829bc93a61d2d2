// A kernel chosen once and launched many times: Runtime::Plan picks and
// loads the kernel for a problem (or for a bucket of them), sizes its
// scratch; Runtime::Run launches it with no lookup, lock, allocation or
// host sync, so that runs can be captured in CUDA graphs (FlashInfer's
// plan/run). A plan keeps its kernel (plan again to pick up one tuned
// since) and stays valid while its runtime lives.
#ifndef EVOTUNE_RUNTIME_INCLUDE_EVOTUNE_ATTENTION_PLAN_H_
#define EVOTUNE_RUNTIME_INCLUDE_EVOTUNE_ATTENTION_PLAN_H_

#include <cuda.h>

#include <cstdint>

#include "absl/status/status.h"
#include "core/problem.h"
#include "evotune/v1/evotune.pb.h"

namespace evotune {

struct LoadedKernel;  // launch/launcher.h

class AttentionPlan {
 public:
  // The problem planned for: every run's problem is within it
  // (CheckWithinPlan).
  const Problem& problem() const { return problem_; }
  // The scratch every run must pass (AttentionCall::workspace, ::counters
  // holding at least this many values; counters zero before the first run).
  int64_t workspace_floats() const;
  int64_t counters() const;
  // The kernel, as Runtime::KernelFor describes it (no cubin).
  const v1::Kernel& kernel() const { return kernel_; }

 private:
  friend class Runtime;
  AttentionPlan(const Problem& problem, const v1::Kernel& kernel,
                const LoadedKernel* launch, CUcontext ctx)
      : problem_(problem), kernel_(kernel), launch_(launch), ctx_(ctx) {}

  Problem problem_;
  v1::Kernel kernel_;
  const LoadedKernel* launch_;  // The runtime's, alive while it lives.
  CUcontext ctx_;
};

// OK when a run of `call` may launch the kernel planned for `planned`: the
// same batch, heads, KV heads, head_dim, mask, dtype and layout, and at most
// its seq_q and seq_k (the kernels read lengths at run time; blocks past a
// shorter problem's rows do nothing). INVALID_ARGUMENT naming the field
// ("problem.heads", "problem.seq_k") otherwise.
absl::Status CheckWithinPlan(const Problem& planned, const Problem& call);

}  // namespace evotune

#endif  // EVOTUNE_RUNTIME_INCLUDE_EVOTUNE_ATTENTION_PLAN_H_
