#include "tuner/model/transfer.h"

#include <algorithm>
#include <memory>
#include <set>

#include "gtest/gtest.h"
#include "kernel_templates/serving_defaults.h"
#include "tests/model/h100_testing.h"

namespace evotune {
namespace {

const KernelTemplate& Decode() {
  return *TemplateRegistry::Builtin().Find("decode_fwd");
}

// One query of 32 heads on 8 KV heads: one 16-row block per KV head and
// batch entry.
Problem DecodeProblem(int64_t batch, int64_t seq_k) {
  Problem p;
  p.batch = batch;
  p.heads = 32;
  p.kv_heads = 8;
  p.seq_k = seq_k;
  p.head_dim = 128;
  return p;
}

// A made-up law where the split count fits the grid to 128 multiprocessors
// and each split costs a little: a batch of 16 fills them without splits, a
// batch of 1 wants 16.
double Law(const Config& c, const Problem& p) {
  const double blocks = static_cast<double>(p.batch * p.kv_heads);
  const double fill = std::min(1.0, blocks * c.at("KV_SPLITS") / 128.0);
  return p.seq_k * 0.01 / c.at("WARPS") / fill + 0.5 * c.at("KV_SPLITS") +
         c.at("STAGES");
}

std::vector<CostSample> Measured(const Problem& p,
                                 double (*law)(const Config&,
                                               const Problem&) = Law) {
  std::vector<CostSample> out;
  for (const Config& c : FeasibleConfigs(Decode(), p, H100Limits())) {
    out.push_back({&Decode(), c, p, law(c, p)});
  }
  return out;
}

// The problems the models are trained on: batches of 1 and 16 at several
// lengths.
std::vector<Problem> TrainingProblems() {
  std::vector<Problem> out;
  for (int64_t seq_k : {2048, 4096, 16384}) {
    for (int64_t batch : {1, 16}) out.push_back(DecodeProblem(batch, seq_k));
  }
  return out;
}

std::unique_ptr<CostModel> Trained(const std::vector<CostSample>& train) {
  auto features = std::make_shared<FeatureMap>(TemplateRegistry::Builtin());
  absl::StatusOr<std::unique_ptr<CostModel>> model =
      CostModel::Train(features, train, H100Limits());
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *std::move(model) : nullptr;
}

// A model trained on TrainingProblems under `law`.
std::unique_ptr<CostModel> TrainedOn(double (*law)(const Config&,
                                                   const Problem&)) {
  std::vector<CostSample> train;
  for (const Problem& p : TrainingProblems()) {
    for (CostSample& s : Measured(p, law)) train.push_back(std::move(s));
  }
  return Trained(train);
}

// Configs with every other value of `name`; nothing else differs.
bool SameButFor(const Config& a, const Config& b, const std::string& name) {
  Config x = a, y = b;
  x.erase(name);
  y.erase(name);
  return x == y;
}

// Each of a problem's fastest configs enters the pool with its variants of
// other split counts, where they ran at that head_dim and dtype.
TEST(TransferTest, PoolHoldsSplitVariantsThatRan) {
  std::vector<CostSample> samples;
  for (CostSample& s : Measured(DecodeProblem(16, 8192))) {
    // As if 32 splits had failed to compile.
    if (s.config.at("KV_SPLITS") != 32) samples.push_back(std::move(s));
  }
  const std::vector<TransferCandidate> pool = TransferPool(samples, 1);
  ASSERT_FALSE(pool.empty());
  const Config& fastest = pool.front().config;
  EXPECT_EQ(fastest.at("KV_SPLITS"), 1);
  std::set<int64_t> splits;
  for (const TransferCandidate& c : pool) {
    EXPECT_TRUE(SameButFor(c.config, fastest, "KV_SPLITS"))
        << ConfigKey(c.config);
    splits.insert(c.config.at("KV_SPLITS"));
  }
  EXPECT_EQ(splits, (std::set<int64_t>{1, 2, 4, 8, 16, 64}));
}

// Trained on both batches at several lengths, and offered the pool of a
// batch of 16, whose fastest configs have no splits: asked for a batch of
// 1, the ranking serves the split count the law wants there.
TEST(TransferTest, ServesTheSplitCountTheAskedProblemNeeds) {
  std::unique_ptr<CostModel> model = TrainedOn(Law);
  ASSERT_NE(model, nullptr);
  std::vector<CostSample> batch16 = Measured(DecodeProblem(16, 8192));
  std::sort(batch16.begin(), batch16.end(),
            [](const CostSample& a, const CostSample& b) {
              return a.median_us < b.median_us;
            });
  for (size_t i = 0; i < 2; ++i) {
    ASSERT_EQ(batch16[i].config.at("KV_SPLITS"), 1);
  }
  const std::vector<TransferCandidate> pool = TransferPool(batch16, 2);
  absl::StatusOr<std::vector<RankedTransfer>> ranked =
      RankTransfers(*model, pool, DecodeProblem(1, 8192), 1);
  ASSERT_TRUE(ranked.ok()) << ranked.status();
  ASSERT_EQ(ranked->size(), 1u);
  const Config& served = ranked->front().candidate.config;
  EXPECT_EQ(served.at("KV_SPLITS"), 16) << ConfigKey(served);
}

// The config its template fits to the asked problem leads, marked fitted
// and never measured, when the model predicts no transfer more than
// kFittedMargin faster (here every config costs the same); not where it
// predicts one well ahead (the law's 16 splits for a batch of 1).
TEST(TransferTest, TheFittedConfigLeadsUnlessATransferIsPredictedWellAhead) {
  const Problem asked = DecodeProblem(1, 8192);
  const Config fitted = Decode().fitted_defaults(asked, H100Limits()).front();
  auto flat = [](const Config&, const Problem& p) { return p.seq_k * 0.01; };
  std::unique_ptr<CostModel> alike = TrainedOn(flat);
  ASSERT_NE(alike, nullptr);
  const std::vector<TransferCandidate> pool =
      TransferPool(Measured(DecodeProblem(16, 8192), flat), 8);
  absl::StatusOr<std::vector<RankedTransfer>> ranked =
      RankTransfers(*alike, pool, asked, 4);
  ASSERT_TRUE(ranked.ok()) << ranked.status();
  ASSERT_EQ(ranked->size(), 4u);
  EXPECT_TRUE(ranked->front().fitted);
  EXPECT_EQ(ranked->front().candidate.config, fitted);
  EXPECT_EQ(ProblemKey(ranked->front().candidate.problem), ProblemKey(asked));
  EXPECT_EQ(ranked->front().candidate.median_us, 0);
  for (size_t i = 1; i < ranked->size(); ++i) {
    EXPECT_FALSE((*ranked)[i].fitted);
    EXPECT_NE((*ranked)[i].candidate.config, fitted);  // Not twice.
  }
  std::unique_ptr<CostModel> lawful = TrainedOn(Law);
  ASSERT_NE(lawful, nullptr);
  ranked = RankTransfers(
      *lawful, TransferPool(Measured(DecodeProblem(16, 8192)), 2), asked, 4);
  ASSERT_TRUE(ranked.ok()) << ranked.status();
  ASSERT_FALSE(ranked->empty());
  EXPECT_FALSE(ranked->front().fitted);
  EXPECT_EQ(ranked->front().candidate.config.at("KV_SPLITS"), 16);
}

const KernelTemplate& Tma() {
  return *TemplateRegistry::Builtin().Find("flash_fwd_tma");
}

// Where the model ranks first a config of a template that another ranks
// below for the asked problem (flash_fwd_tma under decode_fwd for one
// query), the config decode_fwd fits to the problem leads unless the model
// predicts the first more than kOutrankedMargin faster: here every
// flash_fwd_tma config costs 7 us, then 4, against decode_fwd's 10.
TEST(TransferTest, AnOutrankingTemplatesFittedConfigLeads) {
  const Problem asked = DecodeProblem(1, 8192);
  ASSERT_GT(DefaultRank(Decode(), asked), DefaultRank(Tma(), asked));
  auto first = [&](double tma_us) -> RankedTransfer {
    std::vector<CostSample> samples;
    for (const Problem& p : TrainingProblems()) {
      for (const Config& c : FeasibleConfigs(Decode(), p, H100Limits())) {
        samples.push_back({&Decode(), c, p, 10.0});
      }
      for (const Config& c : FeasibleConfigs(Tma(), p, H100Limits())) {
        samples.push_back({&Tma(), c, p, tma_us});
      }
    }
    std::unique_ptr<CostModel> model = Trained(samples);
    if (model == nullptr) return {};
    absl::StatusOr<std::vector<RankedTransfer>> ranked =
        RankTransfers(*model, TransferPool(samples, 8), asked, 2);
    EXPECT_TRUE(ranked.ok()) << ranked.status();
    return ranked.ok() && !ranked->empty() ? ranked->front() : RankedTransfer{};
  };
  const RankedTransfer near = first(7.0);
  EXPECT_EQ(near.candidate.t, &Decode());
  EXPECT_TRUE(near.fitted);
  EXPECT_EQ(near.candidate.config,
            Decode().fitted_defaults(asked, H100Limits()).front());
  const RankedTransfer far = first(4.0);
  EXPECT_EQ(far.candidate.t, &Tma());
}

// decode_fwd tuned only at head_dim 64 fp16, flash_fwd_tma (whose configs
// fit every form) at head_dim 128 bf16 as well: asked for an MQA decode at
// head_dim 128 bf16, where only flash_fwd_tma's configs are runnable as
// measured, decode_fwd still outranks it and its fitted config leads
// (flash_fwd_tma predicted 7 us against 10, within kOutrankedMargin).
TEST(TransferTest, AnOutrankingTemplateTunedAtAnotherFormStillLeads) {
  Problem asked;
  asked.heads = 8;
  asked.kv_heads = 1;
  asked.seq_k = 2900;
  asked.head_dim = 128;
  asked.dtype = DType::kBf16;
  std::vector<CostSample> samples;
  for (const Problem& trained : TrainingProblems()) {
    Problem d64 = trained;
    d64.head_dim = 64;
    for (const Config& c : FeasibleConfigs(Decode(), d64, H100Limits())) {
      samples.push_back({&Decode(), c, d64, 10.0});
    }
    Problem d128 = trained;
    d128.dtype = DType::kBf16;
    for (const Config& c : FeasibleConfigs(Tma(), d128, H100Limits())) {
      samples.push_back({&Tma(), c, d128, 7.0});
    }
  }
  std::unique_ptr<CostModel> model = Trained(samples);
  ASSERT_NE(model, nullptr);
  absl::StatusOr<std::vector<RankedTransfer>> ranked =
      RankTransfers(*model, TransferPool(samples, 8), asked, 2);
  ASSERT_TRUE(ranked.ok()) << ranked.status();
  ASSERT_FALSE(ranked->empty());
  EXPECT_EQ(ranked->front().candidate.t, &Decode());
  EXPECT_TRUE(ranked->front().fitted);
  EXPECT_EQ(ranked->front().candidate.config,
            Decode().fitted_defaults(asked, H100Limits()).front());
}

// A model trained under a law where splits only cost, and a pool of
// configs without splits (as tuned for full grids): asked for 2 sequences of
// one head, whose unsplit grid is 2 blocks on 132 multiprocessors, the
// fitted config (split to fill them) leads although the model predicts the
// unsplit one faster; asked for a batch that fills the GPU unsplit, the
// transfer does.
TEST(TransferTest, AFittedConfigLeadsWhereATransferStarvesTheGpu) {
  auto splits_cost = [](const Config& c, const Problem& p) {
    return p.seq_k * 0.001 + 2.0 * c.at("KV_SPLITS") + c.at("STAGES");
  };
  std::vector<CostSample> all, unsplit;
  for (const Problem& p : TrainingProblems()) {
    for (CostSample& s : Measured(p, splits_cost)) {
      if (s.config.at("KV_SPLITS") == 1) unsplit.push_back(s);
      all.push_back(std::move(s));
    }
  }
  std::unique_ptr<CostModel> model = Trained(all);
  ASSERT_NE(model, nullptr);
  const std::vector<TransferCandidate> pool = TransferPool(unsplit, 8);
  Problem small = DecodeProblem(2, 3478);
  small.heads = small.kv_heads = 1;
  const Config fitted = Decode().fitted_defaults(small, H100Limits()).front();
  ASSERT_GT(fitted.at("KV_SPLITS"), 1);
  absl::StatusOr<std::vector<RankedTransfer>> ranked =
      RankTransfers(*model, pool, small, 2);
  ASSERT_TRUE(ranked.ok()) << ranked.status();
  ASSERT_FALSE(ranked->empty());
  EXPECT_TRUE(ranked->front().fitted);
  EXPECT_EQ(ranked->front().candidate.config, fitted);
  ranked = RankTransfers(*model, pool, DecodeProblem(32, 3478), 2);
  ASSERT_TRUE(ranked.ok()) << ranked.status();
  ASSERT_FALSE(ranked->empty());
  EXPECT_FALSE(ranked->front().fitted);
  EXPECT_EQ(ranked->front().candidate.config.at("KV_SPLITS"), 1);
}

// A template without a split parameter: its configs as they ran.
TEST(TransferTest, ConfigsWithoutSplitsTransferAsTheyAre) {
  const KernelTemplate& naive = *TemplateRegistry::Builtin().Find("naive");
  ASSERT_EQ(naive.space.Find("KV_SPLITS"), nullptr);
  Problem p = DecodeProblem(1, 512);
  std::vector<CostSample> samples;
  for (const Config& c : FeasibleConfigs(naive, p, H100Limits())) {
    samples.push_back({&naive, c, p, 1.0 + samples.size()});
  }
  ASSERT_GT(samples.size(), 2u);
  const std::vector<TransferCandidate> pool = TransferPool(samples, 2);
  ASSERT_EQ(pool.size(), 2u);
  EXPECT_EQ(pool[0].config, samples[0].config);
  EXPECT_EQ(pool[1].config, samples[1].config);
}

// Every config of `t` the problem admits, timed by a made-up law under which
// 64-key tiles win at head_dim 64 and 128-key tiles at 128.
std::vector<CostSample> MeasuredForms(const KernelTemplate& t,
                                      const Problem& p) {
  const char* tile = t.space.Find("BLOCK_N") ? "BLOCK_N" : "TILE_N";
  std::vector<CostSample> out;
  for (const Config& c : FeasibleConfigs(t, p, H100Limits())) {
    const bool fits = (c.at(tile) == 64) == (p.head_dim == 64);
    out.push_back({&t, c, p, (fits ? 10.0 : 20.0) + out.size() * 1e-3});
  }
  return out;
}

// A config measured only at head_dim 64 and fp16 is ranked for a head_dim
// 128 bf16 problem beside those measured there when its template fits every
// form (flash_fwd_tma); otherwise (decode_fwd) only those measured at the
// asked form are.
TEST(TransferTest, TemplatesThatFitEveryFormServeConfigsOfOtherForms) {
  Problem d64;
  d64.heads = d64.kv_heads = 16;
  d64.seq_q = d64.seq_k = 1024;
  Problem d128 = d64;
  d128.head_dim = 128;
  d128.dtype = DType::kBf16;
  Problem asked = d128;
  asked.seq_q = asked.seq_k = 2048;
  for (const KernelTemplate* t : {&Tma(), &Decode()}) {
    Problem small = d64, large = d128, q = asked;
    if (t == &Decode()) small.seq_q = large.seq_q = q.seq_q = 1;
    std::vector<CostSample> samples = MeasuredForms(*t, small);
    for (CostSample& s : MeasuredForms(*t, large)) samples.push_back(s);
    std::unique_ptr<CostModel> model = Trained(samples);
    ASSERT_NE(model, nullptr);
    const std::vector<TransferCandidate> pool = TransferPool(samples, 1);
    absl::StatusOr<std::vector<RankedTransfer>> ranked =
        RankTransfers(*model, pool, q, pool.size());
    ASSERT_TRUE(ranked.ok()) << ranked.status();
    bool other_form = false;
    for (const RankedTransfer& r : *ranked) {
      other_form |= r.candidate.problem.head_dim == 64;
    }
    EXPECT_EQ(other_form, t->fits_every_form) << t->name;
  }
}

// The first config of `t` at `a` without splits whose variants of every
// split count run at `b` too.
Config SplitFreeAtBoth(const KernelTemplate& t, const Problem& a,
                       const Problem& b) {
  const std::vector<Config> at_b = FeasibleConfigs(t, b, H100Limits());
  auto runs_at_b = [&](const Config& c) {
    return std::find(at_b.begin(), at_b.end(), c) != at_b.end();
  };
  for (const Config& c : FeasibleConfigs(t, a, H100Limits())) {
    if (c.at("KV_SPLITS") != 1 || !runs_at_b(c)) continue;
    bool all = true;
    for (int64_t v : t.space.Find("KV_SPLITS")->values) {
      Config variant = c;
      variant["KV_SPLITS"] = v;
      all &= runs_at_b(variant);
    }
    if (all) return c;
  }
  return {};
}

// A config that was fastest only at head_dim 64 fp16 enters the pool once,
// with its split variants that ran at head_dim 128 bf16 when its template
// fits every form (flash_fwd_tma); otherwise (decode_fwd) without them.
TEST(TransferTest, PoolTakesSplitVariantsOfEveryFormWhereConfigsFitIt) {
  for (const KernelTemplate* t : {&Tma(), &Decode()}) {
    Problem small;
    small.heads = small.kv_heads = 16;
    small.seq_q = t == &Decode() ? 1 : 1024;
    small.seq_k = 1024;
    Problem large = small;
    large.head_dim = 128;
    large.dtype = DType::kBf16;
    const Config c = SplitFreeAtBoth(*t, small, large);
    ASSERT_FALSE(c.empty()) << t->name;
    std::vector<CostSample> samples = {{t, c, small, 1.0}};
    for (const Config& other : FeasibleConfigs(*t, large, H100Limits())) {
      // The large problem's fastest is another config; c's ran slower there.
      const bool family = SameButFor(other, c, "KV_SPLITS");
      samples.push_back({t, other, large, family ? 5.0 : 1.0 + samples.size()});
    }
    std::multiset<int64_t> splits;
    for (const TransferCandidate& s : TransferPool(samples, 1)) {
      if (SameButFor(s.config, c, "KV_SPLITS")) {
        splits.insert(s.config.at("KV_SPLITS"));
      }
    }
    const std::vector<int64_t>& values = t->space.Find("KV_SPLITS")->values;
    EXPECT_EQ(splits, t->fits_every_form
                          ? std::multiset<int64_t>(values.begin(), values.end())
                          : std::multiset<int64_t>{1})
        << t->name;
  }
}

}  // namespace
}  // namespace evotune
