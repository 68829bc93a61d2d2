// EncodeTensorMaps describes each tensor to the driver as the templates read
// it. Runs without a GPU: the driver's encoder is replaced by a recorder.
#include "launch/tensor_maps.h"

#include <cstring>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace evotune {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

struct Call {
  CUtensorMapDataType dtype;
  cuuint32_t rank;
  void* data;
  std::vector<cuuint64_t> dims, strides;
  std::vector<cuuint32_t> box, element_strides;
  CUtensorMapSwizzle swizzle;
  CUtensorMapFloatOOBfill fill;
  CUtensorMap* out;
};

std::vector<Call> calls;
int fail_call = -1;  // The call that returns an error, if any.

CUresult Record(CUtensorMap* map, CUtensorMapDataType dtype, cuuint32_t rank,
                void* data, const cuuint64_t* dims, const cuuint64_t* strides,
                const cuuint32_t* box, const cuuint32_t* element_strides,
                CUtensorMapInterleave, CUtensorMapSwizzle swizzle,
                CUtensorMapL2promotion, CUtensorMapFloatOOBfill fill) {
  calls.push_back({dtype,
                   rank,
                   data,
                   {dims, dims + rank},
                   {strides, strides + rank - 1},
                   {box, box + rank},
                   {element_strides, element_strides + rank},
                   swizzle,
                   fill,
                   map});
  // Mark the map, so the test sees which output each call wrote.
  std::memset(map, static_cast<int>(calls.size()), sizeof(CUtensorMap));
  return static_cast<int>(calls.size()) - 1 == fail_call
             ? CUDA_ERROR_INVALID_VALUE
             : CUDA_SUCCESS;
}

class TensorMapsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    calls.clear();
    fail_call = -1;
    problem_.batch = 2;
    problem_.heads = 8;
    problem_.kv_heads = 2;
    problem_.seq_q = 100;
    problem_.seq_k = 300;
    problem_.head_dim = 128;
    problem_.dtype = DType::kBf16;
    // Q and O in a [batch, seq, heads, dim] buffer, K and V packed.
    params_.q = q_;
    params_.k = k_;
    params_.v = v_;
    params_.o = o_;
    params_.q_row_stride = params_.o_row_stride = 8 * 128;
    params_.q_head_stride = params_.o_head_stride = 128;
    params_.q_batch_stride = params_.o_batch_stride = 100 * 8 * 128;
    params_.k_row_stride = params_.v_row_stride = 128;
    params_.k_head_stride = params_.v_head_stride = 300 * 128;
    params_.k_batch_stride = params_.v_batch_stride = 2 * 300 * 128;
    params_.rows_q = 100;
    params_.rows_k = 300;
    boxes_.q_rows = 128;
    boxes_.kv_rows = 192;
    boxes_.o_rows = 64;
  }

  alignas(16) char q_[16], k_[16], v_[16], o_[16];
  Problem problem_;
  AttentionParams params_{};
  LaunchGeometry::TmaBoxes boxes_;
};

TEST_F(TensorMapsTest, EachTensorIsAFourDimensionalMapOfItsOwnShape) {
  absl::StatusOr<AttentionTensorMaps> maps =
      EncodeTensorMaps(Record, params_, problem_, boxes_);
  ASSERT_TRUE(maps.ok()) << maps.status();
  ASSERT_EQ(calls.size(), 4u);
  const Call &q = calls[0], &k = calls[1], &v = calls[2], &o = calls[3];
  EXPECT_EQ(q.data, q_);
  EXPECT_EQ(k.data, k_);
  EXPECT_EQ(v.data, v_);
  EXPECT_EQ(o.data, o_);
  EXPECT_THAT(q.dims, ElementsAre(128, 100, 8, 2));
  EXPECT_THAT(q.strides, ElementsAre(8 * 128 * 2, 128 * 2, 100 * 8 * 128 * 2));
  EXPECT_THAT(k.dims, ElementsAre(128, 300, 2, 2));  // kv_heads, seq_k.
  EXPECT_THAT(k.strides, ElementsAre(256, 300 * 256, 2 * 300 * 256));
  EXPECT_EQ(v.dims, k.dims);
  EXPECT_THAT(o.dims, ElementsAre(128, 100, 8, 2));
  EXPECT_THAT(q.box, ElementsAre(64, 128, 1, 1));
  EXPECT_THAT(k.box, ElementsAre(64, 192, 1, 1));
  EXPECT_THAT(v.box, ElementsAre(64, 192, 1, 1));
  EXPECT_THAT(o.box, ElementsAre(64, 64, 1, 1));
  for (const Call& c : calls) {
    EXPECT_EQ(c.rank, 4u);
    EXPECT_EQ(c.dtype, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16);
    EXPECT_EQ(c.swizzle, CU_TENSOR_MAP_SWIZZLE_128B);
    EXPECT_EQ(c.fill, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);  // Zeros.
    EXPECT_THAT(c.element_strides, ElementsAre(1, 1, 1, 1));
  }
  // Each map lands in its own field.
  EXPECT_EQ(reinterpret_cast<const unsigned char*>(&maps->q)[0], 1);
  EXPECT_EQ(reinterpret_cast<const unsigned char*>(&maps->k)[0], 2);
  EXPECT_EQ(reinterpret_cast<const unsigned char*>(&maps->v)[0], 3);
  EXPECT_EQ(reinterpret_cast<const unsigned char*>(&maps->o)[127], 4);
}

