#include "tuner/cli/model_config.h"

#include <cmath>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace evotune {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

absl::Status Invalid(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

// The field, or nullptr when it is absent or null.
const Value* Field(const Struct& s, const std::string& name) {
  auto it = s.fields().find(name);
  if (it == s.fields().end() || it->second.has_null_value()) return nullptr;
  return &it->second;
}

// A positive integer field; `fallback` when absent (0: required).
absl::StatusOr<int64_t> Count(const Struct& s, const std::string& name,
                              int64_t fallback) {
  const Value* v = Field(s, name);
  if (v == nullptr) {
    if (fallback > 0) return fallback;
    return Invalid(name, "required (a positive integer)");
  }
  const double x = v->number_value();
  if (!v->has_number_value() || x < 1 || x > 1e6 || std::floor(x) != x) {
    return Invalid(name, "must be a positive integer");
  }
  return static_cast<int64_t>(x);
}

absl::StatusOr<DType> DTypeOf(const Struct& s) {
  for (const char* name : {"torch_dtype", "dtype"}) {
    const Value* v = Field(s, name);
    if (v == nullptr) continue;
    const std::string& text = v->string_value();
    if (text == "bfloat16") return DType::kBf16;
    if (text == "float16") return DType::kFp16;
    return Invalid(name, absl::StrCat("\"", text,
                                      "\": evotune tunes float16 and bfloat16 "
                                      "(--dtype chooses one)"));
  }
  return DType::kBf16;
}

// A positive number field (at most 1e6); 0 when absent or null.
absl::StatusOr<double> Positive(const Struct& s, const std::string& name) {
  const Value* v = Field(s, name);
  if (v == nullptr) return 0.0;
  const double x = v->number_value();
  if (!v->has_number_value() || !(x > 0) || x > 1e6) {
    return Invalid(name, "must be a positive number (at most 1e6) or null");
  }
  return x;
}

// Which layers slide (first) and which attend to every key (second), of a
// model with a sliding window: Hugging Face's layer_types where given, else
// the older spellings of the layouts of Gemma (sliding_window_pattern, or
// gemma2's alternation) and Qwen2 (max_window_layers); else every layer.
absl::StatusOr<std::pair<bool, bool>> SlidingLayers(const Struct& s,
                                                    const std::string& type) {
  if (const Value* types = Field(s, "layer_types")) {
    std::pair<bool, bool> out{false, false};
    const auto& list = types->list_value().values();
    for (int i = 0; i < list.size(); ++i) {
      const std::string& t = list[i].string_value();
      if (t == "sliding_attention") {
        out.first = true;
      } else if (t == "full_attention") {
        out.second = true;
      } else {
        return Invalid(absl::StrCat("layer_types[", i, "]"),
                       absl::StrCat("\"", t,
                                    "\": evotune serves full_attention and "
                                    "sliding_attention layers"));
      }
    }
    if (list.empty()) return Invalid("layer_types", "a list of layer types");
    return out;
  }
  if (Field(s, "sliding_window_pattern") != nullptr) {
    absl::StatusOr<int64_t> n = Count(s, "sliding_window_pattern", 0);
    if (!n.ok()) return n.status();
    return std::pair<bool, bool>{*n > 1, true};  // Every n-th layer full.
  }
  if (type == "gemma2") return std::pair<bool, bool>{true, true};
  if (const Value* v = Field(s, "max_window_layers")) {
    const double below = v->number_value();  // The first `below` are full.
    if (!v->has_number_value() || below < 0 || below > 1e6 ||
        std::floor(below) != below) {
      return Invalid("max_window_layers", "must be a count of layers");
    }
    absl::StatusOr<int64_t> layers =
        Count(s, "num_hidden_layers", static_cast<int64_t>(below) + 1);
    if (!layers.ok()) return layers.status();
    return std::pair<bool, bool>{below<*layers, below> 0};
  }
  return std::pair<bool, bool>{true, false};
}

// Whether the model biases its scores with ALiBi: BLOOM always, MPT where
// its attn_config says so, and any config with "alibi": true.
bool UsesAlibi(const Struct& s, const std::string& type) {
  auto set = [](const Struct& in, const char* name) {
    const Value* v = Field(in, name);
    return v != nullptr && v->bool_value();
  };
  const Value* attn = Field(s, "attn_config");
  return type == "bloom" || set(s, "alibi") ||
         (attn != nullptr && attn->has_struct_value() &&
          set(attn->struct_value(), "alibi"));
}

// The kinds of the model's layers: full attention and/or a sliding window
// (Hugging Face's `sliding_window` W is the query's own key and W - 1
// before it: window_left W - 1; a window no shorter than max_context is
// full attention within the envelope), each with the model's softcap,
// sinks (gpt-oss's) and ALiBi (BLOOM's, MPT's).
absl::StatusOr<std::vector<LayerKind>> KindsOf(const Struct& s,
                                               const std::string& type,
                                               int64_t max_context) {
  LayerKind full;
  for (const char* name : {"attn_logit_softcapping", "logit_softcapping"}) {
    absl::StatusOr<double> cap = Positive(s, name);
    if (!cap.ok()) return cap.status();
    if (*cap > 0) full.softcap = static_cast<float>(*cap);
  }
  full.sinks = type == "gpt_oss";
  full.alibi = UsesAlibi(s, type);
  const Value* use = Field(s, "use_sliding_window");
  if (Field(s, "sliding_window") == nullptr ||
      (use != nullptr && !use->bool_value())) {
    return std::vector<LayerKind>{full};
  }
  absl::StatusOr<int64_t> window = Count(s, "sliding_window", 0);
  if (!window.ok()) return window.status();
  absl::StatusOr<std::pair<bool, bool>> layers = SlidingLayers(s, type);
  if (!layers.ok()) return layers.status();
  const auto [sliding, dense] = *layers;
  std::vector<LayerKind> out;
  if (dense || !sliding || *window >= max_context) out.push_back(full);
  if (sliding && *window < max_context) {
    LayerKind windowed = full;
    windowed.window_left = *window - 1;
    out.push_back(windowed);
  }
  return out;
}

// Multi-head latent attention (DeepSeek-V2/V3, whose config has
// v_head_dim) as its prefill computes it, each head's keys decompressed:
// queries and keys of qk_nope_head_dim + qk_rope_head_dim, values of
// v_head_dim. Sets `m`'s head dims; false (and nothing set) without MLA.
absl::StatusOr<bool> LatentHeadDims(const Struct& s, ModelAttention& m) {
  if (Field(s, "v_head_dim") == nullptr) return false;
  int64_t dims[3];
  const char* names[3] = {"qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"};
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<int64_t> d = Count(s, names[i], 0);
    if (!d.ok()) return d.status();
    dims[i] = *d;
  }
  m.head_dim = dims[0] + dims[1];
  m.head_dim_v = dims[2] == m.head_dim ? 0 : dims[2];
  return true;
}

