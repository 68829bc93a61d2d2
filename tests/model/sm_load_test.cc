#include "tuner/model/sm_load.h"

#include "gtest/gtest.h"

namespace evotune {
namespace {

constexpr int kSms = 132;

Problem Causal(int batch, int heads, int64_t seq_q, int64_t seq_k) {
  Problem p;
  p.batch = batch;
  p.heads = p.kv_heads = heads;
  p.seq_q = seq_q;
  p.seq_k = seq_k;
  p.causal = true;
  return p;
}

// As flash_fwd_tma lays a persistent launch out: every tile along x.
LaunchGeometry Persistent(LaunchGeometry g) {
  g.grid[0] *= g.grid[1] * g.grid[2];
  g.grid[1] = g.grid[2] = 1;
  g.persistent = true;
  return g;
}

// The load of a cluster-combined launch of block_m x block_n tiles (0: the
// whole key range at once) in `splits` KV splits.
std::optional<SmLoad> Load(const Problem& p, int block_m, int block_n,
                           int splits) {
  return EstimateSmLoad(
      SplitKvGeometry(p, block_m, block_n, splits, SplitCombine::kCluster), p,
      kSms);
}

TEST(SmLoadTest, EqualBlocksFillingWholeWavesLoadEveryMultiprocessorAlike) {
  Problem p = Causal(1, kSms, 64, 4096);
  p.causal = false;
  const std::optional<SmLoad> load = Load(p, 64, 0, 1);
  ASSERT_TRUE(load.has_value());
  EXPECT_DOUBLE_EQ(load->busiest, load->mean);
  EXPECT_DOUBLE_EQ(load->mean, 64.0 * (4096 + 64));  // One block each.
}

// b2 h16 1024² causal, 128-row tiles: 256 blocks, 8 of each head whose
// keys grow by 128 (a tile's load: 128 rows x (keys + 64)). Dealt in turn,
// multiprocessor s gets ranks s % 8 and (s + 4) % 8: up to 8 + 4 tiles of
// 128 keys; the snake pairs rank r with rank 7 - r: 9 tiles everywhere.
TEST(SmLoadTest, ACausalGridDealtInTurnLoadsSomeMoreThanASnake) {
  const Problem p = Causal(2, 16, 1024, 1024);
  const LaunchGeometry g =
      SplitKvGeometry(p, 128, 0, 1, SplitCombine::kCluster);
  const double mean = 32 * 128 * (128 * 36 + 8 * 64) / double(kSms);
  const std::optional<SmLoad> dealt = EstimateSmLoad(g, p, kSms);
  ASSERT_TRUE(dealt.has_value());
  EXPECT_DOUBLE_EQ(dealt->mean, mean);
  EXPECT_DOUBLE_EQ(dealt->busiest, 128 * (12 * 128 + 2 * 64));
  const std::optional<SmLoad> snake = EstimateSmLoad(Persistent(g), p, kSms);
  ASSERT_TRUE(snake.has_value());
  EXPECT_DOUBLE_EQ(snake->mean, mean);
  EXPECT_DOUBLE_EQ(snake->busiest, 128 * (9 * 128 + 2 * 64));
}

// b1 h32 q128 k2048 causal, 64-row tiles: 64 blocks leave 68 of 132
// multiprocessors idle; two KV splits halve the longest block's keys.
TEST(SmLoadTest, KvSplitsShortenTheBusiestMultiprocessorOfASmallGrid) {
  const Problem p = Causal(1, 32, 128, 2048);
  const std::optional<SmLoad> one = Load(p, 64, 0, 1);
  const std::optional<SmLoad> two = Load(p, 64, 0, 2);
  ASSERT_TRUE(one.has_value() && two.has_value());
  EXPECT_DOUBLE_EQ(one->busiest, 64 * (2048 + 64));
  EXPECT_DOUBLE_EQ(two->busiest, 64 * (1024 + 64));
  EXPECT_DOUBLE_EQ(one->mean, 32 * 64 * (2048 + 1984 + 2 * 64) / double(kSms));
}

// A block works through whole key tiles, masked columns too: b1 h1 q128
// k128 causal in 64-row tiles sees 128 and 64 keys, but with 128-key tiles
// both blocks take one whole tile.
TEST(SmLoadTest, ABlockWorksThroughWholeKeyTiles) {
  const Problem p = Causal(1, 1, 128, 128);
  const std::optional<SmLoad> exact = Load(p, 64, 0, 1);
  const std::optional<SmLoad> tiled = Load(p, 64, 128, 1);
  ASSERT_TRUE(exact.has_value() && tiled.has_value());
  EXPECT_DOUBLE_EQ(exact->mean, 64 * (128 + 64 + 2 * 64) / double(kSms));
  EXPECT_DOUBLE_EQ(tiled->mean, 64 * (2 * 128 + 2 * 64) / double(kSms));
}

// Splits share whole tiles, the first the most: 2048 keys are 16 tiles of
// 128, three splits take 6, 6 and 4 of them.
TEST(SmLoadTest, KvSplitsShareWholeKeyTiles) {
  Problem p = Causal(1, 1, 64, 2048);
  p.causal = false;
  const std::optional<SmLoad> load = Load(p, 64, 128, 3);
  ASSERT_TRUE(load.has_value());
  EXPECT_DOUBLE_EQ(load->busiest, 64 * (6 * 128 + 64));
}

// The decode template packs the query heads of a KV head into its rows:
// GQA 8, one query, 16-row blocks: one block per KV head, every key.
TEST(SmLoadTest, PackedHeadsAreOneTileOfEveryKey) {
  Problem p = Causal(4, 32, 1, 8192);
  p.kv_heads = 8;
  LaunchGeometry g;
  g.grid[0] = 4;  // Four KV splits of one 16-row block.
  g.grid[1] = p.kv_heads;
  g.grid[2] = p.batch;
  g.tile_rows = 16;
  g.tile_packs_heads = true;
  const std::optional<SmLoad> load = EstimateSmLoad(g, p, kSms);
  ASSERT_TRUE(load.has_value());
  EXPECT_DOUBLE_EQ(load->busiest, 16 * (2048 + 64));
  EXPECT_DOUBLE_EQ(load->mean, 128 * 16 * (2048 + 64) / double(kSms));
}

// Past the blocks it deals one by one, the rest is spread evenly: a huge
// grid's busiest multiprocessor is within a few percent of the average.
TEST(SmLoadTest, AHugeGridIsNearlyEven) {
  const Problem p = Causal(16, 64, 8192, 8192);
  const std::optional<SmLoad> load = Load(p, 128, 0, 1);
  ASSERT_TRUE(load.has_value());
  EXPECT_GE(load->busiest, load->mean);
  EXPECT_LE(load->busiest, 1.02 * load->mean);
}

TEST(SmLoadTest, UnknownWithoutTileRowsOrMultiprocessors) {
  const Problem p = Causal(1, 8, 512, 512);
  LaunchGeometry g = SplitKvGeometry(p, 64, 0, 1, SplitCombine::kCluster);
  EXPECT_FALSE(EstimateSmLoad(g, p, 0).has_value());
  g.tile_rows = 0;
  EXPECT_FALSE(EstimateSmLoad(g, p, kSms).has_value());
}

}  // namespace
}  // namespace evotune
