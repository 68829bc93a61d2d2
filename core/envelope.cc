#include "core/envelope.h"

#include <algorithm>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace evotune {
namespace {

// The shortest length bucket, of decode keys and of prompts: short calls
// run best on other configs than 128-token ones (on the H100, prompts of 20
// to 100 tokens on one 64-row consumer 1.2-1.6x faster than on the two of
// the 128-token bucket's kernel; decode over 17 to 24 keys on two warps of
// 16-key tiles 1.12-1.16x faster than on the 128-key bucket's eight:
// bench/results/2026-12-06_h100_84bd925_small-prompts.json).
constexpr int64_t kShortest = 32;
// The fewest queries a packed call's bucket has (evotune.torch's varlen
// entry points round their maxima up to a power of two, at least 16).
constexpr int64_t kFewestPacked = 16;

int64_t CeilPow2(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

// Powers of two from `from` up to CeilPow2(to).
std::vector<int64_t> Pow2s(int64_t from, int64_t to) {
  std::vector<int64_t> out;
  for (int64_t p = CeilPow2(from); p <= CeilPow2(to); p *= 2) {
    out.push_back(p);
  }
  return out;
}

// The powers of two from `from` up to CeilPow2(to), each from `threshold` up
// preceded by three quarters of it (2^k / 4 * 3, between 2^(k-1) and 2^k).
std::vector<int64_t> Pow2sAndThreeQuarters(int64_t from, int64_t to,
                                           int64_t threshold) {
  std::vector<int64_t> out;
  for (int64_t p : Pow2s(from, to)) {
    if (p >= threshold) out.push_back(p / 4 * 3);
    out.push_back(p);
  }
  return out;
}

// Decode batches: the powers of two up to CeilPow2(max_batch) and, from 3,
// three quarters of each (3, 6, 12, ...). A decode kernel's best config follows
// how its blocks fill the multiprocessors, so a bucket tuned at its largest
// batch serves a call of 0.6 times that less well (on the H100, 20 sequences of
// 3,427 keys in the bucket of 32: the bucket's four-warp config 100.2 us,
// two warps 93.6:
// bench/results/2026-12-06_h100_0d349d8_decode-configs-under-sdpa.json).
std::vector<int64_t> DecodeBatches(int64_t max_batch) {
  return Pow2sAndThreeQuarters(1, max_batch, 4);
}

// Decode key lengths in a layout that is not packed (the op rounds a packed
// call's maxima up to powers of two): the powers of two from kShortest up to
// CeilPow2(longest) and, from 384, three quarters of each (384, 768, ...),
// as the op's key buckets of a dense decode call (evotune.torch.key_bucket).
// The config tuned at a bucket's longest serves a call of half its keys
// less well (on the H200, one-query rows with under 0.6 of their bucket's
// keys: the search's pick no faster than the fitted default on the mean, 4
// of 14 more than 5% slower; over 0.8 of them: 4.6% faster, none slower:
// bench/results/2026-12-06_h200_6693b56_tune-model-llama3-8b-shapes.json).
std::vector<int64_t> DecodeKeys(int64_t longest) {
  return Pow2sAndThreeQuarters(kShortest, longest, 512);
}

// The fewest of a quantity a call in the bucket of `bucket` has: one more
// than half of it (a call of half or less falls in the bucket below), one
// in the first bucket.
int64_t Least(int64_t bucket, int64_t first) {
  return bucket == first ? 1 : bucket / 2 + 1;
}

// Every bucket's attention: all but the sizes and causal flag.
Problem FormOf(const Envelope& e, int64_t heads, int64_t kv_heads,
               int64_t head_dim, DType dtype, const LayerKind& kind) {
  Problem form;
  form.heads = heads;
  form.kv_heads = kv_heads;
  form.head_dim = head_dim;
  form.dtype = dtype;
  form.layout = e.layout;
  form.page_size = e.layout == Layout::kPaged ? e.page_size : 0;
  form.window_left = kind.window_left;
  form.softcap = kind.softcap;
  form.sinks = kind.sinks;
  form.alibi = kind.alibi;
  return form;
}

// The bucket of `form`'s attention (heads, dtype, layout, score mods) of
// these sizes; a paged one's keys in whole pages.
Problem BucketOf(const Problem& form, int64_t batch, int64_t seq_q,
                 int64_t seq_k, bool causal) {
  Problem p = form;
  p.batch = batch;
  p.seq_q = seq_q;
  p.seq_k = seq_k;
  p.causal = causal;
  if (p.page_size > 0) {
    p.seq_k = (seq_k + p.page_size - 1) / p.page_size * p.page_size;
  }
  return p;
}

// The most queries of a step's prefilling sequence: a chunk's; without
// chunks, in a packed layout's step (decode rows and whole prompts in one
// call), a whole prompt's; none in a dense one's.
int64_t PrefillQueries(const Envelope& e, bool packed) {
  if (e.prefill_chunk > 0) return e.prefill_chunk;
  return packed ? std::min(e.max_context, e.max_prefill_tokens) : 0;
}

absl::Status OutOfRange(const char* field, int64_t value, int64_t lo,
                        int64_t hi) {
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": must be in [", lo, ", ", hi, "], got ", value));
}

}  // namespace

