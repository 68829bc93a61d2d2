// What a model serves, as attention problems: the buckets that cover every
// call within a serving envelope (batch sizes, context lengths, prefill
// chunks, decode and speculative query counts), for `evotune tune-model`.
// A bundle of them serves every call within the envelope with no miss (the
// runtime serves a problem with the kernel of the smallest bucket holding
// it, evotune/runtime.h).
#ifndef EVOTUNE_CORE_ENVELOPE_H_
#define EVOTUNE_CORE_ENVELOPE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/problem.h"

namespace evotune {

struct Envelope {
  int64_t max_batch = 256;     // Sequences per decode step.
  int64_t max_context = 8192;  // Keys a sequence attends to, at most.
  // Queries of one prefill chunk against a longer prefix (0: none).
  int64_t prefill_chunk = 2048;
  // Tokens of one whole-prompt prefill call (batch x prompt length).
  int64_t max_prefill_tokens = 8192;
  // Queries per sequence of a decode step: 1, and more for speculative
  // decoding (each causal over the step's own keys).
  std::vector<int64_t> decode_queries = {1, 4};
  // How the calls pass their tensors: fixed-length batches (kDense), packed
  // sequences with lengths on the device (kVarlen), a KV cache (kKvCache),
  // or one in pages of page_size keys (kPaged, vLLM's block size).
  Layout layout = Layout::kDense;
  int64_t page_size = 0;  // Paged only.
};

// One kind of a model's layers beyond heads and head_dim (Hugging Face's
// layer_types): a sliding window of window_left keys before each query's
// own (-1: none), logit softcapping (0: none), attention sinks, ALiBi, as
// the Problem fields of those names.
struct LayerKind {
  int64_t window_left = -1;
  float softcap = 0;
  bool sinks = false;
  bool alibi = false;

  bool operator==(const LayerKind& o) const {
    return window_left == o.window_left && softcap == o.softcap &&
           sinks == o.sinks && alibi == o.alibi;
  }
};

// Tune-model's plan: a bucket whose search is predicted to save less than
// this share of the served time gets a check of its served config, not a
// search; a search that saved less gained little.
inline constexpr double kSmallGain = 0.03;

// The share of `from_us` that `to_us` saves: 1 - to / from, at least 0; 0
// unless both are positive.
double GainShare(double from_us, double to_us);

// "full attention", or what the kind has: "window 4095, softcap 50, sinks"
// (", ALiBi" with ALiBi).
std::string LayerKindName(const LayerKind& kind);

// INVALID_ARGUMENT naming the field ("max_batch: ...") for an envelope
// outside the problems evotune takes.
absl::Status ValidateEnvelope(const Envelope& envelope);

// The buckets of the envelope for attention of `heads` query heads on
// `kv_heads`, head_dim and dtype, in the envelope's layout (paged: key
// lengths rounded up to whole pages; packed layouts, varlen and paged,
// bucket queries from 16 as evotune.torch's varlen entry points do, their
// decode buckets causal as engines call them: one query sees the same
// keys either way). Batch sizes and lengths go
// by powers of two, lengths up to the first power of two at or above the
// envelope's bound, so that every call within it falls in one:
//   decode: each decode query count q (causal where q > 1), batch 1 ..
//     max_batch (also 3, 6, 12, ...: 1.5 times each power of two from 2),
//     q queries on 32 .. max_context keys;
//   prompts (causal): the batches (up to max_batch) and lengths (from 32)
//     a call of at most max_prefill_tokens tokens falls in, queries as many
//     as keys;
//   chunks (causal): up to prefill_chunk queries on prefill_chunk ..
//     max_context keys, the batches (up to max_batch) a call of at most
//     max_prefill_tokens queries falls in; in a packed layout without
//     chunks (prefill_chunk 0), whole prompts of up to max_context and
//     max_prefill_tokens queries take the chunk's place (a step of decode
//     rows and prompts is one call whose longest sequence is a prompt).
// In that order, each list by batch then length; none twice. Each bucket
// has the kind's window (window_right -1), softcap and sinks.
std::vector<Problem> EnvelopeBuckets(const Envelope& envelope, int64_t heads,
                                     int64_t kv_heads, int64_t head_dim,
                                     DType dtype, const LayerKind& kind = {});

}  // namespace evotune

#endif  // EVOTUNE_CORE_ENVELOPE_H_
