#include "tuner/wire/message_convert.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace evotune {

absl::StatusOr<Layout> LayoutFromProto(v1::Layout layout,
                                       absl::string_view field) {
  switch (layout) {
    case v1::LAYOUT_DENSE:
      return Layout::kDense;
    case v1::LAYOUT_VARLEN:
      return Layout::kVarlen;
    case v1::LAYOUT_KV_CACHE:
      return Layout::kKvCache;
    case v1::LAYOUT_PAGED:
      return Layout::kPaged;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(field,
                       ": LAYOUT_DENSE, LAYOUT_VARLEN, LAYOUT_KV_CACHE or "
                       "LAYOUT_PAGED (got ",
                       layout, ")"));
  }
}

v1::Layout LayoutToProto(Layout layout) {
  return layout == Layout::kVarlen    ? v1::LAYOUT_VARLEN
         : layout == Layout::kKvCache ? v1::LAYOUT_KV_CACHE
         : layout == Layout::kPaged   ? v1::LAYOUT_PAGED
                                      : v1::LAYOUT_DENSE;
}

absl::StatusOr<Problem> ProblemFromProto(const v1::Problem& p,
                                         absl::string_view prefix) {
  Problem out;
  out.batch = p.batch();
  out.heads = p.heads();
  out.kv_heads = p.kv_heads() == 0 ? p.heads() : p.kv_heads();
  out.seq_q = p.seq_q();
  out.seq_k = p.seq_k();
  out.head_dim = p.head_dim();
  // 0, or a value equal to head_dim: the same problem (one key).
  out.head_dim_v = p.head_dim_v() == p.head_dim() ? 0 : p.head_dim_v();
  out.causal = p.causal();
  absl::StatusOr<Layout> layout =
      LayoutFromProto(p.layout(), absl::StrCat(prefix, ".layout"));
  if (!layout.ok()) return layout.status();
  out.layout = *layout;
  out.page_size = p.page_size();
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
  if (p.kv_dtype() == v1::DTYPE_E4M3) {
    out.kv_fp8 = true;
  } else if (p.kv_dtype() != v1::DTYPE_UNSPECIFIED &&
             p.kv_dtype() != p.dtype()) {
    return absl::InvalidArgumentError(absl::StrCat(
        prefix,
        ".kv_dtype: DTYPE_UNSPECIFIED (the dtype's), the dtype or DTYPE_E4M3 "
        "(got ",
        p.kv_dtype(), ")"));
  }
  if (p.q_dtype() == v1::DTYPE_E4M3) {
    out.q_fp8 = true;
  } else if (p.q_dtype() != v1::DTYPE_UNSPECIFIED && p.q_dtype() != p.dtype()) {
    return absl::InvalidArgumentError(absl::StrCat(
        prefix,
        ".q_dtype: DTYPE_UNSPECIFIED (the dtype's), the dtype or DTYPE_E4M3 "
        "(got ",
        p.q_dtype(), ")"));
  }
  if (p.has_window_left()) out.window_left = p.window_left();
  if (p.has_window_right()) out.window_right = p.window_right();
  out.softcap = p.softcap();
  out.sinks = p.sinks();
  out.alibi = p.alibi();
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
  if (HeadDimV(p) != p.head_dim) {
    out.set_head_dim_v(static_cast<uint32_t>(p.head_dim_v));
  }
  out.set_causal(p.causal);
  out.set_dtype(p.dtype == DType::kBf16 ? v1::DTYPE_BF16 : v1::DTYPE_FP16);
  if (p.kv_fp8) out.set_kv_dtype(v1::DTYPE_E4M3);
  if (p.q_fp8) out.set_q_dtype(v1::DTYPE_E4M3);
  out.set_layout(LayoutToProto(p.layout));
  out.set_page_size(static_cast<uint32_t>(p.page_size));
  if (p.window_left >= 0) {
    out.set_window_left(static_cast<uint32_t>(p.window_left));
  }
  if (p.window_right >= 0) {
    out.set_window_right(static_cast<uint32_t>(p.window_right));
  }
  out.set_softcap(p.softcap);
  out.set_sinks(p.sinks);
  out.set_alibi(p.alibi);
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

DeviceInfo DeviceKeyFromProto(const v1::Device& d) {
  DeviceInfo out;
  out.name = d.name();
  out.cc_major = static_cast<int>(d.cc_major());
  out.cc_minor = static_cast<int>(d.cc_minor());
  out.driver_version = d.driver_version();
  out.nvrtc_version = d.nvrtc_version();
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

absl::StatusOr<DeviceInfo> DeviceFromProto(const v1::WorkerDevice& d) {
  if (d.device().cc_major() > 99 || d.device().cc_minor() > 9) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device.device: compute capability ", d.device().cc_major(), ".",
        d.device().cc_minor(), " is not one"));
  }
  DeviceInfo out = DeviceKeyFromProto(d.device());
  out.limits.smem_per_block_bytes =
      static_cast<int64_t>(d.smem_per_block_bytes());
  out.limits.max_threads_per_block =
      static_cast<int>(d.max_threads_per_block());
  if (d.multiprocessors() > static_cast<uint32_t>(kMaxMultiprocessors)) {
    return absl::InvalidArgumentError(
        absl::StrCat("device.multiprocessors: at most ", kMaxMultiprocessors,
                     " (got ", d.multiprocessors(), ")"));
  }
  out.limits.multiprocessors = static_cast<int>(d.multiprocessors());
  out.limits.compute_capability = 10 * out.cc_major + out.cc_minor;
  if (out.name.empty()) {
    return absl::InvalidArgumentError("device.device.name: required");
  }
  if (out.limits.smem_per_block_bytes <= 0 ||
      out.limits.max_threads_per_block <= 0) {
    return absl::InvalidArgumentError(
        "device: smem_per_block_bytes and max_threads_per_block are required");
  }
  return out;
}

