#include "tuner/wire/kernel_bundle.h"

#include "absl/strings/str_cat.h"

namespace evotune {

absl::StatusOr<v1::KernelBundle> ReadKernelBundle(const std::string& path,
                                                  const FileSystem& fs) {
  absl::StatusOr<std::string> data = fs.ReadFile(path);
  if (!data.ok()) return data.status();
  v1::KernelBundle bundle;
  if (!bundle.ParseFromString(*data)) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": not a kernel bundle (evotune export writes them)"));
  }
  if (bundle.format_version() != kKernelBundleFormat) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": bundle format ", bundle.format_version(),
        ", this build reads ", kKernelBundleFormat, "; export it again"));
  }
  return bundle;
}

absl::Status WriteKernelBundle(const std::string& path, v1::KernelBundle bundle,
                               const FileSystem& fs) {
  bundle.set_format_version(kKernelBundleFormat);
  std::string data;
  if (!bundle.SerializeToString(&data)) {
    return absl::InternalError(absl::StrCat("cannot serialize ", path));
  }
  return fs.WriteFileAtomically(path, data);
}

}  // namespace evotune
