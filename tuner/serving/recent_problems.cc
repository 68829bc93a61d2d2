#include "tuner/serving/recent_problems.h"

namespace evotune {

void RecentProblems::Add(const std::string& device, const Problem& problem) {
  if (capacity_ == 0) return;
  absl::MutexLock lock(&mu_);
  const std::pair<std::string, std::string> key{device, ProblemKey(problem)};
  auto it = where_.find(key);
  if (it != where_.end()) {
    order_.splice(order_.begin(), order_, it->second);
    return;
  }
  if (order_.size() == capacity_) {
    const Entry& last = order_.back();
    where_.erase({last.first, ProblemKey(last.second)});
    order_.pop_back();
  }
  order_.emplace_front(device, problem);
  where_[key] = order_.begin();
}

std::vector<Problem> RecentProblems::Recent(const std::string& device,
                                            size_t limit) const {
  absl::MutexLock lock(&mu_);
  std::vector<Problem> out;
  for (const Entry& e : order_) {
    if (out.size() >= limit) break;
    if (e.first == device) out.push_back(e.second);
  }
  return out;
}

}  // namespace evotune