v1::WorkerDevice WorkerDeviceToProto(const DeviceInfo& d) {
  v1::WorkerDevice out;
  *out.mutable_device() = DeviceToProto(d);
  out.set_smem_per_block_bytes(
      static_cast<uint64_t>(d.limits.smem_per_block_bytes));
  out.set_max_threads_per_block(
      static_cast<uint32_t>(d.limits.max_threads_per_block));
  out.set_multiprocessors(
      static_cast<uint32_t>(std::max(0, d.limits.multiprocessors)));
  return out;
}

absl::StatusOr<Config> ConfigFromProto(const v1::Config& c) {
  Config out;
  for (const v1::ParamValue& p : c.params()) {
    if (!out.emplace(p.name(), p.value()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("config: parameter ", p.name(), " given twice"));
    }
  }
  return out;
}

v1::Latency LatencyToProto(const TrialResult& r) {
  v1::Latency l;
  l.set_median_us(r.median_us);
  l.set_min_us(r.min_us);
  l.set_p90_us(r.p90_us);
  l.set_cv(r.cv);
  l.set_samples(static_cast<uint32_t>(r.samples));
  l.set_timed_against(static_cast<uint32_t>(std::max(0, r.timed_against)));
  return l;
}

v1::TrialTask TaskToProto(const std::string& task_id, const TrialTask& t,
                          absl::Duration deadline) {
  v1::TrialTask out;
  out.set_task_id(task_id);
  *out.mutable_device() = DeviceToProto(t.device);
  out.set_template_name(t.template_name);
  out.set_template_hash(t.template_hash);
  *out.mutable_config() = ConfigToProto(t.config);
  *out.mutable_problem() = ProblemToProto(t.problem);
  out.set_quick(t.quick);
  out.set_deadline_seconds(absl::ToDoubleSeconds(deadline));
  for (const Contender& c : t.rivals) {
    v1::Rival* rival = out.add_rivals();
    rival->set_template_name(c.template_name);
    rival->set_template_hash(c.template_hash);
    *rival->mutable_config() = ConfigToProto(c.config);
  }
  out.set_turns(static_cast<uint32_t>(std::max(0, t.turns)));
  return out;
}

absl::StatusOr<TrialTask> TaskFromProto(const v1::TrialTask& t) {
  TrialTask out;
  out.device = DeviceKeyFromProto(t.device());
  out.template_name = t.template_name();
  out.template_hash = t.template_hash();
  absl::StatusOr<Config> config = ConfigFromProto(t.config());
  if (!config.ok()) return config.status();
  out.config = *std::move(config);
  absl::StatusOr<Problem> problem =
      ProblemFromProto(t.problem(), "task.problem");
  if (!problem.ok()) return problem.status();
  out.problem = *problem;
  out.quick = t.quick();
  if (t.rivals_size() > kMaxRivals) {
    return absl::InvalidArgumentError(absl::StrCat(
        "task.rivals: ", t.rivals_size(), " configs, at most ", kMaxRivals));
  }
  for (int i = 0; i < t.rivals_size(); ++i) {
    const v1::Rival& r = t.rivals(i);
    if (r.template_name().empty() || r.template_hash().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("task.rivals[", i,
                       "].template_name: a rival names its template "
                       "and its version"));
    }
    absl::StatusOr<Config> config = ConfigFromProto(r.config());
    if (!config.ok()) return config.status();
    out.rivals.push_back(
        {r.template_name(), r.template_hash(), *std::move(config)});
  }
  if (!out.rivals.empty() && (t.turns() < 1 || t.turns() > kMaxTurns)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "task.turns: ", t.turns(), " with rivals; must be 1 to ", kMaxTurns));
  }
  out.turns = static_cast<int>(t.turns());
  return out;
}

