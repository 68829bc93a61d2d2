#include "tuner/daemon/proto_convert.h"

#include "absl/strings/str_cat.h"
#include "tuner/search/strategy_registry.h"

namespace evotune {

v1::Trial TrialToProto(const StoredTrial& t) {
  v1::Trial out;
  out.set_trial_id(t.trial_id);
  *out.mutable_config() = ConfigToProto(t.config);
  out.set_status(static_cast<v1::TrialStatus>(t.result.status));
  if (t.result.status == TrialStatus::kOk) {
    *out.mutable_latency() = LatencyToProto(t.result);
  }
  out.set_error(t.result.error);
  out.set_created_unix_s(t.created_unix_s);
  return out;
}

v1::Job JobToProto(const JobView& view) {
  const JobRecord& j = view.job;
  v1::Job out;
  out.set_job_id(j.job_id);
  out.set_template_name(j.template_name);
  out.set_template_hash(j.template_hash);
  *out.mutable_problem() = ProblemToProto(j.problem);
  out.mutable_budget()->set_max_trials(static_cast<uint32_t>(j.max_trials));
  out.mutable_budget()->set_max_seconds(j.max_seconds);
  out.set_strategy(j.strategy);
  out.set_seed(j.seed);
  *out.mutable_device() = DeviceToProto(j.device);
  out.set_state(static_cast<v1::JobState>(j.state));
  out.set_error(j.error);
  out.set_trials_done(static_cast<uint32_t>(j.trials_done));
  out.set_elapsed_seconds(j.elapsed_seconds);
  if (view.best) *out.mutable_best() = TrialToProto(*view.best);
  out.set_created_unix_s(j.created_unix_s);
  out.set_finished_unix_s(j.finished_unix_s);
  out.set_background(j.background);
  // Stored by the daemon itself as FormatStrategyOptions writes them.
  if (absl::StatusOr<StrategyOptions> o =
          ParseStrategyOptions(j.strategy_options);
      o.ok()) {
    out.mutable_strategy_options()->insert(o->begin(), o->end());
  }
  return out;
}

v1::TemplateInfo TemplateToProto(const KernelTemplate& t) {
  v1::TemplateInfo out;
  out.set_name(t.name);
  out.set_source_hash(t.hash);
  out.set_description(t.description);
  for (const Param& p : t.space.params()) {
    v1::ParamSpec* spec = out.add_params();
    spec->set_name(p.name);
    for (int64_t v : p.values) spec->add_values(v);
    spec->set_help(p.help);
  }
  for (const Constraint& c : t.constraints) out.add_constraints(c.expression);
  out.add_constraints("threads per block <= device limit");
  out.add_constraints("shared memory per block <= device limit");
  for (int64_t d : t.head_dims) out.add_head_dims(static_cast<uint32_t>(d));
  for (DType d : t.dtypes) {
    out.add_dtypes(d == DType::kBf16 ? v1::DTYPE_BF16 : v1::DTYPE_FP16);
  }
  out.set_kv_fp8(t.kv_fp8);
  out.set_q_fp8(t.q_fp8);
  for (int cc : t.q_fp8_compute_capabilities) {
    out.add_q_fp8_compute_capabilities(static_cast<uint32_t>(cc));
  }
  using Dims = KernelTemplate::ValueHeadDims;
  out.set_value_head_dims(t.value_head_dims == Dims::kAny        ? "any"
                          : t.value_head_dims == Dims::kNarrower ? "narrower"
                                                                 : "");
  return out;
}

v1::QueryBestResponse BestToProto(const BestAnswer& answer) {
  v1::QueryBestResponse out;
  *out.mutable_device() = DeviceToProto(answer.device);
  out.set_transferred(answer.transferred);
  out.set_predicted(answer.predicted);
  out.set_defaults(answer.defaults);
  out.set_ranking(answer.ranking);
  out.set_tuning_job_id(answer.tuning_job_id);
  *out.mutable_source_problem() = ProblemToProto(answer.source_problem);
  for (const RankedTrial& r : answer.results) {
    v1::RankedConfig* c = out.add_results();
    c->set_template_name(r.template_name);
    c->set_template_hash(r.template_hash);
    *c->mutable_trial() = TrialToProto(r.trial);
    c->set_predicted_us(r.predicted_us);
    c->set_fitted(r.fitted);
    // A default or fitted config was never measured: no status, no latency.
    if (answer.defaults || r.fitted) {
      c->mutable_trial()->clear_status();
      c->mutable_trial()->clear_latency();
    }
  }
  return out;
}

absl::StatusOr<ModelTuneRequest> ModelTuneFromProto(
    const v1::TuneModelRequest& r) {
  ModelTuneRequest out;
  out.heads = r.heads();
  out.kv_heads = r.kv_heads() == 0 ? r.heads() : r.kv_heads();
  out.head_dim = r.head_dim();
  out.head_dim_v = r.head_dim_v() == r.head_dim() ? 0 : r.head_dim_v();
  if (r.dtype() == v1::DTYPE_FP16) {
    out.dtype = DType::kFp16;
  } else if (r.dtype() == v1::DTYPE_BF16) {
    out.dtype = DType::kBf16;
  } else {
    return absl::InvalidArgumentError(
        "dtype: DTYPE_FP16 or DTYPE_BF16 required");
  }
  if (r.layer_kinds_size() > 0) out.kinds.clear();
  for (const v1::LayerKind& k : r.layer_kinds()) {
    LayerKind kind;
    if (k.has_window_left()) kind.window_left = k.window_left();
    kind.softcap = k.softcap();
    kind.sinks = k.sinks();
    kind.alibi = k.alibi();
    out.kinds.push_back(kind);
  }
  const v1::Envelope& e = r.envelope();
  out.envelope.max_batch = e.max_batch();
  out.envelope.max_context = e.max_context();
  out.envelope.prefill_chunk = e.prefill_chunk();
  out.envelope.max_prefill_tokens = e.max_prefill_tokens();
  out.envelope.decode_queries.assign(e.decode_queries().begin(),
                                     e.decode_queries().end());
  absl::StatusOr<Layout> layout =
      LayoutFromProto(e.layout(), "envelope.layout");
  if (!layout.ok()) return layout.status();
  out.envelope.layout = *layout;
  out.envelope.page_size = e.page_size();
  out.max_trials = r.budget().max_trials();
  out.max_seconds = r.budget().max_seconds();
  out.device = r.device();
  out.dry_run = r.dry_run();
  out.strategy = r.strategy();
  out.strategy_options.insert(r.strategy_options().begin(),
                              r.strategy_options().end());
  return out;
}

v1::TuneModelResponse ModelBucketsToProto(
    const std::vector<ModelBucket>& buckets) {
  v1::TuneModelResponse out;
  for (const ModelBucket& b : buckets) {
    v1::ModelBucket* m = out.add_buckets();
    *m->mutable_problem() = ProblemToProto(b.problem);
    m->set_job_id(b.job_id);
    if (b.state.has_value()) {
      m->set_state(static_cast<v1::JobState>(static_cast<int>(*b.state)));
    }
    m->set_submitted(b.submitted);
    m->set_predicted_served_us(b.served_us);
    m->set_predicted_best_us(b.best_us);
    m->set_max_trials(static_cast<uint32_t>(b.trials));
  }
  return out;
}

absl::StatusOr<SearchRequest> SearchFromProto(
    const v1::SubmitSearchRequest& r) {
  SearchRequest out;
  out.template_name = r.template_name();
  if (!r.has_problem()) {
    return absl::InvalidArgumentError("problem: required");
  }
  absl::StatusOr<Problem> problem = ProblemFromProto(r.problem());
  if (!problem.ok()) return problem.status();
  out.problem = *problem;
  out.max_trials = r.budget().max_trials();
  out.max_seconds = r.budget().max_seconds();
  out.strategy = r.strategy();
  out.strategy_options.insert(r.strategy_options().begin(),
                              r.strategy_options().end());
  out.seed = r.seed();
  out.device = r.device();
  return out;
}

namespace {

// The fields QueryBestRequest and GetKernelRequest share, k = 1.
template <typename Request>
absl::StatusOr<BestQuery> QueryFromProto(const Request& r) {
  BestQuery out;
  if (!r.has_problem()) {
    return absl::InvalidArgumentError("problem: required");
  }
  absl::StatusOr<Problem> problem = ProblemFromProto(r.problem());
  if (!problem.ok()) return problem.status();
  out.problem = *problem;
  out.device = r.device();
  out.template_name = r.template_name();
  if (r.has_tune_on_miss()) out.tune_on_miss = r.tune_on_miss();
  return out;
}

}  // namespace

absl::StatusOr<BestQuery> BestQueryFromProto(const v1::QueryBestRequest& r) {
  absl::StatusOr<BestQuery> out = QueryFromProto(r);
  if (!out.ok()) return out;
  out->k =
      r.k() == 0 ? 1 : static_cast<int>(std::min<uint32_t>(r.k(), 1 << 20));
  if (r.has_wait_for_model()) out->wait_for_model = r.wait_for_model();
  return out;
}

absl::StatusOr<BestQuery> KernelQueryFromProto(const v1::GetKernelRequest& r) {
  return QueryFromProto(r);
}

v1::Kernel KernelToProto(const ServedKernel& kernel) {
  // The answer's fields as QueryBest sends them, k = 1.
  const v1::QueryBestResponse best = BestToProto(kernel.answer);
  const v1::RankedConfig& chosen = best.results(0);
  v1::Kernel out;
  *out.mutable_problem() = ProblemToProto(kernel.problem);
  *out.mutable_device() = best.device();
  out.set_template_name(chosen.template_name());
  out.set_template_hash(chosen.template_hash());
  *out.mutable_config() = chosen.trial().config();
  if (!best.defaults()) *out.mutable_trial() = chosen.trial();
  out.set_transferred(best.transferred());
  out.set_predicted(best.predicted());
  out.set_defaults(best.defaults());
  *out.mutable_source_problem() = best.source_problem();
  out.set_tuning_job_id(best.tuning_job_id());
  out.set_arch(kernel.arch);
  out.set_nvrtc_version(kernel.nvrtc_version);
  out.set_kernel_name(kernel.kernel_name);
  out.set_cubin(kernel.compiled.cubin);
  out.set_ptx(kernel.compiled.ptx);
  *out.mutable_geometry() = GeometryToProto(kernel.geometry);
  out.set_param_layout_version(kernel.param_layout_version);
  return out;
}

absl::StatusOr<EvaluateRequest> EvaluateFromProto(
    const v1::EvaluateConfigRequest& r) {
  EvaluateRequest out;
  out.template_name = r.template_name();
  out.device = r.device();
  absl::StatusOr<Config> config = ConfigFromProto(r.config());
  if (!config.ok()) return config.status();
  out.config = *std::move(config);
  if (!r.has_problem()) {
    return absl::InvalidArgumentError("problem: required");
  }
  absl::StatusOr<Problem> problem = ProblemFromProto(r.problem());
  if (!problem.ok()) return problem.status();
  out.problem = *problem;
  return out;
}

v1::EvaluateConfigResponse EvaluateToProto(const EvaluateAnswer& answer) {
  v1::EvaluateConfigResponse out;
  *out.mutable_device() = DeviceToProto(answer.device);
  out.set_template_hash(answer.template_hash);
  *out.mutable_trial() = TrialToProto(answer.trial);
  out.set_cached(answer.cached);
  out.set_tflops(answer.tflops);
  return out;
}

absl::StatusOr<std::optional<JobState>> StateFilterFromProto(int state) {
  if (state == v1::JOB_STATE_UNSPECIFIED) return std::optional<JobState>();
  if (state < 1 || state > 5) {
    return absl::InvalidArgumentError(
        absl::StrCat("state: unknown job state ", state));
  }
  return std::optional<JobState>(static_cast<JobState>(state));
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // absl and gRPC share the canonical code numbering.
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

}  // namespace evotune
