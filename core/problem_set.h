// ProblemSet: problems searched for the one nearest another by
// ProblemDistance, each problem's logs computed once. A store's tuned
// problems are a ProblemSet: an untuned query that the nearest rule answers
// then costs one pass over a few numbers per problem (tens of microseconds
// for 10,000 problems) instead of a read and parse of every problem's row.
#ifndef EVOTUNE_CORE_PROBLEM_SET_H_
#define EVOTUNE_CORE_PROBLEM_SET_H_

#include <array>
#include <optional>
#include <vector>

#include "core/problem.h"

namespace evotune {

class ProblemSet {
 public:
  explicit ProblemSet(std::vector<Problem> problems);

  struct Match {
    Problem problem;
    double distance = 0;  // ProblemDistance to the problem asked.
  };

  // The problem nearest `p` other than `p` itself (the first of equally near
  // ones), among those of p's head_dim, dtype and score mods (causal flag,
  // window, softcap) when `same_class`; nullopt when there is none.
  std::optional<Match> Nearest(const Problem& p, bool same_class) const;

  size_t size() const { return problems_.size(); }

 private:
  // log2 of batch, heads, kv_heads, seq_q, seq_k and head_dim.
  using Logs = std::array<double, 6>;
  static Logs LogsOf(const Problem& p);

  std::vector<Problem> problems_;
  std::vector<Logs> logs_;
};

}  // namespace evotune

#endif  // EVOTUNE_CORE_PROBLEM_SET_H_
