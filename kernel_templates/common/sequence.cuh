// The sequences of a launch (device code): each sequence's lengths and the
// offsets of its rows, by the rules of attention_params.cuh, for templates
// with or without lengths on the device.
#ifndef EVOTUNE_KERNEL_TEMPLATES_COMMON_SEQUENCE_CUH_
#define EVOTUNE_KERNEL_TEMPLATES_COMMON_SEQUENCE_CUH_

#include "attention_params.cuh"

// EVT_DEVICE_LENGTHS, a compile define: 1 where the problem's layout keeps
// lengths on the device, 0 for a dense problem's kernel, which then has no
// per-sequence loads or checks (the length arrays are never read).
#ifndef EVT_DEVICE_LENGTHS
#define EVT_DEVICE_LENGTHS 1
#endif
constexpr bool kDeviceLengths = EVT_DEVICE_LENGTHS != 0;

// EVT_PAGE_SIZE, a compile define: the keys per page of a paged problem's
// kernel (K and V read through the block table), 0 for every other.
#ifndef EVT_PAGE_SIZE
#define EVT_PAGE_SIZE 0
#endif
constexpr int kPageSize = EVT_PAGE_SIZE;
static_assert(kPageSize == 0 || kDeviceLengths,
              "a paged kernel reads its lengths from the device");

// The length arrays of a launch, null in a dense problem's kernel.
__device__ __forceinline__ const int* CuSeqlensQ(const AttentionParams& p) {
  return kDeviceLengths ? p.cu_seqlens_q : nullptr;
}
__device__ __forceinline__ const int* CuSeqlensK(const AttentionParams& p) {
  return kDeviceLengths ? p.cu_seqlens_k : nullptr;
}
__device__ __forceinline__ const int* SequsedK(const AttentionParams& p) {
  return kDeviceLengths ? p.seqused_k : nullptr;
}

// Sequence b of a launch: its lengths and where its rows start (the rules
// of common/attention_params.cuh). With lengths on the device these are
// loads of four ints; without, the problem's fixed lengths.
struct Sequence {
  int seq_q, seq_k;
  int q_start, k_start;  // Rows of Q and of K before the sequence's.
  long long q, k, v, o;  // Element offsets of its row 0 of head 0.
};

__device__ __forceinline__ Sequence SequenceOf(const AttentionParams& p,
                                               int b) {
  Sequence s;
  s.q_start = s.k_start = 0;
  s.seq_q = p.seq_q;
  s.seq_k = p.seq_k;
  if (!kDeviceLengths) {
    s.q = b * p.q_batch_stride;
    s.o = b * p.o_batch_stride;
    s.k = b * p.k_batch_stride;
    s.v = b * p.v_batch_stride;
    return s;
  }
  if (p.cu_seqlens_q != nullptr) {
    s.q_start = __ldg(p.cu_seqlens_q + b);
    s.seq_q = __ldg(p.cu_seqlens_q + b + 1) - s.q_start;
  }
  if (p.cu_seqlens_k != nullptr) {
    s.k_start = __ldg(p.cu_seqlens_k + b);
    s.seq_k = __ldg(p.cu_seqlens_k + b + 1) - s.k_start;
  }
  if (p.seqused_k != nullptr) s.seq_k = __ldg(p.seqused_k + b);
  // The host checks what it can; whatever the arrays hold, no access leaves
  // the tensors: lengths are cut to the maxima and to the rows left.
  s.q_start = min(max(s.q_start, 0), p.rows_q);
  s.seq_q = max(0, min(min(s.seq_q, p.seq_q), p.rows_q - s.q_start));
  s.q = b * p.q_batch_stride + s.q_start * p.q_row_stride;
  s.o = b * p.o_batch_stride + s.q_start * p.o_row_stride;
  if (kPageSize > 0) {  // Pages carry the key rows (KeyRow): no offsets.
    s.k_start = 0;
    s.seq_k = max(0, min(s.seq_k, p.seq_k));
    s.k = s.v = 0;
    return s;
  }
  s.k_start = min(max(s.k_start, 0), p.rows_k);
  s.seq_k = max(0, min(min(s.seq_k, p.seq_k), p.rows_k - s.k_start));
  s.k = b * p.k_batch_stride + s.k_start * p.k_row_stride;
  s.v = b * p.v_batch_stride + s.k_start * p.v_row_stride;
  return s;
}

// The element offset of key row j of sequence b from its row 0 (Sequence's
// k or v), for K or V of `page_stride` (its batch stride) and `row_stride`:
// j * row_stride, or in a paged kernel the row of j's page. A page id
// outside the rows_k / page_size pages is clamped to them: whatever the
// block table holds, no access leaves the tensors. Rows [j, j + n) lie in
// one page where n divides the page size and j is a multiple of n.
__device__ __forceinline__ long long KeyRow(const AttentionParams& p, int b,
                                            int j, long long page_stride,
                                            long long row_stride) {
  if (kPageSize == 0) return j * row_stride;
  constexpr int kPage = kPageSize > 0 ? kPageSize : 1;
  const int pages = p.rows_k / kPage;
  const int page =
      min(max(__ldg(p.block_table + b * p.block_table_stride + j / kPage), 0),
          pages - 1);
  return page * page_stride + (j % kPage) * row_stride;
}

#endif  // EVOTUNE_KERNEL_TEMPLATES_COMMON_SEQUENCE_CUH_
