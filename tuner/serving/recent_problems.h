// RecentProblems: the problems served on each GPU, the most recent first,
// so that a program starting there can be given the kernels it likely asks
// for before it asks (GetKernel records, RecentKernels answers). Bounded:
// the least recently served fall out first. Thread-safe.
#ifndef EVOTUNE_TUNER_SERVING_RECENT_PROBLEMS_H_
#define EVOTUNE_TUNER_SERVING_RECENT_PROBLEMS_H_

#include <cstddef>
#include <list>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "core/problem.h"

namespace evotune {

class RecentProblems {
 public:
  // Keeps at most `capacity` (device, problem) entries over all devices.
  explicit RecentProblems(size_t capacity = 1024) : capacity_(capacity) {}

  // `problem` served on `device` now: moved to the front of its list.
  void Add(const std::string& device, const Problem& problem);

  // Up to `limit` problems served on `device`, the most recent first.
  std::vector<Problem> Recent(const std::string& device, size_t limit) const;

 private:
  using Entry = std::pair<std::string, Problem>;  // (device, problem)
  const size_t capacity_;
  mutable absl::Mutex mu_;
  std::list<Entry> order_ ABSL_GUARDED_BY(mu_);  // Most recent first.
  // By (device, problem key): where the entry is in order_.
  std::map<std::pair<std::string, std::string>, std::list<Entry>::iterator>
      where_ ABSL_GUARDED_BY(mu_);
};

}  // namespace evotune

#endif  // EVOTUNE_TUNER_SERVING_RECENT_PROBLEMS_H_
