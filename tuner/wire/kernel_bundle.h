// Kernel bundles: the kernels of a list of problems in one file (a
// serialized evotune.v1.KernelBundle), written by `evotune export` and read
// by the runtime where no daemon runs.
#ifndef EVOTUNE_TUNER_WIRE_KERNEL_BUNDLE_H_
#define EVOTUNE_TUNER_WIRE_KERNEL_BUNDLE_H_

#include <string>

#include "absl/status/statusor.h"
#include "evotune/v1/bundle.pb.h"
#include "tuner/common/file_system.h"

namespace evotune {

// The format this build writes and reads (KernelBundle.format_version).
inline constexpr int kKernelBundleFormat = 1;

// NOT_FOUND when the file is missing; INVALID_ARGUMENT when it is no bundle
// or of another format version (the message names the path).
absl::StatusOr<v1::KernelBundle> ReadKernelBundle(
    const std::string& path, const FileSystem& fs = FileSystem::Local());

// Writes `bundle` (its format_version set to kKernelBundleFormat) to a
// temporary file beside `path` and renames it there, so that a reader never
// sees half a bundle. INTERNAL when writing fails.
absl::Status WriteKernelBundle(const std::string& path, v1::KernelBundle bundle,
                               const FileSystem& fs = FileSystem::Local());

}  // namespace evotune

#endif  // EVOTUNE_TUNER_WIRE_KERNEL_BUNDLE_H_
