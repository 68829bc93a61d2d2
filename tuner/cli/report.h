// A search job as one self-contained HTML page: inline SVG plots and tables,
// no scripts and nothing fetched when it is viewed.
//
//   - search progress: every trial's median time against its number (log
//     scale), the best so far as a step line, failed trials marked by status
//     along the top;
//   - each parameter's effect: the correct trials' times per value;
//   - the fastest trials with their latency spread.
#ifndef EVOTUNE_TUNER_CLI_REPORT_H_
#define EVOTUNE_TUNER_CLI_REPORT_H_

#include <string>
#include <vector>

#include "evotune/v1/evotune.pb.h"

namespace evotune {

// `events` are the job's trials in order (WatchJob from sequence 0).
std::string JobReportHtml(const v1::Job& job,
                          const std::vector<v1::TrialEvent>& events);

}  // namespace evotune

#endif  // EVOTUNE_TUNER_CLI_REPORT_H_
