// Random attention inputs as a pure function of (seed, element index): the
// GPU fills whole tensors with kRandomFillSource, and the host recomputes only
// the elements the reference reads, bit for bit.
#ifndef EVOTUNE_TUNER_EVALUATOR_RANDOM_INPUTS_H_
#define EVOTUNE_TUNER_EVALUATOR_RANDOM_INPUTS_H_

#include <cstdint>

#include "core/problem.h"

namespace evotune {

// Element `index` of a tensor filled with `seed`: uniform on a grid of step
// 2^-15 in [offset - 1, offset + 1), rounded to nearest-even in `dtype`
// (e4m3: its bits in the low byte).
// Every step before the rounding is exact in float, so host and device agree.
uint16_t RandomInputBits(uint64_t seed, uint64_t index, float offset,
                         DType dtype);

// CUDA source of the kernel
//   evotune_random_fill(void* out, unsigned long long n,
//                       unsigned long long seed, float offset, int format)
// which writes RandomInputBits for indices [0, n) with a grid-stride loop:
// format 0 fp16, 1 bf16 (16-bit elements), 2 e4m3 (bytes; compute
// capability 8.9 and newer).
extern const char kRandomFillSource[];

}  // namespace evotune

#endif  // EVOTUNE_TUNER_EVALUATOR_RANDOM_INPUTS_H_
