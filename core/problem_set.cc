#include "core/problem_set.h"

#include <cmath>
#include <limits>
#include <utility>

namespace evotune {

ProblemSet::ProblemSet(std::vector<Problem> problems)
    : problems_(std::move(problems)) {
  logs_.reserve(problems_.size());
  for (const Problem& p : problems_) logs_.push_back(LogsOf(p));
}

ProblemSet::Logs ProblemSet::LogsOf(const Problem& p) {
  Logs l;
  const int64_t sizes[] = {p.batch, p.heads, p.kv_heads,
                           p.seq_q, p.seq_k, p.head_dim};
  for (size_t i = 0; i < l.size(); ++i) {
    l[i] = std::log2(static_cast<double>(sizes[i]));
  }
  return l;
}

std::optional<ProblemSet::Match> ProblemSet::Nearest(const Problem& p,
                                                     bool same_class) const {
  const Logs at = LogsOf(p);
  size_t best = problems_.size();
  double best_distance = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < problems_.size(); ++i) {
    const Problem& q = problems_[i];
    const bool other_class =
        q.head_dim != p.head_dim || q.dtype != p.dtype || !SameScoreMods(q, p);
    if (same_class && other_class) continue;
    // ProblemDistance, from the logs kept.
    double d = KindDistance(q, p);
    for (size_t j = 0; j < at.size(); ++j) {
      const double x = logs_[i][j] - at[j];
      d += x * x;
    }
    if (d < best_distance && !(q == p)) {
      best = i;
      best_distance = d;
    }
  }
  if (best == problems_.size()) return std::nullopt;
  return Match{problems_[best], best_distance};
}

}  // namespace evotune
