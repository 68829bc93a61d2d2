#include "evotune/attention_call.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"

namespace evotune {
namespace {

// One dimension of a tensor: its stride and extent, in elements.
struct Dim {
  const char* field;
  int64_t stride;
  int64_t extent;
};

std::array<Dim, 4> Dims(const AttentionTensor& t) {
  return {Dim{"head_dim", 1, t.head_dim},
          {"row_stride", t.row_stride, t.seq},
          {"head_stride", t.head_stride, t.heads},
          {"batch_stride", t.batch_stride, t.batch}};
}

// Elements from the first to one past the last the tensor addresses.
int64_t SpanElements(const AttentionTensor& t) {
  int64_t span = 1;
  for (const Dim& d : Dims(t)) span += (d.extent - 1) * d.stride;
  return span;
}

absl::Status Field(const char* tensor, const char* field,
                   const std::string& message) {
  return absl::InvalidArgumentError(
      absl::StrCat(tensor, ".", field, ": ", message));
}

// The head dim of the call's tensor `name`: V's and O's the problem's
// value head dim, Q's and K's its head_dim; and the problem field's name.
std::pair<int64_t, const char*> HeadDimOf(absl::string_view name,
                                          const Problem& p) {
  if (name == "v" || name == "o") {
    return {HeadDimV(p), p.head_dim_v > 0 ? "head_dim_v" : "head_dim"};
  }
  return {p.head_dim, "head_dim"};
}

// A paged problem's K or V: pages of page_size rows, as many as the
// caller has (their rows within the kernels' int32 row count).
absl::Status CheckPages(const char* name, const AttentionTensor& t,
                        const Problem& p) {
  const auto [head_dim, head_dim_name] = HeadDimOf(name, p);
  for (auto [field, got, want, what] :
       {std::tuple{"heads", t.heads, p.kv_heads, "kv_heads"},
        {"seq", t.seq, p.page_size, "page_size"},
        {"head_dim", t.head_dim, head_dim, head_dim_name}}) {
    if (got != want) {
      return Field(name, field,
                   absl::StrCat("must be the problem's ", what, " (", want,
                                "), got ", got));
    }
  }
  constexpr int64_t kMaxRows = int64_t{1} << 31;
  if (t.batch < 1 || t.batch > kMaxRows / p.page_size - 1) {
    return Field(name, "batch",
                 absl::StrCat("the number of pages: from 1 to ",
                              kMaxRows / p.page_size - 1, ", got ", t.batch));
  }
  return absl::OkStatus();
}

// `packed_q`: Q and O are packed (varlen, or paged with cu_seqlens_q).
absl::Status CheckExtents(const char* name, const AttentionTensor& t,
                          const Problem& p, bool is_kv, bool packed_q) {
  if (is_kv && p.layout == Layout::kPaged) return CheckPages(name, t, p);
  const int64_t heads = is_kv ? p.kv_heads : p.heads;
  const bool packed = is_kv ? p.layout == Layout::kVarlen : packed_q;
  // Packed tensors: one batch of any number of rows (at least one).
  const int64_t seq = packed  ? std::max<int64_t>(t.seq, 1)
                      : is_kv ? p.seq_k
                              : p.seq_q;
  const char* seq_name = packed  ? "rows (at least 1)"
                         : is_kv ? "seq_k"
                                 : "seq_q";
  const auto [head_dim, head_dim_name] = HeadDimOf(name, p);
  for (auto [field, got, want, what] :
       {std::tuple{"batch", t.batch, packed ? 1 : p.batch,
                   packed ? "packed batch" : "batch"},
        {"heads", t.heads, heads, is_kv ? "kv_heads" : "heads"},
        {"seq", t.seq, seq, seq_name},
        {"head_dim", t.head_dim, head_dim, head_dim_name}}) {
    if (got != want) {
      return Field(name, field,
                   absl::StrCat("must be the problem's ", what, " (", want,
                                "), got ", got));
    }
  }
  return absl::OkStatus();
}

// Bytes of one element of the call's tensor `name` ("q", "k", "v" or "o").
int64_t ElementBytes(const Problem& p, absl::string_view name) {
  if (name == "q") return DTypeBytes(QDType(p));
  if (name == "k" || name == "v") return DTypeBytes(KvDType(p));
  return DTypeBytes(p.dtype);
}

absl::Status CheckLayout(const char* name, const AttentionTensor& t,
                         int64_t element_bytes) {
  if (t.data == nullptr) return Field(name, "data", "null");
  if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0) {
    return Field(name, "data",
                 absl::StrCat("must be 16-byte aligned, got 0x",
                              absl::Hex(reinterpret_cast<uintptr_t>(t.data))));
  }
  const std::array<Dim, 4> dims = Dims(t);
  for (auto d = dims.begin() + 1; d != dims.end(); ++d) {  // head_dim's is 1
    const int64_t per_16_bytes = 16 / element_bytes;
    if (d->stride <= 0 || d->stride % per_16_bytes != 0) {
      return Field(name, d->field,
                   absl::StrCat("must be a positive multiple of ", per_16_bytes,
                                " elements (16 bytes), got ", d->stride));
    }
  }
  if (t.row_stride < t.head_dim) {
    return Field(name, "row_stride",
                 absl::StrCat("must be at least head_dim (", t.head_dim,
                              "), got ", t.row_stride));
  }
  return absl::OkStatus();
}

// O is written: no two of its elements may share an address.
absl::Status CheckNoSelfOverlap(const AttentionTensor& o) {
  std::array<Dim, 4> dims = Dims(o);
  std::sort(dims.begin(), dims.end(),
            [](const Dim& a, const Dim& b) { return a.stride < b.stride; });
  int64_t span_below = 1;
  for (const Dim& d : dims) {
    if (d.extent == 1) continue;
    if (d.stride < span_below) {
      return Field("o", d.field,
                   absl::StrCat(d.stride,
                                " makes o overlap itself (the "
                                "dimensions below it span ",
                                span_below, " elements)"));
    }
    span_below += (d.extent - 1) * d.stride;
  }
  return absl::OkStatus();
}

// Whether O (16-bit elements) and `t` (of element_bytes) share memory.
bool Overlap(const AttentionTensor& o, const AttentionTensor& t,
             int64_t element_bytes) {
  const auto begin = [](const AttentionTensor& x) {
    return reinterpret_cast<uintptr_t>(x.data);
  };
  const auto end = [&](const AttentionTensor& x, int64_t bytes) {
    return begin(x) + bytes * static_cast<uintptr_t>(SpanElements(x));
  };
  return begin(o) < end(t, element_bytes) && begin(t) < end(o, 2);
}

// The launch data beside the tensors: the descale factors only for FP8
// inputs, fp32-aligned, strides from 0; the sinks and ALiBi slopes exactly
// where the problem has them.
absl::Status CheckLaunchData(const AttentionCall& call) {
  for (auto [field, ptr, allowed] :
       {std::tuple{"q_descale", call.q_descale, call.problem.q_fp8},
        {"k_descale", call.k_descale, call.problem.kv_fp8},
        {"v_descale", call.v_descale, call.problem.kv_fp8}}) {
    if (ptr != nullptr && !allowed) {
      return Field(field, "data",
                   "must be null: its tensor is not float8 (kv_dtype e4m3 "
                   "takes k_descale and v_descale, q_dtype e4m3 q_descale)");
    }
    if (reinterpret_cast<uintptr_t>(ptr) % 4 != 0) {
      return Field(field, "data", "must be 4-byte aligned (fp32)");
    }
  }
  for (auto [field, ptr, wanted, what] :
       {std::tuple{"sinks", call.sinks, call.problem.sinks, "sinks"},
        {"alibi_slopes", call.alibi_slopes, call.problem.alibi, "ALiBi"}}) {
    if ((ptr != nullptr) != wanted) {
      return Field(field, "data",
                   absl::StrCat(wanted ? "must be given: the problem has "
                                       : "must be null: the problem has no ",
                                what));
    }
    if (reinterpret_cast<uintptr_t>(ptr) % 4 != 0) {
      return Field(field, "data", "must be 4-byte aligned (fp32)");
    }
  }
  constexpr int64_t kMaxStride = int64_t{1} << 24;
  for (auto [field, stride] :
       {std::pair{"descale_batch_stride", call.descale_batch_stride},
        {"descale_head_stride", call.descale_head_stride},
        {"alibi_batch_stride", call.alibi_batch_stride}}) {
    if (stride < 0 || stride > kMaxStride) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": must be in [0, ", kMaxStride, "] elements, got ", stride));
    }
  }
  return absl::OkStatus();
}

