#include "core/problem.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/batch_lengths.h"

namespace evotune {
namespace {

absl::Status FieldError(absl::string_view prefix, absl::string_view field,
                        absl::string_view message) {
  return absl::InvalidArgumentError(
      absl::StrCat(prefix, ".", field, ": ", message));
}

absl::Status CheckRange(absl::string_view prefix, absl::string_view field,
                        int64_t value, int64_t max) {
  if (value < 1 || value > max) {
    return FieldError(prefix, field,
                      absl::StrCat("must be in [1, ", max, "], got ", value));
  }
  return absl::OkStatus();
}

// A paged problem's page size: 16 to 256 keys, a multiple of 16, dividing
// seq_k; none for every other layout.
absl::Status CheckPages(const Problem& p, absl::string_view prefix) {
  if (p.layout != Layout::kPaged) {
    if (p.page_size == 0) return absl::OkStatus();
    return FieldError(
        prefix, "page_size",
        absl::StrCat("must be 0 but for a paged layout, got ", p.page_size));
  }
  if (p.page_size < kMinPageSize || p.page_size > kMaxPageSize ||
      p.page_size % kMinPageSize != 0) {
    return FieldError(
        prefix, "page_size",
        absl::StrCat("must be a multiple of ", kMinPageSize, " in [",
                     kMinPageSize, ", ", kMaxPageSize, "], got ", p.page_size));
  }
  if (p.seq_k % p.page_size != 0) {
    return FieldError(prefix, "seq_k",
                      absl::StrCat("must be a multiple of page_size (",
                                   p.page_size, "), got ", p.seq_k));
  }
  return absl::OkStatus();
}

// The window bounds and softcap: each bound -1 or in [0, kMaxSeqLen], the
// causal mask's right bound left to causal (so that one mask has one key),
// the cap finite and in [0, kMaxSoftcap].
absl::Status CheckScoreMods(const Problem& p, absl::string_view prefix) {
  for (auto [name, bound] : {std::pair{"window_left", p.window_left},
                             {"window_right", p.window_right}}) {
    if (bound < -1 || bound > kMaxSeqLen) {
      return FieldError(prefix, name,
                        absl::StrCat("must be -1 (no bound) or in [0, ",
                                     kMaxSeqLen, "], got ", bound));
    }
  }
  if (p.causal && p.window_right != -1) {
    return FieldError(prefix, "window_right",
                      absl::StrCat("must be -1 with causal (the causal mask "
                                   "ends each row at its diagonal), got ",
                                   p.window_right));
  }
  if (!p.causal && p.window_right == 0) {
    return FieldError(prefix, "window_right",
                      "0 is the causal mask: set causal and window_right -1");
  }
  if (!std::isfinite(p.softcap) || p.softcap < 0 || p.softcap > kMaxSoftcap) {
    return FieldError(prefix, "softcap",
                      absl::StrCat("must be 0 (none) or in (0, ", kMaxSoftcap,
                                   "], got ", p.softcap));
  }
  return absl::OkStatus();
}

// The shortest decimal form of `x` that reads back as x.
std::string ShortestFloat(float x) {
  for (int digits = 6;; ++digits) {
    std::string s = absl::StrFormat("%.*g", digits, x);
    if (digits >= 9 || std::strtof(s.c_str(), nullptr) == x) return s;
  }
}

// Reads the key's parts after the layout (ScoreModsName) into `p`; false
// for anything else.
bool ParseScoreMods(const std::vector<absl::string_view>& parts, Problem& p) {
  size_t i = 9;
  auto bound = [&](absl::string_view prefix, int64_t* out) {
    absl::string_view part = i < parts.size() ? parts[i] : "";
    if (!absl::ConsumePrefix(&part, prefix)) return true;
    ++i;
    return absl::SimpleAtoi(part, out) && *out >= 0;
  };
  if (!bound("wl", &p.window_left) || !bound("wr", &p.window_right)) {
    return false;
  }
  absl::string_view cap = i < parts.size() ? parts[i] : "";
  if (absl::ConsumePrefix(&cap, "cap")) {
    ++i;
    if (!absl::SimpleAtof(cap, &p.softcap) || !(p.softcap > 0) ||
        ShortestFloat(p.softcap) != cap) {
      return false;
    }
  }
  p.sinks = i < parts.size() && parts[i] == "sinks";
  if (p.sinks) ++i;
  p.alibi = i < parts.size() && parts[i] == "alibi";
  return i + (p.alibi ? 1 : 0) == parts.size();
}

}  // namespace

// The dtype part of an FP8 KV cache's key, and of FP8 attention's, after
// O's type.
constexpr absl::string_view kFp8KvSuffix = ".kve4m3";
constexpr absl::string_view kFp8QkvSuffix = ".qkve4m3";

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kBf16:
      return "bf16";
    case DType::kE4m3:
      return "e4m3";
    case DType::kFp16:
      break;
  }
  return "fp16";
}

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  for (DType d : {DType::kFp16, DType::kBf16, DType::kE4m3}) {
    if (name == DTypeName(d)) return d;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype \"", name, "\" (fp16, bf16 or e4m3)"));
}

