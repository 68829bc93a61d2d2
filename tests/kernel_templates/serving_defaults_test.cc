#include "kernel_templates/serving_defaults.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernel_templates/template_registry.h"
#include "tests/model/h100_testing.h"

namespace evotune {
namespace {

Problem Decode(int64_t batch, int64_t heads, int64_t kv_heads, int64_t seq_k) {
  Problem p;
  p.batch = batch;
  p.heads = heads;
  p.kv_heads = kv_heads;
  p.seq_q = 1;
  p.seq_k = seq_k;
  p.head_dim = 128;
  p.dtype = DType::kBf16;
  return p;
}

// The config an answer made of t's defaults serves for the problem: the
// first that runs there (empty when none does).
Config Served(const KernelTemplate& t, const Problem& p,
              const DeviceLimits& limits = H100Limits()) {
  const std::vector<DefaultChoice> served = RankedDefaults({&t}, p, limits, 1);
  EXPECT_EQ(served.size(), 1u);
  return served.empty() ? Config{} : served.front().config;
}

// A template of one parameter whose rank and defaults a test chooses.
KernelTemplate Ranked(const std::string& name, int rank,
                      std::vector<int64_t> defaults) {
  KernelTemplate t;
  t.name = name;
  t.space = ParamSpace({{"X", {1, 2, 3, 4}, "x"}});
  t.head_dims = {64, 128};
  t.dtypes = {DType::kFp16, DType::kBf16};
  for (int64_t x : defaults) t.defaults.push_back({{"X", x}});
  t.default_rank = [rank](const Problem&) { return rank; };
  t.geometry = [](const Config&, const Problem&) { return LaunchGeometry{}; };
  return t;
}

TEST(ServingDefaultsTest, TheBestRankedTemplatesThatCanServeTheProblem) {
  const KernelTemplate low = Ranked("low", 1, {1});
  const KernelTemplate high = Ranked("high", 3, {1});
  const KernelTemplate also_high = Ranked("also_high", 3, {1});
  KernelTemplate d64_only = Ranked("d64_only", 9, {1});
  d64_only.head_dims = {64};
  KernelTemplate other_gpu = Ranked("other_gpu", 9, {1});
  other_gpu.only_compute_capability = 100;
  const Problem p = Decode(1, 8, 8, 1024);
  EXPECT_THAT(TopRanked({&low, &d64_only, &high, &other_gpu, &also_high}, p,
                        H100Limits()),
              testing::ElementsAre(&high, &also_high));
  EXPECT_THAT(TopRanked({&low}, p, H100Limits()), testing::ElementsAre(&low));
  EXPECT_TRUE(TopRanked({&d64_only, &other_gpu}, p, H100Limits()).empty());
  KernelTemplate unranked = Ranked("unranked", 0, {1});
  unranked.default_rank = nullptr;
  EXPECT_EQ(DefaultRank(unranked, p), 0);
  EXPECT_THAT(TopRanked({&unranked, &low}, p, H100Limits()),
              testing::ElementsAre(&low));
}

TEST(ServingDefaultsTest, RankedDefaultsFittedFirstRunnableOnlyOnce) {
  KernelTemplate low = Ranked("low", 1, {2, 1});
  KernelTemplate high = Ranked("high", 3, {1, 2, 3});
  // Fitted to the problem: X = 4 and X = 2 (which the defaults repeat); X = 3
  // breaks a constraint.
  high.fitted_defaults = [](const Problem&, const DeviceLimits&) {
    return std::vector<Config>{{{"X", 4}}, {{"X", 2}}};
  };
  high.constraints = {{"X != 3", [](const Config& c, const Problem&) {
                         return c.at("X") != 3;
                       }}};
  const Problem p = Decode(1, 8, 8, 1024);
  const std::vector<DefaultChoice> all =
      RankedDefaults({&low, &high}, p, H100Limits(), 10);
  std::vector<std::string> got;
  for (const DefaultChoice& d : all) {
    got.push_back(d.t->name + ":" + ConfigKey(d.config));
  }
  EXPECT_THAT(got, testing::ElementsAre("high:X=4", "high:X=2", "high:X=1",
                                        "low:X=2", "low:X=1"));
  EXPECT_EQ(RankedDefaults({&low, &high}, p, H100Limits(), 2).size(), 2u);
  size_t fitted = 0;
  EXPECT_THAT(
      DefaultConfigs(high, p, H100Limits(), &fitted),
      testing::ElementsAre(Config{{"X", 4}}, Config{{"X", 2}}, Config{{"X", 1}},
                           Config{{"X", 2}}, Config{{"X", 3}}));
  EXPECT_EQ(fitted, 2u);
}

// decode_fwd fits its split count to the device: as many splits as keep the
// grid within one block per multiprocessor (the recorded optimum of the
// suite's decode problems on the H100: 16 for decode-long, 2 for
// decode-gqa, 1 for decode-d64), and no more than the keys can feed: more
// than 64 keys a split (the H200's exhaustive optima: one split on 128 keys,
// eight on 1,024), and a merge of the splits' partial rows that reads no
// more than a split streams.
TEST(ServingDefaultsTest, DecodeSplitsFillTheMultiprocessors) {
  const KernelTemplate& t = *TemplateRegistry::Builtin().Find("decode_fwd");
  // The split count of the fitted configs, the same in all of the first's
  // rows but the unsplit variant of two splits (DecodeTwoSplitsComeWith...);
  // the first that runs there is what an answer made of defaults serves.
  auto splits = [&](const Problem& p, const DeviceLimits& limits) {
    const std::vector<Config> fitted = t.fitted_defaults(p, limits);
    for (const Config& c : fitted) {
      if (c.at("ROWS") != fitted.front().at("ROWS") ||
          (fitted.front().at("KV_SPLITS") == 2 && c.at("KV_SPLITS") == 1)) {
        continue;
      }
      EXPECT_EQ(c.at("KV_SPLITS"), fitted.front().at("KV_SPLITS"));
    }
    EXPECT_EQ(Served(t, p, limits).at("KV_SPLITS"),
              fitted.front().at("KV_SPLITS"));
    return fitted.front().at("KV_SPLITS");
  };
  EXPECT_EQ(splits(Decode(1, 64, 8, 32768), H100Limits()), 16);
  EXPECT_EQ(splits(Decode(8, 32, 8, 8192), H100Limits()), 2);
  Problem d64 = Decode(32, 16, 16, 2048);
  d64.head_dim = 64;
  d64.dtype = DType::kFp16;
  EXPECT_EQ(splits(d64, H100Limits()), 1);
  // Few keys: one split up to 128, more than 64 keys a split past them.
  EXPECT_EQ(splits(Decode(1, 64, 8, 100), H100Limits()), 1);
  EXPECT_EQ(splits(Decode(1, 8, 8, 128), H100Limits()), 1);
  EXPECT_EQ(splits(Decode(1, 8, 8, 129), H100Limits()), 2);
  EXPECT_EQ(splits(Decode(2, 32, 8, 1024), H100Limits()), 8);
  // 16 merged rows of 1,000 keys: the merge bounds it at 4 (4 x 4 x 16 rows
  // of partial sums read; the keys allow 8).
  EXPECT_EQ(splits(Decode(1, 64, 4, 1000), H100Limits()), 4);
  // MQA: 16 rows merged from each split. 16 splits (recorded 11% off the
  // optimum on the H100), where the grid alone allows 32 (24% off).
  Problem mqa = Decode(4, 16, 1, 8192);
  mqa.dtype = DType::kFp16;
  EXPECT_EQ(splits(mqa, H100Limits()), 16);
  // A smaller device, and one of unknown size.
  DeviceLimits l4 = H100Limits();
  l4.compute_capability = 89;
  l4.multiprocessors = 58;
  l4.smem_per_block_bytes = 99 * 1024;
  EXPECT_EQ(splits(Decode(1, 64, 8, 32768), l4), 4);
  DeviceLimits unknown = H100Limits();
  unknown.multiprocessors = 0;
  EXPECT_EQ(splits(Decode(1, 64, 8, 32768), unknown), 16);
  EXPECT_EQ(splits(Decode(1, 32, 1, 131072), H100Limits()), 64);
}

// Where the fitted config splits the keys in two, an unsplit one of eight
// warps (16-key tiles at head_dim 128) comes second: half the
// multiprocessors with twice the tiles in flight each, and no merge. Not
// where the keys split further, or not at all.
TEST(ServingDefaultsTest, DecodeTwoSplitsComeWithAnUnsplitEightWarpVariant) {
  const KernelTemplate& t = *TemplateRegistry::Builtin().Find("decode_fwd");
  // The fitted configs with fewer splits than the first.
  auto unsplit = [&](const Problem& p) {
    std::vector<Config> out;
    const std::vector<Config> fitted = t.fitted_defaults(p, H100Limits());
    for (const Config& c : fitted) {
      if (c.at("KV_SPLITS") < fitted.front().at("KV_SPLITS")) out.push_back(c);
    }
    return out;
  };
  // 4 queries of 16 heads on 2048 keys, head_dim 64: 64 blocks.
  Problem d64 = Decode(4, 16, 16, 2048);
  d64.seq_q = 4;
  d64.head_dim = 64;
  ASSERT_EQ(t.fitted_defaults(d64, H100Limits()).front().at("KV_SPLITS"), 2);
  const std::vector<Config> found = unsplit(d64);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0], t.fitted_defaults(d64, H100Limits())[1]);
  EXPECT_EQ(found[0].at("WARPS"), 8);
  EXPECT_EQ(found[0].at("TILE_N"), 32);
  EXPECT_EQ(found[0].at("ROWS"), 16);
  EXPECT_TRUE(RunsOn(t, found[0], d64, H100Limits()));
  const Problem d128 = Decode(8, 32, 8, 8192);  // Also 64 blocks.
  ASSERT_EQ(unsplit(d128).size(), 1u);
  EXPECT_EQ(unsplit(d128)[0].at("TILE_N"), 16);
  EXPECT_TRUE(RunsOn(t, unsplit(d128)[0], d128, H100Limits()));
  EXPECT_TRUE(unsplit(Decode(1, 64, 8, 32768)).empty());  // 16 splits.
  EXPECT_TRUE(unsplit(Decode(32, 32, 8, 8192)).empty());  // Full: 1 split.
}

