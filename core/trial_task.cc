#include "core/trial_task.h"

#include <algorithm>

namespace evotune {

std::vector<Contender> TaskContenders(const TrialTask& task) {
  std::vector<Contender> out = {
      {task.template_name, task.template_hash, task.config}};
  out.insert(out.end(), task.rivals.begin(), task.rivals.end());
  return out;
}

double TrialTaskWork(const TrialTask& task) {
  if (task.rivals.empty()) return 1;
  const double timings =
      std::max(1.0, static_cast<double>(task.turns) / kFullTimingSamples);
  return static_cast<double>(1 + task.rivals.size()) * timings;
}

}  // namespace evotune
