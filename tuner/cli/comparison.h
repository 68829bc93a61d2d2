// A comparison run (bench/sdpa_compare.py's JSON: evotune kernels beside
// PyTorch SDPA in one process) and the rows of it that concern one job.
#ifndef EVOTUNE_TUNER_CLI_COMPARISON_H_
#define EVOTUNE_TUNER_CLI_COMPARISON_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "evotune/v1/comparison.pb.h"
#include "evotune/v1/evotune.pb.h"

namespace evotune {

// Parses the JSON text of a comparison run. INVALID_ARGUMENT naming `what`
// (the file) when it is not one.
absl::StatusOr<v1::SdpaComparison> ParseComparison(const std::string& json,
                                                   const std::string& what);

// ParseComparison of a file's contents; NOT_FOUND when it cannot be read.
absl::StatusOr<v1::SdpaComparison> ReadComparison(const std::string& path);

// The rows timed on the job's problem, fastest first, except that the job's
// winner (its template and best config) comes first when the run timed it.
// INVALID_ARGUMENT naming `what` and listing the problems the run holds when it
// has none for this one.
absl::StatusOr<std::vector<v1::SdpaComparisonRow>> RowsForJob(
    const v1::SdpaComparison& run, const v1::Job& job, const std::string& what);

// Whether the row times the job's winner.
bool IsJobWinner(const v1::SdpaComparisonRow& row, const v1::Job& job);

}  // namespace evotune

#endif  // EVOTUNE_TUNER_CLI_COMPARISON_H_