// FP8 attention: Q, K and V of one byte an element (boxes of 128 of them,
// 128 bytes; strides in bytes), O 16-bit.
TEST_F(TensorMapsTest, E4m3TensorsAreMapsOfBytes) {
  problem_.kv_fp8 = problem_.q_fp8 = true;
  ASSERT_TRUE(EncodeTensorMaps(Record, params_, problem_, boxes_).ok());
  ASSERT_EQ(calls.size(), 4u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(calls[i].dtype, CU_TENSOR_MAP_DATA_TYPE_UINT8);
    EXPECT_EQ(calls[i].box[0], 128u);
  }
  EXPECT_THAT(calls[0].strides, ElementsAre(8 * 128, 128, 100 * 8 * 128));
  EXPECT_EQ(calls[3].dtype, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16);
  EXPECT_THAT(calls[3].box, ElementsAre(64, 64, 1, 1));
}

// Packed tensors (rows from cu_seqlens) are one batch of all their rows,
// bounded by the tensor's rows: the copy engine zero-fills past them.
TEST_F(TensorMapsTest, PackedTensorsAreOneBatchOfAllTheirRows) {
  const int cu[3] = {0, 0, 0};  // Never read: only their presence counts.
  params_.cu_seqlens_q = cu;
  params_.cu_seqlens_k = cu;
  params_.rows_q = 1000;
  params_.rows_k = 5000;
  params_.q_batch_stride = params_.o_batch_stride = 0;
  params_.k_batch_stride = params_.v_batch_stride = 0;
  params_.k_row_stride = params_.v_row_stride = 2 * 128;
  params_.k_head_stride = params_.v_head_stride = 128;
  ASSERT_TRUE(EncodeTensorMaps(Record, params_, problem_, boxes_).ok());
  ASSERT_EQ(calls.size(), 4u);
  EXPECT_THAT(calls[0].dims, ElementsAre(128, 1000, 8, 1));
  EXPECT_THAT(calls[0].strides,
              ElementsAre(8 * 128 * 2, 128 * 2, 1000 * 8 * 128 * 2));
  EXPECT_THAT(calls[1].dims, ElementsAre(128, 5000, 2, 1));
  EXPECT_THAT(calls[1].strides, ElementsAre(256 * 2, 256, 5000 * 256 * 2));
  EXPECT_THAT(calls[3].dims, ElementsAre(128, 1000, 8, 1));
  // A KV cache (seqused_k only) keeps its batches.
  calls.clear();
  params_.cu_seqlens_q = params_.cu_seqlens_k = nullptr;
  params_.seqused_k = cu;
  params_.rows_k = 300;
  params_.k_batch_stride = params_.v_batch_stride = 300 * 2 * 128;
  ASSERT_TRUE(EncodeTensorMaps(Record, params_, problem_, boxes_).ok());
  EXPECT_THAT(calls[1].dims, ElementsAre(128, 300, 2, 2));
}

// Paged K and V are a batch of pages, [num_pages, page_size, kv_heads,
// head_dim]: the map's rows are a page's and its batches the pages.
TEST_F(TensorMapsTest, PagedKeysAndValuesAreABatchOfPages) {
  const int lengths[2] = {0, 0};  // Never read.
  problem_.layout = Layout::kPaged;
  problem_.page_size = 32;
  params_.seqused_k = lengths;
  params_.rows_k = 7 * 32;  // Seven pages.
  params_.k_row_stride = params_.v_row_stride = 2 * 128;
  params_.k_head_stride = params_.v_head_stride = 128;
  params_.k_batch_stride = params_.v_batch_stride = 32 * 2 * 128;
  boxes_.kv_rows = 32;
  ASSERT_TRUE(EncodeTensorMaps(Record, params_, problem_, boxes_).ok());
  ASSERT_EQ(calls.size(), 4u);
  for (int i : {1, 2}) {
    EXPECT_THAT(calls[i].dims, ElementsAre(128, 32, 2, 7));
    EXPECT_THAT(calls[i].strides, ElementsAre(512, 256, 32 * 512));
    EXPECT_THAT(calls[i].box, ElementsAre(64, 32, 1, 1));
  }
  EXPECT_THAT(calls[0].dims, ElementsAre(128, 100, 8, 2));  // Q as ever.
}

TEST_F(TensorMapsTest, Fp16IsEncodedAsFloat16) {
  problem_.dtype = DType::kFp16;
  ASSERT_TRUE(EncodeTensorMaps(Record, params_, problem_, boxes_).ok());
  EXPECT_EQ(calls[0].dtype, CU_TENSOR_MAP_DATA_TYPE_FLOAT16);
}

TEST_F(TensorMapsTest, ARefusedMapNamesItsTensor) {
  fail_call = 2;
  absl::StatusOr<AttentionTensorMaps> maps =
      EncodeTensorMaps(Record, params_, problem_, boxes_);
  ASSERT_FALSE(maps.ok());
  EXPECT_EQ(maps.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(maps.status().message(), HasSubstr("tensor map of v"));
}

}  // namespace
}  // namespace evotune
