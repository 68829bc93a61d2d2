#include "core/problem.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/batch_lengths.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace evotune {
namespace {

using ::testing::HasSubstr;

Problem Seed() {
  Problem p;
  p.batch = 1;
  p.heads = 8;
  p.kv_heads = 8;
  p.seq_q = 512;
  p.seq_k = 512;
  p.head_dim = 64;
  return p;
}

TEST(ProblemTest, KeyRoundTripsAndDistinguishesEveryField) {
  Problem p = Seed();
  EXPECT_EQ(ProblemKey(p), "b1_h8_kv8_q512_k512_d64_full_fp16_bhsd");
  std::vector<Problem> variants(24, p);
  variants[0].batch = 2;
  variants[1].heads = 16;
  variants[2].kv_heads = 4;
  variants[3].seq_q = 511;
  variants[4].seq_k = 513;
  variants[5].head_dim = 128;
  variants[6].causal = true;
  variants[7].dtype = DType::kBf16;
  variants[8].layout = Layout::kVarlen;
  variants[9].layout = Layout::kKvCache;
  variants[10].layout = Layout::kPaged;
  variants[10].page_size = 16;
  variants[11] = variants[10];
  variants[11].page_size = 256;
  variants[12].kv_fp8 = true;
  variants[13].kv_fp8 = variants[13].q_fp8 = true;
  variants[14].window_left = 128;
  variants[15].window_right = 7;
  variants[16].window_left = variants[16].window_right = 0;
  variants[17].softcap = 0.3f;
  variants[18] = variants[10];
  variants[18].causal = true;
  variants[18].window_left = 4096;
  variants[18].softcap = 50;
  variants[19].sinks = true;
  variants[20] = variants[18];
  variants[20].sinks = true;
  variants[21].alibi = true;
  variants[22] = variants[20];
  variants[22].alibi = true;
  variants[23].head_dim = 192;
  variants[23].head_dim_v = 128;
  for (const Problem& v : variants) {
    EXPECT_NE(ProblemKey(v), ProblemKey(p));
    absl::StatusOr<Problem> parsed = ParseProblemKey(ProblemKey(v));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, v);
  }
  EXPECT_FALSE(ParseProblemKey("b1_h8").ok());
  EXPECT_FALSE(ParseProblemKey("b1_h8_kv8_q512_k512_d64_full_fp32_bhsd").ok());
}

TEST(ProblemTest, AValueHeadDimOfItsOwnIsTheSixthPart) {
  Problem mla = Seed();
  mla.head_dim = 192;
  mla.head_dim_v = 128;
  EXPECT_EQ(ProblemKey(mla), "b1_h8_kv8_q512_k512_d192v128_full_fp16_bhsd");
  EXPECT_EQ(HeadDimV(mla), 128);
  EXPECT_EQ(HeadDimV(Seed()), 64);
  // The value head dim set to head_dim is the same problem, one key.
  Problem same = Seed();
  same.head_dim_v = 64;
  EXPECT_EQ(same, Seed());
  EXPECT_EQ(ProblemKey(same), ProblemKey(Seed()));
  for (const char* bad : {"d64v64", "d64v0", "d64v", "d64v32v16", "d64vx"}) {
    EXPECT_FALSE(ParseProblemKey(absl::StrCat("b1_h8_kv8_q512_k512_", bad,
                                              "_full_fp16_bhsd"))
                     .ok())
        << bad;
  }
  // Flops count each GEMM at its own width: 2 (192 + 128) a pair.
  EXPECT_DOUBLE_EQ(ProblemFlops(mla), 2.0 * 8 * (192 + 128) * 512 * 512);
  // Another value width is further than the same problem, nearer than
  // another dtype of it.
  Problem bf16 = mla;
  bf16.dtype = DType::kBf16;
  Problem d192 = mla;
  d192.head_dim_v = 0;
  EXPECT_GT(ProblemDistance(mla, d192), 0);
  EXPECT_LT(ProblemDistance(mla, d192), ProblemDistance(mla, bf16));
}

