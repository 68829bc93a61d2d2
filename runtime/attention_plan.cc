#include "evotune/attention_plan.h"

#include "absl/strings/str_cat.h"
#include "launch/launcher.h"

namespace evotune {

int64_t AttentionPlan::workspace_floats() const {
  return launch_->geometry.workspace_floats;
}

int64_t AttentionPlan::counters() const { return launch_->geometry.counters; }

absl::Status CheckWithinPlan(const Problem& planned, const Problem& call) {
  auto differs = [&](const char* field, int64_t want, int64_t got) {
    return absl::InvalidArgumentError(
        absl::StrCat("problem.", field, ": the plan is for ", want, ", got ",
                     got, " (make a plan for this problem)"));
  };
  if (call.batch != planned.batch) {
    return differs("batch", planned.batch, call.batch);
  }
  if (call.heads != planned.heads) {
    return differs("heads", planned.heads, call.heads);
  }
  if (call.kv_heads != planned.kv_heads) {
    return differs("kv_heads", planned.kv_heads, call.kv_heads);
  }
  if (call.head_dim != planned.head_dim) {
    return differs("head_dim", planned.head_dim, call.head_dim);
  }
  if (HeadDimV(call) != HeadDimV(planned)) {
    return differs("head_dim_v", HeadDimV(planned), HeadDimV(call));
  }
  if (call.causal != planned.causal) {
    return differs("causal", planned.causal, call.causal);
  }
  auto named = [](const char* field, absl::string_view want,
                  absl::string_view got) {
    return absl::InvalidArgumentError(
        absl::StrCat("problem.", field, ": the plan is for ", want, ", got ",
                     got, " (make a plan for this problem)"));
  };
  if (call.dtype != planned.dtype) {
    return named("dtype", DTypeName(planned.dtype), DTypeName(call.dtype));
  }
  if (call.kv_fp8 != planned.kv_fp8) {
    auto kv = [](const Problem& p) { return p.kv_fp8 ? "e4m3" : "dtype"; };
    return named("kv_dtype", kv(planned), kv(call));
  }
  if (call.q_fp8 != planned.q_fp8) {
    auto q = [](const Problem& p) { return p.q_fp8 ? "e4m3" : "dtype"; };
    return named("q_dtype", q(planned), q(call));
  }
  if (call.layout != planned.layout) {
    return named("layout", LayoutName(planned.layout), LayoutName(call.layout));
  }
  if (call.window_left != planned.window_left) {
    return differs("window_left", planned.window_left, call.window_left);
  }
  if (call.window_right != planned.window_right) {
    return differs("window_right", planned.window_right, call.window_right);
  }
  if (call.softcap != planned.softcap) {
    return named("softcap", absl::StrCat(planned.softcap),
                 absl::StrCat(call.softcap));
  }
  auto longer = [&](const char* field, int64_t most, int64_t got) {
    return absl::InvalidArgumentError(absl::StrCat("problem.", field, ": ", got,
                                                   " is more than the ", most,
                                                   " the plan is for"));
  };
  if (call.seq_q > planned.seq_q) {
    return longer("seq_q", planned.seq_q, call.seq_q);
  }
  if (call.seq_k > planned.seq_k) {
    return longer("seq_k", planned.seq_k, call.seq_k);
  }
  return absl::OkStatus();
}

}  // namespace evotune
