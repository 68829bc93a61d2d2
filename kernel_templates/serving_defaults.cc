#include "kernel_templates/serving_defaults.h"

#include <algorithm>
#include <set>
#include <string>
#include <utility>

namespace evotune {

int DefaultRank(const KernelTemplate& t, const Problem& problem) {
  return t.default_rank ? t.default_rank(problem) : 0;
}

std::vector<const KernelTemplate*> TopRanked(
    const std::vector<const KernelTemplate*>& candidates,
    const Problem& problem, const DeviceLimits& limits) {
  std::vector<const KernelTemplate*> top;
  int best = 0;
  for (const KernelTemplate* t : candidates) {
    if (!CheckSupports(*t, problem).ok() || !CheckDevice(*t, limits).ok()) {
      continue;
    }
    const int rank = DefaultRank(*t, problem);
    if (top.empty() || rank > best) {
      top.clear();
      best = rank;
    }
    if (rank == best) top.push_back(t);
  }
  return top;
}

std::vector<Config> DefaultConfigs(const KernelTemplate& t,
                                   const Problem& problem,
                                   const DeviceLimits& limits, size_t* fitted) {
  std::vector<Config> configs;
  if (t.fitted_defaults) configs = t.fitted_defaults(problem, limits);
  if (fitted != nullptr) *fitted = configs.size();
  configs.insert(configs.end(), t.defaults.begin(), t.defaults.end());
  return configs;
}

std::vector<DefaultChoice> RankedDefaults(
    const std::vector<const KernelTemplate*>& candidates,
    const Problem& problem, const DeviceLimits& limits, size_t k) {
  std::vector<std::pair<int, const KernelTemplate*>> ranked;
  for (const KernelTemplate* t : candidates) {
    ranked.push_back({DefaultRank(*t, problem), t});
  }
  std::stable_sort(
      ranked.begin(), ranked.end(),
      [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<DefaultChoice> out;
  for (const auto& [rank, t] : ranked) {
    std::set<std::string> seen;
    for (const Config& c : DefaultConfigs(*t, problem, limits)) {
      if (out.size() < k && seen.insert(ConfigKey(c)).second &&
          RunsOn(*t, c, problem, limits)) {
        out.push_back({t, c});
      }
    }
  }
  return out;
}

}  // namespace evotune