v1::RivalResult RivalToProto(const TrialResult& r) {
  v1::RivalResult out;
  out.set_status(static_cast<v1::TrialStatus>(r.status));
  if (r.status == TrialStatus::kOk) *out.mutable_latency() = LatencyToProto(r);
  out.set_error(r.error);
  return out;
}

void SetResult(const TrialResult& r, v1::CompleteTrialRequest* out) {
  out->set_status(static_cast<v1::TrialStatus>(r.status));
  if (r.status == TrialStatus::kOk) *out->mutable_latency() = LatencyToProto(r);
  out->set_error(r.error);
  for (const TrialResult& rival : r.rival_results) {
    *out->add_rivals() = RivalToProto(rival);
  }
}

namespace {

// A result's own fields, wherever they sit; `prefix` names them in errors.
absl::StatusOr<TrialResult> OutcomeFromProto(int status,
                                             const v1::Latency& latency,
                                             const std::string& error,
                                             absl::string_view prefix) {
  if (!IsValidTrialStatus(status)) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "status: unknown trial status ", status));
  }
  TrialResult out;
  out.status = static_cast<TrialStatus>(status);
  if (out.status == TrialStatus::kOk) {
    out.median_us = latency.median_us();
    out.min_us = latency.min_us();
    out.p90_us = latency.p90_us();
    out.cv = latency.cv();
    out.samples = static_cast<int>(latency.samples());
    out.timed_against = static_cast<int>(
        std::min<uint32_t>(latency.timed_against(), kMaxRivals));
    if (!(out.median_us > 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          prefix, "latency.median_us: must be positive for an ok trial"));
    }
  }
  out.error = error;
  return out;
}

}  // namespace

absl::StatusOr<TrialResult> ResultFromProto(const v1::CompleteTrialRequest& r) {
  absl::StatusOr<TrialResult> out = OutcomeFromProto(
      static_cast<int>(r.status()), r.latency(), r.error(), "");
  if (!out.ok()) return out.status();
  for (int i = 0; i < r.rivals_size(); ++i) {
    const v1::RivalResult& rival = r.rivals(i);
    absl::StatusOr<TrialResult> result =
        OutcomeFromProto(static_cast<int>(rival.status()), rival.latency(),
                         rival.error(), absl::StrCat("rivals[", i, "]."));
    if (!result.ok()) return result.status();
    out->rival_results.push_back(*std::move(result));
  }
  return out;
}

v1::LaunchGeometry GeometryToProto(const LaunchGeometry& g) {
  v1::LaunchGeometry out;
  out.set_grid_x(g.grid[0]);
  out.set_grid_y(g.grid[1]);
  out.set_grid_z(g.grid[2]);
  out.set_cluster_x(g.cluster_x);
  out.set_block_threads(g.block_threads);
  out.set_smem_bytes(g.smem_bytes);
  out.set_workspace_floats(g.workspace_floats);
  out.set_counters(g.counters);
  out.set_tma_q_rows(g.tma.q_rows);
  out.set_tma_kv_rows(g.tma.kv_rows);
  out.set_tma_o_rows(g.tma.o_rows);
  out.set_persistent(g.persistent);
  return out;
}

LaunchGeometry GeometryFromProto(const v1::LaunchGeometry& g) {
  LaunchGeometry out;
  out.grid[0] = static_cast<int64_t>(g.grid_x());
  out.grid[1] = static_cast<int64_t>(g.grid_y());
  out.grid[2] = static_cast<int64_t>(g.grid_z());
  out.cluster_x = static_cast<int>(g.cluster_x());
  out.block_threads = static_cast<int>(g.block_threads());
  out.smem_bytes = static_cast<int64_t>(g.smem_bytes());
  out.workspace_floats = static_cast<int64_t>(g.workspace_floats());
  out.counters = static_cast<int64_t>(g.counters());
  out.tma.q_rows = static_cast<int>(g.tma_q_rows());
  out.tma.kv_rows = static_cast<int>(g.tma_kv_rows());
  out.tma.o_rows = static_cast<int>(g.tma_o_rows());
  out.persistent = g.persistent();
  return out;
}

}  // namespace evotune