// Blocks pack 32 query rows where 16-row blocks alone fill the GPU, or where
// a KV head has 128 rows or more (its K/V re-read half as often; splits make
// up the grid).
TEST(ServingDefaultsTest, DecodeRowsGrowWithTheGridOrThePackedRows) {
  const KernelTemplate& t = *TemplateRegistry::Builtin().Find("decode_fwd");
  auto rows_splits = [&](const Problem& p) {
    const Config c = Served(t, p);
    return std::make_pair(c.at("ROWS"), c.at("KV_SPLITS"));
  };
  using RowsSplits = std::pair<int64_t, int64_t>;
  Problem q16 = Decode(64, 8, 2, 2048);  // 64 packed rows, 512 blocks of 16.
  q16.seq_q = 16;
  q16.causal = true;
  EXPECT_EQ(rows_splits(q16), RowsSplits(32, 1));
  q16.head_dim = 64;
  EXPECT_EQ(rows_splits(q16), RowsSplits(32, 1));
  // 64 blocks: split instead.
  EXPECT_EQ(rows_splits(Decode(8, 32, 8, 8192)), RowsSplits(16, 2));
  Problem one_row = Decode(32, 16, 16, 2048);  // Full, but 1 row per head.
  EXPECT_EQ(rows_splits(one_row), RowsSplits(16, 1));
  // 512 rows on each of 4 KV heads: 64 blocks of 32 rows in 2 splits
  // (recorded 4% off the optimum), not 128 of 16 in one (39% off).
  Problem q64 = Decode(1, 32, 4, 16384);
  q64.seq_q = 64;
  q64.causal = true;
  EXPECT_EQ(rows_splits(q64), RowsSplits(32, 2));
  // 96 packed rows on each of 4 (batch, KV head): 24 blocks of 16 rows in 4
  // splits (the recorded optimum; 32 rows in 8 splits were 5% off).
  Problem q12 = Decode(2, 16, 2, 6000);
  q12.seq_q = 12;
  q12.head_dim = 64;
  q12.causal = true;
  EXPECT_EQ(rows_splits(q12), RowsSplits(16, 4));
  Problem q2 = Decode(8, 16, 2, 4096);  // 32 packed rows, 16 blocks of 16.
  q2.seq_q = 2;
  EXPECT_EQ(rows_splits(q2), RowsSplits(16, 8));
  // Where 32 rows are chosen for the packed rows alone, the fitted configs
  // (the search's first seeds) also hold the one fitted to 16 rows: for MQA
  // with 64 queries on 8192 keys the recorded optimum, where the first is
  // 6% off.
  Problem mqa = Decode(1, 8, 1, 8192);
  mqa.seq_q = 64;
  EXPECT_EQ(rows_splits(mqa), RowsSplits(32, 8));
  EXPECT_THAT(t.fitted_defaults(mqa, H100Limits()),
              testing::Contains(Config{{"KV_SPLITS", 4},
                                       {"Q_IN_REGS", 1},
                                       {"ROWS", 16},
                                       {"STAGES", 3},
                                       {"TILE_N", 16},
                                       {"WARPS", 8}}));
  EXPECT_THAT(t.fitted_defaults(q16, H100Limits()),
              testing::Each(testing::Contains(std::make_pair("ROWS", 32))));
}

