// Leave-one-problem-out on recorded landscapes: how well configs transferred
// from other problems serve a problem never tuned, measured against that
// problem's recorded optimum, for the cost model and for the nearest-problem
// rule it replaces. The evidence behind the cost model (bench/transfer_loo,
// tests/model/leave_one_out_test.cc).
#ifndef EVOTUNE_TUNER_MODEL_LEAVE_ONE_OUT_H_
#define EVOTUNE_TUNER_MODEL_LEAVE_ONE_OUT_H_

#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "tuner/model/cost_model.h"

namespace evotune {

// One template's recorded results: every config feasible on the recorded
// GPU's limits of every recorded problem (by problem key), with its result.
struct RecordedLandscape {
  std::string path;
  const KernelTemplate* t = nullptr;
  DeviceLimits limits;  // The recording's (its header's).
  std::map<std::string, std::vector<std::pair<Config, TrialResult>>> problems;
};

// Reads a CSV as bench/record_landscapes.sh writes it (see ReplayEvaluator).
// INVALID_ARGUMENT when its header does not give the GPU's multiprocessors:
// the cost model's launch features and the fitted configs need them.
absl::StatusOr<RecordedLandscape> LoadRecordedLandscape(
    const std::string& path, const TemplateRegistry& templates);

// The limits the landscapes were recorded with; INVALID_ARGUMENT naming two
// recordings whose limits differ (of different GPUs), or for none.
absl::StatusOr<DeviceLimits> SharedLimits(
    const std::vector<RecordedLandscape>& landscapes);

// The OK results of every landscape as training samples, leaving out the
// problem `skip` (a problem key; empty leaves out none).
std::vector<CostSample> RecordedSamples(
    const std::vector<RecordedLandscape>& landscapes, const std::string& skip);

// A config of a template and its recorded latency on the problem left out
// (infinity when it failed there or nothing was served).
struct Choice {
  std::string template_name;  // Empty when nothing was served.
  Config config;
  double us = std::numeric_limits<double>::infinity();
};

// One problem left out: its recorded optimum and the config each rule
// serves.
struct LeftOut {
  std::string problem;
  Choice optimum;
  Choice model;
  Choice nearest;
};

// Every recorded problem left out in turn, served from the other problems'
// results of the templates recorded for it: a model trained on all the
// other problems ranks their TransferPool; the nearest-problem rule serves
// the fastest runnable config of the nearest other problem (same head_dim,
// dtype and causal first). Where the templates that suit the problem best
// (serving_defaults.h's TopRanked) have no results among those serving it,
// both answer as the daemon does, with RankedDefaults' first. A problem no
// other problem can serve is skipped.
//
// With `tuned` (problem keys) the daemon's situation after tuning only
// those: one model trained on them, and the nearest rule over them, serve
// every other recorded problem.
absl::StatusOr<std::vector<LeftOut>> LeaveOneProblemOut(
    const std::vector<RecordedLandscape>& landscapes,
    const DeviceLimits& limits, const CostModelOptions& options = {},
    const std::set<std::string>& tuned = {});

}  // namespace evotune

#endif  // EVOTUNE_TUNER_MODEL_LEAVE_ONE_OUT_H_
