#include "tuner/daemon/proto_convert.h"

#include "absl/strings/str_cat.h"

namespace evotune {

absl::StatusOr<Problem> ProblemFromProto(const v1::Problem& p,
                                         absl::string_view prefix) {
  Problem out;
  out.batch = p.batch();
  out.heads = p.heads();
  out.kv_heads = p.kv_heads() == 0 ? p.heads() : p.kv_heads();
  out.seq_q = p.seq_q();
  out.seq_k = p.seq_k();
  out.head_dim = p.head_dim();
  out.causal = p.causal();
  switch (p.dtype()) {
    case v1::DTYPE_FP16:
      out.dtype = DType::kFp16;
      break;
    case v1::DTYPE_BF16:
      out.dtype = DType::kBf16;
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          prefix, ".dtype: required, DTYPE_FP16 or DTYPE_BF16 (got ", p.dtype(),
          ")"));
  }
  return out;
}

v1::Problem ProblemToProto(const Problem& p) {
  v1::Problem out;
  out.set_batch(static_cast<uint32_t>(p.batch));
  out.set_heads(static_cast<uint32_t>(p.heads));
  out.set_kv_heads(static_cast<uint32_t>(p.kv_heads));
  out.set_seq_q(static_cast<uint32_t>(p.seq_q));
  out.set_seq_k(static_cast<uint32_t>(p.seq_k));
  out.set_head_dim(static_cast<uint32_t>(p.head_dim));
  out.set_causal(p.causal);
  out.set_dtype(p.dtype == DType::kBf16 ? v1::DTYPE_BF16 : v1::DTYPE_FP16);
  return out;
}

v1::Device DeviceToProto(const DeviceInfo& d) {
  v1::Device out;
  out.set_name(d.name);
  out.set_cc_major(d.cc_major);
  out.set_cc_minor(d.cc_minor);
  out.set_driver_version(d.driver_version);
  out.set_nvrtc_version(d.nvrtc_version);
  return out;
}

v1::Config ConfigToProto(const Config& c) {
  v1::Config out;
  for (const auto& [name, value] : c) {
    v1::ParamValue* p = out.add_params();
    p->set_name(name);
    p->set_value(value);
  }
  return out;
}

v1::Trial TrialToProto(const StoredTrial& t) {
  v1::Trial out;
  out.set_trial_id(t.trial_id);
  *out.mutable_config() = ConfigToProto(t.config);
  out.set_status(static_cast<v1::TrialStatus>(t.result.status));
  if (t.result.status == TrialStatus::kOk) {
    v1::Latency* l = out.mutable_latency();
    l->set_median_us(t.result.median_us);
    l->set_min_us(t.result.min_us);
    l->set_p90_us(t.result.p90_us);
    l->set_cv(t.result.cv);
    l->set_samples(t.result.samples);
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
  return out;
}

v1::QueryBestResponse BestToProto(const BestAnswer& answer) {
  v1::QueryBestResponse out;
  *out.mutable_device() = DeviceToProto(answer.device);
  out.set_transferred(answer.transferred);
  *out.mutable_source_problem() = ProblemToProto(answer.source_problem);
  for (const RankedTrial& r : answer.results) {
    v1::RankedConfig* c = out.add_results();
    c->set_template_name(r.template_name);
    c->set_template_hash(r.template_hash);
    *c->mutable_trial() = TrialToProto(r.trial);
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
  out.seed = r.seed();
  out.device = r.device();
  return out;
}

absl::StatusOr<BestQuery> BestQueryFromProto(const v1::QueryBestRequest& r) {
  BestQuery out;
  if (!r.has_problem()) {
    return absl::InvalidArgumentError("problem: required");
  }
  absl::StatusOr<Problem> problem = ProblemFromProto(r.problem());
  if (!problem.ok()) return problem.status();
  out.problem = *problem;
  out.device = r.device();
  out.template_name = r.template_name();
  out.k = r.k() == 0 ? 1 : static_cast<int>(std::min<uint32_t>(r.k(), 1 << 20));
  return out;
}

absl::StatusOr<EvaluateRequest> EvaluateFromProto(
    const v1::EvaluateConfigRequest& r) {
  EvaluateRequest out;
  out.template_name = r.template_name();
  out.device = r.device();
  for (const v1::ParamValue& p : r.config().params()) {
    if (!out.config.emplace(p.name(), p.value()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("config: parameter ", p.name(), " given twice"));
    }
  }
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
