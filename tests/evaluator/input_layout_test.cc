#include "tuner/evaluator/input_layout.h"

#include <set>

#include "gtest/gtest.h"

namespace evotune {
namespace {

Problem Small(Layout layout) {
  Problem p;
  p.batch = 3;
  p.heads = 4;
  p.kv_heads = 2;
  p.seq_q = 40;
  p.seq_k = 100;
  p.head_dim = 64;
  p.layout = layout;
  return p;
}

// Every row of every sequence and head at its own place inside the tensor.
void ExpectRowsDistinctAndInside(const InputLayout& l) {
  const Problem& p = l.problem();
  std::set<int64_t> q_rows, k_rows;
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.heads; ++h) {
      for (int64_t i = 0; i < l.lengths().q[b]; ++i) {
        const int64_t at = l.QIndex(b, h, i);
        EXPECT_TRUE(q_rows.insert(at).second);
        EXPECT_LE(at + p.head_dim, l.q_elems());
      }
    }
    for (int64_t h = 0; h < p.kv_heads; ++h) {
      for (int64_t j = 0; j < l.lengths().k[b]; ++j) {
        const int64_t at = l.KIndex(b, h, j);
        EXPECT_TRUE(k_rows.insert(at).second);
        EXPECT_LE(at + p.head_dim, l.kv_elems());
      }
    }
  }
}

TEST(InputLayoutTest, DenseIsContiguousBhsdWithoutLengths) {
  const InputLayout l(Small(Layout::kDense));
  EXPECT_EQ(l.q_elems(), 3 * 4 * 40 * 64);
  EXPECT_EQ(l.kv_elems(), 3 * 2 * 100 * 64);
  EXPECT_TRUE(l.LengthArrays().empty());
  EXPECT_TRUE(l.UnusedKv(64).empty());
  const AttentionParams p = l.Params();
  EXPECT_EQ(p.q_batch_stride, 4 * 40 * 64);
  EXPECT_EQ(p.rows_q, 40);
  ExpectRowsDistinctAndInside(l);
}

TEST(InputLayoutTest, VarlenIsPackedWithCumulativeOffsets) {
  const InputLayout l(Small(Layout::kVarlen));
  const BatchLengths& n = l.lengths();
  EXPECT_EQ(l.q_elems(), n.TotalQ() * 4 * 64);
  EXPECT_EQ(l.kv_elems(),
            (n.TotalK() + InputLayout::kPadRows) * 2 * 64);  // Padded.
  const AttentionParams p = l.Params();
  EXPECT_EQ(p.q_batch_stride, 0);
  EXPECT_EQ(p.q_row_stride, 4 * 64);
  EXPECT_EQ(p.q_head_stride, 64);
  EXPECT_EQ(p.k_row_stride, 2 * 64);
  EXPECT_EQ(p.rows_q, n.TotalQ());
  EXPECT_EQ(p.rows_k, n.TotalK() + InputLayout::kPadRows);
  // cu_seqlens_q then cu_seqlens_k.
  const std::vector<int32_t>& a = l.LengthArrays();
  ASSERT_EQ(a.size(), 8u);
  EXPECT_EQ(a[0], 0);
  EXPECT_EQ(a[3], n.TotalQ());
  EXPECT_EQ(a[4], 0);
  EXPECT_EQ(a[7], n.TotalK());
  AttentionParams with = p;
  l.SetLengthPointers(a.data(), &with);
  EXPECT_EQ(with.cu_seqlens_q, a.data());
  EXPECT_EQ(with.cu_seqlens_k, a.data() + 4);
  EXPECT_EQ(with.seqused_k, nullptr);
  // The padding after the last sequence is what no launch may read in.
  ASSERT_EQ(l.UnusedKv(64).size(), 1u);
  EXPECT_EQ(l.UnusedKv(64)[0].begin, n.TotalK() * 2 * 64);
  EXPECT_EQ(l.UnusedKv(64)[0].begin + l.UnusedKv(64)[0].count, l.kv_elems());
  ExpectRowsDistinctAndInside(l);
}