// A paged call's block table: rows of at least seq_k / page_size ids.
absl::Status CheckBlockTable(const AttentionCall& call) {
  const Problem& p = call.problem;
  const bool paged = p.layout == Layout::kPaged;
  if (!paged) {
    if (call.block_table_stride == 0) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        "block_table_stride: must be 0 for layout ", LayoutName(p.layout)));
  }
  const int64_t pages = p.seq_k / p.page_size;
  if (call.block_table_stride < pages ||
      call.block_table_stride > (int64_t{1} << 31) / p.batch) {
    return absl::InvalidArgumentError(absl::StrCat(
        "block_table_stride: must be at least seq_k / page_size (", pages,
        ") and its table within 2^31 ids, got ", call.block_table_stride));
  }
  return absl::OkStatus();
}

}  // namespace

bool PackedQ(const AttentionCall& call) {
  return call.problem.layout == Layout::kVarlen ||
         (call.problem.layout == Layout::kPaged &&
          call.cu_seqlens_q != nullptr);
}

namespace {

// The length arrays the layout needs, and none it does not.
absl::Status CheckLengths(const AttentionCall& call) {
  const Layout layout = call.problem.layout;
  const bool varlen = layout == Layout::kVarlen;
  const bool paged = layout == Layout::kPaged;
  for (auto [field, ptr, needed, allowed] :
       {std::tuple{"cu_seqlens_q", call.cu_seqlens_q, varlen, varlen || paged},
        {"cu_seqlens_k", call.cu_seqlens_k, varlen, varlen},
        {"seqused_k", call.seqused_k, layout == Layout::kKvCache || paged,
         layout != Layout::kDense},
        {"block_table", call.block_table, paged, paged}}) {
    const std::string layout_name(LayoutName(layout));
    if (ptr == nullptr && needed) {
      return Field(field, "data",
                   absl::StrCat("required for layout ", layout_name));
    }
    if (ptr != nullptr && !allowed) {
      return Field(field, "data",
                   absl::StrCat("must be null for layout ", layout_name));
    }
    if (reinterpret_cast<uintptr_t>(ptr) % 4 != 0) {
      return Field(field, "data", "must be 4-byte aligned (int32)");
    }
  }
  if (PackedQ(call) && call.q.seq != call.o.seq) {
    return Field(
        "o", "seq",
        absl::StrCat("must be q's rows (", call.q.seq, "), got ", call.o.seq));
  }
  if (varlen && call.k.seq != call.v.seq) {
    return Field(
        "v", "seq",
        absl::StrCat("must be k's rows (", call.k.seq, "), got ", call.v.seq));
  }
  if (paged && call.k.batch != call.v.batch) {
    return Field("v", "batch",
                 absl::StrCat("must be k's pages (", call.k.batch, "), got ",
                              call.v.batch));
  }
  return CheckBlockTable(call);
}

absl::Status CheckScale(float scale) {
  if (!std::isfinite(scale) || scale < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "scale: must be finite and positive (0 for 1/sqrt(head_dim)), got ",
        scale));
  }
  return absl::OkStatus();
}

}  // namespace

