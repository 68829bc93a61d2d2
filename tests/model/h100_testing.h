// The limits of the H100 SXM the recordings in tests/data were made on (as
// their headers give them), for tests that rank, model or serve configs as
// on that GPU.
#ifndef EVOTUNE_TESTS_MODEL_H100_TESTING_H_
#define EVOTUNE_TESTS_MODEL_H100_TESTING_H_

#include "core/trial.h"

namespace evotune {

inline DeviceLimits H100Limits() {
  DeviceLimits h100;
  h100.smem_per_block_bytes = 227 * 1024;
  h100.max_threads_per_block = 1024;
  h100.compute_capability = 90;
  h100.multiprocessors = 132;
  return h100;
}

}  // namespace evotune

#endif  // EVOTUNE_TESTS_MODEL_H100_TESTING_H_
