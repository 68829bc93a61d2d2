// The lines of a recording's header that describe its device: compute
// capability, multiprocessors and the shared memory a block may opt in to.
// `evotune-worker --describe` prints them for its GPU, record_landscapes.sh
// writes them into a landscape's header ("# " before each), and
// ReplayEvaluator reads them back, so a replay has the recorded GPU's limits.
#ifndef EVOTUNE_TUNER_EVALUATOR_DEVICE_HEADER_H_
#define EVOTUNE_TUNER_EVALUATOR_DEVICE_HEADER_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/trial.h"

namespace evotune {

// "compute capability: 9.0\nmultiprocessors: 132\n
//  shared memory per block: 232448\n" for an H100.
std::string DeviceHeader(const DeviceInfo& device);

// Reads one header line (its text after '#') into `device`: true for one of
// DeviceHeader's lines, false for another line; INVALID_ARGUMENT naming the
// field when the value is malformed.
absl::StatusOr<bool> ReadDeviceHeaderLine(absl::string_view text,
                                          DeviceInfo* device);

}  // namespace evotune

#endif  // EVOTUNE_TUNER_EVALUATOR_DEVICE_HEADER_H_