TEST(ProblemTest, WindowsAndSoftcapsEndTheKey) {
  Problem p = Seed();
  p.causal = true;
  p.window_left = 4096;
  p.softcap = 50;
  EXPECT_EQ(ProblemKey(p),
            "b1_h8_kv8_q512_k512_d64_causal_fp16_bhsd_wl4096_cap50");
  EXPECT_TRUE(HasWindow(p));
  EXPECT_FALSE(SameScoreMods(p, Seed()));
  const std::string base = "b1_h8_kv8_q512_k512_d64_full_fp16_bhsd";
  for (const char* bad :
       {"_cap50_wl4", "_wl-2", "_wl", "_cap0", "_cap-1", "_cap50.0", "_wr3_wl4",
        "_cap50_cap50", "_x", "_sinks_cap5", "_sinks_sinks", "_alibi_sinks",
        "_alibi_alibi"}) {
    EXPECT_FALSE(ParseProblemKey(base + bad).ok()) << bad;
  }
  EXPECT_EQ(ParseProblemKey(base + "_wl0_wr3")->window_right, 3);
  EXPECT_TRUE(ParseProblemKey(base + "_wl8_sinks")->sinks);
  EXPECT_TRUE(ParseProblemKey(base + "_cap50_alibi")->alibi);
  EXPECT_EQ(ParseProblemKey(base + "_sinks_alibi")->alibi, true);
}

TEST(ProblemTest, ValidationNamesTheScoreModField) {
  auto field = [](Problem p) {
    absl::Status s = ValidateProblem(p);
    return s.ok() ? std::string("ok") : std::string(s.message()).substr(0, 20);
  };
  Problem p = Seed();
  p.window_left = -2;
  EXPECT_EQ(field(p), "problem.window_left:");
  p = Seed();
  p.window_right = kMaxSeqLen + 1;
  EXPECT_EQ(field(p), "problem.window_right");
  p = Seed();
  p.causal = true;
  p.window_right = 4;
  EXPECT_EQ(field(p), "problem.window_right");
  p.causal = false;
  p.window_right = 0;  // The causal mask, under another name.
  EXPECT_EQ(field(p), "problem.window_right");
  p.window_right = 1;
  EXPECT_EQ(field(p), "ok");
  p = Seed();
  for (float cap : {-1.f, std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN(), 2e6f}) {
    p.softcap = cap;
    EXPECT_EQ(field(p), "problem.softcap: mus") << cap;
  }
  p.softcap = 30;
  EXPECT_EQ(field(p), "ok");
}

TEST(ProblemTest, AnotherWindowOrSoftcapIsOneStepAway) {
  Problem p = Seed();
  Problem q = p;
  q.window_left = 256;
  EXPECT_EQ(ProblemDistance(p, q), 1.0);
  q.softcap = 30;
  EXPECT_EQ(ProblemDistance(p, q), 1.0);
  q.causal = true;
  EXPECT_EQ(ProblemDistance(p, q), 2.0);
}

