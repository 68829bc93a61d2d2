#include "tuner/cli/model_config.h"

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
           "sliding_window": 4096})",
       "sliding_window: 4096 keys, below --max_context 8192"},
      {R"({"num_attention_heads": 8, "head_dim": 256,
           "attn_logit_softcapping": 50.0})",
       "attn_logit_softcapping"},
      {R"({"text_config": {"num_attention_heads": 8}})",
       "text_config.head_dim"},
      {"not json", "not a JSON object"},
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

TEST(ModelConfigTest, AFileThatCannotBeReadIsNotFound) {
  absl::StatusOr<ModelAttention> m = ReadModelConfig("/no/such.json", 8192);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(m.status().message(), HasSubstr("/no/such.json"));
}

}  // namespace
}  // namespace evotune
