#include "tuner/cli/model_config.h"

#include <cmath>
#include <fstream>
#include <sstream>

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

// Variants no template serves yet.
absl::Status CheckVariants(const Struct& s, int64_t max_context) {
  const Value* window = Field(s, "sliding_window");
  const Value* use = Field(s, "use_sliding_window");
  const bool used = use == nullptr || use->bool_value();
  if (window != nullptr && used && window->number_value() < max_context) {
    return Invalid("sliding_window",
                   absl::StrCat(window->number_value(),
                                " keys, below --max_context ", max_context,
                                ": sliding-window attention is not served "
                                "yet (lower --max_context to it)"));
  }
  for (const char* name : {"attn_logit_softcapping", "logit_softcapping"}) {
    if (Field(s, name) != nullptr) {
      return Invalid(name, "softcapped attention is not served yet");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelAttention> FromStruct(const Struct& s,
                                          int64_t max_context) {
  ModelAttention m;
  if (const Value* v = Field(s, "model_type")) m.name = v->string_value();
  absl::StatusOr<int64_t> heads = Count(s, "num_attention_heads", 0);
  if (!heads.ok()) return heads.status();
  absl::StatusOr<int64_t> kv = Count(s, "num_key_value_heads", *heads);
  if (!kv.ok()) return kv.status();
  if (*kv > *heads || *heads % *kv != 0) {
    return Invalid(
        "num_key_value_heads",
        absl::StrCat(*kv, " must divide num_attention_heads (", *heads, ")"));
  }
  absl::StatusOr<int64_t> head_dim = int64_t{0};
  if (Field(s, "head_dim") != nullptr) {
    head_dim = Count(s, "head_dim", 0);
    if (!head_dim.ok()) return head_dim.status();
  } else {  // Absent: from hidden_size.
    absl::StatusOr<int64_t> hidden = Count(s, "hidden_size", 0);
    if (!hidden.ok()) {
      return Invalid("head_dim", "absent, and so is hidden_size");
    }
    if (*hidden % *heads != 0) {
      return Invalid("hidden_size", absl::StrCat(*hidden,
                                                 " is not a multiple of "
                                                 "num_attention_heads (",
                                                 *heads, "); give head_dim"));
    }
    head_dim = *hidden / *heads;
  }
  absl::StatusOr<DType> dtype = DTypeOf(s);
  if (!dtype.ok()) return dtype.status();
  if (absl::Status v = CheckVariants(s, max_context); !v.ok()) return v;
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
