#include "tuner/cli/tune_model.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tuner/wire/message_convert.h"

namespace evotune {

std::vector<BucketStep> PlanBuckets(const std::vector<Problem>& buckets,
                                    const std::vector<v1::Job>& jobs) {
  // By problem key: the job that decides the bucket's step.
  std::map<std::string, BucketStep> known;
  for (const v1::Job& job : jobs) {
    absl::StatusOr<Problem> p = ProblemFromProto(job.problem());
    if (!p.ok()) continue;
    BucketStep step{*p, BucketStep::kSubmit, job.job_id()};
    if (job.state() == v1::JOB_STATE_SUCCEEDED) {
      step.kind = BucketStep::kDone;
    } else if (job.state() == v1::JOB_STATE_QUEUED ||
               job.state() == v1::JOB_STATE_RUNNING) {
      step.kind = BucketStep::kTrack;
    } else {
      continue;
    }
    BucketStep& have = known[ProblemKey(*p)];
    // A success decides; else the last unfinished one listed.
    if (have.kind != BucketStep::kDone) have = step;
  }
  std::vector<BucketStep> out;
  for (const Problem& p : buckets) {
    auto it = known.find(ProblemKey(p));
    out.push_back(it == known.end() ? BucketStep{p, BucketStep::kSubmit, ""}
                                    : it->second);
  }
  return out;
}

std::string FormatModelProgress(int done, int total, int64_t trials,
                                absl::Duration elapsed, absl::Duration budget) {
  auto clock = [](absl::Duration d) {
    const int64_t s = absl::ToInt64Seconds(d);
    return s >= 60 ? absl::StrFormat("%dm%02ds", s / 60, s % 60)
                   : absl::StrFormat("%ds", s);
  };
  return absl::StrCat("tune-model: ", done, "/", total, " buckets, ", trials,
                      " trials, ", clock(elapsed), " of ", clock(budget));
}

}  // namespace evotune
