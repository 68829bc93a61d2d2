// TrialTask: one evaluation of one config on one device, as the daemon hands
// it to whatever runs trials; or several configs of one problem, of one
// template or several, timed together in turns (Evaluator::TimeInTurns), to
// confirm a search's order and the problem's choice between templates.
#ifndef EVOTUNE_CORE_TRIAL_TASK_H_
#define EVOTUNE_CORE_TRIAL_TASK_H_

#include <string>
#include <vector>

#include "core/config.h"
#include "core/problem.h"
#include "core/trial.h"

namespace evotune {

// A config of one template version: what a task times in turns.
struct Contender {
  std::string template_name;
  std::string template_hash;
  Config config;

  bool operator==(const Contender& o) const {
    return template_name == o.template_name &&
           template_hash == o.template_hash && config == o.config;
  }
};

// Most rivals a task may carry.
inline constexpr int kMaxRivals = 15;

struct TrialTask {
  DeviceInfo device;
  std::string template_name;
  std::string template_hash;
  Config config;
  Problem problem;
  bool quick = false;  // Quick timing instead of a full one.
  // Configs timed in turns with `config` (of the task's template or
  // another), each passing every gate again; their results come back in
  // TrialResult::rival_results. Empty: `config` alone.
  std::vector<Contender> rivals;
  int turns = 0;  // Samples per config with rivals (one per turn).
};

// The task's own config (of its template), then its rivals.
std::vector<Contender> TaskContenders(const TrialTask& task);

// How many full trials' worth of GPU time the task holds (1 for one config),
// so that deadlines and remembered durations scale with it.
double TrialTaskWork(const TrialTask& task);

}  // namespace evotune

#endif  // EVOTUNE_CORE_TRIAL_TASK_H_