AttentionCall ContiguousCall(const Problem& problem, const void* q,
                             const void* k, const void* v, void* o) {
  const auto bhsd = [&](const void* data, int64_t heads, int64_t seq,
                        int64_t d) {
    return AttentionTensor{
        const_cast<void*>(data), heads * seq * d, seq * d, d,
        problem.batch,           heads,           seq,     d};
  };
  const int64_t d = problem.head_dim, dv = HeadDimV(problem);
  AttentionCall call;
  call.problem = problem;
  call.q = bhsd(q, problem.heads, problem.seq_q, d);
  call.k = bhsd(k, problem.kv_heads, problem.seq_k, d);
  call.v = bhsd(v, problem.kv_heads, problem.seq_k, dv);
  call.o = bhsd(o, problem.heads, problem.seq_q, dv);
  return call;
}

absl::Status CheckAttentionCall(const AttentionCall& call) {
  if (absl::Status s = ValidateProblem(call.problem); !s.ok()) return s;
  if (absl::Status s = CheckLengths(call); !s.ok()) return s;
  for (auto [name, t, is_kv] : {std::tuple{"q", &call.q, false},
                                {"k", &call.k, true},
                                {"v", &call.v, true},
                                {"o", &call.o, false}}) {
    if (absl::Status s =
            CheckExtents(name, *t, call.problem, is_kv, PackedQ(call));
        !s.ok()) {
      return s;
    }
    if (absl::Status s =
            CheckLayout(name, *t, ElementBytes(call.problem, name));
        !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = CheckNoSelfOverlap(call.o); !s.ok()) return s;
  for (auto [name, t] :
       {std::pair{"q", &call.q}, {"k", &call.k}, {"v", &call.v}}) {
    if (Overlap(call.o, *t, ElementBytes(call.problem, name))) {
      return Field("o", "data", absl::StrCat("overlaps ", name));
    }
  }
  if (absl::Status s = CheckLaunchData(call); !s.ok()) return s;
  return CheckScale(call.scale);
}

}  // namespace evotune
