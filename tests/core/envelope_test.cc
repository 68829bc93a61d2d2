#include "core/envelope.h"

#include <algorithm>
#include <random>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace evotune {
namespace {

using ::testing::HasSubstr;

// Whether `bucket` holds `call`, as the runtime's bundle lookup takes it: the
// same form with at least its batch and lengths.
bool Holds(const Problem& bucket, const Problem& call) {
  return bucket.heads == call.heads && bucket.kv_heads == call.kv_heads &&
         bucket.head_dim == call.head_dim && bucket.causal == call.causal &&
         bucket.dtype == call.dtype && bucket.layout == call.layout &&
         bucket.batch >= call.batch && bucket.seq_q >= call.seq_q &&
         bucket.seq_k >= call.seq_k;
}

// Draws from 1 .. n, the same every run.
class Upto {
 public:
  explicit Upto(unsigned seed) : rng_(seed) {}
  int64_t operator()(int64_t n) {
    return std::uniform_int_distribution<int64_t>(1, n)(rng_);
  }

 private:
  std::mt19937 rng_;
};

std::vector<Problem> Llama3Buckets(const Envelope& e) {
  return EnvelopeBuckets(e, 32, 8, 128, DType::kBf16);
}

TEST(EnvelopeTest, TheDefaultEnvelopeIsAFewHundredBucketsAtMostNoneTwice) {
  const std::vector<Problem> buckets = Llama3Buckets(Envelope());
  std::set<std::string> keys;
  for (const Problem& p : buckets) {
    EXPECT_TRUE(keys.insert(ProblemKey(p)).second) << ProblemKey(p);
    EXPECT_TRUE(ValidateProblem(p).ok()) << ProblemKey(p);
  }
  // Decode: 2 query counts x 16 batches x 14 lengths; prompts and chunks.
  EXPECT_GT(buckets.size(), 448u);
  EXPECT_LT(buckets.size(), 560u);
}

// A dense decode step's keys go by three quarters of powers of two as well
// from 384 (the op's key buckets): 600 keys fall in the bucket of 768. A
// packed layout's stay powers of two (the op rounds its maxima so).
TEST(EnvelopeTest, DenseDecodeKeysHaveBucketsBetweenPowersOfTwo) {
  Envelope e;
  e.max_context = 4096;
  for (Layout layout : {Layout::kDense, Layout::kVarlen}) {
    e.layout = layout;
    std::set<int64_t> keys;
    for (const Problem& p : Llama3Buckets(e)) {
      if (p.batch == 8 && p.seq_q <= 16 && p.seq_k != p.seq_q) {
        keys.insert(p.seq_k);  // Decode rows of 8 sequences.
      }
    }
    std::set<int64_t> want = {32, 64, 128, 256, 512, 1024, 2048, 4096};
    if (layout == Layout::kDense) want.insert({384, 768, 1536, 3072});
    EXPECT_EQ(keys, want) << LayoutName(layout);
  }
}

// Decode batches go by halves of powers of two as well: a step of 20
// sequences falls in the bucket of 24, one of 12 in its own.
TEST(EnvelopeTest, DecodeBatchesHaveBucketsBetweenPowersOfTwo) {
  std::set<int64_t> decode, prompt;
  for (const Problem& p : Llama3Buckets(Envelope())) {
    (p.seq_q <= 4 ? decode : prompt).insert(p.batch);  // 1 or 4 queries.
  }
  EXPECT_EQ(decode, (std::set<int64_t>{1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64,
                                       96, 128, 192, 256}));
  EXPECT_EQ(prompt.count(24), 0u);  // Prompts and chunks: powers of two.
}

// Every call within the envelope, drawn at random, falls in a bucket.
TEST(EnvelopeTest, EveryCallWithinTheEnvelopeFallsInABucket) {
  Envelope e;
  e.max_batch = 200;
  e.max_context = 5000;
  e.prefill_chunk = 1000;
  e.max_prefill_tokens = 6000;
  e.decode_queries = {1, 3};
  const std::vector<Problem> buckets = Llama3Buckets(e);
  Upto upto(7);
  for (int i = 0; i < 3000; ++i) {
    Problem call = buckets.front();
    switch (i % 3) {
      case 0:  // A decode step.
        call.batch = upto(e.max_batch);
        call.seq_q = e.decode_queries[upto(2) - 1];
        call.seq_k = std::max(call.seq_q, upto(e.max_context));
        call.causal = call.seq_q > 1;
        break;
      case 1:  // Whole prompts of at most max_prefill_tokens.
        call.seq_q = call.seq_k = upto(e.max_context);
        call.batch = upto(std::clamp<int64_t>(e.max_prefill_tokens / call.seq_q,
                                              1, e.max_batch));
        call.causal = true;
        break;
      default:  // Chunks against their prefixes, as many queries at most.
        call.seq_q = upto(e.prefill_chunk);
        call.seq_k = call.seq_q + upto(e.max_context - call.seq_q);
        call.batch = upto(std::clamp<int64_t>(e.max_prefill_tokens / call.seq_q,
                                              1, e.max_batch));
        call.causal = true;
    }
    bool held = false;
    for (const Problem& b : buckets) held |= Holds(b, call);
    EXPECT_TRUE(held) << ProblemKey(call);
  }
}

// A prompt of a few tokens falls in a bucket of its own size, not the
// 128-token one (two 64-row consumers there ran 1.2-1.6x slower than one
// on prompts of 20 to 100 tokens).
TEST(EnvelopeTest, ShortPromptsHaveBucketsOfTheirOwn) {
  const std::vector<Problem> buckets = Llama3Buckets(Envelope());
  auto smallest = [&](int64_t batch, int64_t len) {
    Problem call = buckets.front();
    call.batch = batch;
    call.seq_q = call.seq_k = len;
    call.causal = true;
    const Problem* best = nullptr;
    for (const Problem& b : buckets) {
      if (Holds(b, call) &&
          (best == nullptr || b.batch * b.seq_q * b.seq_k <
                                  best->batch * best->seq_q * best->seq_k)) {
        best = &b;
      }
    }
    return best == nullptr ? std::string("none") : ProblemKey(*best);
  };
  EXPECT_EQ(smallest(6, 20), "b8_h32_kv8_q32_k32_d128_causal_bf16_bhsd");
  EXPECT_EQ(smallest(200, 59), "b256_h32_kv8_q64_k64_d128_causal_bf16_bhsd");
  EXPECT_EQ(smallest(1, 100), "b1_h32_kv8_q128_k128_d128_causal_bf16_bhsd");
}

// A kind of layers with a window, softcap and sinks: the same buckets,
// each with the kind's score mods (valid problems, causal or not).
TEST(EnvelopeTest, EachBucketHasTheLayersScoreMods) {
  const std::vector<Problem> plain = Llama3Buckets(Envelope());
  LayerKind kind;
  kind.window_left = 4095;
  kind.softcap = 50;
  kind.sinks = true;
  const std::vector<Problem> windowed =
      EnvelopeBuckets(Envelope(), 32, 8, 128, DType::kBf16, kind);
  ASSERT_EQ(windowed.size(), plain.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    Problem same = windowed[i];
    EXPECT_EQ(same.window_left, 4095);
    EXPECT_EQ(same.window_right, -1);
    EXPECT_EQ(same.softcap, 50);
    EXPECT_TRUE(same.sinks);
    EXPECT_TRUE(ValidateProblem(same).ok()) << ProblemKey(same);
    same.window_left = -1;
    same.softcap = 0;
    same.sinks = false;
    EXPECT_EQ(same, plain[i]);
  }
  EXPECT_EQ(LayerKindName(kind), "window 4095, softcap 50, sinks");
  EXPECT_EQ(LayerKindName(LayerKind()), "full attention");
}

// An engine's calls over a paged cache (evotune.torch's varlen entry
// points: queries bucketed from 16, keys in whole pages): every bucket a
// valid paged problem, and every call within the envelope in one.
TEST(EnvelopeTest, PagedBucketsHoldAnEnginesCalls) {
  Envelope e;
  e.max_batch = 64;
  e.max_context = 3000;
  e.prefill_chunk = 512;
  e.max_prefill_tokens = 4096;
  e.layout = Layout::kPaged;
  e.page_size = 48;
  const std::vector<Problem> buckets = Llama3Buckets(e);
  for (const Problem& p : buckets) {
    EXPECT_TRUE(ValidateProblem(p).ok()) << ProblemKey(p);
    EXPECT_EQ(p.page_size, 48);
    EXPECT_GE(p.seq_q, 16) << ProblemKey(p);
  }
  EXPECT_EQ(ProblemKey(buckets.front()),
            "b1_h32_kv8_q16_k48_d128_causal_bf16_paged48");
  auto bound = [](int64_t n) {  // evotune.varlen.bucket's default policy.
    int64_t b = 16;
    while (b < n) b *= 2;
    return b;
  };
  Upto upto(3);
  for (int i = 0; i < 2000; ++i) {
    Problem call = buckets.front();
    // A step of decode rows and at most one prefill chunk.
    call.batch = upto(e.max_batch);
    const int64_t max_q = i % 2 ? 1 : upto(e.prefill_chunk);
    call.seq_q = bound(max_q);
    const int64_t keys = std::max(max_q, upto(e.max_context));
    call.seq_k = (bound(keys) + 47) / 48 * 48;
    bool held = false;
    for (const Problem& b : buckets) {
      held |= b.page_size == call.page_size && b.layout == call.layout &&
              Holds(b, call);
    }
    EXPECT_TRUE(held) << ProblemKey(call) << " of " << max_q << " queries";
  }
}

// An engine that does not chunk prompts calls a step of decode rows and
// whole prompts at once (packed queries): every such step falls in a
// bucket, though no prompt bucket of its batch is that long.
TEST(EnvelopeTest, PackedStepsOfWholePromptsFallInABucket) {
  Envelope e;
  e.max_batch = 64;
  e.max_context = 4096;
  e.prefill_chunk = 0;
  e.max_prefill_tokens = 1024;
  e.layout = Layout::kVarlen;
  const std::vector<Problem> buckets = Llama3Buckets(e);
  Upto upto(5);
  for (int i = 0; i < 2000; ++i) {
    Problem call = buckets.front();
    call.batch = upto(e.max_batch);  // Decode rows and one prompt.
    const int64_t prompt = upto(e.max_prefill_tokens - (call.batch - 1));
    call.seq_q = std::max<int64_t>(16, prompt);
    call.seq_k = std::max(prompt, upto(e.max_context));
    bool held = false;
    for (const Problem& b : buckets) held |= Holds(b, call);
    EXPECT_TRUE(held) << ProblemKey(call) << " of a " << prompt
                      << "-token prompt";
  }
}

TEST(EnvelopeTest, AGainIsTheShareSaved) {
  EXPECT_DOUBLE_EQ(GainShare(10, 8), 0.2);
  EXPECT_EQ(GainShare(10, 12), 0);  // Slower saves nothing.
  EXPECT_EQ(GainShare(0, 8), 0);    // Without both, no gain.
  EXPECT_EQ(GainShare(10, 0), 0);
}

TEST(EnvelopeTest, AnEnvelopeOutOfRangeNamesTheField) {
  struct Case {
    const char* field;
    void (*change)(Envelope*);
  };
  const Case cases[] = {
      {"max_batch", [](Envelope* e) { e->max_batch = 0; }},
      {"max_context", [](Envelope* e) { e->max_context = 0; }},
      {"prefill_chunk", [](Envelope* e) { e->prefill_chunk = 9000; }},
      {"max_prefill_tokens", [](Envelope* e) { e->max_prefill_tokens = 0; }},
      {"decode_queries", [](Envelope* e) { e->decode_queries.clear(); }},
      {"decode_queries",
       [](Envelope* e) {
         e->decode_queries = {1, 65};
       }},
      {"page_size: a multiple of 16",
       [](Envelope* e) {
         e->layout = Layout::kPaged;
         e->page_size = 24;
       }},
      {"page_size: only with the paged layout",
       [](Envelope* e) { e->page_size = 16; }},
  };
  EXPECT_TRUE(ValidateEnvelope(Envelope()).ok());
  for (const Case& c : cases) {
    Envelope e;
    c.change(&e);
    absl::Status s = ValidateEnvelope(e);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_THAT(s.message(), HasSubstr(c.field));
  }
}

}  // namespace
}  // namespace evotune