// flash_fwd_tma fits consumers (64-row or 128-row tiles) and splits to the
// grid: one consumer for a head's few queries or a small grid, splits while
// the grid stays within the multiprocessors and each split keeps 4 tiles of
// 128 keys, persistent blocks when unsplit. The first that runs is what an
// answer made of defaults serves.
TEST(ServingDefaultsTest, TmaFitsConsumersAndSplitsToTheGrid) {
  const KernelTemplate& t = *TemplateRegistry::Builtin().Find("flash_fwd_tma");
  auto first = [&](const Problem& p) {
    const Config c = Served(t, p);
    return "C" + std::to_string(c.at("CONSUMERS")) + " K" +
           std::to_string(c.at("KV_SPLITS")) + " P" +
           std::to_string(c.at("PERSISTENT")) + " PP" +
           std::to_string(c.at("PINGPONG"));
  };
  auto prefill = [](int64_t batch, int64_t heads, int64_t seq_q,
                    int64_t seq_k) {
    Problem p = Decode(batch, heads, heads, seq_k);
    p.seq_q = seq_q;
    return p;
  };
  // 1024 tiles of 128 rows: two consumers, persistent.
  EXPECT_EQ(first(prefill(2, 16, 4096, 4096)), "C2 K1 P1 PP1");
  // 192 tiles: the same.
  EXPECT_EQ(first(prefill(2, 12, 1000, 1000)), "C2 K1 P1 PP1");
  // The seed problem: 32 tiles of 128 rows, so 64 of 64; 512 keys are too
  // few to split.
  EXPECT_EQ(first(prefill(1, 8, 512, 512)), "C1 K1 P1 PP0");
  // 17 queries: 64 tiles of 64 rows, 2 splits of 4097 keys (recorded
  // optimum; the persistent ping-pong default was 1.42x).
  EXPECT_EQ(first(prefill(8, 8, 17, 4097)), "C1 K2 P0 PP0");
  // MQA, 64 queries on 8192 keys: 8 tiles, 4 splits (the default 4x off).
  Problem mqa = prefill(1, 8, 64, 8192);
  mqa.kv_heads = 1;
  EXPECT_EQ(first(mqa), "C1 K4 P0 PP0");
  EXPECT_EQ(t.fitted_defaults(mqa, H100Limits()).size(), 2u);
  // The second: 64-key tiles, not persistent, overlapped at head_dim 64
  // only.
  EXPECT_EQ(t.fitted_defaults(mqa, H100Limits())[1].at("BLOCK_N"), 64);
  EXPECT_EQ(t.fitted_defaults(mqa, H100Limits())[1].at("OVERLAP"), 0);
  EXPECT_EQ(t.fitted_defaults(mqa, H100Limits())[1].at("PERSISTENT"), 0);
  Problem d64 = prefill(16, 16, 32, 512);
  d64.kv_heads = 4;
  d64.head_dim = 64;
  ASSERT_EQ(t.fitted_defaults(d64, H100Limits()).size(), 2u);
  EXPECT_EQ(t.fitted_defaults(d64, H100Limits())[1].at("OVERLAP"), 1);
  // 64 tiles of 128 rows fill half the GPU: two consumers, 2 splits.
  EXPECT_EQ(first(prefill(4, 8, 256, 3000)), "C2 K2 P0 PP1");
}

