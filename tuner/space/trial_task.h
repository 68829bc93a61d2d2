// TrialTask: one evaluation of one config on one device, as the daemon hands
// it to whatever runs trials.
#ifndef EVOTUNE_TUNER_SPACE_TRIAL_TASK_H_
#define EVOTUNE_TUNER_SPACE_TRIAL_TASK_H_

#include <string>

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
};

}  // namespace evotune

#endif  // EVOTUNE_TUNER_SPACE_TRIAL_TASK_H_
