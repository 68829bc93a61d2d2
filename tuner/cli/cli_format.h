// Human-readable rendering of evotune.v1 messages for the evotune CLI.
#ifndef EVOTUNE_TUNER_CLI_CLI_FORMAT_H_
#define EVOTUNE_TUNER_CLI_CLI_FORMAT_H_

#include <string>
#include <vector>

#include "evotune/v1/evotune.pb.h"

namespace evotune {

std::string FormatProblem(const v1::Problem& p);
std::string FormatConfig(const v1::Config& c);
std::string FormatDevice(const v1::Device& d);
std::string StateName(v1::JobState state);
std::string TrialStatusLabel(v1::TrialStatus status);
// "12.34 us", or "-" when the trial has no latency.
std::string FormatLatency(const v1::Trial& t);
std::string FormatDuration(double seconds);

// Columns padded to their widest cell; the first row is the header.
std::string FormatTable(const std::vector<std::vector<std::string>>& rows);

std::string FormatJob(const v1::Job& job);
std::string FormatJobsTable(const v1::ListJobsResponse& jobs);
std::string FormatBest(const v1::QueryBestResponse& best);
std::string FormatTemplates(const v1::ListTemplatesResponse& templates);

// The outcome of `evotune bench`: status (and why, when not OK), latency
// statistics and rate.
std::string FormatEvaluation(const v1::EvaluateConfigRequest& request,
                             const v1::EvaluateConfigResponse& response);

// One progress line: bar, trials done of budget, best so far, elapsed, ETA.
std::string FormatProgress(const v1::Job& job, int width);

}  // namespace evotune

#endif  // EVOTUNE_TUNER_CLI_CLI_FORMAT_H_
