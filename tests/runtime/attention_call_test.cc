// CheckAttentionCall without a GPU: a table of calls whose tensors do not fit
// their problem, each refused with INVALID_ARGUMENT naming the field, and the
// layouts a caller may use.
#include "evotune/attention_call.h"

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace evotune {
namespace {

using ::testing::StartsWith;

Problem Seed() {
  return *ParseProblemKey("b1_h8_kv8_q512_k512_d64_full_fp16_bhsd");
}

void* At(uintptr_t address) { return reinterpret_cast<void*>(address); }

// Distinct, aligned addresses (never read).
AttentionCall Call(const Problem& p) {
  return ContiguousCall(p, At(0x1000000), At(0x2000000), At(0x3000000),
                        At(0x4000000));
}

// [batch, seq, heads, head_dim] storage, as PyTorch's transpose(1, 2) of it.
void Bshd(AttentionTensor* t) {
  t->head_stride = t->head_dim;
  t->row_stride = t->heads * t->head_dim;
  t->batch_stride = t->seq * t->row_stride;
}

TEST(AttentionCallTest, ContiguousCallStatesTheProblemsExtents) {
  Problem p = Seed();
  p.kv_heads = 2;
  p.seq_k = 300;
  const AttentionCall call = Call(p);
  EXPECT_EQ(call.q.seq, 512);
  EXPECT_EQ(call.k.heads, 2);
  EXPECT_EQ(call.v.seq, 300);
  EXPECT_EQ(call.o.head_dim, 64);
  EXPECT_TRUE(CheckAttentionCall(call).ok()) << CheckAttentionCall(call);
}

// MLA's prefill: Q and K of head_dim, V and O of head_dim_v; a V or O of
// the other width is refused naming head_dim_v.
TEST(AttentionCallTest, VAndOHaveTheValueHeadDim) {
  Problem p = Seed();
  p.head_dim = 192;
  p.head_dim_v = 128;
  AttentionCall call = Call(p);
  EXPECT_EQ(call.k.head_dim, 192);
  EXPECT_EQ(call.v.head_dim, 128);
  EXPECT_EQ(call.o.row_stride, 128);
  EXPECT_TRUE(CheckAttentionCall(call).ok()) << CheckAttentionCall(call);
  for (AttentionTensor* t : {&call.v, &call.o}) {
    AttentionCall bad = call;
    AttentionTensor& wide = t == &call.v ? bad.v : bad.o;
    wide.head_dim = 192;
    wide.row_stride = 192;
    wide.head_stride = 192 * wide.seq;
    wide.batch_stride = wide.head_stride * wide.heads;
    const absl::Status s = CheckAttentionCall(bad);
    EXPECT_TRUE(absl::IsInvalidArgument(s));
    EXPECT_THAT(std::string(s.message()),
                StartsWith(absl::StrCat(t == &call.v ? "v" : "o",
                                        ".head_dim: must be the problem's "
                                        "head_dim_v (128), got 192")));
  }
  AttentionCall narrow_k = call;
  narrow_k.k.head_dim = 128;
  EXPECT_THAT(std::string(CheckAttentionCall(narrow_k).message()),
              StartsWith("k.head_dim: must be the problem's head_dim (192)"));
}

TEST(AttentionCallTest, LayoutsWithUnitStrideAlongHeadDimPass) {
  AttentionCall call = Call(Seed());
  for (AttentionTensor* t : {&call.q, &call.k, &call.v, &call.o}) Bshd(t);
  EXPECT_TRUE(CheckAttentionCall(call).ok()) << CheckAttentionCall(call);
  // Padded rows; K and V interleaved in one buffer.
  call = Call(Seed());
  call.q.row_stride = 72;
  call.q.head_stride = 512 * 72;
  call.q.batch_stride = 8 * 512 * 72;
  call.k.row_stride = call.v.row_stride = 128;
  call.v.data = At(0x2000000 + 64 * 2);
  call.k.head_stride = call.v.head_stride = 512 * 128;
  call.scale = 0.125f;
  EXPECT_TRUE(CheckAttentionCall(call).ok()) << CheckAttentionCall(call);
}

struct BadCall {
  const char* name;
  std::function<void(AttentionCall*)> change;
  const char* field;  // The message's start.
};

TEST(AttentionCallTest, EveryBadCallIsRefusedNamingTheField) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<BadCall> table = {
      {"3 kv heads under 8", [](AttentionCall* c) { c->problem.kv_heads = 3; },
       "problem.kv_heads"},
      {"batch beyond the limit",
       [](AttentionCall* c) { c->problem.batch = kMaxBatch + 1; },
       "problem.batch"},
      {"zero-length q", [](AttentionCall* c) { c->problem.seq_q = 0; },
       "problem.seq_q"},
      {"k and v of head_dim 128 under q's 64",
       [](AttentionCall* c) { c->k.head_dim = c->v.head_dim = 128; },
       "k.head_dim: must be the problem's head_dim (64), got 128"},
      {"v shorter than k", [](AttentionCall* c) { c->v.seq = 300; },
       "v.seq: must be the problem's seq_k (512), got 300"},
      {"k of batch 2 under q's 1", [](AttentionCall* c) { c->k.batch = 2; },
       "k.batch"},
      {"o of fewer heads", [](AttentionCall* c) { c->o.heads = 4; },
       "o.heads: must be the problem's heads (8)"},
      {"extents left zero", [](AttentionCall* c) { c->q.seq = 0; }, "q.seq"},
      {"null k", [](AttentionCall* c) { c->k.data = nullptr; }, "k.data: null"},
      {"q 2 bytes off alignment",
       [](AttentionCall* c) { c->q.data = At(0x1000002); },
       "q.data: must be 16-byte aligned"},
      {"rows 12 elements apart", [](AttentionCall* c) { c->q.row_stride = 12; },
       "q.row_stride: must be a positive multiple of 8"},
      {"rows overlapping", [](AttentionCall* c) { c->v.row_stride = 32; },
       "v.row_stride: must be at least head_dim"},
      {"a zero head stride", [](AttentionCall* c) { c->k.head_stride = 0; },
       "k.head_stride: must be a positive multiple of 8"},
      {"a negative batch stride",
       [](AttentionCall* c) { c->v.batch_stride = -8; }, "v.batch_stride"},
      {"o's heads on each other",
       [](AttentionCall* c) { c->o.head_stride = 64 * 8; },
       "o.head_stride: 512 makes o overlap itself"},
      {"o's batches on each other",
       [](AttentionCall* c) {
         c->problem.batch = 2;
         for (AttentionTensor* t : {&c->q, &c->k, &c->v, &c->o}) t->batch = 2;
         c->o.batch_stride = 128;
       },
       "o.batch_stride"},
      {"o over q", [](AttentionCall* c) { c->o.data = At(0x1000000 + 4096); },
       "o.data: overlaps q"},
      {"o over v", [](AttentionCall* c) { c->o.data = c->v.data; },
       "o.data: overlaps v"},
      {"a negative scale", [](AttentionCall* c) { c->scale = -0.125f; },
       "scale: must be finite and positive"},
      {"a NaN scale", [](AttentionCall* c) { c->scale = std::nanf(""); },
       "scale"},
      {"an infinite scale", [inf](AttentionCall* c) { c->scale = inf; },
       "scale"},
  };
  for (const BadCall& bad : table) {
    AttentionCall call = Call(Seed());
    bad.change(&call);
    const absl::Status s = CheckAttentionCall(call);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad.name;
    EXPECT_THAT(std::string(s.message()), StartsWith(bad.field))
        << bad.name << ": " << s;
  }
}

// An FP8 KV cache: K and V of one byte an element (strides in multiples of
// 16 of them), descale factors only for it.
TEST(AttentionCallTest, AnFp8KvCacheTakesByteStridesAndDescaleFactors) {
  Problem p = Seed();
  p.kv_fp8 = true;
  AttentionCall call = Call(p);
  const float* factors = reinterpret_cast<const float*>(0x5000000);
  call.k_descale = call.v_descale = factors;
  call.descale_batch_stride = 8;
  call.descale_head_stride = 1;
  EXPECT_TRUE(CheckAttentionCall(call).ok()) << CheckAttentionCall(call);
  // K's rows 80 bytes apart: a multiple of 16 bytes in e4m3, not in fp16.
  call.k.row_stride = call.v.row_stride = 80;
  call.k.head_stride = call.v.head_stride = 80 * 512;
  call.k.batch_stride = call.v.batch_stride = 80 * 512 * 8;
  EXPECT_TRUE(CheckAttentionCall(call).ok()) << CheckAttentionCall(call);
  call.k.row_stride = 72;
  EXPECT_THAT(std::string(CheckAttentionCall(call).message()),
              StartsWith("k.row_stride: must be a positive multiple of 16"));
  const std::vector<BadCall> table = {
      {"factors for a 16-bit cache",
       [](AttentionCall* c) { c->problem.kv_fp8 = false; }, "k_descale.data"},
      {"q_descale", [factors](AttentionCall* c) { c->q_descale = factors; },
       "q_descale.data"},
      {"misaligned factors",
       [](AttentionCall* c) {
         c->v_descale = reinterpret_cast<const float*>(0x5000002);
       },
       "v_descale.data: must be 4-byte aligned"},
      {"a negative stride",
       [](AttentionCall* c) { c->descale_head_stride = -1; },
       "descale_head_stride"},
  };
  for (const BadCall& bad : table) {
    AttentionCall c = Call(p);
    c.k_descale = c.v_descale = factors;
    bad.change(&c);
    const absl::Status s = CheckAttentionCall(c);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad.name;
    EXPECT_THAT(std::string(s.message()), StartsWith(bad.field))
        << bad.name << ": " << s;
  }
}

// Attention sinks: their logits exactly where the problem has them.
TEST(AttentionCallTest, SinksComeExactlyWithAProblemOfSinks) {
  Problem p = Seed();
  p.sinks = true;
  AttentionCall call = Call(p);
  call.sinks = reinterpret_cast<const float*>(0x5000000);
  EXPECT_TRUE(CheckAttentionCall(call).ok()) << CheckAttentionCall(call);
  for (auto [sinks, with, want] :
       {std::tuple{static_cast<const float*>(nullptr), true,
                   "sinks.data: must be given"},
        {reinterpret_cast<const float*>(0x5000000), false,
         "sinks.data: must be null"},
        {reinterpret_cast<const float*>(0x5000002), true,
         "sinks.data: must be 4-byte aligned"}}) {
    AttentionCall c = call;
    c.sinks = sinks;
    c.problem.sinks = with;
    EXPECT_THAT(std::string(CheckAttentionCall(c).message()), StartsWith(want));
  }
}

// ALiBi: its slopes exactly where the problem has it, a batch stride from 0.
TEST(AttentionCallTest, AlibiSlopesComeExactlyWithAProblemOfAlibi) {
  Problem p = Seed();
  p.alibi = true;
  AttentionCall call = Call(p);
  const float* slopes = reinterpret_cast<const float*>(0x5000000);
  call.alibi_slopes = slopes;
  EXPECT_TRUE(CheckAttentionCall(call).ok()) << CheckAttentionCall(call);
  call.alibi_batch_stride = p.heads;
  EXPECT_TRUE(CheckAttentionCall(call).ok()) << CheckAttentionCall(call);
  for (auto [ptr, with, stride, want] :
       {std::tuple{static_cast<const float*>(nullptr), true, int64_t{0},
                   "alibi_slopes.data: must be given: the problem has ALiBi"},
        {slopes, false, int64_t{0},
         "alibi_slopes.data: must be null: the problem has no ALiBi"},
        {reinterpret_cast<const float*>(0x5000002), true, int64_t{0},
         "alibi_slopes.data: must be 4-byte aligned"},
        {slopes, true, int64_t{-8}, "alibi_batch_stride: must be in [0, "}}) {
    AttentionCall c = call;
    c.alibi_slopes = ptr;
    c.problem.alibi = with;
    c.alibi_batch_stride = stride;
    EXPECT_THAT(std::string(CheckAttentionCall(c).message()), StartsWith(want));
  }
}

// FP8 attention: Q of one byte an element too, and its descale factors.
TEST(AttentionCallTest, Fp8AttentionTakesByteQueriesAndTheirFactors) {
  Problem p = Seed();
  p.kv_fp8 = p.q_fp8 = true;
  AttentionCall call = Call(p);
  const float* factors = reinterpret_cast<const float*>(0x5000000);
  call.q_descale = call.k_descale = call.v_descale = factors;
  EXPECT_TRUE(CheckAttentionCall(call).ok()) << CheckAttentionCall(call);
  call.q.row_stride = 80;  // 80 bytes: a multiple of 16 in e4m3.
  call.q.head_stride = 80 * 512;
  call.q.batch_stride = 80 * 512 * 8;
  EXPECT_TRUE(CheckAttentionCall(call).ok()) << CheckAttentionCall(call);
  call.q.row_stride = 72;
  EXPECT_THAT(std::string(CheckAttentionCall(call).message()),
              StartsWith("q.row_stride: must be a positive multiple of 16"));
}

TEST(AttentionCallTest, ASingleHeadOrRowIgnoresItsStride) {
  Problem p = Seed();
  p.heads = p.kv_heads = 1;
  p.seq_q = 1;
  AttentionCall call = Call(p);
  call.o.head_stride = 8;  // Never multiplied by more than zero.
  call.o.row_stride = 64;
  EXPECT_TRUE(CheckAttentionCall(call).ok()) << CheckAttentionCall(call);
}

}  // namespace
}  // namespace evotune

