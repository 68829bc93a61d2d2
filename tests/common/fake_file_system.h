// A FileSystem in memory for tests: files as a map, writes and reads that
// fail on command, and counts of what was done.
#ifndef EVOTUNE_TESTS_COMMON_FAKE_FILE_SYSTEM_H_
#define EVOTUNE_TESTS_COMMON_FAKE_FILE_SYSTEM_H_

#include <map>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "tuner/common/file_system.h"

namespace evotune {

class FakeFileSystem : public FileSystem {
 public:
  absl::StatusOr<std::string> ReadFile(const std::string& path) const override {
    absl::MutexLock lock(&mu_);
    ++reads_;
    auto it = files_.find(path);
    if (it == files_.end() || fail_reads_) {
      return absl::NotFoundError(absl::StrCat("cannot read ", path));
    }
    return it->second;
  }
  absl::Status WriteFileAtomically(const std::string& path,
                                   absl::string_view data) const override {
    absl::MutexLock lock(&mu_);
    ++writes_;
    if (fail_writes_) {
      return absl::InternalError(absl::StrCat("cannot write ", path));
    }
    files_[path] = std::string(data);
    return absl::OkStatus();
  }
  absl::Status CreateDirectories(const std::string& path) const override {
    absl::MutexLock lock(&mu_);
    directories_.insert(path);
    return absl::OkStatus();
  }

  void FailWrites(bool fail) {
    absl::MutexLock lock(&mu_);
    fail_writes_ = fail;
  }
  void FailReads(bool fail) {
    absl::MutexLock lock(&mu_);
    fail_reads_ = fail;
  }
  void Put(const std::string& path, const std::string& data) {
    absl::MutexLock lock(&mu_);
    files_[path] = data;
  }
  std::map<std::string, std::string> files() const {
    absl::MutexLock lock(&mu_);
    return files_;
  }
  bool HasDirectory(const std::string& path) const {
    absl::MutexLock lock(&mu_);
    return directories_.count(path) > 0;
  }
  int reads() const {
    absl::MutexLock lock(&mu_);
    return reads_;
  }
  int writes() const {
    absl::MutexLock lock(&mu_);
    return writes_;
  }

 private:
  mutable absl::Mutex mu_;
  mutable std::map<std::string, std::string> files_ ABSL_GUARDED_BY(mu_);
  mutable std::set<std::string> directories_ ABSL_GUARDED_BY(mu_);
  mutable int reads_ ABSL_GUARDED_BY(mu_) = 0;
  mutable int writes_ ABSL_GUARDED_BY(mu_) = 0;
  bool fail_writes_ ABSL_GUARDED_BY(mu_) = false;
  bool fail_reads_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace evotune

#endif  // EVOTUNE_TESTS_COMMON_FAKE_FILE_SYSTEM_H_
