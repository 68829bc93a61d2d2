// An attention problem and its canonical key.
#ifndef EVOTUNE_CORE_PROBLEM_H_
#define EVOTUNE_CORE_PROBLEM_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace evotune {

// The 16-bit types of Q, O and (unless a problem's kv_fp8 says otherwise)
// K and V; kE4m3, float8 e4m3 (the OCP FP8 format of sm_89 and newer), is
// the type of an FP8 KV cache and never a problem's `dtype`.
enum class DType { kFp16, kBf16, kE4m3 };

// Bytes of one element: 1 for e4m3, else 2.
inline int64_t DTypeBytes(DType dtype) { return dtype == DType::kE4m3 ? 1 : 2; }

// "fp16", "bf16" or "e4m3".
absl::string_view DTypeName(DType dtype);
absl::StatusOr<DType> ParseDType(absl::string_view name);

// Where a problem's sequence lengths live, and so how its tensors are laid
// out (kernel_templates/common/attention_params.cuh has the exact rules).
enum class Layout {
  // "bhsd": every sequence has seq_q queries and seq_k keys, [batch, heads,
  // seq, head_dim] tensors (any strides).
  kDense,
  // "thd": lengths on the device, as flash_attn_varlen_func takes them:
  // packed Q and O [total_q, heads, head_dim], K and V [total_k, kv_heads,
  // head_dim], int32 cu_seqlens_q and cu_seqlens_k [batch + 1]. seq_q and
  // seq_k bound every sequence's lengths.
  kVarlen,
  // "cache": decode against a KV cache, as flash_attn_with_kvcache: Q and O
  // [batch, heads, seq_q, head_dim], K and V [batch, kv_heads, seq_k,
  // head_dim] of which sequence b uses the first seqused_k[b] (int32 on the
  // device, at most seq_k).
  kKvCache,
  // "paged<page_size>": decode against a paged KV cache, as
  // flash_attn_with_kvcache with a block_table: Q and O as kKvCache; K and V
  // [num_pages, page_size, kv_heads, head_dim] pages; sequence b's key j in
  // slot j % page_size of page block_table[b][j / page_size] (int32
  // [batch, seq_k / page_size] on the device), its first seqused_k[b] keys
  // used. seq_k is a multiple of page_size.
  kPaged,
};

// "bhsd", "thd", "cache" or "paged" (the key's last part, with the page
// size after "paged").
absl::string_view LayoutName(Layout layout);
absl::StatusOr<Layout> ParseLayout(absl::string_view name);

// softmax(Q K^T * head_dim^-0.5) V over [batch, heads, seq, head_dim]
// tensors (or the layout `layout` names). K and V have kv_heads heads; query
// head h reads kv head h / (heads / kv_heads). With causal set, query row i
// sees keys j <= i + seq_k - seq_q of its own sequence's lengths (the mask is
// aligned to the bottom-right corner, as in FlashAttention 2); a row that
// sees no key outputs zeros. With lengths on the device, seq_q and seq_k are
// the bounds of a bucket: one problem serves every batch within them.
// A sliding window (window_left, window_right; FlashAttention's window_size)
// narrows row i's keys to [i + shift - window_left, i + shift +
// window_right], shift = seq_k - seq_q; logit softcapping replaces each
// score s * scale by softcap * tanh(s * scale / softcap); with sinks, a
// learned logit per query head joins every row's softmax (its probability
// is dropped: it only lowers the others), as gpt-oss has it; with ALiBi,
// each score (softcapped or not) gains -slope * |i + shift - j|, a slope
// per query head (FlashAttention's alibi_slopes; BLOOM's and MPT's form).
struct Problem {
  int64_t batch = 1;
  int64_t heads = 1;
  int64_t kv_heads = 1;
  int64_t seq_q = 1;
  int64_t seq_k = 1;
  int64_t head_dim = 64;
  // The value head dim (V's and O's last dimension) where it differs from
  // head_dim, Q's and K's (DeepSeek's MLA prefill: 192 and 128); 0 for the
  // same (HeadDimV).
  int64_t head_dim_v = 0;
  bool causal = false;
  DType dtype = DType::kFp16;
  // K and V are float8 e4m3 (an FP8 KV cache), each (sequence, KV head)
  // dequantized by a descale factor the call passes; Q and O are `dtype`.
  bool kv_fp8 = false;
  // Q is float8 e4m3 too (FP8 attention; needs kv_fp8), with descale
  // factors like K's; O is `dtype`.
  bool q_fp8 = false;
  Layout layout = Layout::kDense;
  // Keys per page of a kPaged problem (16 to 256, a multiple of 16); 0 for
  // every other layout.
  int64_t page_size = 0;
  // Keys a row sees before (left) and after (right) its diagonal key, -1
  // for no bound on that side. A causal problem's right bound is the
  // diagonal: its window_right is -1.
  int64_t window_left = -1;
  int64_t window_right = -1;
  // Logit softcapping's cap (Gemma 2's 50); 0 for none.
  float softcap = 0;
  // Attention sinks: each query head's logit (in the units of the scaled
  // scores, not softcapped) joins its rows' softmax; the call passes them.
  bool sinks = false;
  // ALiBi: the call passes a slope per query head (or per sequence and
  // query head) that biases each score by its distance from the diagonal.
  bool alibi = false;