// A paged decode step is served by decode_fwd with key tiles that lie in
// one page or span whole ones: its fitted 32-key tiles on pages of 16 and
// 64 keys, 16-key tiles on pages of 48; every fitted config runs there.
TEST(ServingDefaultsTest, PagedDecodeTilesLieInOnePageOrSpanWholeOnes) {
  const KernelTemplate& t = *TemplateRegistry::Builtin().Find("decode_fwd");
  for (int64_t page : {16, 48, 64}) {
    Problem p = Decode(8, 32, 8, 48 * 64);
    p.layout = Layout::kPaged;
    p.page_size = page;
    ASSERT_TRUE(ValidateProblem(p).ok());
    const std::vector<Config> fitted = t.fitted_defaults(p, H100Limits());
    ASSERT_FALSE(fitted.empty());
    for (const Config& c : fitted) {
      EXPECT_TRUE(RunsOn(t, c, p, H100Limits())) << page << " " << ConfigKey(c);
    }
    EXPECT_EQ(Served(t, p).at("TILE_N"), page == 48 ? 16 : 32) << page;
  }
}

// Persistent blocks wherever the keys are not split, with a causal mask
// too (a ragged last round of tiles included: they go longest first).
TEST(ServingDefaultsTest, TmaPersistsWhereKeysAreNotSplit) {
  const KernelTemplate& t = *TemplateRegistry::Builtin().Find("flash_fwd_tma");
  auto served = [&](int64_t batch, int64_t heads, int64_t seq_q, int64_t seq_k,
                    bool causal) {
    Problem p = Decode(batch, heads, heads, seq_k);
    p.seq_q = seq_q;
    p.causal = causal;
    return Served(t, p);
  };
  // 1,064 tiles of 128 rows on 132 multiprocessors: a last round of 8.
  EXPECT_EQ(served(4, 14, 2413, 2413, true).at("PERSISTENT"), 1);
  EXPECT_EQ(served(4, 14, 2413, 2413, false).at("PERSISTENT"), 1);
  // 448 tiles: 52 in the last round.
  EXPECT_EQ(served(2, 32, 805, 805, true).at("PERSISTENT"), 1);
  // 1,024 tiles: 100 in the last; 1,056: eight full rounds.
  EXPECT_EQ(served(4, 16, 2048, 2048, true).at("PERSISTENT"), 1);
  EXPECT_EQ(served(2, 33, 2048, 2048, true).at("PERSISTENT"), 1);
  // Two query blocks on 4,013 keys: split, so not persistent.
  const Config chunk = served(1, 32, 256, 4013, true);
  EXPECT_GT(chunk.at("KV_SPLITS"), 1);
  EXPECT_EQ(chunk.at("PERSISTENT"), 0);
}

