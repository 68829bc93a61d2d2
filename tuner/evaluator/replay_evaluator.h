// ReplayEvaluator: answers from a recorded landscape (a CSV as
// bench/record_landscapes.sh writes it) instead of a GPU, so that searches
// can be compared and the service exercised on real measurements anywhere.
//
// Results are keyed on a device named after the recording ("replay of
// <GPU> (<template>@<recorded hash>)"), so they never mix with live
// measurements, nor with another recording.
//
// The device's limits are the recording's ("# multiprocessors: N" and
// "# shared memory per block: BYTES" in its header), so a daemon replaying it
// fits its defaults and its cost model to the GPU that was measured. A
// recording without them reports 0 multiprocessors (unknown) and a shared
// memory limit that admits every recorded config.
//
// A template may have gained parameters since the recording. A parameter the
// recording lacks matches only at its first (smallest) value, which by the
// templates' rule reproduces the kernel from before the parameter existed.
#ifndef EVOTUNE_TUNER_EVALUATOR_REPLAY_EVALUATOR_H_
#define EVOTUNE_TUNER_EVALUATOR_REPLAY_EVALUATOR_H_

#include <map>
#include <memory>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "tuner/evaluator/evaluator.h"

namespace evotune {

// Recorded results: problem key -> config key -> result.
using Landscape = std::map<std::string, std::map<std::string, TrialResult>>;

class ReplayEvaluator : public Evaluator {
 public:
  // INVALID_ARGUMENT naming the line for a malformed file.
  static absl::StatusOr<std::unique_ptr<ReplayEvaluator>> Load(
      const std::string& path);

  const DeviceInfo& device() const override { return device_; }

  // FAILED_PRECONDITION for another template or a problem that was not
  // recorded; a config that was not recorded is resource_rejected (the
  // recording covers every config feasible on its GPU).
  absl::StatusOr<TrialResult> Evaluate(const KernelTemplate& t,
                                       const Config& config,
                                       const Problem& problem) override;

  absl::Status CanEvaluate(const KernelTemplate& t) const override;
  bool Covers(const KernelTemplate& t, const Config& config,
              const Problem& problem) const override;

  std::vector<std::string> RecordedProblems() const override;

  const std::string& template_name() const { return template_name_; }
  const Landscape& landscape() const { return landscape_; }

 private:
  ReplayEvaluator() = default;
  // A "# ..." line of the file's header (text after the '#'): the GPU, its
  // compute capability and limits, the template and its hash.
  absl::Status ReadComment(absl::string_view text, std::string* gpu,
                           std::string* hash);
  // The recorded result for `config`, or null.
  const TrialResult* Find(const KernelTemplate& t, const Config& config,
                          const Problem& problem) const;

  DeviceInfo device_;
  std::string template_name_;
  std::set<std::string> recorded_params_;
  Landscape landscape_;
};

}  // namespace evotune

#endif  // EVOTUNE_TUNER_EVALUATOR_REPLAY_EVALUATOR_H_
