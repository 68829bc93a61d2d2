// The outcome of evaluating one config, and the identity of the device it was
// measured on.
#ifndef EVOTUNE_CORE_TRIAL_H_
#define EVOTUNE_CORE_TRIAL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace evotune {

// Values are stored in the database and match evotune.v1.TrialStatus: never
// renumber them.
enum class TrialStatus {
  kOk = 1,
  kCompileError = 2,
  kResourceRejected = 3,
  kIncorrect = 4,
  kTimeout = 5,
  kCrashed = 6,
};

// "ok", "compile_error", ...
absl::string_view TrialStatusName(TrialStatus status);
bool IsValidTrialStatus(int value);

// Timing samples of a full and of a quick evaluation. A search times every
// correct candidate quickly and only those that could enter its elite fully.
inline constexpr int kFullTimingSamples = 15;
inline constexpr int kQuickTimingSamples = 3;

// A bad candidate is data, not an error: status says what happened, error
// holds the log (compiler output, mismatch report, ...). Latencies are set
// only when status is kOk.
struct TrialResult {
  TrialStatus status = TrialStatus::kOk;
  double median_us = 0;
  double min_us = 0;
  double p90_us = 0;
  double cv = 0;    // Coefficient of variation of the timing samples.
  int samples = 0;  // Timing samples behind the latencies.
  // Other configs timed in turns with this one, sample by sample (a search's
  // fastest, confirmed together); 0 when it was timed alone.
  int timed_against = 0;
  std::string error;
  // The results of a task's rivals (TrialTask::rivals), in their order; empty
  // for a task without rivals, or one that failed as a whole.
  std::vector<TrialResult> rival_results;
};

// What a device allows one block; read off the device at run time.
struct DeviceLimits {
  int64_t smem_per_block_bytes = 48 * 1024;  // Opt-in maximum.
  int max_threads_per_block = 1024;
  // 10 * major + minor, as 90 for an H100; 0 when unknown (no template is
  // then refused for it).
  int compute_capability = 0;
  // Streaming multiprocessors; 0 when unknown. Sizes persistent grids.
  int multiprocessors = 0;
};

// More multiprocessors than any GPU has (an H100 has 132): a count read from
// the wire or a file past it is refused (the cost model keeps a figure per
// multiprocessor).
constexpr int kMaxMultiprocessors = 4096;

// The device key: results measured on different keys never mix.
struct DeviceInfo {
  std::string name;
  int cc_major = 0;
  int cc_minor = 0;
  std::string driver_version;
  std::string nvrtc_version;
  DeviceLimits limits;  // Not part of the key.

  bool SameKey(const DeviceInfo& o) const {
    return name == o.name && cc_major == o.cc_major && cc_minor == o.cc_minor &&
           driver_version == o.driver_version &&
           nvrtc_version == o.nvrtc_version;
  }
};

}  // namespace evotune

#endif  // EVOTUNE_CORE_TRIAL_H_
