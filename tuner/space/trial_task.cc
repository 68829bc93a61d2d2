#include "tuner/space/trial_task.h"

#include <algorithm>

namespace evotune {

std::vector<Config> TaskConfigs(const TrialTask& task) {
  std::vector<Config> configs = {task.config};
  configs.insert(configs.end(), task.rivals.begin(), task.rivals.end());
  return configs;
}

double TrialTaskWork(const TrialTask& task) {
  if (task.rivals.empty()) return 1;
  const double timings =
      std::max(1.0, static_cast<double>(task.turns) / kFullTimingSamples);
  return static_cast<double>(1 + task.rivals.size()) * timings;
}

}  // namespace evotune
