// `evotune tune-model`: which buckets of a model's envelope still need a
// search given the daemon's jobs (so that a run resumes where one stopped),
// and the run's progress line.
#ifndef EVOTUNE_TUNER_CLI_TUNE_MODEL_H_
#define EVOTUNE_TUNER_CLI_TUNE_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "core/problem.h"
#include "evotune/v1/evotune.pb.h"

namespace evotune {

struct BucketStep {
  enum Kind { kSubmit, kTrack, kDone };
  Problem problem;
  Kind kind = kSubmit;
  std::string job_id;  // The job tracked or done.
};

// For each bucket, in order: kDone where a job of its problem succeeded,
// kTrack (the newest) where one is queued or running, else kSubmit (none,
// or only failed or cancelled ones). Jobs the daemon started itself (tune
// on miss) count as well.
std::vector<BucketStep> PlanBuckets(const std::vector<Problem>& buckets,
                                    const std::vector<v1::Job>& jobs);

// "tune-model: 37/160 buckets, 296 trials, 2m10s of 10m".
std::string FormatModelProgress(int done, int total, int64_t trials,
                                absl::Duration elapsed, absl::Duration budget);

}  // namespace evotune

#endif  // EVOTUNE_TUNER_CLI_TUNE_MODEL_H_
