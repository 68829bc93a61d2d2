#include "tuner/cli/model_config.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace evotune {
namespace {

using ::testing::HasSubstr;

// Llama 3 8B's fields (others omitted).
constexpr char kLlama3[] = R"({
  "model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
  "num_key_value_heads": 8, "torch_dtype": "bfloat16",
  "rope_scaling": null, "max_position_embeddings": 8192})";

TEST(ModelConfigTest, ReadsTheAttentionOfAModel) {
  absl::StatusOr<ModelAttention> m = ParseModelConfig(kLlama3, 8192);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->name, "llama");
  EXPECT_EQ(m->heads, 32);
  EXPECT_EQ(m->kv_heads, 8);
  EXPECT_EQ(m->head_dim, 128);
  EXPECT_EQ(m->dtype, DType::kBf16);
}

TEST(ModelConfigTest, DefaultsAndOtherSpellings) {
  // No KV heads (MHA), an explicit head_dim, the newer "dtype".
  absl::StatusOr<ModelAttention> m = ParseModelConfig(
      R"({"num_attention_heads": 16, "head_dim": 64, "hidden_size": 2048,
          "dtype": "float16"})",
      4096);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->kv_heads, 16);
  EXPECT_EQ(m->head_dim, 64);
  EXPECT_EQ(m->dtype, DType::kFp16);
  // A multimodal model's text tower; a window no shorter than the context.
  m = ParseModelConfig(
      R"({"model_type": "mm", "text_config": {"num_attention_heads": 8,
          "num_key_value_heads": 2, "hidden_size": 1024,
          "sliding_window": 4096}})",
      4096);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->heads, 8);
  EXPECT_EQ(m->kv_heads, 2);
  EXPECT_EQ(m->head_dim, 128);
  EXPECT_EQ(m->dtype, DType::kBf16);  // Absent: bfloat16.
}

TEST(ModelConfigTest, BadConfigsNameTheField) {
  struct Case {
    const char* json;
    const char* field;
  };
  const Case cases[] = {
      {R"({"hidden_size": 4096})", "num_attention_heads: required"},
      {R"({"num_attention_heads": 32.5, "head_dim": 64})",
       "num_attention_heads: must be a positive integer"},
      {R"({"num_attention_heads": 32, "num_key_value_heads": 3,
           "head_dim": 128})",
       "num_key_value_heads: 3 must divide"},
      {R"({"num_attention_heads": 32})", "head_dim: absent"},
      {R"({"num_attention_heads": 32, "hidden_size": 1000})",
       "hidden_size: 1000 is not a multiple"},
      {R"({"num_attention_heads": 32, "head_dim": 128,
           "torch_dtype": "float32"})",
       "torch_dtype: \"float32\""},
      {R"({"num_attention_heads": 32, "head_dim": 128,
           "sliding_window": 0})",
       "sliding_window: must be a positive integer"},
      {R"({"num_attention_heads": 8, "head_dim": 256,
           "attn_logit_softcapping": -50.0})",
       "attn_logit_softcapping: must be a positive number"},
      {R"({"num_attention_heads": 8, "head_dim": 64, "sliding_window": 128,
           "layer_types": ["full_attention", "chunked_attention"]})",
       "layer_types[1]: \"chunked_attention\""},
      {R"({"num_attention_heads": 8, "head_dim": 64, "sliding_window": 128,
           "max_window_layers": -1})",
       "max_window_layers: must be a count"},
      {R"({"text_config": {"num_attention_heads": 8}})",
       "text_config.head_dim"},
      {"not json", "not a JSON object"},
      {R"({"model_type": "deepseek_v3", "num_attention_heads": 128,
           "qk_nope_head_dim": 128, "v_head_dim": 128,
           "hidden_size": 7168})",
       "qk_rope_head_dim: required"},
      {R"({"model_type": "bloom", "n_head": 32, "hidden_size": 4100})",
       "hidden_size: 4100 is not a multiple of n_head (32)"},
      {R"({"model_type": "mpt", "n_heads": 0, "d_model": 4096})",
       "n_heads: must be a positive integer"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<ModelAttention> m = ParseModelConfig(c.json, 8192);
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument) << c.json;
    EXPECT_THAT(m.status().message(), HasSubstr(c.field)) << c.json;
  }
  // A window that is switched off does not matter.
  EXPECT_TRUE(ParseModelConfig(R"({"num_attention_heads": 8, "head_dim": 64,
                                   "sliding_window": 1024,
                                   "use_sliding_window": false})",
                               8192)
                  .ok());
}

// The kinds of layers, as "full attention" or what they have.
std::vector<std::string> Kinds(const char* json, int64_t max_context) {
  absl::StatusOr<ModelAttention> m = ParseModelConfig(json, max_context);
  EXPECT_TRUE(m.ok()) << m.status();
  std::vector<std::string> out;
  if (m.ok()) {
    for (const LayerKind& k : m->kinds) out.push_back(LayerKindName(k));
  }
  return out;
}

