#include "tuner/search/list_strategy.h"

#include <random>

namespace evotune {

ListStrategy::ListStrategy(std::vector<Config> order)
    : order_(std::move(order)) {}

std::vector<Config> ListStrategy::Shuffled(std::vector<Config> configs,
                                           uint64_t seed) {
  // Fisher-Yates with std::mt19937_64, whose output the standard fixes, and
  // a modulo draw (the bias is negligible for spaces of this size).
  std::mt19937_64 gen(seed);
  for (size_t i = configs.size(); i > 1; --i) {
    const size_t j = static_cast<size_t>(gen() % i);
    std::swap(configs[i - 1], configs[j]);
  }
  return configs;
}

void ListStrategy::SkipSeen() {
  while (next_ < order_.size() && seen_.count(ConfigKey(order_[next_])) > 0) {
    ++next_;
  }
}

std::vector<Config> ListStrategy::Propose(int n) {
  std::vector<Config> out;
  for (SkipSeen(); next_ < order_.size() && static_cast<int>(out.size()) < n;
       SkipSeen()) {
    seen_.insert(ConfigKey(order_[next_]));
    out.push_back(order_[next_++]);
  }
  return out;
}

void ListStrategy::Report(
    const std::vector<std::pair<Config, TrialResult>>& results) {
  for (const auto& r : results) seen_.insert(ConfigKey(r.first));
}

bool ListStrategy::Done() const {
  for (size_t i = next_; i < order_.size(); ++i) {
    if (seen_.count(ConfigKey(order_[i])) == 0) return false;
  }
  return true;
}

}  // namespace evotune
