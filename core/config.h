// A configuration of a kernel template and its canonical key.
#ifndef EVOTUNE_CORE_CONFIG_H_
#define EVOTUNE_CORE_CONFIG_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace evotune {

// Parameter name -> value. A std::map keeps the names sorted, which makes the
// canonical key a plain walk.
using Config = std::map<std::string, int64_t>;

// "NAME=value" pairs sorted by name and joined with ',', e.g.
// "BLOCK_N=64,NUM_WARPS=4". Equal configs have equal keys and vice versa.
std::string ConfigKey(const Config& config);

// Parses a key as ConfigKey writes it; spaces around items are accepted, and
// the order of the items does not matter. A repeated name is an error.
absl::StatusOr<Config> ParseConfigKey(absl::string_view key);

}  // namespace evotune

#endif  // EVOTUNE_CORE_CONFIG_H_
