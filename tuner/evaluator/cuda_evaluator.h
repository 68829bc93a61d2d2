// The GPU evaluator: compiles a candidate with NVRTC for the device's exact
// architecture, validates it against the host reference on fresh random
// inputs, and times it with CUDA events.
//
// Gates, in order (each outcome is a TrialStatus):
//   1. constraints (space, shared memory, threads)   -> resource_rejected
//   2. NVRTC compile (cached on disk, prefetched on
//      a thread pool)                               -> compile_error
//   3. load; registers and local memory read back;
//      a config that spills is rejected              -> resource_rejected
//   4. correctness: output poisoned with NaN, inputs
//      random and nonzero, every element finite, the
//      same bits on repeat_runs more runs (races), and
//      sampled rows within tolerance of the reference -> incorrect
//   5. timing: warm-up, then >= 10 samples of enough back-to-back launches
//      to last >= 100 us each; median, min, p90 and CV per launch (with
//      cold_l2, each of a sample's launches timed alone after the scrub).
// TimeInTurns passes each config through gates 1-4 on one set of fresh
// inputs (each kernel with its own scratch), holds them all loaded, and
// takes their timing samples in turns, each after a read of a buffer twice
// the L2's size: a sample starts from the same cache whichever kernel ran
// before it (without that, on the H100 a problem whose K and V are about
// the L2's size measured the same 24 configs 1.5x slower among 153 configs
// than among themselves, in an unrelated order). Short decode kernels (a few
// queries, under 30 us) measure 1.5-3.6 us a launch slower so than alone,
// likely each sample's first launch reading K and V from memory.
// A launch that faults leaves the CUDA context unusable: the trial is
// recorded as crashed and every later call fails (the process must restart).
#ifndef EVOTUNE_TUNER_EVALUATOR_CUDA_EVALUATOR_H_
#define EVOTUNE_TUNER_EVALUATOR_CUDA_EVALUATOR_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "launch/cuda_driver.h"
#include "tuner/evaluator/evaluator.h"

namespace evotune {

struct CudaEvaluatorOptions {
  int ordinal = 0;
  // Where compiled kernels are kept between runs; empty keeps them in
  // memory only.
  std::string cache_dir;
  // Background compile threads for Prefetch.
  int compile_threads = 4;
  // Extra runs on the same inputs whose output must match the first bit
  // for bit (a race shows as output that changes between runs).
  int repeat_runs = 2;
  // Times every launch alone after the read of the cache scrub, so that it
  // reads its inputs from memory (as a model's decode step reads a layer's
  // K/V cache, the other layers having gone through L2), where by default
  // a sample's launches run back to back, each finding what the one before
  // left in L2. For benchmarks that set the two side by side: results
  // timed so are not the store's (its keys do not name the policy).
  bool cold_l2 = false;
  // Compiles candidates for this architecture instead of the device's. A
  // virtual one ("compute_89") gives PTX that the driver compiles for the
  // device as it loads it, so that a GPU runs the code another
  // architecture's compile selects (a test runs sm_89's FP8 path on a
  // Hopper GPU so); configs are then judged for that architecture, which
  // must not be newer than the device. Empty: the device's own (a cubin).
  std::string compile_arch;
  // The driver API it calls; null: the machine's (CudaDriver::Get()). A
  // test's fake GPU (tests/common/fake_cuda_driver.h) drives the gates
  // without one. It must outlive the evaluator.
  const CudaDriver* driver = nullptr;
};

// UNAVAILABLE "no CUDA device: ..." when the driver or device is missing.
absl::StatusOr<std::unique_ptr<Evaluator>> MakeCudaEvaluator(
    const CudaEvaluatorOptions& options);

}  // namespace evotune

#endif  // EVOTUNE_TUNER_EVALUATOR_CUDA_EVALUATOR_H_
