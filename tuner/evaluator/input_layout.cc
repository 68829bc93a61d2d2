#include "tuner/evaluator/input_layout.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "launch/tensor_maps.h"

namespace evotune {

InputLayout::InputLayout(const Problem& problem)
    : problem_(problem), lengths_(RepresentativeLengths(problem)) {
  cu_q_ = BatchLengths::Cumulative(lengths_.q);
  cu_k_ = BatchLengths::Cumulative(lengths_.k);
  const bool packed = problem.layout == Layout::kVarlen;
  const bool paged = problem.layout == Layout::kPaged;
  rows_q_ = PacksQueries(problem.layout) ? lengths_.TotalQ()
                                         : problem.batch * problem.seq_q;
  rows_k_ =
      packed ? lengths_.TotalK() + kPadRows : problem.batch * problem.seq_k;
  if (packed) {
    arrays_ = cu_q_;
    arrays_.insert(arrays_.end(), cu_k_.begin(), cu_k_.end());
  } else if (problem.layout == Layout::kKvCache) {
    arrays_.assign(lengths_.k.begin(), lengths_.k.end());
  }
  if (paged) {  // Packed queries over the pages.
    arrays_ = cu_q_;
    arrays_.insert(arrays_.end(), lengths_.k.begin(), lengths_.k.end());
    const int64_t named = problem.seq_k / problem.page_size * problem.batch;
    std::vector<int32_t> pages(named + kSparePages);
    std::iota(pages.begin(), pages.end(), 0);
    std::shuffle(pages.begin(), pages.end(), std::mt19937(20261202));
    block_table_.assign(pages.begin(), pages.begin() + named);
    arrays_.insert(arrays_.end(), block_table_.begin(), block_table_.end());
    rows_k_ = static_cast<int64_t>(pages.size()) * problem.page_size;
  }
}

int64_t InputLayout::PagedRow(int64_t b, int64_t j) const {
  const Problem& p = problem_;
  const int64_t page =
      block_table_[b * (p.seq_k / p.page_size) + j / p.page_size];
  return page * p.page_size + j % p.page_size;
}

int64_t InputLayout::QRow(int64_t b, int64_t h, int64_t i) const {
  const Problem& p = problem_;
  if (PacksQueries(p.layout)) return (cu_q_[b] + i) * p.heads + h;
  return (b * p.heads + h) * p.seq_q + i;
}

int64_t InputLayout::KRow(int64_t b, int64_t kvh, int64_t j) const {
  const Problem& p = problem_;
  if (p.layout == Layout::kVarlen) return (cu_k_[b] + j) * p.kv_heads + kvh;
  if (p.layout == Layout::kPaged) return PagedRow(b, j) * p.kv_heads + kvh;
  return (b * p.kv_heads + kvh) * p.seq_k + j;
}

AttentionParams InputLayout::Params() const {
  AttentionParams params = ContiguousParams(problem_);
  const long long d = problem_.head_dim;
  const long long dv = HeadDimV(problem_);
  if (PacksQueries(problem_.layout)) {
    params.q_row_stride = problem_.heads * d;
    params.o_row_stride = problem_.heads * dv;
    params.q_head_stride = d;
    params.o_head_stride = dv;
    params.q_batch_stride = params.o_batch_stride = 0;
    params.rows_q = static_cast<int>(rows_q_);
  }
  if (problem_.layout == Layout::kPaged) {
    params.k_row_stride = problem_.kv_heads * d;
    params.v_row_stride = problem_.kv_heads * dv;
    params.k_head_stride = d;
    params.v_head_stride = dv;
    params.k_batch_stride = problem_.page_size * problem_.kv_heads * d;
    params.v_batch_stride = problem_.page_size * problem_.kv_heads * dv;
    params.rows_k = static_cast<int>(rows_k_);
    params.block_table_stride =
        static_cast<int>(problem_.seq_k / problem_.page_size);
    return params;
  }
  if (problem_.layout != Layout::kVarlen) return params;
  params.k_row_stride = problem_.kv_heads * d;
  params.v_row_stride = problem_.kv_heads * dv;
  params.k_head_stride = d;
  params.v_head_stride = dv;
  params.k_batch_stride = params.v_batch_stride = 0;
  params.rows_k = static_cast<int>(rows_k_);
  return params;
}

std::vector<InputLayout::Range> InputLayout::UnusedKv(int64_t cols) const {
  const Problem& p = problem_;
  std::vector<Range> out;
  if (p.layout == Layout::kVarlen) {
    const int64_t total = lengths_.TotalK();
    out.push_back(
        {KRow(p.batch, 0, 0) * cols, (rows_k_ - total) * p.kv_heads * cols});
  } else if (p.layout == Layout::kPaged) {
    out = UnusedPages(cols);
  } else if (p.layout == Layout::kKvCache) {
    for (int64_t b = 0; b < p.batch; ++b) {
      const int64_t used = lengths_.k[b];
      if (used == p.seq_k) continue;
      for (int64_t h = 0; h < p.kv_heads; ++h) {
        out.push_back({KRow(b, h, used) * cols, (p.seq_k - used) * cols});
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
  } else if (problem_.layout == Layout::kPaged) {
    params->cu_seqlens_q = arrays;
    params->seqused_k = arrays + cu_q_.size();
    params->block_table = arrays + cu_q_.size() + problem_.batch;
  }
}

std::vector<InputLayout::Range> InputLayout::UnusedPages(int64_t cols) const {
  const Problem& p = problem_;
  const int64_t row = p.kv_heads * cols;  // Elements of a page's row.
  std::vector<bool> named(rows_k_ / p.page_size, false);
  std::vector<Range> out;
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t j = 0; j < p.seq_k; j += p.page_size) {
      const int64_t first = PagedRow(b, j);  // The page's row 0.
      named[first / p.page_size] = true;
      const int64_t used =
          std::clamp<int64_t>(lengths_.k[b] - j, 0, p.page_size);
      if (used < p.page_size) {
        out.push_back({(first + used) * row, (p.page_size - used) * row});
      }
    }
  }
  for (size_t page = 0; page < named.size(); ++page) {
    if (!named[page]) {
      out.push_back(
          {static_cast<int64_t>(page) * p.page_size * row, p.page_size * row});
    }
  }
  return out;
}

}  // namespace evotune