namespace evotune {
namespace {

// A packed varlen call: [total, heads, head_dim] tensors as one batch.
AttentionCall VarlenCall() {
  Problem p = Seed();
  p.layout = Layout::kVarlen;
  p.batch = 4;
  p.kv_heads = 2;
  p.seq_k = 1024;
  AttentionCall call = Call(p);
  for (auto [t, heads, rows] : {std::tuple{&call.q, p.heads, 900},
                                {&call.k, p.kv_heads, 3000},
                                {&call.v, p.kv_heads, 3000},
                                {&call.o, p.heads, 900}}) {
    t->batch = 1;
    t->heads = heads;
    t->seq = rows;
    t->head_stride = 64;
    t->row_stride = heads * 64;
    t->batch_stride = rows * t->row_stride;
  }
  call.cu_seqlens_q = reinterpret_cast<const int32_t*>(At(0x5000000));
  call.cu_seqlens_k = reinterpret_cast<const int32_t*>(At(0x5001000));
  return call;
}

TEST(AttentionCallTest, LengthsOnTheDeviceFitTheirLayout) {
  AttentionCall varlen = VarlenCall();
  EXPECT_TRUE(CheckAttentionCall(varlen).ok()) << CheckAttentionCall(varlen);
  varlen.seqused_k = reinterpret_cast<const int32_t*>(At(0x5002000));
  EXPECT_TRUE(CheckAttentionCall(varlen).ok()) << CheckAttentionCall(varlen);
  Problem cache = Seed();
  cache.layout = Layout::kKvCache;
  AttentionCall decode = Call(cache);
  decode.seqused_k = reinterpret_cast<const int32_t*>(At(0x5002000));
  EXPECT_TRUE(CheckAttentionCall(decode).ok()) << CheckAttentionCall(decode);
}

using Mutations =
    std::vector<std::pair<std::function<void(AttentionCall&)>, std::string>>;

// Each change of `base` is refused with INVALID_ARGUMENT, the message
// starting with its text.
void ExpectEachRefused(const AttentionCall& base, const Mutations& cases) {
  for (const auto& [mutate, want] : cases) {
    AttentionCall call = base;
    mutate(call);
    const absl::Status s = CheckAttentionCall(call);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << want;
    EXPECT_THAT(std::string(s.message()), StartsWith(want));
  }
}

TEST(AttentionCallTest, BadLengthsAreRefusedNamingTheField) {
  const auto* some = reinterpret_cast<const int32_t*>(At(0x5002000));
  const Mutations cases = {
      {[](AttentionCall& c) { c.cu_seqlens_q = nullptr; },
       "cu_seqlens_q.data: required"},
      {[](AttentionCall& c) { c.cu_seqlens_k = nullptr; },
       "cu_seqlens_k.data: required"},
      {[](AttentionCall& c) {
         c.cu_seqlens_k = reinterpret_cast<const int32_t*>(At(0x5001002));
       },
       "cu_seqlens_k.data: must be 4-byte aligned"},
      {[](AttentionCall& c) { c.q.batch = 4; }, "q.batch"},
      {[](AttentionCall& c) { c.o.seq = 901; }, "o.seq"},
      {[](AttentionCall& c) { c.v.seq = 2999; }, "v.seq"},
      {[](AttentionCall& c) { c.k.heads = 8; }, "k.heads"},
      {[&](AttentionCall& c) {
         c.problem.layout = Layout::kKvCache;
         c.seqused_k = some;
       },
       "cu_seqlens_q.data: must be null for layout cache"},
      {[](AttentionCall& c) { c.problem.layout = Layout::kDense; },
       "cu_seqlens_q.data: must be null for layout bhsd"},
  };
  ExpectEachRefused(VarlenCall(), cases);
  Problem cache = Seed();
  cache.layout = Layout::kKvCache;
  EXPECT_THAT(std::string(CheckAttentionCall(Call(cache)).message()),
              StartsWith("seqused_k.data: required for layout cache"));
}

// A paged call: Q and O as a cache's, K and V [num_pages, page_size,
// kv_heads, head_dim] pages, seqused_k and a block table.
AttentionCall PagedCall() {
  Problem p = Seed();
  p.batch = 3;
  p.kv_heads = 2;
  p.seq_q = 4;
  p.seq_k = 1024;
  p.layout = Layout::kPaged;
  p.page_size = 64;
  AttentionCall call = Call(p);
  for (AttentionTensor* t : {&call.k, &call.v}) {
    t->batch = 100;  // Pages, any number.
    t->seq = 64;
    Bshd(t);
  }
  call.v.data = At(0x3000000 + 100 * 64 * 2 * 64 * 2);  // After K.
  call.seqused_k = reinterpret_cast<const int32_t*>(At(0x5002000));
  call.block_table = reinterpret_cast<const int32_t*>(At(0x5003000));
  call.block_table_stride = 16;  // seq_k / page_size.
  return call;
}

TEST(AttentionCallTest, APagedCallPasses) {
  AttentionCall call = PagedCall();
  EXPECT_TRUE(CheckAttentionCall(call).ok()) << CheckAttentionCall(call);
  call.block_table_stride = 40;  // Wider rows than the problem reads.
  call.k.batch = call.v.batch = 1;
  EXPECT_TRUE(CheckAttentionCall(call).ok()) << CheckAttentionCall(call);
}

// A paged call whose queries are packed by cu_seqlens_q: Q and O one batch
// of any number of rows.
AttentionCall PackedPagedCall() {
  AttentionCall call = PagedCall();
  for (AttentionTensor* t : {&call.q, &call.o}) {
    t->batch = 1;
    t->seq = 7;  // Rows of all sequences together.
    Bshd(t);
  }
  call.cu_seqlens_q = reinterpret_cast<const int32_t*>(At(0x5004000));
  return call;
}

TEST(AttentionCallTest, APagedCallMayPackItsQueries) {
  AttentionCall call = PackedPagedCall();
  EXPECT_TRUE(PackedQ(call));
  EXPECT_TRUE(CheckAttentionCall(call).ok()) << CheckAttentionCall(call);
  EXPECT_FALSE(PackedQ(PagedCall()));
  const Mutations cases = {
      {[](AttentionCall& c) { c.q.batch = 3; },
       "q.batch: must be the problem's packed batch (1)"},
      {[](AttentionCall& c) { c.o.seq = 8; }, "o.seq: must be q's rows (7)"},
      {[](AttentionCall& c) { c.cu_seqlens_q = nullptr; },
       "q.batch: must be the problem's batch (3)"},
      {[](AttentionCall& c) {
         c.cu_seqlens_k = reinterpret_cast<const int32_t*>(At(0x5005000));
       },
       "cu_seqlens_k.data: must be null for layout paged"},
  };
  ExpectEachRefused(PackedPagedCall(), cases);
}

TEST(AttentionCallTest, BadPagedCallsAreRefusedNamingTheField) {
  const Mutations cases = {
      {[](AttentionCall& c) { c.block_table = nullptr; },
       "block_table.data: required for layout paged"},
      {[](AttentionCall& c) { c.seqused_k = nullptr; },
       "seqused_k.data: required for layout paged"},
      {[](AttentionCall& c) { c.block_table_stride = 15; },
       "block_table_stride: must be at least seq_k / page_size (16)"},
      {[](AttentionCall& c) { c.block_table_stride = int64_t{1} << 31; },
       "block_table_stride"},
      {[](AttentionCall& c) { c.k.seq = 32; },
       "k.seq: must be the problem's page_size (64)"},
      {[](AttentionCall& c) { c.v.batch = 0; }, "v.batch"},
      {[](AttentionCall& c) { c.v.batch = 99; },
       "v.batch: must be k's pages (100)"},
      {[](AttentionCall& c) { c.k.batch = c.v.batch = int64_t{1} << 26; },
       "k.batch: the number of pages"},
      {[](AttentionCall& c) { c.k.heads = 8; }, "k.heads"},
      {[](AttentionCall& c) { c.problem.page_size = 48; }, "problem.seq_k"},
      {[](AttentionCall& c) {
         c.problem.layout = Layout::kKvCache;
         c.problem.page_size = 0;
       },
       "block_table.data: must be null for layout cache"},
      {[](AttentionCall& c) {
         c.problem.layout = Layout::kKvCache;
         c.problem.page_size = 0;
         c.block_table = nullptr;
       },
       "block_table_stride: must be 0 for layout cache"},
  };
  ExpectEachRefused(PagedCall(), cases);
}

}  // namespace
}  // namespace evotune