absl::Status ValidateEnvelope(const Envelope& e) {
  if (e.max_batch < 1 || e.max_batch > kMaxBatch) {
    return OutOfRange("max_batch", e.max_batch, 1, kMaxBatch);
  }
  if (e.max_context < 1 || e.max_context > kMaxSeqLen / 2) {
    return OutOfRange("max_context", e.max_context, 1, kMaxSeqLen / 2);
  }
  if (e.prefill_chunk < 0 || e.prefill_chunk > e.max_context) {
    return OutOfRange("prefill_chunk", e.prefill_chunk, 0, e.max_context);
  }
  if (e.max_prefill_tokens < 1 || e.max_prefill_tokens > kMaxSeqLen) {
    return OutOfRange("max_prefill_tokens", e.max_prefill_tokens, 1,
                      kMaxSeqLen);
  }
  if (e.decode_queries.empty()) {
    return absl::InvalidArgumentError(
        "decode_queries: at least one (1 for plain decode)");
  }
  for (int64_t q : e.decode_queries) {
    if (q < 1 || q > 64) return OutOfRange("decode_queries", q, 1, 64);
  }
  if (e.layout == Layout::kPaged) {
    if (e.page_size < 16 || e.page_size > 256 || e.page_size % 16 != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "page_size: a multiple of 16 in [16, 256] for the paged layout, "
          "got ",
          e.page_size));
    }
  } else if (e.page_size != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size: only with the paged layout (layout ",
                     LayoutName(e.layout), "), got ", e.page_size));
  }
  return absl::OkStatus();
}

double GainShare(double from_us, double to_us) {
  if (!(from_us > 0) || !(to_us > 0)) return 0;
  return std::max(0.0, 1 - to_us / from_us);
}

std::string LayerKindName(const LayerKind& kind) {
  std::vector<std::string> parts;
  if (kind.window_left >= 0) {
    parts.push_back(absl::StrCat("window ", kind.window_left));
  }
  if (kind.softcap > 0) parts.push_back(absl::StrCat("softcap ", kind.softcap));
  if (kind.sinks) parts.push_back("sinks");
  if (kind.alibi) parts.push_back("ALiBi");
  return parts.empty() ? "full attention" : absl::StrJoin(parts, ", ");
}

std::vector<Problem> EnvelopeBuckets(const Envelope& e, int64_t heads,
                                     int64_t kv_heads, int64_t head_dim,
                                     DType dtype, const LayerKind& kind) {
  const Problem form = FormOf(e, heads, kv_heads, head_dim, dtype, kind);
  std::vector<Problem> out;
  std::set<std::string> seen;
  auto add = [&](int64_t batch, int64_t seq_q, int64_t seq_k, bool causal) {
    Problem p = BucketOf(form, batch, seq_q, seq_k, causal);
    if (seen.insert(ProblemKey(p)).second) out.push_back(p);
  };
  // Packed calls bucket their queries from 16, causal or not alike.
  const bool packed = e.layout == Layout::kVarlen || e.layout == Layout::kPaged;
  const int64_t fewest = packed ? kFewestPacked : 1;
  const int64_t longest = std::max(kShortest, e.max_context);
  for (int64_t q : e.decode_queries) {
    for (int64_t batch : DecodeBatches(e.max_batch)) {
      for (int64_t keys :
           packed ? Pow2s(kShortest, longest) : DecodeKeys(longest)) {
        add(batch, std::max(fewest, CeilPow2(q)), keys, packed || q > 1);
      }
    }
  }
  for (int64_t batch : Pow2s(1, e.max_batch)) {
    for (int64_t len : Pow2s(kShortest, longest)) {
      // Where a call of at most max_prefill_tokens can fall.
      if (Least(batch, 1) * Least(len, kShortest) <= e.max_prefill_tokens) {
        add(batch, len, len, true);
      }
    }
  }
  if (const int64_t queries = PrefillQueries(e, packed); queries > 0) {
    const int64_t chunk = std::max(fewest, CeilPow2(queries));
    for (int64_t batch : Pow2s(1, e.max_batch)) {
      // A chunk has queries as many as its tokens allow, up to the chunk.
      if (Least(batch, 1) > e.max_prefill_tokens) break;
      for (int64_t keys : Pow2s(chunk, longest)) add(batch, chunk, keys, true);
    }
  }
  return out;
}

}  // namespace evotune
