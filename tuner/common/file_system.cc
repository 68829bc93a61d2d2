#include "tuner/common/file_system.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace evotune {
namespace {

class LocalFileSystem : public FileSystem {
 public:
  absl::StatusOr<std::string> ReadFile(const std::string& path) const override {
    std::ifstream in(path, std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
    std::ostringstream data;
    data << in.rdbuf();
    if (in.bad()) {
      return absl::NotFoundError(absl::StrCat("cannot read ", path));
    }
    return std::move(data).str();
  }

  absl::Status WriteFileAtomically(const std::string& path,
                                   absl::string_view data) const override {
    // Unique per process and call: writers of one path never share a file.
    static std::atomic<uint64_t> counter = 0;
    const std::string temp =
        absl::StrCat(path, ".tmp", ::getpid(), "-", counter++);
    {
      std::ofstream out(temp, std::ios::binary | std::ios::trunc);
      out.write(data.data(), static_cast<std::streamsize>(data.size()));
      if (!out.flush()) {
        std::remove(temp.c_str());
        return absl::InternalError(absl::StrCat("cannot write ", temp));
      }
    }
    std::error_code ec;
    std::filesystem::rename(temp, path, ec);
    if (ec) {
      std::remove(temp.c_str());
      return absl::InternalError(absl::StrCat("cannot rename ", temp, " to ",
                                              path, ": ", ec.message()));
    }
    return absl::OkStatus();
  }

  absl::Status CreateDirectories(const std::string& path) const override {
    std::error_code ec;
    std::filesystem::create_directories(path, ec);
    if (ec) {
      return absl::InternalError(
          absl::StrCat("cannot create ", path, ": ", ec.message()));
    }
    return absl::OkStatus();
  }
};

}  // namespace

const FileSystem& FileSystem::Local() {
  static const LocalFileSystem* const local = new LocalFileSystem;
  return *local;
}

}  // namespace evotune
