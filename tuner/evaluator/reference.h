// The independent reference the evaluator validates candidates against: a
// plain fp32 attention on the host, written separately from the templates, and
// the fp16/bf16 conversions it needs.
#ifndef EVOTUNE_TUNER_EVALUATOR_REFERENCE_H_
#define EVOTUNE_TUNER_EVALUATOR_REFERENCE_H_

#include <cstdint>
#include <vector>

#include "core/problem.h"

namespace evotune {

// Round-to-nearest-even conversions of the storage formats: fp16, bf16, and
// e4m3 in the low 8 bits (saturating to its largest finite value, 448, as
// the GPU's cvt.rn.satfinite).
uint16_t FloatToHalfBits(float f, DType dtype);
float HalfBitsToFloat(uint16_t bits, DType dtype);

// One output row: query row `row` of head `head` in batch `batch`.
struct RowIndex {
  int64_t batch = 0;
  int64_t head = 0;
  int64_t row = 0;
};

// One output row (HeadDimV floats into `out`) of query row `row`, given that
// row of Q and the [seq_k][head_dim] K and [seq_k][HeadDimV] V of its kv
// head; `sink` is its
// head's sink logit where the problem has sinks, `alibi_slope` its ALiBi
// slope where the problem has ALiBi.
void ReferenceRow(const Problem& problem, int64_t row, const float* q_row,
                  const float* k_head, const float* v_head, float* out,
                  float sink = 0.f, float alibi_slope = 0.f);

// Computes the given output rows (HeadDimV floats each, concatenated) from
// contiguous bhsd inputs already converted to float (and with sinks, each
// query head's sink; with ALiBi, each [batch, head]'s slope). Follows the
// masking rules documented on Problem; accumulates in double.
std::vector<float> ReferenceRows(const Problem& problem,
                                 const std::vector<float>& q,
                                 const std::vector<float>& k,
                                 const std::vector<float>& v,
                                 const std::vector<RowIndex>& rows,
                                 const std::vector<float>& sinks = {},
                                 const std::vector<float>& alibi_slopes = {});

// Error of `got` against `want` (same length): max |got - want| and
// ||got - want||_2 / ||want||_2. NaN in got makes both infinite.
struct ErrorStats {
  double max_abs = 0;
  double rel_l2 = 0;
};
ErrorStats CompareRows(const std::vector<float>& got,
                       const std::vector<float>& want);

// Acceptance thresholds per dtype (documented in docs/results.md): of the
// output dtype, and for FP8 attention (Problem::q_fp8, P rounded to e4m3)
// FP8's own.
struct Tolerance {
  double max_abs;
  double rel_l2;
};
Tolerance ToleranceFor(DType dtype);
Tolerance ToleranceFor(const Problem& problem);

}  // namespace evotune

#endif  // EVOTUNE_TUNER_EVALUATOR_REFERENCE_H_
