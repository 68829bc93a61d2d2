// A search job as one self-contained HTML page: inline SVG plots and tables,
// no scripts and nothing fetched when it is viewed.
//
//   - search progress: every trial's median time against its number (log
//     scale), the best so far as a step line, failed trials marked by status
//     along the top;
//   - each parameter's effect: the correct trials' times per value;
//   - the fastest trials with their latency spread;
//   - with a comparison run, the kernels it timed for the job's problem
//     beside PyTorch SDPA's flash and cuDNN backends (times of that run).
#ifndef EVOTUNE_TUNER_CLI_REPORT_H_
#define EVOTUNE_TUNER_CLI_REPORT_H_

#include <string>
#include <vector>

#include "evotune/v1/comparison.pb.h"
#include "evotune/v1/evotune.pb.h"

namespace evotune {

// A comparison run and its rows for the job's problem (RowsForJob).
struct JobComparison {
  v1::SdpaComparison run;
  std::vector<v1::SdpaComparisonRow> rows;
};

// `events` are the job's trials in order (WatchJob from sequence 0);
// `comparison` may be null.
std::string JobReportHtml(const v1::Job& job,
                          const std::vector<v1::TrialEvent>& events,
                          const JobComparison* comparison = nullptr);

}  // namespace evotune

#endif  // EVOTUNE_TUNER_CLI_REPORT_H_
