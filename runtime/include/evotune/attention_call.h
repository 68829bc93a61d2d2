// A call of the runtime: the problem, its four tensors and the softmax
// scale, and the checks a call must pass before anything launches.
#ifndef EVOTUNE_RUNTIME_INCLUDE_EVOTUNE_ATTENTION_CALL_H_
#define EVOTUNE_RUNTIME_INCLUDE_EVOTUNE_ATTENTION_CALL_H_

#include <cstdint>

#include "absl/status/status.h"
#include "core/problem.h"

namespace evotune {

// One tensor: [batch, heads, seq, head_dim] elements of the problem's dtype
// (K and V of an FP8 KV cache: e4m3, one byte each) with unit stride along
// head_dim. The runtime checks every field against
// the problem before anything launches: the extents must be the problem's
// (Q and O [batch, heads, seq_q, head_dim], K and V [batch, kv_heads, seq_k,
// head_dim], V's and O's head_dim the problem's value head dim (HeadDimV);
// for a packed varlen problem, batch 1 and seq the tensor's rows,
// any number: [total, heads, head_dim] is [1, heads, total, head_dim] with
// row stride heads * head_dim), the pointer 16-byte aligned, the strides (in
// elements) positive multiples of 16 bytes with rows at least head_dim
// apart, O's layout must not overlap itself (ordered by stride, each
// dimension's stride at least the span of those below it) nor Q, K or V. What
// it cannot check, the caller guarantees: `data` points at memory of this
// context that holds the stated extents at these strides.
struct AttentionTensor {
  void* data = nullptr;
  int64_t batch_stride = 0;
  int64_t head_stride = 0;
  int64_t row_stride = 0;
  int64_t batch = 0;
  int64_t heads = 0;
  int64_t seq = 0;
  int64_t head_dim = 0;
};

// O = softmax(Q K^T * scale) V for `problem` (causal: bottom-right aligned
// when seq_q != seq_k). Q and O have `heads` heads, K and V `kv_heads`. A
// paged problem's K and V are its pages, [num_pages, page_size, kv_heads,
// head_dim]: as tensors, batch num_pages (any, at least 1) and seq the
// problem's page_size.
struct AttentionCall {
  Problem problem;
  AttentionTensor q, k, v, o;
  // Finite and positive; 0 means 1 / sqrt(head_dim). (The kernels fold the
  // scale into the row maximum, so negative scales are refused.)
  float scale = 0;
  // Scratch of the sizes Kernel.geometry names (workspace_floats fp32
  // values; counters ints, zero before the first launch, left zero by
  // every launch). Null: the runtime's own, allocated per stream on the
  // first launch there, which must not be under stream capture (launch once
  // on the stream before capturing, or pass scratch).
  float* workspace = nullptr;
  int* counters = nullptr;
  // Lengths on the device (int32, 4-byte aligned, in this context), by the
  // problem's layout (core/problem.h): kVarlen needs cu_seqlens_q and
  // cu_seqlens_k ([batch + 1], from 0, non-decreasing, each sequence within
  // seq_q and seq_k, the last at most the tensors' rows) and may have
  // seqused_k; kKvCache needs seqused_k ([batch], each at most seq_k);
  // kPaged needs seqused_k and block_table ([batch] rows of
  // block_table_stride page ids, of which sequence b's key j is in page
  // block_table[b * block_table_stride + j / page_size]; the stride at least
  // seq_k / page_size) and may have cu_seqlens_q (then Q and O are packed,
  // [total_q, heads, head_dim] as one batch, as kVarlen's: a batch of decode
  // rows and prefill chunks over the pages); kDense has none. The runtime
  // cannot read device memory without a sync, so these values are the caller's
  // to guarantee; whatever they hold, the kernels stay inside the tensors (a
  // page id outside [0, num_pages) reads a page of the pool, never past it).
  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* cu_seqlens_k = nullptr;
  const int32_t* seqused_k = nullptr;
  const int32_t* block_table = nullptr;
  int64_t block_table_stride = 0;
  // An FP8 KV cache (problem.kv_fp8): fp32 factors on the device that
  // dequantize K and V, the value of K's element of sequence b and KV head h
  // being its e4m3 value times k_descale[b * descale_batch_stride + h *
  // descale_head_stride] (FlashAttention 3's [batch, kv_heads] descale
  // tensors; strides in elements, 0 and 0 for one factor per tensor). Null
  // means 1; non-null only with problem.kv_fp8. q_descale likewise for FP8
  // attention's Q (problem.q_fp8).
  const float* q_descale = nullptr;
  const float* k_descale = nullptr;
  const float* v_descale = nullptr;
  int64_t descale_batch_stride = 0;
  int64_t descale_head_stride = 0;
  // Attention sinks (problem.sinks, and only then): fp32 [heads] on the
  // device, query head h's logit joining its rows' softmax.
  const float* sinks = nullptr;
  // ALiBi (problem.alibi, and only then): fp32 slopes on the device, query
  // head h of sequence b's at alibi_slopes[b * alibi_batch_stride + h]
  // (FlashAttention's alibi_slopes: [heads], stride 0, or [batch, heads]).
  const float* alibi_slopes = nullptr;
  int64_t alibi_batch_stride = 0;
};

// A call on contiguous tensors (the layout `evotune` tunes).
AttentionCall ContiguousCall(const Problem& problem, const void* q,
                             const void* k, const void* v, void* o);

// Whether `call` may launch: INVALID_ARGUMENT naming the first field that
// does not fit ("problem.kv_heads", "q.data", "v.seq", "o.head_stride",
// "scale", "cu_seqlens_q", "block_table_stride", "k_descale"). Host arithmetic
// only: no driver call, no memory read.
absl::Status CheckAttentionCall(const AttentionCall& call);

// Whether the call's Q and O are packed by cu_seqlens_q (kVarlen, and kPaged
// with cu_seqlens_q): one batch whose rows start at its offsets.
bool PackedQ(const AttentionCall& call);

}  // namespace evotune

#endif  // EVOTUNE_RUNTIME_INCLUDE_EVOTUNE_ATTENTION_CALL_H_
