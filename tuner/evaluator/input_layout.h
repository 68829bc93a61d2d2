// The evaluator's tensors of a problem: contiguous, in the problem's layout
// (core/problem.h), at its representative lengths (core/batch_lengths.h).
// Where each row lies, the launch parameters that describe them, and the
// length arrays a launch with lengths on the device reads.
#ifndef EVOTUNE_TUNER_EVALUATOR_INPUT_LAYOUT_H_
#define EVOTUNE_TUNER_EVALUATOR_INPUT_LAYOUT_H_

#include <cstdint>
#include <vector>

#include "core/batch_lengths.h"
#include "core/problem.h"
#include "kernel_templates/common/attention_params.cuh"

namespace evotune {

class InputLayout {
 public:
  explicit InputLayout(const Problem& problem);

  const Problem& problem() const { return problem_; }
  const BatchLengths& lengths() const { return lengths_; }
  // Elements of Q, of O, of K and of V (O and V of the value head dim).
  int64_t q_elems() const {
    return rows_q_ * problem_.heads * problem_.head_dim;
  }
  int64_t o_elems() const {
    return rows_q_ * problem_.heads * HeadDimV(problem_);
  }
  int64_t kv_elems() const {
    return rows_k_ * problem_.kv_heads * problem_.head_dim;
  }
  int64_t v_elems() const {
    return rows_k_ * problem_.kv_heads * HeadDimV(problem_);
  }
  // Element index of column 0 of query row i of head h in sequence b (in Q,
  // and in O), and of key row j of kv head kvh (in K, and in V).
  int64_t QIndex(int64_t b, int64_t h, int64_t i) const {
    return QRow(b, h, i) * problem_.head_dim;
  }
  int64_t OIndex(int64_t b, int64_t h, int64_t i) const {
    return QRow(b, h, i) * HeadDimV(problem_);
  }
  int64_t KIndex(int64_t b, int64_t kvh, int64_t j) const {
    return KRow(b, kvh, j) * problem_.head_dim;
  }
  int64_t VIndex(int64_t b, int64_t kvh, int64_t j) const {
    return KRow(b, kvh, j) * HeadDimV(problem_);
  }

  // The launch parameters of these tensors (strides, sizes, rows; no
  // pointers: the caller sets the tensors' and LengthArrays' addresses).
  AttentionParams Params() const;

  // The int32 arrays the launch reads, concatenated: cu_seqlens_q then
  // cu_seqlens_k (kVarlen), seqused_k (kKvCache), cu_seqlens_q, seqused_k
  // then the block table (kPaged: its queries are packed, an engine's mixed
  // batch of decode rows and prefill chunks); empty when dense. Point the
  // params at them with SetLengthPointers.
  const std::vector<int32_t>& LengthArrays() const { return arrays_; }
  void SetLengthPointers(const int32_t* device_arrays,
                         AttentionParams* params) const;

  // Element ranges of K and V that no launch may let into its output: the
  // cache slots past each sequence's seqused_k (and the pages no block table
  // names), and kPadRows rows after a packed K/V's last sequence (inside the
  // tensor as the launch sees it). The evaluator fills them with NaN. In
  // elements of a K/V tensor of `cols` columns a head (head_dim for K, the
  // value head dim for V).
  struct Range {
    int64_t begin, count;
  };
  std::vector<Range> UnusedKv(int64_t cols) const;
  static constexpr int64_t kPadRows = 256;
  // A paged problem's pages beyond those its block table names (the table
  // holds the others in a shuffled order).
  static constexpr int64_t kSparePages = 3;

 private:
  // Row of key j of sequence b in a paged problem's pool of pages.
  int64_t PagedRow(int64_t b, int64_t j) const;
  // The head row (element index over the head's columns) of query row i of
  // head h of sequence b, and of key row j of kv head kvh.
  int64_t QRow(int64_t b, int64_t h, int64_t i) const;
  int64_t KRow(int64_t b, int64_t kvh, int64_t j) const;
  std::vector<Range> UnusedPages(int64_t cols) const;

  Problem problem_;
  BatchLengths lengths_;
  std::vector<int32_t> cu_q_, cu_k_, arrays_;
  std::vector<int32_t> block_table_;  // [batch, seq_k / page_size] (kPaged).
  int64_t rows_q_, rows_k_;  // All rows (bhsd), or the packed tensor's.
};

}  // namespace evotune

#endif  // EVOTUNE_TUNER_EVALUATOR_INPUT_LAYOUT_H_