// The first of `names` the config has (older models spell Hugging Face's
// fields their own way), else the first.
std::string Spelled(const Struct& s, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (Field(s, name) != nullptr) return name;
  }
  return *names.begin();
}

// head_dim, or where absent the hidden size (hidden_size, MPT's d_model)
// over the `heads` of field `heads_field`.
absl::StatusOr<int64_t> HeadDimOf(const Struct& s, int64_t heads,
                                  const std::string& heads_field) {
  if (Field(s, "head_dim") != nullptr) return Count(s, "head_dim", 0);
  const std::string hidden_field = Spelled(s, {"hidden_size", "d_model"});
  absl::StatusOr<int64_t> hidden = Count(s, hidden_field, 0);
  if (!hidden.ok()) return Invalid("head_dim", "absent, and so is hidden_size");
  if (*hidden % heads != 0) {
    return Invalid(hidden_field,
                   absl::StrCat(*hidden, " is not a multiple of ", heads_field,
                                " (", heads, "); give head_dim"));
  }
  return *hidden / heads;
}

absl::StatusOr<ModelAttention> FromStruct(const Struct& s,
                                          int64_t max_context) {
  ModelAttention m;
  if (const Value* v = Field(s, "model_type")) m.name = v->string_value();
  // BLOOM's n_head, MPT's n_heads and d_model.
  const std::string heads_field =
      Spelled(s, {"num_attention_heads", "n_head", "n_heads"});
  absl::StatusOr<int64_t> heads = Count(s, heads_field, 0);
  if (!heads.ok()) return heads.status();
  absl::StatusOr<int64_t> kv = Count(s, "num_key_value_heads", *heads);
  if (!kv.ok()) return kv.status();
  if (*kv > *heads || *heads % *kv != 0) {
    return Invalid(
        "num_key_value_heads",
        absl::StrCat(*kv, " must divide num_attention_heads (", *heads, ")"));
  }
  absl::StatusOr<bool> latent = LatentHeadDims(s, m);
  if (!latent.ok()) return latent.status();
  absl::StatusOr<int64_t> head_dim =
      *latent ? m.head_dim : HeadDimOf(s, *heads, heads_field);
  if (!head_dim.ok()) return head_dim.status();
  absl::StatusOr<DType> dtype = DTypeOf(s);
  if (!dtype.ok()) return dtype.status();
  absl::StatusOr<std::vector<LayerKind>> kinds =
      KindsOf(s, m.name, max_context);
  if (!kinds.ok()) return kinds.status();
  m.kinds = *std::move(kinds);
  m.heads = *heads;
  m.kv_heads = *kv;
  m.head_dim = *head_dim;
  m.dtype = *dtype;
  return m;
}

}  // namespace

absl::StatusOr<ModelAttention> ParseModelConfig(const std::string& json,
                                                int64_t max_context) {
  Struct config;
  google::protobuf::util::JsonParseOptions options;
  if (auto s =
          google::protobuf::util::JsonStringToMessage(json, &config, options);
      !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a JSON object: ", std::string(s.message())));
  }
  const Value* text = Field(config, "text_config");
  if (Field(config, "num_attention_heads") == nullptr && text != nullptr &&
      text->has_struct_value()) {
    absl::StatusOr<ModelAttention> m =
        FromStruct(text->struct_value(), max_context);
    if (!m.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("text_config.", m.status().message()));
    }
    return m;
  }
  return FromStruct(config, max_context);
}

absl::StatusOr<ModelAttention> ReadModelConfig(const std::string& path,
                                               int64_t max_context) {
  if (!path.empty() && path.front() == '{') {  // The fields themselves.
    return ParseModelConfig(path, max_context);
  }
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot be read"));
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<ModelAttention> m = ParseModelConfig(text.str(), max_context);
  if (!m.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", m.status().message()));
  }
  return m;
}

}  // namespace evotune
