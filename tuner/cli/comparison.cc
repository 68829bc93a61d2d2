#include "tuner/cli/comparison.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/config.h"
#include "google/protobuf/util/json_util.h"
#include "tuner/wire/message_convert.h"

namespace evotune {

absl::StatusOr<v1::SdpaComparison> ParseComparison(const std::string& json,
                                                   const std::string& what) {
  v1::SdpaComparison run;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  const auto s =
      google::protobuf::util::JsonStringToMessage(json, &run, options);
  if (!s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what,
                     ": not a comparison run (the JSON of "
                     "bench/sdpa_compare.py): ",
                     s.ToString()));
  }
  return run;
}

absl::StatusOr<v1::SdpaComparison> ReadComparison(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot read"));
  std::stringstream text;
  text << in.rdbuf();
  return ParseComparison(text.str(), path);
}

bool IsJobWinner(const v1::SdpaComparisonRow& row, const v1::Job& job) {
  if (!job.has_best() || row.template_name() != job.template_name()) {
    return false;
  }
  absl::StatusOr<Config> best = ConfigFromProto(job.best().config());
  absl::StatusOr<Config> timed = ParseConfigKey(row.config());
  return best.ok() && timed.ok() && *best == *timed;
}

absl::StatusOr<std::vector<v1::SdpaComparisonRow>> RowsForJob(
    const v1::SdpaComparison& run, const v1::Job& job,
    const std::string& what) {
  absl::StatusOr<Problem> problem = ProblemFromProto(job.problem());
  if (!problem.ok()) return problem.status();
  const std::string key = ProblemKey(*problem);
  std::vector<v1::SdpaComparisonRow> rows;
  std::set<std::string> held;
  for (const v1::SdpaComparisonRow& row : run.results()) {
    held.insert(row.problem());
    if (row.problem() == key) rows.push_back(row);
  }
  if (rows.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": no result for the job's problem ", key, " (it holds: ",
        held.empty() ? "nothing" : absl::StrJoin(held, ", "), ")"));
  }
  std::stable_sort(rows.begin(), rows.end(), [&](const auto& a, const auto& b) {
    const bool wa = IsJobWinner(a, job), wb = IsJobWinner(b, job);
    return wa != wb ? wa : a.us() < b.us();
  });
  return rows;
}

}  // namespace evotune
