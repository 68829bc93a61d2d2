#include "evotune/runtime_c.h"

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "evotune/daemon_source.h"
#include "evotune/runtime.h"
#include "tuner/wire/message_convert.h"

struct evotune_runtime {
  std::unique_ptr<evotune::Runtime> runtime;
};

struct evotune_plan {
  const evotune::Runtime* runtime;
  evotune::AttentionPlan plan;
};

namespace {

thread_local std::string last_error;

int Report(const absl::Status& s) {
  last_error = std::string(s.message());
  return static_cast<int>(s.code());
}

evotune::Problem ToProblem(const evotune_problem& p) {
  evotune::Problem out;
  out.batch = p.batch;
  out.heads = p.heads;
  out.kv_heads = p.kv_heads;
  out.seq_q = p.seq_q;
  out.seq_k = p.seq_k;
  out.head_dim = p.head_dim;
  out.causal = p.causal != 0;
  out.dtype = p.bf16 ? evotune::DType::kBf16 : evotune::DType::kFp16;
  // An unknown value is refused by ValidateLayout before any use.
  out.layout = p.layout == EVOTUNE_LAYOUT_VARLEN     ? evotune::Layout::kVarlen
               : p.layout == EVOTUNE_LAYOUT_KV_CACHE ? evotune::Layout::kKvCache
               : p.layout == EVOTUNE_LAYOUT_PAGED    ? evotune::Layout::kPaged
                                                     : evotune::Layout::kDense;
  out.page_size = p.page_size;  // ValidateProblem checks it with the layout.
  out.kv_fp8 = p.kv_fp8 != 0;
  out.q_fp8 = p.q_fp8 != 0;
  if (p.windowed != 0) {
    out.window_left = p.window_left;
    out.window_right = p.window_right;
  }
  out.softcap = p.softcap;
  out.sinks = p.sinks != 0;
  out.alibi = p.alibi != 0;
  out.head_dim_v = p.head_dim_v == p.head_dim ? 0 : p.head_dim_v;
  return out;
}

absl::Status ValidateLayout(const evotune_problem& p) {
  if (p.layout < EVOTUNE_LAYOUT_DENSE || p.layout > EVOTUNE_LAYOUT_PAGED) {
    return absl::InvalidArgumentError(absl::StrCat(
        "problem.layout: EVOTUNE_LAYOUT_DENSE, _VARLEN, _KV_CACHE or _PAGED "
        "(0-3), got ",
        p.layout));
  }
  return absl::OkStatus();
}

std::string ConfigText(const evotune::v1::Config& c) {
  absl::StatusOr<evotune::Config> config = evotune::ConfigFromProto(c);
  return config.ok() ? evotune::ConfigKey(*config) : "(unreadable config)";
}

// `text` into `out` (at most `size` bytes, NUL-terminated).
void CopyOut(const std::string& text, char* out, int64_t size) {
  if (size > 0) {
    const size_t n = std::min<size_t>(text.size(), size - 1);
    std::memcpy(out, text.data(), n);
    out[n] = '\0';
  }
}

// "template CONFIG arch (tuned|transferred|default)" into `out`.
void Describe(const evotune::v1::Kernel& k, char* out, int64_t size) {
  CopyOut(absl::StrCat(k.template_name(), " ", ConfigText(k.config()), " ",
                       k.arch(), " (",
                       k.defaults()      ? "default"
                       : k.transferred() ? "transferred"
                                         : "tuned",
                       ")"),
          out, size);
}

evotune::AttentionTensor ToTensor(const evotune_tensor& t) {
  return {t.data,  t.batch_stride, t.head_stride, t.row_stride,
          t.batch, t.heads,        t.seq,         t.head_dim};
}

evotune::AttentionCall ToCall(const evotune_problem& problem,
                              const evotune_tensor& q, const evotune_tensor& k,
                              const evotune_tensor& v, const evotune_tensor& o,
                              const evotune_lengths* lengths, float scale,
                              float* workspace, int32_t* counters) {
  evotune::AttentionCall call;
  if (lengths != nullptr) {
    call.cu_seqlens_q = lengths->cu_seqlens_q;
    call.cu_seqlens_k = lengths->cu_seqlens_k;
    call.seqused_k = lengths->seqused_k;
    call.block_table = lengths->block_table;
    call.block_table_stride = lengths->block_table_stride;
    call.q_descale = lengths->q_descale;
    call.k_descale = lengths->k_descale;
    call.v_descale = lengths->v_descale;
    call.descale_batch_stride = lengths->descale_batch_stride;
    call.descale_head_stride = lengths->descale_head_stride;
    call.sinks = lengths->sinks;
    call.alibi_slopes = lengths->alibi_slopes;
    call.alibi_batch_stride = lengths->alibi_batch_stride;
  }
  call.problem = ToProblem(problem);
  call.q = ToTensor(q);
  call.k = ToTensor(k);
  call.v = ToTensor(v);
  call.o = ToTensor(o);
  call.scale = scale;
  call.workspace = workspace;
  call.counters = counters;
  return call;
}

}  // namespace

