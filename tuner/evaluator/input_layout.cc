#include "tuner/evaluator/input_layout.h"

#include "launch/tensor_maps.h"

namespace evotune {

InputLayout::InputLayout(const Problem& problem)
    : problem_(problem), lengths_(RepresentativeLengths(problem)) {
  cu_q_ = BatchLengths::Cumulative(lengths_.q);
  cu_k_ = BatchLengths::Cumulative(lengths_.k);
  const bool packed = problem.layout == Layout::kVarlen;
  rows_q_ = packed ? lengths_.TotalQ() : problem.batch * problem.seq_q;
  rows_k_ =
      packed ? lengths_.TotalK() + kPadRows : problem.batch * problem.seq_k;
  if (packed) {
    arrays_ = cu_q_;
    arrays_.insert(arrays_.end(), cu_k_.begin(), cu_k_.end());
  } else if (problem.layout == Layout::kKvCache) {
    arrays_.assign(lengths_.k.begin(), lengths_.k.end());
  }
}

int64_t InputLayout::QIndex(int64_t b, int64_t h, int64_t i) const {
  const Problem& p = problem_;
  if (p.layout == Layout::kVarlen) {
    return ((cu_q_[b] + i) * p.heads + h) * p.head_dim;
  }
  return ((b * p.heads + h) * p.seq_q + i) * p.head_dim;
}

int64_t InputLayout::KIndex(int64_t b, int64_t kvh, int64_t j) const {
  const Problem& p = problem_;
  if (p.layout == Layout::kVarlen) {
    return ((cu_k_[b] + j) * p.kv_heads + kvh) * p.head_dim;
  }
  return ((b * p.kv_heads + kvh) * p.seq_k + j) * p.head_dim;
}

AttentionParams InputLayout::Params() const {
  AttentionParams params = ContiguousParams(problem_);
  if (problem_.layout != Layout::kVarlen) return params;
  const long long d = problem_.head_dim;
  params.q_row_stride = params.o_row_stride = problem_.heads * d;
  params.q_head_stride = params.o_head_stride = d;
  params.k_row_stride = params.v_row_stride = problem_.kv_heads * d;
  params.k_head_stride = params.v_head_stride = d;
  params.q_batch_stride = params.o_batch_stride = 0;
  params.k_batch_stride = params.v_batch_stride = 0;
  params.rows_q = static_cast<int>(rows_q_);
  params.rows_k = static_cast<int>(rows_k_);
  return params;
}

std::vector<InputLayout::Range> InputLayout::UnusedKv() const {
  const Problem& p = problem_;
  std::vector<Range> out;
  if (p.layout == Layout::kVarlen) {
    const int64_t total = lengths_.TotalK();
    out.push_back(
        {KIndex(p.batch, 0, 0), (rows_k_ - total) * p.kv_heads * p.head_dim});
  } else if (p.layout == Layout::kKvCache) {
    for (int64_t b = 0; b < p.batch; ++b) {
      const int64_t used = lengths_.k[b];
      if (used == p.seq_k) continue;
      for (int64_t h = 0; h < p.kv_heads; ++h) {
        out.push_back({KIndex(b, h, used), (p.seq_k - used) * p.head_dim});
      }
    }
  }
  return out;
}

void InputLayout::SetLengthPointers(const int32_t* arrays,
                                    AttentionParams* params) const {
  if (problem_.layout == Layout::kVarlen) {
    params->cu_seqlens_q = arrays;
    params->cu_seqlens_k = arrays + cu_q_.size();
  } else if (problem_.layout == Layout::kKvCache) {
    params->seqused_k = arrays;
  }
}

}  // namespace evotune
