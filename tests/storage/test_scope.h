// The trial scope the storage tests write into.
#ifndef EVOTUNE_TESTS_STORAGE_TEST_SCOPE_H_
#define EVOTUNE_TESTS_STORAGE_TEST_SCOPE_H_

#include <cstdint>

#include "storage/result_store.h"

namespace evotune {

inline TrialScope TestScope(int64_t seq = 512) {
  TrialScope s;
  s.device.name = "Test GPU";
  s.device.cc_major = 9;
  s.device.driver_version = "1.0";
  s.device.nvrtc_version = "13.0";
  s.template_name = "naive";
  s.template_hash = "abc";
  s.problem.heads = s.problem.kv_heads = 8;
  s.problem.seq_q = s.problem.seq_k = seq;
  return s;
}

}  // namespace evotune

#endif  // EVOTUNE_TESTS_STORAGE_TEST_SCOPE_H_