absl::string_view LayoutName(Layout layout) {
  switch (layout) {
    case Layout::kVarlen:
      return "thd";
    case Layout::kKvCache:
      return "cache";
    case Layout::kPaged:
      return "paged";
    case Layout::kDense:
      break;
  }
  return "bhsd";
}

absl::StatusOr<Layout> ParseLayout(absl::string_view name) {
  for (Layout l :
       {Layout::kDense, Layout::kVarlen, Layout::kKvCache, Layout::kPaged}) {
    if (name == LayoutName(l)) return l;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown layout \"", name, "\" (bhsd, thd, cache or paged)"));
}

bool Problem::operator==(const Problem& o) const {
  return batch == o.batch && heads == o.heads && kv_heads == o.kv_heads &&
         seq_q == o.seq_q && seq_k == o.seq_k && head_dim == o.head_dim &&
         HeadDimV(*this) == HeadDimV(o) && causal == o.causal &&
         dtype == o.dtype && kv_fp8 == o.kv_fp8 && q_fp8 == o.q_fp8 &&
         layout == o.layout && page_size == o.page_size &&
         window_left == o.window_left && window_right == o.window_right &&
         softcap == o.softcap && sinks == o.sinks && alibi == o.alibi;
}

bool SameScoreMods(const Problem& a, const Problem& b) {
  return a.causal == b.causal && a.window_left == b.window_left &&
         a.window_right == b.window_right && a.softcap == b.softcap &&
         a.sinks == b.sinks && a.alibi == b.alibi;
}

Problem ActiveScoreMods(Problem call) {
  if (call.seq_q == 1) call.causal = false;
  const bool acts =
      (call.window_left >= 0 && call.window_left < call.seq_k - 1) ||
      (call.window_right >= 0 && call.window_right < call.seq_q - 1);
  if (!acts) call.window_left = call.window_right = -1;
  return call;
}

bool ServesScoreMods(const Problem& served, const Problem& call) {
  const Problem active = ActiveScoreMods(call);
  return served.softcap == call.softcap && served.sinks == call.sinks &&
         served.alibi == call.alibi &&
         (served.causal == call.causal || call.seq_q == 1) &&
         (HasWindow(served) || !HasWindow(active));
}

std::string ScoreModsName(const Problem& p) {
  std::string out;
  if (p.window_left >= 0) absl::StrAppend(&out, "_wl", p.window_left);
  if (p.window_right >= 0) absl::StrAppend(&out, "_wr", p.window_right);
  if (p.softcap > 0) absl::StrAppend(&out, "_cap", ShortestFloat(p.softcap));
  if (p.sinks) absl::StrAppend(&out, "_sinks");
  if (p.alibi) absl::StrAppend(&out, "_alibi");
  return out;
}

