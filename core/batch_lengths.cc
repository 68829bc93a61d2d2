#include "core/batch_lengths.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>

namespace evotune {
namespace {

// FNV-1a: a seed that is the same on every platform and build.
uint64_t StableHash(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

int64_t LogUniform(std::mt19937_64& rng, int64_t max) {
  std::uniform_real_distribution<double> u(0.0, std::log(double(max) + 1));
  return std::clamp<int64_t>(static_cast<int64_t>(std::exp(u(rng))), 1, max);
}

}  // namespace

int64_t BatchLengths::TotalQ() const {
  return std::accumulate(q.begin(), q.end(), int64_t{0});
}

int64_t BatchLengths::TotalK() const {
  return std::accumulate(k.begin(), k.end(), int64_t{0});
}

std::vector<int32_t> BatchLengths::Cumulative(
    const std::vector<int64_t>& lengths) {
  std::vector<int32_t> out(lengths.size() + 1, 0);
  for (size_t i = 0; i < lengths.size(); ++i) {
    out[i + 1] = static_cast<int32_t>(out[i] + lengths[i]);
  }
  return out;
}

bool PacksQueries(Layout layout) {
  return layout == Layout::kVarlen || layout == Layout::kPaged;
}

BatchLengths RepresentativeLengths(const Problem& p) {
  BatchLengths l;
  l.q.assign(p.batch, p.seq_q);
  l.k.assign(p.batch, p.seq_k);
  if (p.layout == Layout::kDense) return l;
  std::mt19937_64 rng(StableHash(ProblemKey(p)));
  const bool packed_q = PacksQueries(p.layout);
  for (int64_t b = 1; b < p.batch; ++b) {
    if (packed_q) l.q[b] = LogUniform(rng, p.seq_q);
    l.k[b] = LogUniform(rng, p.seq_k);
    if (packed_q && p.causal) {
      l.k[b] = std::max(l.k[b], std::min(l.q[b], p.seq_k));
    }
  }
  return l;
}

}  // namespace evotune