// A kernel serves a call of other score mods only where they do nothing
// to it, or where the call's window is launch data for its compiled one.
TEST(ProblemTest, ScoreModsServeCallsTheyComputeAlike) {
  Problem decode = Seed();  // One query on 512 keys.
  decode.seq_q = 1;
  Problem causal = decode;
  causal.causal = true;
  EXPECT_TRUE(ServesScoreMods(decode, causal));
  EXPECT_TRUE(ServesScoreMods(causal, decode));
  Problem prompt = Seed();
  prompt.causal = true;
  EXPECT_FALSE(ServesScoreMods(Seed(), prompt));
  EXPECT_FALSE(ServesScoreMods(prompt, Seed()));
  // A window that reaches past the call's keys is none.
  Problem idle = prompt;
  idle.window_left = 511;
  EXPECT_TRUE(ServesScoreMods(prompt, idle));
  idle.window_left = 510;
  EXPECT_FALSE(ServesScoreMods(prompt, idle));
  Problem right = Seed();
  right.window_left = 600;
  right.window_right = 511;
  EXPECT_TRUE(ServesScoreMods(Seed(), right));
  right.window_right = 510;
  EXPECT_FALSE(ServesScoreMods(Seed(), right));
  // A windowed kernel takes any window (or none) at launch.
  Problem windowed = prompt;
  windowed.window_left = 128;
  EXPECT_TRUE(ServesScoreMods(windowed, prompt));
  EXPECT_TRUE(ServesScoreMods(windowed, idle));
  // Softcap and sinks are alike or not at all.
  Problem capped = windowed;
  capped.softcap = 30;
  EXPECT_FALSE(ServesScoreMods(windowed, capped));
  EXPECT_FALSE(ServesScoreMods(capped, windowed));
  // The mods acting on a call.
  EXPECT_FALSE(ActiveScoreMods(causal).causal);
  EXPECT_TRUE(ActiveScoreMods(prompt).causal);
  Problem past = prompt;
  past.window_left = 511;
  EXPECT_EQ(ActiveScoreMods(past), prompt);
  EXPECT_EQ(ActiveScoreMods(idle), idle);
  Problem sinks = decode;
  sinks.sinks = true;
  EXPECT_FALSE(ServesScoreMods(decode, sinks));
  EXPECT_TRUE(ServesScoreMods(sinks, sinks));
  Problem alibi = decode;
  alibi.alibi = true;
  EXPECT_TRUE(HasScoreMods(alibi));
  EXPECT_FALSE(ServesScoreMods(decode, alibi));
  EXPECT_FALSE(ServesScoreMods(alibi, decode));
  EXPECT_TRUE(ServesScoreMods(alibi, alibi));
  EXPECT_FALSE(SameScoreMods(alibi, sinks));
}

TEST(ProblemTest, AnFp8KvCacheIsNamedAfterTheDtype) {
  Problem p = Seed();
  p.dtype = DType::kBf16;
  p.kv_fp8 = true;
  p.layout = Layout::kKvCache;
  EXPECT_EQ(ProblemKey(p), "b1_h8_kv8_q512_k512_d64_full_bf16.kve4m3_cache");
  EXPECT_EQ(DTypesName(p), "bf16.kve4m3");
  EXPECT_EQ(KvDType(p), DType::kE4m3);
  EXPECT_EQ(*ParseProblemKey(ProblemKey(p)), p);
  EXPECT_TRUE(ValidateProblem(p).ok());
  // e4m3 is the type of K and V only, never a problem's dtype.
  EXPECT_FALSE(ParseProblemKey("b1_h8_kv8_q512_k512_d64_full_e4m3_bhsd").ok());
  EXPECT_FALSE(
      ParseProblemKey("b1_h8_kv8_q512_k512_d64_full_bf16.kvfp32_bhsd").ok());
  p.dtype = DType::kE4m3;
  EXPECT_THAT(std::string(ValidateProblem(p).message()),
              ::testing::StartsWith("problem.dtype:"));
  // Another K/V type is one step away, as another dtype is.
  Problem q = Seed();
  Problem r = q;
  r.kv_fp8 = true;
  EXPECT_EQ(ProblemDistance(q, r), 1.0);
}

TEST(ProblemTest, Fp8AttentionIsNamedAfterTheOutputType) {
  Problem p = Seed();
  p.dtype = DType::kBf16;
  p.head_dim = 128;
  p.kv_fp8 = p.q_fp8 = true;
  EXPECT_EQ(ProblemKey(p), "b1_h8_kv8_q512_k512_d128_full_bf16.qkve4m3_bhsd");
  EXPECT_EQ(QDType(p), DType::kE4m3);
  EXPECT_EQ(KvDType(p), DType::kE4m3);
  EXPECT_EQ(*ParseProblemKey(ProblemKey(p)), p);
  EXPECT_TRUE(ValidateProblem(p).ok());
  // FP8 Q needs FP8 K and V.
  p.kv_fp8 = false;
  EXPECT_THAT(std::string(ValidateProblem(p).message()),
              ::testing::StartsWith("problem.q_dtype:"));
  Problem kv = p;
  kv.kv_fp8 = true;
  kv.q_fp8 = false;
  p.kv_fp8 = true;
  EXPECT_EQ(ProblemDistance(kv, p), 1.0);
}