// The decode template ranks first for up to 16 queries, and for up to 64
// queries on keys at least 64 times as many; a prefill template otherwise.
TEST(ServingDefaultsTest, DecodeRanksFirstForFewQueriesOrLongKeys) {
  const KernelTemplate& decode =
      *TemplateRegistry::Builtin().Find("decode_fwd");
  const KernelTemplate& tma =
      *TemplateRegistry::Builtin().Find("flash_fwd_tma");
  auto first = [&](int64_t seq_q, int64_t seq_k) {
    Problem p = Decode(1, 8, 1, seq_k);
    p.seq_q = seq_q;
    const std::vector<DefaultChoice> served =
        RankedDefaults({&tma, &decode}, p, H100Limits(), 1);
    EXPECT_EQ(served.size(), 1u);
    return served.empty() ? "" : served.front().t->name;
  };
  EXPECT_EQ(first(1, 100), "decode_fwd");
  EXPECT_EQ(first(16, 16), "decode_fwd");
  EXPECT_EQ(first(17, 17 * 64), "decode_fwd");
  EXPECT_EQ(first(64, 8192), "decode_fwd");
  EXPECT_EQ(first(17, 17 * 64 - 1), "flash_fwd_tma");
  EXPECT_EQ(first(32, 512), "flash_fwd_tma");
  EXPECT_EQ(first(65, 65 * 128), "flash_fwd_tma");
}

