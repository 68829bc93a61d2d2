// Evaluator: turns (template, config, problem) into a TrialResult.
#ifndef EVOTUNE_TUNER_EVALUATOR_EVALUATOR_H_
#define EVOTUNE_TUNER_EVALUATOR_EVALUATOR_H_

#include <vector>

#include "absl/status/statusor.h"
#include "core/config.h"
#include "core/problem.h"
#include "core/trial.h"
#include "kernel_templates/kernel_template.h"

namespace evotune {

// A config with its template, as TimeInTurns takes them.
struct TemplateConfig {
  const KernelTemplate* t;
  Config config;
};

// Configs of one template, as TimeInTurns takes them.
inline std::vector<TemplateConfig> OfTemplate(
    const KernelTemplate& t, const std::vector<Config>& configs) {
  std::vector<TemplateConfig> out;
  for (const Config& c : configs) out.push_back({&t, c});
  return out;
}

// A bad candidate (does not compile, exceeds resources, wrong output, ...) is
// data: an OK StatusOr whose TrialResult says so. A non-OK status means the
// evaluator itself cannot work (no device, out of device memory for the
// inputs, ...) and the job should stop. Implementations need not be
// thread-safe: callers evaluate one candidate at a time per evaluator.
class Evaluator {
 public:
  virtual ~Evaluator() = default;

  // The device results are keyed on. Stable for the evaluator's lifetime.
  virtual const DeviceInfo& device() const = 0;

  // Every gate, then kFullTimingSamples timing samples.
  virtual absl::StatusOr<TrialResult> Evaluate(const KernelTemplate& t,
                                               const Config& config,
                                               const Problem& problem) = 0;

  // The same gates with only kQuickTimingSamples samples (a lower-fidelity
  // latency). By default a full evaluation.
  virtual absl::StatusOr<TrialResult> QuickEvaluate(const KernelTemplate& t,
                                                    const Config& config,
                                                    const Problem& problem) {
    return Evaluate(t, config, problem);
  }

  // Times several configs of one problem (of one template or several)
  // together, in turns: each passes the gates of Evaluate (a config that
  // fails one gets that result), then every kernel takes one timing sample
  // per turn, in a new random order each turn, so that clocks that drift
  // over seconds (a board at its power limit) fall on all of them alike and
  // their order can be trusted. The results follow `configs`, each with
  // `turns` samples. By default each config is evaluated fully, one after
  // another.
  virtual absl::StatusOr<std::vector<TrialResult>> TimeInTurns(
      const std::vector<TemplateConfig>& configs, const Problem& problem,
      int turns) {
    std::vector<TrialResult> results;
    for (const TemplateConfig& c : configs) {
      absl::StatusOr<TrialResult> r = Evaluate(*c.t, c.config, problem);
      if (!r.ok()) return r.status();
      results.push_back(*std::move(r));
    }
    return results;
  }

  // OK when this evaluator can evaluate template `t`; otherwise
  // INVALID_ARGUMENT saying why (a replay holds one template only).
  virtual absl::Status CanEvaluate(const KernelTemplate& t) const {
    return absl::OkStatus();
  }

  // Whether this evaluator can answer for `config` (a replay only for what
  // was recorded). Searches draw from the feasible configs it covers.
  virtual bool Covers(const KernelTemplate& t, const Config& config,
                      const Problem& problem) const {
    return true;
  }

  // The problems (ProblemKey) a replay has recordings of, for messages;
  // empty for an evaluator that measures anything.
  virtual std::vector<std::string> RecordedProblems() const { return {}; }

  // A hint that these configs will be evaluated soon, so that work which
  // needs no GPU (compiling) can start in the background. Optional.
  virtual void Prefetch(const KernelTemplate& t,
                        const std::vector<Config>& configs,
                        const Problem& problem) {}
  // How many prefetched configs it compiles at once (0: it does not).
  virtual int CompileAhead() const { return 0; }
};

}  // namespace evotune

#endif  // EVOTUNE_TUNER_EVALUATOR_EVALUATOR_H_