extern "C" {

int evotune_runtime_api_version(void) { return EVOTUNE_RUNTIME_API_VERSION; }

evotune_runtime* evotune_runtime_open_bundle(const char* path) {
  absl::StatusOr<std::unique_ptr<evotune::BundleSource>> source =
      evotune::BundleSource::Open(path);
  if (!source.ok()) {
    Report(source.status());
    return nullptr;
  }
  return new evotune_runtime{
      std::make_unique<evotune::Runtime>(*std::move(source))};
}

evotune_runtime* evotune_runtime_open_daemon(const char* address,
                                             const char* token) {
  return evotune_runtime_open_daemon_tls(address, token, nullptr, nullptr,
                                         nullptr);
}

evotune_runtime* evotune_runtime_open_daemon_tls(const char* address,
                                                 const char* token,
                                                 const char* tls_ca,
                                                 const char* tls_cert,
                                                 const char* tls_key) {
  auto text = [](const char* s) { return std::string(s ? s : ""); };
  auto source = evotune::DaemonSource::Connect(
      text(address), text(token),
      {text(tls_ca), text(tls_cert), text(tls_key)});
  if (!source.ok()) {
    Report(source.status());
    return nullptr;
  }
  return new evotune_runtime{
      std::make_unique<evotune::Runtime>(*std::move(source))};
}

void evotune_runtime_close(evotune_runtime* runtime) { delete runtime; }

void evotune_runtime_wait_for_new_classes(evotune_runtime* runtime,
                                          int64_t max_us) {
  runtime->runtime->WaitForNewClasses(max_us < 0 ? absl::InfiniteDuration()
                                                 : absl::Microseconds(max_us));
}

int evotune_runtime_prefetch(evotune_runtime* runtime, void* stream,
                             int limit) {
  return Report(
      runtime->runtime->Prefetch(static_cast<CUstream>(stream), limit));
}

int evotune_runtime_scratch(evotune_runtime* runtime,
                            const evotune_problem* problem, void* stream,
                            int64_t* workspace_floats, int64_t* counters) {
  if (absl::Status s = ValidateLayout(*problem); !s.ok()) return Report(s);
  absl::StatusOr<evotune::v1::Kernel> k = runtime->runtime->KernelFor(
      ToProblem(*problem), static_cast<CUstream>(stream));
  if (!k.ok()) return Report(k.status());
  *workspace_floats = static_cast<int64_t>(k->geometry().workspace_floats());
  *counters = static_cast<int64_t>(k->geometry().counters());
  return 0;
}

int evotune_runtime_about(evotune_runtime* runtime, char* out, int64_t size) {
  CopyOut(runtime->runtime->About(), out, size);
  return 0;
}

int evotune_runtime_describe(evotune_runtime* runtime,
                             const evotune_problem* problem, void* stream,
                             char* out, int64_t size) {
  if (absl::Status s = ValidateLayout(*problem); !s.ok()) return Report(s);
  absl::StatusOr<evotune::v1::Kernel> k = runtime->runtime->KernelFor(
      ToProblem(*problem), static_cast<CUstream>(stream));
  if (!k.ok()) return Report(k.status());
  Describe(*k, out, size);
  return 0;
}

int evotune_runtime_attention(evotune_runtime* runtime,
                              const evotune_problem* problem,
                              const evotune_tensor* q, const evotune_tensor* k,
                              const evotune_tensor* v, const evotune_tensor* o,
                              float scale, float* workspace, int32_t* counters,
                              void* stream) {
  return evotune_runtime_attention_lengths(runtime, problem, q, k, v, o,
                                           nullptr, scale, workspace, counters,
                                           stream);
}

int evotune_runtime_attention_lengths(
    evotune_runtime* runtime, const evotune_problem* problem,
    const evotune_tensor* q, const evotune_tensor* k, const evotune_tensor* v,
    const evotune_tensor* o, const evotune_lengths* lengths, float scale,
    float* workspace, int32_t* counters, void* stream) {
  if (absl::Status s = ValidateLayout(*problem); !s.ok()) return Report(s);
  absl::Status s = runtime->runtime->Attention(
      ToCall(*problem, *q, *k, *v, *o, lengths, scale, workspace, counters),
      static_cast<CUstream>(stream));
  return s.ok() ? 0 : Report(s);
}

int evotune_runtime_plan(evotune_runtime* runtime,
                         const evotune_problem* problem, void* stream,
                         evotune_plan** plan) {
  *plan = nullptr;
  if (absl::Status s = ValidateLayout(*problem); !s.ok()) return Report(s);
  absl::StatusOr<evotune::AttentionPlan> made = runtime->runtime->Plan(
      ToProblem(*problem), static_cast<CUstream>(stream));
  if (!made.ok()) return Report(made.status());
  *plan = new evotune_plan{runtime->runtime.get(), *std::move(made)};
  return 0;
}

void evotune_plan_free(evotune_plan* plan) { delete plan; }

void evotune_plan_scratch(const evotune_plan* plan, int64_t* workspace_floats,
                          int64_t* counters) {
  *workspace_floats = plan->plan.workspace_floats();
  *counters = plan->plan.counters();
}

int evotune_plan_describe(const evotune_plan* plan, char* out, int64_t size) {
  Describe(plan->plan.kernel(), out, size);
  return 0;
}

int evotune_plan_run(const evotune_plan* plan, const evotune_problem* problem,
                     const evotune_tensor* q, const evotune_tensor* k,
                     const evotune_tensor* v, const evotune_tensor* o,
                     const evotune_lengths* lengths, float scale,
                     float* workspace, int32_t* counters, void* stream) {
  if (absl::Status s = ValidateLayout(*problem); !s.ok()) return Report(s);
  absl::Status s = plan->runtime->Run(
      plan->plan,
      ToCall(*problem, *q, *k, *v, *o, lengths, scale, workspace, counters),
      static_cast<CUstream>(stream));
  return s.ok() ? 0 : Report(s);
}

const char* evotune_last_error(void) { return last_error.c_str(); }

}  // extern "C"