absl::Status ValidateProblem(const Problem& p, absl::string_view prefix) {
  if (absl::Status s = CheckRange(prefix, "batch", p.batch, kMaxBatch);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckRange(prefix, "heads", p.heads, kMaxHeads);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckRange(prefix, "kv_heads", p.kv_heads, p.heads);
      !s.ok()) {
    return s;
  }
  if (p.heads % p.kv_heads != 0) {
    return FieldError(
        prefix, "kv_heads",
        absl::StrCat("must divide heads (", p.heads, "), got ", p.kv_heads));
  }
  if (absl::Status s = CheckRange(prefix, "seq_q", p.seq_q, kMaxSeqLen);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckRange(prefix, "seq_k", p.seq_k, kMaxSeqLen);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckRange(prefix, "head_dim", p.head_dim, kMaxHeadDim);
      !s.ok()) {
    return s;
  }
  if (p.head_dim_v != 0) {
    if (absl::Status s =
            CheckRange(prefix, "head_dim_v", p.head_dim_v, kMaxHeadDim);
        !s.ok()) {
      return s;
    }
  }
  if (HeadDimV(p) != p.head_dim && (p.kv_fp8 || p.q_fp8)) {
    return FieldError(prefix, "head_dim_v",
                      "a value head dim other than head_dim is 16-bit only "
                      "(kv_dtype e4m3 needs head_dim_v 0)");
  }
  if (p.dtype == DType::kE4m3) {
    return FieldError(prefix, "dtype",
                      "fp16 or bf16 (the type of Q and O; an FP8 KV cache is "
                      "kv_dtype e4m3)");
  }
  if (p.q_fp8 && !p.kv_fp8) {
    return FieldError(prefix, "q_dtype",
                      "e4m3 needs kv_dtype e4m3 too (FP8 attention reads Q, K "
                      "and V in e4m3)");
  }
  if (absl::Status s = CheckPages(p, prefix); !s.ok()) return s;
  if (absl::Status s = CheckScoreMods(p, prefix); !s.ok()) return s;
  const int64_t q_elems = p.batch * p.heads * p.seq_q * p.head_dim;
  const int64_t k_elems =
      p.batch * p.kv_heads * p.seq_k * std::max(p.head_dim, HeadDimV(p));
  if (q_elems > kMaxTensorElements) {
    return FieldError(prefix, "seq_q",
                      absl::StrCat("batch*heads*seq_q*head_dim = ", q_elems,
                                   " exceeds ", kMaxTensorElements));
  }
  if (k_elems > kMaxTensorElements) {
    return FieldError(prefix, "seq_k",
                      absl::StrCat("batch*kv_heads*seq_k*head_dim(_v) = ",
                                   k_elems, " exceeds ", kMaxTensorElements));
  }
  return absl::OkStatus();
}

std::string DTypesName(const Problem& p) {
  return absl::StrCat(DTypeName(p.dtype), p.q_fp8    ? kFp8QkvSuffix
                                          : p.kv_fp8 ? kFp8KvSuffix
                                                     : "");
}

std::string ProblemKey(const Problem& p) {
  return absl::StrCat(
      "b", p.batch, "_h", p.heads, "_kv", p.kv_heads, "_q", p.seq_q, "_k",
      p.seq_k, "_d", p.head_dim,
      HeadDimV(p) != p.head_dim ? absl::StrCat("v", p.head_dim_v) : "", "_",
      p.causal ? "causal" : "full", "_", DTypesName(p), "_",
      LayoutName(p.layout),
      p.layout == Layout::kPaged ? absl::StrCat(p.page_size) : std::string(),
      ScoreModsName(p));
}

absl::StatusOr<Problem> ParseProblemKey(absl::string_view key) {
  std::vector<absl::string_view> parts = absl::StrSplit(key, '_');
  auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed problem key \"", key, "\""));
  };
  if (parts.size() < 9) return bad();
  Problem p;
  absl::string_view layout_name = parts[8];
  if (absl::ConsumePrefix(&layout_name, LayoutName(Layout::kPaged))) {
    if (!absl::SimpleAtoi(layout_name, &p.page_size) || p.page_size <= 0) {
      return bad();
    }
    layout_name = LayoutName(Layout::kPaged);
  }
  absl::StatusOr<Layout> layout = ParseLayout(layout_name);
  if (!layout.ok() || (p.page_size > 0) != (*layout == Layout::kPaged)) {
    return bad();
  }
  p.layout = *layout;
  const std::pair<absl::string_view, int64_t*> numeric[] = {
      {"b", &p.batch}, {"h", &p.heads}, {"kv", &p.kv_heads},
      {"q", &p.seq_q}, {"k", &p.seq_k}, {"d", &p.head_dim}};
  absl::string_view dims = parts[5];
  std::vector<absl::string_view> dim_parts = absl::StrSplit(dims, 'v');
  if (dim_parts.size() > 2) return bad();
  if (dim_parts.size() == 2) {
    if (!absl::SimpleAtoi(dim_parts[1], &p.head_dim_v) || p.head_dim_v <= 0) {
      return bad();
    }
    parts[5] = dim_parts[0];
  }
  for (int i = 0; i < 6; ++i) {
    absl::string_view part = parts[i];
    if (!absl::ConsumePrefix(&part, numeric[i].first) ||
        !absl::SimpleAtoi(part, numeric[i].second)) {
      return bad();
    }
  }
  if (parts[6] != "causal" && parts[6] != "full") return bad();
  p.causal = parts[6] == "causal";
  absl::string_view dtype_name = parts[7];
  p.q_fp8 = absl::ConsumeSuffix(&dtype_name, kFp8QkvSuffix);
  p.kv_fp8 = p.q_fp8 || absl::ConsumeSuffix(&dtype_name, kFp8KvSuffix);
  absl::StatusOr<DType> dtype = ParseDType(dtype_name);
  if (!dtype.ok() || *dtype == DType::kE4m3) return bad();
  p.dtype = *dtype;
  if (!ParseScoreMods(parts, p)) return bad();
  // "d128v128" is not a key: equal head dims have no "v" part.
  if (p.head_dim_v == p.head_dim) return bad();
  return p;
}

