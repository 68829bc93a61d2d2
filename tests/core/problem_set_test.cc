#include "core/problem_set.h"

#include <random>

#include "gtest/gtest.h"

namespace evotune {
namespace {

Problem Make(int64_t batch, int64_t heads, int64_t kv_heads, int64_t seq_q,
             int64_t seq_k, int64_t head_dim, bool causal = false,
             DType dtype = DType::kFp16) {
  Problem p;
  p.batch = batch;
  p.heads = heads;
  p.kv_heads = kv_heads;
  p.seq_q = seq_q;
  p.seq_k = seq_k;
  p.head_dim = head_dim;
  p.causal = causal;
  p.dtype = dtype;
  return p;
}

Problem RandomProblem(std::mt19937_64& gen) {
  auto pow2 = [&](int most) { return int64_t{1} << (gen() % (most + 1)); };
  const int64_t kv = pow2(4);
  return Make(pow2(5), kv * pow2(3), kv, 1 + gen() % 4096, 1 + gen() % 8192,
              gen() % 2 ? 64 : 128, gen() % 2 == 0,
              gen() % 2 ? DType::kFp16 : DType::kBf16);
}

// What the store's nearest rule did before: ProblemDistance to each
// problem, in order, the first of the nearest kept.
std::optional<Problem> NearestByDistance(const std::vector<Problem>& set,
                                         const Problem& p, bool same_class) {
  std::optional<Problem> best;
  double best_distance = 1e300;
  for (const Problem& q : set) {
    if (q == p ||
        (same_class && (q.head_dim != p.head_dim || q.dtype != p.dtype ||
                        q.causal != p.causal))) {
      continue;
    }
    const double d = ProblemDistance(q, p);
    if (d < best_distance) {
      best = q;
      best_distance = d;
    }
  }
  return best;
}

TEST(ProblemSetTest, NearestIsTheProblemOfLeastDistance) {
  std::mt19937_64 gen(7);
  std::vector<Problem> problems;
  for (int i = 0; i < 400; ++i) problems.push_back(RandomProblem(gen));
  const ProblemSet set(problems);
  EXPECT_EQ(set.size(), 400u);
  for (int i = 0; i < 200; ++i) {
    const Problem p = RandomProblem(gen);
    for (bool same_class : {true, false}) {
      std::optional<Problem> want = NearestByDistance(problems, p, same_class);
      std::optional<ProblemSet::Match> got = set.Nearest(p, same_class);
      ASSERT_EQ(got.has_value(), want.has_value());
      if (got) {
        EXPECT_DOUBLE_EQ(ProblemDistance(got->problem, p),
                         ProblemDistance(*want, p))
            << ProblemKey(p) << ": " << ProblemKey(got->problem) << " vs "
            << ProblemKey(*want);
        EXPECT_NEAR(got->distance, ProblemDistance(got->problem, p), 1e-9);
      }
    }
  }
}

TEST(ProblemSetTest, NeverTheProblemItselfAndOnlyItsClassWhenAsked) {
  const Problem seed = Make(1, 8, 8, 512, 512, 64);
  const Problem causal = Make(1, 8, 8, 512, 512, 64, true);
  const Problem far = Make(64, 32, 8, 4096, 4096, 64);
  const ProblemSet set({seed, causal, far});
  auto nearest = [&](const ProblemSet& s, const Problem& p, bool same_class) {
    std::optional<ProblemSet::Match> m = s.Nearest(p, same_class);
    return m ? std::optional<Problem>(m->problem) : std::nullopt;
  };
  EXPECT_EQ(nearest(set, seed, false), causal);
  EXPECT_EQ(nearest(set, seed, true), far);
  EXPECT_EQ(nearest(set, causal, true), std::nullopt);
  EXPECT_EQ(nearest(set, causal, false), seed);
  EXPECT_EQ(nearest(set, Make(1, 8, 8, 512, 512, 128), true), std::nullopt);
  EXPECT_EQ(nearest(ProblemSet({}), seed, false), std::nullopt);
}

}  // namespace
}  // namespace evotune
