// The one launch of an attention kernel, shared by the evaluator (which
// times candidates) and the runtime (which serves them): the arguments every
// template takes (AttentionParams, and the tensor maps of Q, K, V and O where
// the geometry copies tiles with TMA), the grid rule of LaunchGrid, and
// cuLaunchKernel. A change of the parameter layout is made here once.
#ifndef EVOTUNE_LAUNCH_LAUNCHER_H_
#define EVOTUNE_LAUNCH_LAUNCHER_H_

#include <cuda.h>

#include "absl/status/statusor.h"
#include "core/problem.h"
#include "kernel_templates/common/attention_params.cuh"
#include "kernel_templates/kernel_template.h"
#include "launch/cuda_driver.h"
#include "launch/tensor_maps.h"

namespace evotune {

// What a template's kernel is launched with (its two parameters).
struct LaunchArgs {
  AttentionParams params{};
  AttentionTensorMaps maps{};  // Encoded when the geometry uses TMA.
};

// A loaded kernel: its function, its geometry for the problem, and the
// multiprocessors of its device (the grid of a persistent kernel).
struct LoadedKernel {
  CUfunction function = nullptr;
  LaunchGeometry geometry;
  int multiprocessors = 0;
};

// `params` (pointers, strides, sizes, scale, scratch) with the tensor maps
// `geometry` needs. EncodeTensorMaps' INVALID_ARGUMENT naming the tensor
// when the driver refuses one.
absl::StatusOr<LaunchArgs> MakeLaunchArgs(EncodeTiledFn encode,
                                          const LaunchGeometry& geometry,
                                          const AttentionParams& params,
                                          const Problem& problem);

// Launches `kernel` with `args` on `stream`, in the current context, with
// LaunchGrid's grid, the geometry's block and dynamic shared memory. The
// driver's result (the launch is asynchronous: faults show later).
CUresult LaunchAttention(const CudaDriver& d, const LoadedKernel& kernel,
                         LaunchArgs& args, CUstream stream);

}  // namespace evotune

#endif  // EVOTUNE_LAUNCH_LAUNCHER_H_
