// The sequence lengths a problem is measured at. A problem with lengths on
// the device (Layout kVarlen, kKvCache or kPaged) names a bucket: seq_q and
// seq_k bound its sequences' lengths. Searches time and validate a bucket on
// one representative batch of mixed lengths drawn from it, the same for every
// config and every run (a pure function of the problem), so that timings
// compare; RepresentativeLengths is that batch.
#ifndef EVOTUNE_CORE_BATCH_LENGTHS_H_
#define EVOTUNE_CORE_BATCH_LENGTHS_H_

#include <cstdint>
#include <vector>

#include "core/problem.h"

namespace evotune {

// Per-sequence query and key counts, `batch` of each.
struct BatchLengths {
  std::vector<int64_t> q, k;

  int64_t TotalQ() const;
  int64_t TotalK() const;
  // Cumulative offsets from 0, batch + 1 of them (cu_seqlens).
  static std::vector<int32_t> Cumulative(const std::vector<int64_t>& lengths);
};

// Dense: every sequence at (seq_q, seq_k). With lengths on the device:
// sequence 0 at the bucket's maxima, the others log-uniform in [1, max]
// (kKvCache keeps seq_q queries each; kVarlen and kPaged draw query lengths
// too, and a causal sequence of theirs has at least as many keys as
// queries, as a prefill chunk over its prefix does), drawn
// from a generator seeded by the problem's key.
BatchLengths RepresentativeLengths(const Problem& problem);

// Whether a layout's representative batch packs its queries by
// cu_seqlens_q, each sequence with a query length of its own: kVarlen, and
// kPaged (an engine's batch of decode rows and prefill chunks over pages).
bool PacksQueries(Layout layout);

}  // namespace evotune

#endif  // EVOTUNE_CORE_BATCH_LENGTHS_H_