TEST(ProblemTest, LayoutsNameTheKeysLastPart) {
  Problem p = Seed();
  p.layout = Layout::kVarlen;
  EXPECT_EQ(ProblemKey(p), "b1_h8_kv8_q512_k512_d64_full_fp16_thd");
  p.layout = Layout::kKvCache;
  EXPECT_EQ(ProblemKey(p), "b1_h8_kv8_q512_k512_d64_full_fp16_cache");
  EXPECT_FALSE(ParseProblemKey("b1_h8_kv8_q512_k512_d64_full_fp16_bshd").ok());
  EXPECT_THAT(ParseLayout("blocked").status().message(),
              HasSubstr("bhsd, thd, cache or paged"));
  Problem dense = Seed();
  EXPECT_DOUBLE_EQ(ProblemDistance(dense, p), 1.0);
  Problem paged = p;
  paged.layout = Layout::kPaged;
  paged.page_size = 64;
  EXPECT_EQ(ProblemKey(paged), "b1_h8_kv8_q512_k512_d64_full_fp16_paged64");
  Problem pages16 = paged;
  pages16.page_size = 16;
  EXPECT_DOUBLE_EQ(ProblemDistance(paged, pages16), 4.0);  // log2(4)^2.
  for (const char* key : {"b1_h8_kv8_q512_k512_d64_full_fp16_paged",
                          "b1_h8_kv8_q512_k512_d64_full_fp16_paged0",
                          "b1_h8_kv8_q512_k512_d64_full_fp16_pagedx",
                          "b1_h8_kv8_q512_k512_d64_full_fp16_cache16"}) {
    EXPECT_FALSE(ParseProblemKey(key).ok()) << key;
  }
}

TEST(ProblemTest, ValidationNamesTheField) {
  struct Case {
    std::function<void(Problem&)> mutate;
    std::string field;
  };
  const std::vector<Case> cases = {
      {[](Problem& p) { p.batch = 0; }, "problem.batch"},
      {[](Problem& p) { p.heads = kMaxHeads + 1; }, "problem.heads"},
      {[](Problem& p) { p.kv_heads = 3; }, "problem.kv_heads"},
      {[](Problem& p) { p.kv_heads = 16; }, "problem.kv_heads"},
      {[](Problem& p) { p.seq_q = 0; }, "problem.seq_q"},
      {[](Problem& p) { p.seq_k = kMaxSeqLen + 1; }, "problem.seq_k"},
      {[](Problem& p) { p.head_dim = 0; }, "problem.head_dim"},
      {[](Problem& p) { p.head_dim_v = -1; }, "problem.head_dim_v"},
      {[](Problem& p) { p.head_dim_v = kMaxHeadDim + 1; },
       "problem.head_dim_v"},
      {[](Problem& p) {
         p.head_dim_v = 128;
         p.kv_fp8 = true;
       },
       "problem.head_dim_v"},
      {[](Problem& p) {
         p.batch = 4096;
         p.seq_q = 1 << 20;
       },
       "problem.seq_q"},
      {[](Problem& p) { p.page_size = 16; }, "problem.page_size"},
      {[](Problem& p) { p.layout = Layout::kPaged; }, "problem.page_size"},
      {[](Problem& p) {
         p.layout = Layout::kPaged;
         p.page_size = 24;
       },
       "problem.page_size"},
      {[](Problem& p) {
         p.layout = Layout::kPaged;
         p.page_size = 512;
       },
       "problem.page_size"},
      {[](Problem& p) {
         p.layout = Layout::kPaged;
         p.page_size = 48;  // 512 keys are not whole pages of 48.
       },
       "problem.seq_k"},
  };
  for (const Case& c : cases) {
    Problem p = Seed();
    c.mutate(p);
    absl::Status s = ValidateProblem(p);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << c.field;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.field + ":"));
  }
  EXPECT_TRUE(ValidateProblem(Seed()).ok());
  Problem paged = Seed();
  paged.layout = Layout::kPaged;
  paged.page_size = 128;
  EXPECT_TRUE(ValidateProblem(paged).ok());
}

