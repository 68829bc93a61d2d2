#include "tuner/wire/kernel_bundle.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace evotune {

absl::StatusOr<v1::KernelBundle> ReadKernelBundle(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  v1::KernelBundle bundle;
  if (!bundle.ParseFromIstream(&in)) {
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

absl::Status WriteKernelBundle(const std::string& path,
                               v1::KernelBundle bundle) {
  bundle.set_format_version(kKernelBundleFormat);
  const std::string temp = absl::StrCat(path, ".tmp", getpid());
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    if (!out || !bundle.SerializeToOstream(&out) || !out.flush()) {
      std::remove(temp.c_str());
      return absl::InternalError(absl::StrCat("cannot write ", temp));
    }
  }
  std::error_code ec;
  std::filesystem::rename(temp, path, ec);
  if (ec) {
    std::remove(temp.c_str());
    return absl::InternalError(
        absl::StrCat("cannot rename ", temp, " to ", path, ": ", ec.message()));
  }
  return absl::OkStatus();
}

}  // namespace evotune