TEST(InputLayoutTest, KvCacheMarksTheSlotsPastEachLength) {
  const InputLayout l(Small(Layout::kKvCache));
  const AttentionParams p = l.Params();
  const std::vector<int32_t>& a = l.LengthArrays();
  ASSERT_EQ(a.size(), 3u);
  AttentionParams with = p;
  l.SetLengthPointers(a.data(), &with);
  EXPECT_EQ(with.seqused_k, a.data());
  EXPECT_EQ(with.cu_seqlens_q, nullptr);
  int64_t unused = 0;
  for (const InputLayout::Range& r : l.UnusedKv(64)) unused += r.count;
  int64_t want = 0;
  for (int64_t b = 0; b < 3; ++b) want += (100 - a[b]) * 2 * 64;
  EXPECT_EQ(unused, want);
  ExpectRowsDistinctAndInside(l);
}

// Pages of 16 keys in a shuffled order: the block table names each page
// once, the params address K as the pool of pages, and the unused ranges are
// the slots past each sequence's length and the spare pages, none of them a
// row in use.
TEST(InputLayoutTest, PagedSpreadsEachSequenceOverPagesOfTheTable) {
  Problem problem = Small(Layout::kPaged);
  problem.seq_k = 112;  // 7 pages of 16 per sequence.
  problem.page_size = 16;
  const InputLayout l(problem);
  // cu_seqlens_q (its queries packed, of mixed lengths), seqused_k, the
  // block table.
  const std::vector<int32_t>& a = l.LengthArrays();
  ASSERT_EQ(a.size(), 4u + 3u + 3 * 7);
  const int32_t* table = a.data() + 4 + 3;
  std::set<int32_t> pages(table, a.data() + a.size());
  EXPECT_EQ(pages.size(), 21u);
  EXPECT_EQ(*pages.rbegin(), 21 + InputLayout::kSparePages - 1);
  AttentionParams p = l.Params();
  l.SetLengthPointers(a.data(), &p);
  EXPECT_EQ(p.cu_seqlens_q, a.data());
  EXPECT_EQ(a[3], l.lengths().TotalQ());
  EXPECT_EQ(p.rows_q, l.lengths().TotalQ());
  EXPECT_EQ(p.q_batch_stride, 0);
  EXPECT_EQ(p.q_row_stride, problem.heads * 64);
  EXPECT_EQ(l.QIndex(1, 2, 0), (a[1] * problem.heads + 2) * 64);
  EXPECT_EQ(p.seqused_k, a.data() + 4);
  EXPECT_EQ(p.block_table, table);
  EXPECT_EQ(p.block_table_stride, 7);
  EXPECT_EQ(p.k_row_stride, 2 * 64);
  EXPECT_EQ(p.k_head_stride, 64);
  EXPECT_EQ(p.k_batch_stride, 16 * 2 * 64);  // A page.
  EXPECT_EQ(p.rows_k, (21 + InputLayout::kSparePages) * 16);
  EXPECT_EQ(l.kv_elems(), p.rows_k * 2 * 64);
  // Key 17 of sequence 1: slot 1 of its second page.
  EXPECT_EQ(l.KIndex(1, 1, 17), ((table[7 + 1] * 16 + 1) * 2 + 1) * 64);
  ExpectRowsDistinctAndInside(l);
  std::set<int64_t> used;
  for (int64_t b = 0; b < 3; ++b) {
    for (int64_t j = 0; j < l.lengths().k[b]; ++j)
      used.insert(l.KIndex(b, 0, j));
  }
  int64_t unused = 0;
  for (const InputLayout::Range& r : l.UnusedKv(64)) {
    unused += r.count;
    for (int64_t at = r.begin; at < r.begin + r.count; at += 2 * 64) {
      EXPECT_EQ(used.count(at), 0u) << at;
    }
  }
  int64_t want = InputLayout::kSparePages * 16 * 2 * 64;
  for (int64_t b = 0; b < 3; ++b) want += (112 - p.seqused_k[b]) * 2 * 64;
  EXPECT_EQ(unused, want);
}

}  // namespace
}  // namespace evotune