// Where several blocks share a multiprocessor, each streams its keys with
// two warps; where blocks are fewer than the multiprocessors, with eight if
// a block has 16 query rows or more to feed (16-key tiles at head_dim 128),
// else four. Three tiles in flight either way.
// flash_fwd fits its row block and warps to the queries a head has, splits
// to the grid and stages to the blocks a multiprocessor holds; on a device
// with less shared memory it gives up stages, then key tiles.
TEST(ServingDefaultsTest, FlashFitsBlocksSplitsAndStagesToTheProblem) {
  const KernelTemplate& t = *TemplateRegistry::Builtin().Find("flash_fwd");
  auto first = [&](const Problem& p, const DeviceLimits& limits) {
    const Config c = Served(t, p, limits);
    return absl::StrCat("M", c.at("BLOCK_M"), " N", c.at("BLOCK_N"), " W",
                        c.at("NUM_WARPS"), " S", c.at("STAGES"), " K",
                        c.at("KV_SPLITS"));
  };
  auto prefill = [](int64_t batch, int64_t heads, int64_t seq_q, int64_t seq_k,
                    int64_t head_dim) {
    Problem p = Decode(batch, heads, heads, seq_k);
    p.seq_q = seq_q;
    p.head_dim = head_dim;
    return p;
  };
  // Long prefill at head_dim 128: one 128 x 128 block per multiprocessor.
  EXPECT_EQ(first(prefill(2, 16, 4096, 4096, 128), H100Limits()),
            "M128 N128 W8 S3 K1");
  // 32 query blocks, 2048 keys: 4 splits (recorded optimum; unsplit 2.3x).
  Problem few_blocks = prefill(1, 32, 128, 2048, 128);
  few_blocks.kv_heads = 8;
  few_blocks.causal = true;
  EXPECT_EQ(first(few_blocks, H100Limits()), "M128 N128 W8 S3 K4");
  // Head_dim 64, 256 query blocks of 128: four warps on 64-key tiles.
  EXPECT_EQ(first(prefill(4, 16, 1024, 1024, 64), H100Limits()),
            "M128 N64 W4 S3 K1");
  // The seed problem: too few blocks, too few keys to split: 64-row blocks.
  EXPECT_EQ(first(prefill(1, 8, 512, 512, 64), H100Limits()),
            "M64 N128 W4 S3 K1");
  // One query of 256 heads on 8192 keys: 16-row one-warp blocks in 4 splits,
  // one stage (1024 blocks).
  EXPECT_EQ(first(Decode(8, 32, 8, 8192), H100Limits()), "M16 N32 W1 S1 K4");
  // One query of 64 heads: 16-row blocks would leave too few warps.
  EXPECT_EQ(first(Decode(1, 64, 8, 32768), H100Limits()), "M32 N64 W2 S3 K4");
  // 17 queries: 32-row blocks, 4 splits of 4097 keys.
  EXPECT_EQ(first(prefill(8, 8, 17, 4097, 64), H100Limits()),
            "M32 N64 W2 S3 K4");
  // 99 KB per block (an L4): two stages of 64-key tiles at head_dim 128.
  DeviceLimits l4 = H100Limits();
  l4.smem_per_block_bytes = 99 * 1024;
  l4.compute_capability = 89;
  l4.multiprocessors = 58;
  EXPECT_EQ(first(prefill(2, 16, 4096, 4096, 128), l4), "M128 N64 W8 S2 K1");
}

TEST(ServingDefaultsTest, DecodeWarpsFollowTheGridAndTheRows) {
  const KernelTemplate& t = *TemplateRegistry::Builtin().Find("decode_fwd");
  auto first = [&](const Problem& p) {
    const Config c = Served(t, p);
    EXPECT_EQ(c.at("STAGES"), 3);
    return std::make_pair(c.at("WARPS"), c.at("TILE_N"));
  };
  using WarpsTile = std::pair<int64_t, int64_t>;
  EXPECT_EQ(first(Decode(1, 64, 8, 32768)), WarpsTile(4, 32));   // 8 rows.
  EXPECT_EQ(first(Decode(8, 32, 8, 8192)), WarpsTile(4, 32));    // 4 rows.
  EXPECT_EQ(first(Decode(32, 16, 16, 2048)), WarpsTile(2, 32));  // 512 blocks.
  // 192 blocks of 16 rows, but 96 of the 32 rows served.
  Problem q48 = Decode(2, 32, 4, 3000);
  q48.seq_q = 48;
  q48.causal = true;
  EXPECT_EQ(first(q48), WarpsTile(8, 16));
  // MQA: 16 rows, 4 blocks (recorded 11% off the optimum with four warps,
  // 2.5% with eight).
  Problem mqa = Decode(4, 16, 1, 8192);
  mqa.dtype = DType::kFp16;
  EXPECT_EQ(first(mqa), WarpsTile(8, 16));
  mqa.head_dim = 64;
  EXPECT_EQ(first(mqa), WarpsTile(8, 32));
}

}  // namespace
}  // namespace evotune