  bool operator==(const Problem& o) const;
  bool operator!=(const Problem& o) const { return !(*this == o); }
};

// Documented limits of a problem's fields (inclusive).
inline constexpr int64_t kMaxBatch = 4096;
inline constexpr int64_t kMaxHeads = 1024;
inline constexpr int64_t kMaxSeqLen = 1 << 20;
inline constexpr int64_t kMaxHeadDim = 256;
inline constexpr int64_t kMinPageSize = 16;
inline constexpr int64_t kMaxPageSize = 256;
inline constexpr float kMaxSoftcap = 1e6f;
// Elements of one of Q, K, V or O, so that 32-bit element offsets suffice
// within a head and the tensors fit a single GPU.
inline constexpr int64_t kMaxTensorElements = int64_t{1} << 31;

// Checks the fields against the limits above and each other. Errors are
// INVALID_ARGUMENT and start with "<field_prefix>.<field>: ".
absl::Status ValidateProblem(const Problem& problem,
                             absl::string_view field_prefix = "problem");

// The canonical key, e.g. "b1_h8_kv8_q512_k512_d64_full_fp16_bhsd" (the
// sixth part "d192v128" where the value head dim differs; the ninth
// part is LayoutName, "paged16" for a kPaged problem of 16-key pages; the
// dtype part is DTypesName), followed by ScoreModsName's parts when a
// window or softcap is set ("..._bhsd_wl4096_cap50"). Two problems have the
// same key exactly when they are equal.
std::string ProblemKey(const Problem& problem);
// V's and O's head dim: head_dim_v where set, else head_dim.
inline int64_t HeadDimV(const Problem& p) {
  return p.head_dim_v > 0 ? p.head_dim_v : p.head_dim;
}

// The type of a problem's K and V: kE4m3 for an FP8 KV cache, else dtype.
inline DType KvDType(const Problem& p) {
  return p.kv_fp8 ? DType::kE4m3 : p.dtype;
}

// The type of a problem's Q: kE4m3 for FP8 attention, else dtype.
inline DType QDType(const Problem& p) {
  return p.q_fp8 ? DType::kE4m3 : p.dtype;
}

// Whether the problem has a sliding window (either bound set).
inline bool HasWindow(const Problem& p) {
  return p.window_left >= 0 || p.window_right >= 0;
}

// Whether it has any score mod: a window, a softcap, sinks or ALiBi.
inline bool HasScoreMods(const Problem& p) {
  return HasWindow(p) || p.softcap > 0 || p.sinks || p.alibi;
}

// The key's parts after the layout for a window and a softcap, each led by
// '_': "_wl<window_left>" and "_wr<window_right>" for the bounds set,
// "_cap<softcap>" (shortest round-trip form), "_sinks", "_alibi"; "" for
// none.
std::string ScoreModsName(const Problem& problem);

// Whether two problems compute the same function of their scores: causal,
// window, softcap, sinks and ALiBi alike (the classes configs transfer
// within).
bool SameScoreMods(const Problem& a, const Problem& b);

// The call with the score mods that act on it: not causal where it has
// one query (which sees every key either way), no window where the window
// reaches past its keys (window_left >= seq_k - 1 and window_right -1 or
// >= seq_q - 1).
Problem ActiveScoreMods(Problem call);

// Whether a kernel compiled for `served`'s score mods computes `call`'s
// attention (the kernels take the causal flag and the window bounds as
// launch data, and compile in whether a window, a softcap, sinks or ALiBi
// are read): the same softcap, sinks and ALiBi, the same causal flag unless
// the call
// has one query, and a window in `served` or none acting on the call.
bool ServesScoreMods(const Problem& served, const Problem& call);

// The types of a problem's tensors as its key names them: DTypeName(dtype)
// (O's), followed by ".kve4m3" for an FP8 KV cache ("bf16.kve4m3") or
// ".qkve4m3" for FP8 attention ("bf16.qkve4m3").
std::string DTypesName(const Problem& problem);
absl::StatusOr<Problem> ParseProblemKey(absl::string_view key);

// Floating-point operations of one forward pass: 2 * B * H * Sq * Sk * (D +
// Dv) (4 * ... * D where they are equal), for
// causal and windowed problems only the visible (query, key) pairs. With
// lengths on the device, those of the batch the problem is measured on
// (RepresentativeLengths of core/batch_lengths.h), so that a rate from a
// measured time is the real one.
double ProblemFlops(const Problem& problem);

// How far apart two problems are for transferring configs: the squared
// distance in log2 of the sizes (batch, heads, kv_heads, seq_q, seq_k,
// head_dim, the ratio of the value head dim to it, and page_size where both
// are paged), plus 1 for another dtype
// or K/V type, 1 for another causal flag, 1 for other score mods (window,
// softcap) and 1 for another layout.
double ProblemDistance(const Problem& p, const Problem& q);

// ProblemDistance's terms of everything but the sizes: the types, causal
// flag, score mods, layout and page size.
double KindDistance(const Problem& p, const Problem& q);

}  // namespace evotune

#endif  // EVOTUNE_CORE_PROBLEM_H_
