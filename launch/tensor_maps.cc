#include "launch/tensor_maps.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace evotune {

static_assert(sizeof(TensorMap) == sizeof(CUtensorMap) &&
                  alignof(TensorMap) == alignof(CUtensorMap),
              "TensorMap mirrors CUtensorMap");

AttentionParams ContiguousParams(const Problem& p) {
  AttentionParams params{};
  // A contiguous [batch, heads, seq, cols] tensor's strides.
  const auto bhsd = [](long long* batch, long long* head, long long* row,
                       int64_t heads, int64_t seq, long long cols) {
    *row = cols;
    *head = seq * cols;
    *batch = heads * seq * cols;
  };
  const long long d = p.head_dim;
  const long long dv = HeadDimV(p);  // Of V and O.
  bhsd(&params.q_batch_stride, &params.q_head_stride, &params.q_row_stride,
       p.heads, p.seq_q, d);
  bhsd(&params.o_batch_stride, &params.o_head_stride, &params.o_row_stride,
       p.heads, p.seq_q, dv);
  bhsd(&params.k_batch_stride, &params.k_head_stride, &params.k_row_stride,
       p.kv_heads, p.seq_k, d);
  bhsd(&params.v_batch_stride, &params.v_head_stride, &params.v_row_stride,
       p.kv_heads, p.seq_k, dv);
  params.batch = static_cast<int>(p.batch);
  params.heads = static_cast<int>(p.heads);
  params.kv_heads = static_cast<int>(p.kv_heads);
  params.seq_q = static_cast<int>(p.seq_q);
  params.seq_k = static_cast<int>(p.seq_k);
  params.rows_q = params.seq_q;
  params.rows_k = params.seq_k;
  params.causal = p.causal ? 1 : 0;
  params.scale_log2 =
      static_cast<float>(1.4426950408889634 / std::sqrt(double(p.head_dim)));
  params.window_left = static_cast<int>(p.window_left);
  params.window_right = static_cast<int>(p.window_right);
  params.softcap = p.softcap;
  return params;
}

namespace {

struct TensorView {
  const char* name;
  DType dtype;
  const void* data;
  int64_t cols, seq, heads, batch;
  long long row_stride, head_stride, batch_stride;  // Elements.
  int box_rows;
};

// A tensor's view: a packed one (rows from cu_seqlens) is one batch of all
// its rows.
TensorView View(const char* name, DType dtype, const void* data, bool packed,
                int64_t cols, int64_t rows, int64_t heads, int64_t batch,
                long long row_stride, long long head_stride,
                long long batch_stride, int box_rows) {
  if (packed) {
    batch = 1;
    batch_stride = std::max<long long>(rows, 1) * row_stride;
  }
  return {name,  dtype,      data,        cols,         rows,    heads,
          batch, row_stride, head_stride, batch_stride, box_rows};
}

CUtensorMapDataType MapType(DType dtype) {
  switch (dtype) {
    case DType::kBf16:
      return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    case DType::kE4m3:  // Bytes: the copy engine does not convert.
      return CU_TENSOR_MAP_DATA_TYPE_UINT8;
    case DType::kFp16:
      break;
  }
  return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
}

absl::Status Encode(EncodeTiledFn encode, const TensorView& t, TensorMap* map) {
  const cuuint64_t elem = DTypeBytes(t.dtype);
  const cuuint64_t dims[4] = {
      static_cast<cuuint64_t>(t.cols), static_cast<cuuint64_t>(t.seq),
      static_cast<cuuint64_t>(t.heads), static_cast<cuuint64_t>(t.batch)};
  // Bytes, for dimensions 1..3 (dimension 0 is contiguous).
  const cuuint64_t strides[3] = {
      static_cast<cuuint64_t>(t.row_stride) * elem,
      static_cast<cuuint64_t>(t.head_stride) * elem,
      static_cast<cuuint64_t>(t.batch_stride) * elem};
  // 128 bytes of columns.
  const cuuint32_t box[4] = {static_cast<cuuint32_t>(128 / elem),
                             static_cast<cuuint32_t>(t.box_rows), 1, 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  const CUresult r = encode(
      reinterpret_cast<CUtensorMap*>(map), MapType(t.dtype), 4,
      const_cast<void*>(t.data), dims, strides, box, element_strides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor map of ", t.name, ": cuTensorMapEncodeTiled failed (error ", r,
        "); the copy engine needs 16-byte aligned data and strides"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<AttentionTensorMaps> EncodeTensorMaps(
    EncodeTiledFn encode, const AttentionParams& params, const Problem& problem,
    const LaunchGeometry::TmaBoxes& boxes) {
  const bool packed_q = params.cu_seqlens_q != nullptr;
  const bool packed_k = params.cu_seqlens_k != nullptr;
  // Paged K/V: a batch of pages of page_size rows.
  const bool paged = problem.layout == Layout::kPaged;
  const int64_t kv_rows = paged ? problem.page_size : params.rows_k;
  const int64_t kv_batch =
      paged ? params.rows_k / problem.page_size : problem.batch;
  const int64_t d = problem.head_dim;
  const int64_t dv = HeadDimV(problem);
  const TensorView views[4] = {
      View("q", QDType(problem), params.q, packed_q, d, params.rows_q,
           problem.heads, problem.batch, params.q_row_stride,
           params.q_head_stride, params.q_batch_stride, boxes.q_rows),
      View("k", KvDType(problem), params.k, packed_k, d, kv_rows,
           problem.kv_heads, kv_batch, params.k_row_stride,
           params.k_head_stride, params.k_batch_stride, boxes.kv_rows),
      View("v", KvDType(problem), params.v, packed_k, dv, kv_rows,
           problem.kv_heads, kv_batch, params.v_row_stride,
           params.v_head_stride, params.v_batch_stride, boxes.kv_rows),
      View("o", problem.dtype, params.o, packed_q, dv, params.rows_q,
           problem.heads, problem.batch, params.o_row_stride,
           params.o_head_stride, params.o_batch_stride, boxes.o_rows)};
  AttentionTensorMaps maps{};
  TensorMap* out[4] = {&maps.q, &maps.k, &maps.v, &maps.o};
  for (int i = 0; i < 4; ++i) {
    if (absl::Status s = Encode(encode, views[i], out[i]); !s.ok()) {
      return s;
    }
  }
  return maps;
}

}  // namespace evotune