// Windows as Hugging Face masks them (sliding_window W: the query's own key
// and W - 1 before it), on the layers its config says; softcap and sinks on
// every layer.
TEST(ModelConfigTest, ReadsTheKindsOfAModelsLayers) {
  using ::testing::ElementsAre;
  EXPECT_THAT(Kinds(kLlama3, 8192), ElementsAre("full attention"));
  // Mistral 7B v0.1: every layer slides; no window within a shorter context.
  constexpr char kMistral[] = R"({"model_type": "mistral",
      "num_attention_heads": 32, "num_key_value_heads": 8,
      "hidden_size": 4096, "sliding_window": 4096})";
  EXPECT_THAT(Kinds(kMistral, 32768), ElementsAre("window 4095"));
  EXPECT_THAT(Kinds(kMistral, 4096), ElementsAre("full attention"));
  // Gemma 2: alternate layers slide, every one softcapped.
  EXPECT_THAT(Kinds(R"({"model_type": "gemma2", "num_attention_heads": 8,
                        "num_key_value_heads": 4, "head_dim": 256,
                        "sliding_window": 4096,
                        "attn_logit_softcapping": 50.0,
                        "final_logit_softcapping": 30.0})",
                    8192),
              ElementsAre("softcap 50", "window 4095, softcap 50"));
  // gpt-oss: layer_types, sinks on every layer.
  EXPECT_THAT(Kinds(R"({"model_type": "gpt_oss", "num_attention_heads": 64,
                        "num_key_value_heads": 8, "head_dim": 64,
                        "sliding_window": 128,
                        "layer_types": ["sliding_attention",
                                        "full_attention"]})",
                    8192),
              ElementsAre("sinks", "window 127, sinks"));
  // Gemma 3's older spelling: every sixth layer full.
  EXPECT_THAT(Kinds(R"({"model_type": "gemma3_text", "num_attention_heads": 8,
                        "head_dim": 128, "sliding_window": 1024,
                        "sliding_window_pattern": 6,
                        "attn_logit_softcapping": null})",
                    8192),
              ElementsAre("full attention", "window 1023"));
  // Qwen2: the first max_window_layers layers full, the rest slide.
  constexpr char kQwen2[] = R"({"model_type": "qwen2",
      "num_attention_heads": 28, "num_key_value_heads": 4, "head_dim": 128,
      "num_hidden_layers": 28, "sliding_window": 4096,
      "use_sliding_window": true, "max_window_layers": )";
  for (const auto& [layers, want] :
       std::vector<std::pair<int, std::vector<std::string>>>{
           {0, {"window 4095"}},
           {21, {"full attention", "window 4095"}},
           {28, {"full attention"}}}) {
    EXPECT_EQ(Kinds(absl::StrCat(kQwen2, layers, "}").c_str(), 8192), want)
        << layers;
  }
}

// ALiBi models in their own spellings: BLOOM's n_head, MPT's n_heads and
// d_model with attn_config.alibi.
TEST(ModelConfigTest, ReadsAlibiModels) {
  absl::StatusOr<ModelAttention> bloom = ParseModelConfig(
      R"({"model_type": "bloom", "n_head": 32, "hidden_size": 4096,
          "n_layer": 30, "torch_dtype": "bfloat16"})",
      8192);
  ASSERT_TRUE(bloom.ok()) << bloom.status();
  EXPECT_EQ(bloom->heads, 32);
  EXPECT_EQ(bloom->kv_heads, 32);
  EXPECT_EQ(bloom->head_dim, 128);
  ASSERT_EQ(bloom->kinds.size(), 1u);
  EXPECT_TRUE(bloom->kinds[0].alibi);
  EXPECT_EQ(LayerKindName(bloom->kinds[0]), "ALiBi");
  absl::StatusOr<ModelAttention> mpt = ParseModelConfig(
      R"({"model_type": "mpt", "n_heads": 32, "d_model": 4096,
          "attn_config": {"alibi": true, "alibi_bias_max": 8}})",
      8192);
  ASSERT_TRUE(mpt.ok()) << mpt.status();
  EXPECT_EQ(mpt->head_dim, 128);
  EXPECT_TRUE(mpt->kinds[0].alibi);
  // MPT without ALiBi (rotary variants) is full attention.
  EXPECT_THAT(Kinds(R"({"model_type": "mpt", "n_heads": 8, "d_model": 1024,
                        "attn_config": {"alibi": false}})",
                    8192),
              ::testing::ElementsAre("full attention"));
}

TEST(ModelConfigTest, ReadsLatentAttentionAsItsPrefillComputesIt) {
  absl::StatusOr<ModelAttention> v3 = ParseModelConfig(
      R"({"model_type": "deepseek_v3", "num_attention_heads": 128,
          "num_key_value_heads": 128, "qk_nope_head_dim": 128,
          "qk_rope_head_dim": 64, "v_head_dim": 128, "kv_lora_rank": 512,
          "hidden_size": 7168, "torch_dtype": "bfloat16"})",
      8192);
  ASSERT_TRUE(v3.ok()) << v3.status();
  EXPECT_EQ(v3->heads, 128);
  EXPECT_EQ(v3->kv_heads, 128);
  EXPECT_EQ(v3->head_dim, 192);
  EXPECT_EQ(v3->head_dim_v, 128);
  // Equal dims are one head dim.
  absl::StatusOr<ModelAttention> even = ParseModelConfig(
      R"({"num_attention_heads": 16, "qk_nope_head_dim": 96,
          "qk_rope_head_dim": 32, "v_head_dim": 128})",
      8192);
  ASSERT_TRUE(even.ok()) << even.status();
  EXPECT_EQ(even->head_dim, 128);
  EXPECT_EQ(even->head_dim_v, 0);
}

TEST(ModelConfigTest, TheFieldsMayBeGivenInPlaceOfAFile) {
  absl::StatusOr<ModelAttention> m = ReadModelConfig(
      R"({"num_attention_heads": 32, "num_key_value_heads": 8,
          "head_dim": 128, "sliding_window": 4096})",
      8192);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->kv_heads, 8);
  EXPECT_EQ(LayerKindName(m->kinds.at(0)), "window 4095");
}

TEST(ModelConfigTest, AFileThatCannotBeReadIsNotFound) {
  absl::StatusOr<ModelAttention> m = ReadModelConfig("/no/such.json", 8192);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(m.status().message(), HasSubstr("/no/such.json"));
}

}  // namespace
}  // namespace evotune
