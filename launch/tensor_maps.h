// The arguments every template is launched with (common/attention_params.cuh):
// the AttentionParams of a problem, and for a template that copies tiles
// with the Tensor Memory Accelerator (LaunchGeometry::uses_tma) the tensor
// maps of Q, K, V and O.
#ifndef EVOTUNE_LAUNCH_TENSOR_MAPS_H_
#define EVOTUNE_LAUNCH_TENSOR_MAPS_H_

#include <cuda.h>

#include "absl/status/statusor.h"
#include "core/problem.h"
#include "kernel_templates/common/attention_params.cuh"
#include "kernel_templates/kernel_template.h"

namespace evotune {

// cuTensorMapEncodeTiled's signature: the driver's, or a fake in tests.
using EncodeTiledFn = decltype(&::cuTensorMapEncodeTiled);

// The sizes, causal flag and softmax scale (1 / sqrt(head_dim)) of
// `problem`, with the strides of contiguous tensors; no pointers.
AttentionParams ContiguousParams(const Problem& problem);

// Encodes the maps of the tensors in `params` (pointers and element strides
// as the kernel gets them) for boxes of 128 bytes of columns (64 16-bit or 128
// e4m3) by `boxes` rows, 128-byte swizzle, zero fill past the ends (a paged
// problem's K and V: its pages, rows_k / page_size of page_size rows).
// INVALID_ARGUMENT naming the tensor when the driver refuses one (e.g. a
// pointer not 16-byte aligned or a stride not a multiple of 16 bytes).
absl::StatusOr<AttentionTensorMaps> EncodeTensorMaps(
    EncodeTiledFn encode, const AttentionParams& params, const Problem& problem,
    const LaunchGeometry::TmaBoxes& boxes);

}  // namespace evotune

#endif  // EVOTUNE_LAUNCH_TENSOR_MAPS_H_
