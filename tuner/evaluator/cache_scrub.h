// What a sample of kernels timed in turns starts from: the L2 holding only
// clean lines of a buffer read just before, whichever kernel ran before it
// (CudaEvaluator::TimeInTurns). Without it, what the kernels before a sample
// left in L2 set its speed on problems whose K and V are about the L2's
// size (bench/RESULTS.md, 2026-11-27).
#ifndef EVOTUNE_TUNER_EVALUATOR_CACHE_SCRUB_H_
#define EVOTUNE_TUNER_EVALUATOR_CACHE_SCRUB_H_

#include <cstddef>

namespace evotune {

// CUDA source of the kernel
//   evotune_cache_scrub(const uint4* p, unsigned long long n, unsigned* sink)
// which reads p[0, n) with a grid-stride loop (writing *sink only if the
// XOR of all it read is 0x9e3779b9, which a buffer of equal words never
// gives: the loads cannot be left out).
extern const char kCacheScrubSource[];

// Bytes of the buffer to read for an L2 of `l2_bytes` (twice it, at least
// 2 MiB), a multiple of 16.
size_t CacheScrubBytes(int l2_bytes);

}  // namespace evotune

#endif  // EVOTUNE_TUNER_EVALUATOR_CACHE_SCRUB_H_
