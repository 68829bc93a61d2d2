#include "tuner/evaluator/cubin_cache.h"

#include "absl/strings/str_cat.h"

namespace evotune {

CubinCache::CubinCache(std::string dir, std::string arch, int threads,
                       const FileSystem* fs)
    : dir_(std::move(dir)), arch_(std::move(arch)), fs_(fs) {
  // A directory that cannot be made leaves every cubin to be compiled.
  if (!dir_.empty()) fs_->CreateDirectories(dir_).IgnoreError();
  for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { Work(); });
}

CubinCache::~CubinCache() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& w : workers_) w.join();
}

std::string CubinCache::Key(const KernelTemplate& t, const Config& config,
                            const Problem& problem) const {
  return CompileKey(t, config, problem, arch_);
}

void CubinCache::Prefetch(const KernelTemplate& t, const Config& config,
                          const Problem& problem) {
  if (workers_.empty()) return;
  std::string key = Key(t, config, problem);
  absl::MutexLock lock(&mu_);
  if (entries_.count(key) > 0) return;
  entries_[key] = std::make_shared<Entry>();
  queue_.push_back({&t, config, problem, std::move(key)});
}

absl::StatusOr<CompileResult> CubinCache::Get(const KernelTemplate& t,
                                              const Config& config,
                                              const Problem& problem) {
  const std::string key = Key(t, config, problem);
  std::shared_ptr<Entry> entry;
  bool compile_here = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(key);
    if (it == entries_.end()) {
      entry = std::make_shared<Entry>();
      entries_[key] = entry;
      compile_here = true;
    } else {
      entry = it->second;
      // Not started yet: take it off the queue and compile it now.
      for (auto q = queue_.begin(); q != queue_.end(); ++q) {
        if (q->key == key) {
          queue_.erase(q);
          compile_here = true;
          break;
        }
      }
    }
  }
  if (compile_here) {
    absl::StatusOr<CompileResult> r = Compile({&t, config, problem, key});
    absl::MutexLock lock(&mu_);
    entry->result = std::move(r);
    entry->done = true;
    done_.SignalAll();
  }
  absl::MutexLock lock(&mu_);
  while (!entry->done) done_.Wait(&mu_);
  absl::StatusOr<CompileResult> result = entry->result;
  // Files hold the cubins; memory only what is being waited for.
  if (!dir_.empty()) entries_.erase(key);
  return result;
}

void CubinCache::Work() {
  while (true) {
    Task task;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !queue_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    absl::StatusOr<CompileResult> r = Compile(task);
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(task.key);
    if (it != entries_.end()) {
      it->second->result = std::move(r);
      it->second->done = true;
    }
    done_.SignalAll();
  }
}

absl::StatusOr<CompileResult> CubinCache::Compile(const Task& task) {
  CompileResult cached;
  if (ReadFile(task.key, &cached)) return cached;
  absl::StatusOr<CompileResult> r =
      CompileTemplate(*task.t, task.config, task.problem, arch_);
  // Cubins only: PTX (a virtual architecture's) is compiled again.
  if (r.ok() && r->ok && !r->cubin.empty()) WriteFile(task.key, *r);
  return r;
}

bool CubinCache::ReadFile(const std::string& key, CompileResult* out) const {
  if (dir_.empty()) return false;
  absl::StatusOr<std::string> cubin =
      fs_->ReadFile(absl::StrCat(dir_, "/", key, ".cubin"));
  if (!cubin.ok() || cubin->empty()) return false;
  out->ok = true;
  out->cubin = *std::move(cubin);
  out->log = "(from the cubin cache)";
  return true;
}

void CubinCache::WriteFile(const std::string& key,
                           const CompileResult& r) const {
  if (dir_.empty()) return;
  // Only a cache: a cubin that cannot be kept is compiled again next time.
  fs_->WriteFileAtomically(absl::StrCat(dir_, "/", key, ".cubin"), r.cubin)
      .IgnoreError();
}

}  // namespace evotune