TEST(ProblemTest, FlopsCountOnlyVisiblePairsWhenCausal) {
  Problem p = Seed();
  EXPECT_DOUBLE_EQ(ProblemFlops(p), 4.0 * 8 * 64 * 512 * 512);
  p.causal = true;
  EXPECT_DOUBLE_EQ(ProblemFlops(p), 4.0 * 8 * 64 * (512.0 * 513 / 2));
  // Bottom-right alignment: with seq_q > seq_k the first rows see nothing.
  p.seq_q = 4;
  p.seq_k = 2;
  EXPECT_DOUBLE_EQ(ProblemFlops(p), 4.0 * 8 * 64 * (0 + 0 + 1 + 2));
}

// A bucket's flops are those of the batch it is measured on, not of a batch
// at its maxima: a rate from a measured time is then the real one.
TEST(ProblemTest, BucketFlopsAreThoseOfItsRepresentativeBatch) {
  Problem p = Seed();
  p.batch = 16;
  p.seq_q = 64;
  p.seq_k = 2048;
  p.causal = true;
  p.layout = Layout::kVarlen;
  const BatchLengths l = RepresentativeLengths(p);
  double pairs = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t i = 0; i < l.q[b]; ++i) {
      pairs += std::clamp<int64_t>(i + l.k[b] - l.q[b] + 1, 0, l.k[b]);
    }
  }
  EXPECT_DOUBLE_EQ(ProblemFlops(p), 4.0 * 8 * 64 * pairs);
  Problem dense = p;
  dense.layout = Layout::kDense;
  EXPECT_LT(ProblemFlops(p), ProblemFlops(dense));
}

TEST(ProblemTest, CausalFlopsAgreeWithCountingRowByRow) {
  Problem p = Seed();
  p.causal = true;
  p.batch = p.heads = p.kv_heads = 1;
  p.head_dim = 1;
  for (int64_t seq_q : {1, 2, 3, 17, 64, 511, 4097}) {
    for (int64_t seq_k : {1, 2, 5, 17, 64, 512, 4097, 131072}) {
      p.seq_q = seq_q;
      p.seq_k = seq_k;
      if (seq_q * seq_k > (int64_t{1} << 24)) continue;  // Counting's cost.
      double pairs = 0;  // Row i sees keys j <= i + seq_k - seq_q.
      for (int64_t i = 0; i < seq_q; ++i) {
        for (int64_t j = 0; j < seq_k && j <= i + seq_k - seq_q; ++j) ++pairs;
      }
      EXPECT_DOUBLE_EQ(ProblemFlops(p), 4 * pairs) << seq_q << "x" << seq_k;
    }
  }
}

TEST(ProblemTest, WindowFlopsAgreeWithCountingRowByRow) {
  Problem p = Seed();
  p.batch = p.heads = p.kv_heads = 1;
  p.head_dim = 1;
  for (bool causal : {false, true}) {
    for (auto [left, right] : {std::pair<int64_t, int64_t>{0, -1},
                               {3, -1},
                               {-1, 5},
                               {17, 2},
                               {0, 1},
                               {4096, -1}}) {
      for (auto [seq_q, seq_k] : {std::pair<int64_t, int64_t>{1, 1},
                                  {17, 113},
                                  {113, 17},
                                  {64, 64},
                                  {1023, 2048}}) {
        p.causal = causal;
        p.window_left = left;
        p.window_right = causal ? -1 : right;
        p.seq_q = seq_q;
        p.seq_k = seq_k;
        const int64_t shift = seq_k - seq_q;
        double pairs = 0;
        for (int64_t i = 0; i < seq_q; ++i) {
          for (int64_t j = 0; j < seq_k; ++j) {
            const bool seen =
                (left < 0 || j >= i + shift - left) &&
                (causal ? j <= i + shift : right < 0 || j <= i + shift + right);
            pairs += seen;
          }
        }
        EXPECT_DOUBLE_EQ(ProblemFlops(p), 4 * pairs)
            << causal << " " << left << " " << right << " " << seq_q << "x"
            << seq_k;
      }
    }
  }
}

}  // namespace
}  // namespace evotune
