// SyntheticEvaluator: a deterministic stand-in for a GPU, for tests and for
// exercising the service on machines without one.
//
// Its "latency" is a smooth function of the config and problem plus a fixed
// per-config perturbation, and some configs deterministically fail as
// compile_error or incorrect, so searches and the service see every path.
// Results are keyed on a device named "synthetic (not a GPU)", so they never
// mix with measurements of a real device. It can also crash or hang on
// command, standing in for a kernel that faults or never ends.
#ifndef EVOTUNE_TUNER_EVALUATOR_SYNTHETIC_EVALUATOR_H_
#define EVOTUNE_TUNER_EVALUATOR_SYNTHETIC_EVALUATOR_H_

#include <cstdio>
#include <string>

#include "absl/time/time.h"
#include "tuner/evaluator/evaluator.h"

namespace evotune {

class SyntheticEvaluator : public Evaluator {
 public:
  struct Options {
    // Sleeps this long per evaluation, to stand in for GPU time.
    absl::Duration delay = absl::ZeroDuration();
    // When set, appends "<template> <problem key> <config key>" per
    // evaluation, flushed before Evaluate returns (tests count evaluations).
    std::string log_path;
    // Faults on command, for tests of crash isolation. A config matches a
    // fault when it holds every NAME=value of it; the process then dies
    // (crash), never returns (hang), or dies only the first time in any
    // process sharing `fault_dir` (flaky: remembered by a file there).
    Config crash_on;
    Config hang_on;
    Config flaky_on;
    std::string fault_dir;
    // The compute capability it reports (0.0: none): what kernels exported
    // for its device compile for (it still runs none).
    int cc_major = 0;
    int cc_minor = 0;
  };

  static inline constexpr char kDeviceName[] = "synthetic (not a GPU)";

  explicit SyntheticEvaluator(Options options);
  ~SyntheticEvaluator() override;

  const DeviceInfo& device() const override { return device_; }
  absl::StatusOr<TrialResult> Evaluate(const KernelTemplate& t,
                                       const Config& config,
                                       const Problem& problem) override;
  // The same latency, marked as a quick measurement.
  absl::StatusOr<TrialResult> QuickEvaluate(const KernelTemplate& t,
                                            const Config& config,
                                            const Problem& problem) override;

 private:
  Options options_;
  DeviceInfo device_;
  std::FILE* log_ = nullptr;
};

}  // namespace evotune

#endif  // EVOTUNE_TUNER_EVALUATOR_SYNTHETIC_EVALUATOR_H_
