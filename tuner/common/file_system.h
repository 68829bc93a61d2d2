// The files evotune keeps outside its store (compiled kernels, bundles),
// behind one interface, so that tests see what was written and make
// reads and writes fail (tests/common/fake_file_system.h).
#ifndef EVOTUNE_TUNER_COMMON_FILE_SYSTEM_H_
#define EVOTUNE_TUNER_COMMON_FILE_SYSTEM_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace evotune {

// Implementations are thread-safe.
class FileSystem {
 public:
  virtual ~FileSystem() = default;

  // The whole file. NOT_FOUND naming the path when it cannot be read.
  virtual absl::StatusOr<std::string> ReadFile(
      const std::string& path) const = 0;

  // Writes `data` to a temporary file beside `path` and renames it there,
  // so that a reader sees the old file or the new one, never half of one.
  // INTERNAL naming the path when it cannot; `path` is then unchanged.
  virtual absl::Status WriteFileAtomically(const std::string& path,
                                           absl::string_view data) const = 0;

  // `path` and its parents, where missing. INTERNAL naming it on failure.
  virtual absl::Status CreateDirectories(const std::string& path) const = 0;

  // The machine's own.
  static const FileSystem& Local();
};

}  // namespace evotune

#endif  // EVOTUNE_TUNER_COMMON_FILE_SYSTEM_H_
