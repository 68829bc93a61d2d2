// The one launch interface of every attention template. Included by the
// templates (through NVRTC, in memory) and by the host code that fills it, so
// it uses plain C++ types only.
//
// Tensors are [batch, heads, seq, head_dim] with unit stride along head_dim;
// strides are in elements.
//
// Lengths on the device: sequence b's query row i and key j are at
//   b * batch_stride + (start + i) * row_stride + head * head_stride
// where start is cu_seqlens_q[b] (cu_seqlens_k[b] for keys) and 0 where that
// array is null. Sequence b has cu_seqlens_q[b + 1] - cu_seqlens_q[b]
// queries (seq_q where null) and seqused_k[b] keys (else cu_seqlens_k[b + 1]
// - cu_seqlens_k[b], else seq_k). seq_q and seq_k then bound every
// sequence's lengths (the launch grid is sized by them). Packed tensors
// ([total, heads, head_dim], as flash_attn_varlen_func takes) have batch
// stride 0 and rows_q / rows_k rows; the causal mask is aligned to each
// sequence's own bottom-right corner.
//
// Paged K/V (a kernel compiled with EVT_PAGE_SIZE, common/sequence.cuh):
// K and V are pages of EVT_PAGE_SIZE rows, [num_pages, page_size, kv_heads,
// head_dim] at k_batch_stride per page; sequence b's key j is row
// j % page_size of page block_table[b * block_table_stride + j /
// page_size]; seqused_k gives each sequence's keys, seq_k bounds them (a
// multiple of the page size), and rows_k is num_pages * page_size. Q and O
// are per sequence ([batch, heads, seq_q, head_dim]) or packed with
// cu_seqlens_q, as above (a mixed batch of decode rows and prefill chunks).
#ifndef EVOTUNE_KERNEL_TEMPLATES_COMMON_ATTENTION_PARAMS_CUH_
#define EVOTUNE_KERNEL_TEMPLATES_COMMON_ATTENTION_PARAMS_CUH_

struct AttentionParams {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  long long q_batch_stride, q_head_stride, q_row_stride;
  long long k_batch_stride, k_head_stride, k_row_stride;
  long long v_batch_stride, v_head_stride, v_row_stride;
  long long o_batch_stride, o_head_stride, o_row_stride;
  int batch, heads, kv_heads, seq_q, seq_k;
  int causal;
  // Null, or device arrays as described above.
  const int* cu_seqlens_q;  // [batch + 1], non-decreasing, from 0.
  const int* cu_seqlens_k;  // [batch + 1], non-decreasing, from 0.
  const int* seqused_k;     // [batch].
  const int* block_table;   // [batch, block_table_stride] page ids.
  int block_table_stride;
  // Rows of Q/O and of K/V along their row dimension: seq_q and seq_k for
  // unpacked tensors, the packed totals for packed ones (tensor maps are
  // bounded by them).
  int rows_q, rows_k;
  // softmax scale * log2(e): scores are exponentiated with exp2.
  float scale_log2;
  // A sliding window (read by a kernel compiled with EVT_WINDOW): row i of
  // a sequence sees keys [i + shift - window_left, i + shift +
  // window_right], shift = its seq_k - seq_q, -1 for no bound on a side
  // (the causal mask ends a row at i + shift). Logit softcapping (read with
  // EVT_SOFTCAP): each score s * scale becomes softcap * tanh(s * scale /
  // softcap).
  int window_left, window_right;
  float softcap;
  // Attention sinks (read with EVT_SINKS): query head h's logit sinks[h]
  // (fp32, in the units of the scaled scores) joins the softmax of each of
  // its rows, adding exp(sinks[h] - max) to the row's sum only.
  const float* sinks;
  // ALiBi (read with EVT_ALIBI): the score of row i and key j of sequence b
  // and query head h (softcapped where the kernel softcaps) gains -slope *
  // |i + shift - j|, slope = alibi_slopes[b * alibi_batch_stride + h] (fp32;
  // FlashAttention's alibi_slopes, [heads] with stride 0 or [batch, heads]).
  const float* alibi_slopes;
  int alibi_batch_stride;
  // FP8 inputs (a kernel compiled with EVT_KV_FP8 reads e4m3 K and V): the
  // value of an element of K of sequence b and KV head h is its e4m3 value
  // times k_descale[b * descale_batch_stride + h * descale_head_stride]
  // (per tensor with both strides 0), likewise V and Q (q_descale by KV
  // head too, as FlashAttention 3's descale_q). Null means 1.
  const float* q_descale;
  const float* k_descale;
  const float* v_descale;
  int descale_batch_stride, descale_head_stride;
  // Scratch of the size the template asks for (KernelTemplate::workspace):
  // fp32 values, and counters that are zero before the first launch and
  // that every launch leaves zero. Null when the template asks for none.
  float* workspace;
  int* counters;
};

// A CUDA tensor map (CUtensorMap of cuda.h: 128 bytes, 128-byte aligned),
// opaque to the kernels; built on the host with cuTensorMapEncodeTiled.
struct alignas(128) TensorMap {
  unsigned long long opaque[16];
};

// The second launch parameter of the templates that copy tiles with the
// Tensor Memory Accelerator (LaunchGeometry::tma): each tensor as a 4-D map
// (head_dim, seq, heads, batch), innermost first, boxes of 64 columns (128
// bytes, 128-byte swizzle) by the rows the geometry names.
struct AttentionTensorMaps {
  TensorMap q, k, v, o;
};

#endif  // EVOTUNE_KERNEL_TEMPLATES_COMMON_ATTENTION_PARAMS_CUH_
