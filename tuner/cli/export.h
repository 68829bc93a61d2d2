// `evotune export`: the problems to export and how each exported kernel is
// shown. The bundle itself is written by tuner/wire/kernel_bundle.h.
#ifndef EVOTUNE_TUNER_CLI_EXPORT_H_
#define EVOTUNE_TUNER_CLI_EXPORT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/problem.h"
#include "evotune/v1/evotune.pb.h"

namespace evotune {

// `spec` is problem keys separated by commas (as ProblemKey writes them:
// b1_h8_kv8_q512_k512_d64_full_fp16_bhsd), or the path of a file with one
// key per line (blank lines and lines starting with '#' skipped). Repeated
// problems are kept once. INVALID_ARGUMENT naming "--problems" and the bad
// key; NOT_FOUND for an unreadable file.
absl::StatusOr<std::vector<Problem>> ParseProblemList(const std::string& spec);

// One line: problem, template and config, where the config comes from
// (tuned and its latency, transferred from which problem, or a template
// default), architecture and cubin size.
std::string FormatExportedKernel(const v1::Kernel& kernel);

}  // namespace evotune

#endif  // EVOTUNE_TUNER_CLI_EXPORT_H_
