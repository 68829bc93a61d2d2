// A model run (`evotune tune-model`) as one self-contained HTML page: for
// each bucket of the envelope, the kernel its search found, its time
// against the search's first trial (its first seed: the nearest tuned
// problem's best, else the template's fitted config), the trials and
// seconds spent; where the budget went and what it bought, as plots; with
// a comparison run, the faster SDPA backend's time for each bucket it
// timed.
#ifndef EVOTUNE_TUNER_CLI_MODEL_REPORT_H_
#define EVOTUNE_TUNER_CLI_MODEL_REPORT_H_

#include <optional>
#include <string>
#include <vector>

#include "evotune/v1/comparison.pb.h"
#include "evotune/v1/evotune.pb.h"

namespace evotune {

// One bucket and its search.
struct BucketSearch {
  v1::Problem problem;
  v1::Job job;  // Its search; job_id empty where none has run.
  std::vector<v1::TrialEvent> events;  // The search's trials, in order.
};

// The median time of the first correct trial of `events`, if any.
std::optional<double> FirstOkUs(const std::vector<v1::TrialEvent>& events);

// `about` says what model and envelope; `comparison` may be null.
std::string ModelReportHtml(const std::string& about,
                            const std::vector<BucketSearch>& buckets,
                            const v1::SdpaComparison* comparison = nullptr);

}  // namespace evotune

#endif  // EVOTUNE_TUNER_CLI_MODEL_REPORT_H_
