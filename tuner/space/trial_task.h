// TrialTask: one evaluation of one config on one device, as the daemon hands
// it to whatever runs trials; or several configs of one problem timed
// together in turns (Evaluator::TimeInTurns), to confirm a search's order.
#ifndef EVOTUNE_TUNER_SPACE_TRIAL_TASK_H_
#define EVOTUNE_TUNER_SPACE_TRIAL_TASK_H_

#include <string>
#include <vector>

#include "tuner/space/config.h"
#include "tuner/space/problem.h"
#include "tuner/space/trial.h"

namespace evotune {

struct TrialTask {
  DeviceInfo device;
  std::string template_name;
  std::string template_hash;
  Config config;
  Problem problem;
  bool quick = false;  // Quick timing instead of a full one.
  // Configs timed in turns with `config`, each passing every gate again;
  // their results come back in TrialResult::rival_results. Empty: `config`
  // alone.
  std::vector<Config> rivals;
  int turns = 0;  // Samples per config with rivals (one per turn).
};

// task.config, then its rivals.
std::vector<Config> TaskConfigs(const TrialTask& task);

// How many full trials' worth of GPU time the task holds (1 for one config),
// so that deadlines and remembered durations scale with it.
double TrialTaskWork(const TrialTask& task);

}  // namespace evotune

#endif  // EVOTUNE_TUNER_SPACE_TRIAL_TASK_H_