namespace {

// The sum over rows i in [0, n) of clamp(i + c, 0, k), in closed form (it
// is asked per config when a cost model ranks): rows [0, a) give 0, rows
// [a, b) give i + c, rows [b, n) give k.
double SumClamped(int64_t n, int64_t k, int64_t c) {
  const int64_t a = std::clamp<int64_t>(-c, 0, n);
  const int64_t b = std::clamp<int64_t>(k - c, a, n);
  return static_cast<double>(b - a) * static_cast<double>(c) +
         static_cast<double>(a + b - 1) * static_cast<double>(b - a) / 2 +
         static_cast<double>(n - b) * static_cast<double>(k);
}

// The (query, key) pairs one head of a sequence of n queries and k keys
// computes: row i sees keys [i + k - n - left, i + k - n + right], each
// bound cut to [0, k).
double Pairs(const Problem& p, int64_t n, int64_t k) {
  const int64_t unbounded = n + k;  // Past every key, from every row.
  const int64_t left = p.window_left >= 0 ? p.window_left : unbounded;
  const int64_t right =
      p.causal ? 0 : (p.window_right >= 0 ? p.window_right : unbounded);
  const int64_t shift = k - n;
  return SumClamped(n, k, shift + right + 1) - SumClamped(n, k, shift - left);
}

}  // namespace

double ProblemFlops(const Problem& p) {
  const double per_pair =
      2.0 * static_cast<double>(p.heads * (p.head_dim + HeadDimV(p)));
  if (p.layout == Layout::kDense) {
    return per_pair * static_cast<double>(p.batch) * Pairs(p, p.seq_q, p.seq_k);
  }
  const BatchLengths l = RepresentativeLengths(p);
  double pairs = 0;
  for (size_t b = 0; b < l.q.size(); ++b) {
    pairs += Pairs(p, l.q[b], l.k[b]);
  }
  return per_pair * pairs;
}

double KindDistance(const Problem& p, const Problem& q) {
  double d =
      (p.dtype != q.dtype) + (p.kv_fp8 != q.kv_fp8) + (p.q_fp8 != q.q_fp8) +
      (p.causal != q.causal) +
      (p.window_left != q.window_left || p.window_right != q.window_right ||
       p.softcap != q.softcap || p.sinks != q.sinks || p.alibi != q.alibi) +
      (p.layout != q.layout);
  if (p.page_size > 0 && q.page_size > 0) {
    const double x = std::log2(static_cast<double>(p.page_size) / q.page_size);
    d += x * x;
  }
  return d;
}

double ProblemDistance(const Problem& p, const Problem& q) {
  double d = KindDistance(p, q);
  for (auto [a, b] : {std::pair{p.batch, q.batch},
                      {p.heads, q.heads},
                      {p.kv_heads, q.kv_heads},
                      {p.seq_q, q.seq_q},
                      {p.seq_k, q.seq_k},
                      {p.head_dim, q.head_dim},
                      {HeadDimV(p) * q.head_dim, HeadDimV(q) * p.head_dim}}) {
    const double x = std::log2(static_cast<double>(a) / b);
    d += x * x;
  }
  return d;
}

}  // namespace evotune
