#include "tuner/evaluator/device_header.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace evotune {
namespace {

constexpr absl::string_view kComputeCapability = "compute capability:";
constexpr absl::string_view kMultiprocessors = "multiprocessors:";
constexpr absl::string_view kSharedMemory = "shared memory per block:";

absl::Status ReadComputeCapability(absl::string_view value,
                                   DeviceInfo* device) {
  std::pair<std::string, std::string> cc = absl::StrSplit(value, '.');
  if (!absl::SimpleAtoi(cc.first, &device->cc_major) ||
      !absl::SimpleAtoi(cc.second, &device->cc_minor) ||
      device->cc_major <= 0 || device->cc_minor < 0 || device->cc_minor > 9) {
    return absl::InvalidArgumentError(
        "compute capability: expected MAJOR.MINOR");
  }
  device->limits.compute_capability = 10 * device->cc_major + device->cc_minor;
  return absl::OkStatus();
}

// A count in 1..`most`, or INVALID_ARGUMENT naming `field`.
template <typename T>
absl::Status ReadCount(absl::string_view field, absl::string_view value, T most,
                       T* out) {
  if (!absl::SimpleAtoi(value, out) || *out <= 0 || *out > most) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " expected a count from 1 to ", most));
  }
  return absl::OkStatus();
}

}  // namespace

std::string DeviceHeader(const DeviceInfo& device) {
  return absl::StrCat(kComputeCapability, " ", device.cc_major, ".",
                      device.cc_minor, "\n", kMultiprocessors, " ",
                      device.limits.multiprocessors, "\n", kSharedMemory, " ",
                      device.limits.smem_per_block_bytes, "\n");
}

absl::StatusOr<bool> ReadDeviceHeaderLine(absl::string_view text,
                                          DeviceInfo* device) {
  text = absl::StripAsciiWhitespace(text);
  absl::Status read;
  if (absl::ConsumePrefix(&text, kComputeCapability)) {
    read = ReadComputeCapability(absl::StripAsciiWhitespace(text), device);
  } else if (absl::ConsumePrefix(&text, kMultiprocessors)) {
    read = ReadCount(kMultiprocessors, absl::StripAsciiWhitespace(text),
                     kMaxMultiprocessors, &device->limits.multiprocessors);
  } else if (absl::ConsumePrefix(&text, kSharedMemory)) {
    read = ReadCount(kSharedMemory, absl::StripAsciiWhitespace(text),
                     int64_t{1} << 30, &device->limits.smem_per_block_bytes);
  } else {
    return false;
  }
  if (!read.ok()) return read;
  return true;
}

}  // namespace evotune
