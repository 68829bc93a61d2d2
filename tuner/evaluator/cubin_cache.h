// CubinCache: compiled kernels by template version, config, problem class
// (head_dim, dtype), architecture and NVRTC version, kept on disk between
// runs; misses compile on a thread pool so that the compiles of upcoming
// candidates overlap the GPU work of the current one.
#ifndef EVOTUNE_TUNER_EVALUATOR_CUBIN_CACHE_H_
#define EVOTUNE_TUNER_EVALUATOR_CUBIN_CACHE_H_

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "tuner/common/file_system.h"
#include "tuner/evaluator/nvrtc_compiler.h"

namespace evotune {

// Thread-safe.
class CubinCache {
 public:
  // `dir` empty keeps results in memory only; otherwise cubins are files
  // there (created on demand) in `fs`, which must outlive the cache.
  // `threads` compile in the background.
  CubinCache(std::string dir, std::string arch, int threads,
             const FileSystem* fs = &FileSystem::Local());
  ~CubinCache();

  // Starts compiling in the background unless cached or already under way.
  void Prefetch(const KernelTemplate& t, const Config& config,
                const Problem& problem);

  // The compile result, from the cache, from a background compile (waiting
  // for it), or compiled now.
  absl::StatusOr<CompileResult> Get(const KernelTemplate& t,
                                    const Config& config,
                                    const Problem& problem);

  // The cache key; also the file name (plus ".cubin") on disk.
  std::string Key(const KernelTemplate& t, const Config& config,
                  const Problem& problem) const;

 private:
  struct Entry {
    bool done = false;
    absl::StatusOr<CompileResult> result;
  };
  struct Task {
    const KernelTemplate* t;
    Config config;
    Problem problem;
    std::string key;
  };

  void Work();
  absl::StatusOr<CompileResult> Compile(const Task& task);
  bool ReadFile(const std::string& key, CompileResult* out) const;
  void WriteFile(const std::string& key, const CompileResult& r) const;

  const std::string dir_;
  const std::string arch_;
  const FileSystem* const fs_;
  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Entry>> entries_ ABSL_GUARDED_BY(mu_);
  std::deque<Task> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::CondVar done_;
  std::vector<std::thread> workers_;
};

}  // namespace evotune

#endif  // EVOTUNE_TUNER_EVALUATOR_CUBIN_CACHE_H_
