// The attention of a model, read from its Hugging Face config.json: what
// `evotune tune-model` tunes for.
#ifndef EVOTUNE_TUNER_CLI_MODEL_CONFIG_H_
#define EVOTUNE_TUNER_CLI_MODEL_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/envelope.h"
#include "core/problem.h"

namespace evotune {

// Every layer's attention: query heads on KV heads of head_dim (values of
// head_dim_v where it differs), in dtype.
struct ModelAttention {
  std::string name;  // "model_type" (or "" when absent).
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t head_dim_v = 0;  // 0: head_dim.
  DType dtype = DType::kBf16;
  // The kinds of its layers: one for a model whose layers attend alike.
  std::vector<LayerKind> kinds = {LayerKind()};
};

// Reads a config.json's text (`max_context` bounds the lengths served):
// num_attention_heads, num_key_value_heads (default: the heads),
// head_dim (default: hidden_size / num_attention_heads), torch_dtype or
// dtype ("bfloat16", "float16"; absent: bfloat16), and the kinds of its
// layers: a sliding_window below max_context (W keys: window_left W - 1)
// on the layers layer_types names "sliding_attention" (else as
// sliding_window_pattern, Gemma 2's alternation or Qwen2's
// max_window_layers say, else every layer; use_sliding_window false: none),
// attn_logit_softcapping, sinks for gpt-oss, ALiBi for BLOOM (n_head) and
// MPT (n_heads, d_model, attn_config.alibi), multi-head latent attention's
// prefill for DeepSeek-V2/V3 (v_head_dim: queries and keys of
// qk_nope_head_dim + qk_rope_head_dim, values of v_head_dim); from the
// object itself or
// its "text_config" (multimodal models). INVALID_ARGUMENT naming the field
// for a value that is missing, of the wrong type or inconsistent, a dtype
// evotune does not tune, or a layer type it does not serve.
absl::StatusOr<ModelAttention> ParseModelConfig(const std::string& json,
                                                int64_t max_context);

// ParseModelConfig of the file at `path` (or of `path` itself where it is a
// JSON object, starting with "{"); NOT_FOUND when it cannot be read, and
// errors prefixed with the path.
absl::StatusOr<ModelAttention> ReadModelConfig(const std::string& path,
                                               int64_t max_context);

}  // namespace evotune

#endif  // EVOTUNE_TUNER_CLI_MODEL_CONFIG_H_
