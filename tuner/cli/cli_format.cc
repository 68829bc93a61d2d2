#include "tuner/cli/cli_format.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace evotune {

namespace {

// ", window (L, R)", ", softcap C", ", sinks" and ", ALiBi" where the
// problem has them;
// -1 for an unbounded side, as FlashAttention's window_size.
std::string ScoreModsText(const v1::Problem& p) {
  std::string out;
  if (p.has_window_left() || p.has_window_right()) {
    absl::StrAppend(&out, ", window (",
                    p.has_window_left() ? int64_t{p.window_left()} : -1, ", ",
                    p.has_window_right() ? int64_t{p.window_right()} : -1, ")");
  }
  if (p.softcap() > 0) absl::StrAppend(&out, ", softcap ", p.softcap());
  if (p.sinks()) absl::StrAppend(&out, ", sinks");
  if (p.alibi()) absl::StrAppend(&out, ", ALiBi");
  return out;
}

}  // namespace

std::string FormatProblem(const v1::Problem& p) {
  // kv_heads 0 in a request means kv_heads = heads.
  const uint32_t kv_heads = p.kv_heads() == 0 ? p.heads() : p.kv_heads();
  const std::string layout =
      p.layout() == v1::LAYOUT_VARLEN     ? " varlen"
      : p.layout() == v1::LAYOUT_KV_CACHE ? " kv-cache"
      : p.layout() == v1::LAYOUT_PAGED
          ? absl::StrCat(" paged (", p.page_size(), "-key pages)")
          : "";
  return absl::StrFormat(
      "B=%d H=%d KV=%d Sq=%d Sk=%d D=%d%s %s %s%s%s", p.batch(), p.heads(),
      kv_heads, p.seq_q(), p.seq_k(), p.head_dim(),
      p.head_dim_v() != 0 && p.head_dim_v() != p.head_dim()
          ? absl::StrCat(" Dv=", p.head_dim_v())
          : "",
      p.causal() ? "causal" : "non-causal",
      absl::StrCat(p.dtype() == v1::DTYPE_BF16 ? "bf16" : "fp16",
                   p.q_dtype() == v1::DTYPE_E4M3    ? " (Q/K/V e4m3)"
                   : p.kv_dtype() == v1::DTYPE_E4M3 ? " (K/V e4m3)"
                                                    : ""),
      layout, ScoreModsText(p));
}

std::string FormatConfig(const v1::Config& c) {
  std::vector<std::string> items;
  for (const v1::ParamValue& p : c.params()) {
    items.push_back(absl::StrCat(p.name(), "=", p.value()));
  }
  return absl::StrJoin(items, ",");
}

std::string FormatDevice(const v1::Device& d) {
  return absl::StrFormat("%s (sm_%d%d, driver %s, NVRTC %s)", d.name(),
                         d.cc_major(), d.cc_minor(), d.driver_version(),
                         d.nvrtc_version());
}

namespace {

// The wire enums' own names, lower case without their prefix: the same
// names the daemon uses (JobStateName, TrialStatusName).
std::string EnumLabel(const std::string& name, absl::string_view prefix) {
  if (!absl::StartsWith(name, prefix) || name.size() == prefix.size()) {
    return "unknown";
  }
  return absl::AsciiStrToLower(name.substr(prefix.size()));
}

}  // namespace

std::string StateName(v1::JobState state) {
  if (state == v1::JOB_STATE_UNSPECIFIED) return "unknown";
  return EnumLabel(v1::JobState_Name(state), "JOB_STATE_");
}

std::string TrialStatusLabel(v1::TrialStatus status) {
  if (status == v1::TRIAL_STATUS_UNSPECIFIED) return "unknown";
  return EnumLabel(v1::TrialStatus_Name(status), "TRIAL_STATUS_");
}

std::string FormatLatency(const v1::Trial& t) {
  if (t.status() != v1::TRIAL_STATUS_OK) return "-";
  return absl::StrFormat("%.2f us", t.latency().median_us());
}

std::string FormatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = static_cast<int64_t>(std::llround(seconds));
  if (s >= 3600) {
    return absl::StrFormat("%d:%02d:%02d", s / 3600, (s / 60) % 60, s % 60);
  }
  return absl::StrFormat("%d:%02d", s / 60, s % 60);
}

std::string FormatTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    widths.resize(std::max(widths.size(), row.size()));
    for (size_t i = 0; i < row.size(); ++i) {
      widths[i] = std::max(widths[i], row[i].size());
    }
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size())
        line += std::string(widths[i] - row[i].size() + 2, ' ');
    }
    absl::StrAppend(&out, line, "\n");
  }
  return out;
}

namespace {

// ", NAME=value, ..." of the job's strategy options, sorted by name.
std::string FormatOptions(const v1::Job& job) {
  std::map<std::string, double> sorted(job.strategy_options().begin(),
                                       job.strategy_options().end());
  std::string out;
  for (const auto& [name, value] : sorted) {
    absl::StrAppendFormat(&out, ", %s=%g", name, value);
  }
  return out;
}

}  // namespace

std::string FormatJob(const v1::Job& job) {
  std::string out = absl::StrCat(
      "job       ", job.job_id(), "\n", "state     ", StateName(job.state()),
      job.error().empty() ? "" : absl::StrCat(" (", job.error(), ")"), "\n",
      "template  ", job.template_name(), " @", job.template_hash(), "\n",
      "problem   ", FormatProblem(job.problem()), "\n", "device    ",
      FormatDevice(job.device()), "\n", "strategy  ", job.strategy(), " (seed ",
      job.seed(), FormatOptions(job), ")\n", "progress  ", job.trials_done(),
      " of ", job.budget().max_trials(), " trials, ",
      FormatDuration(job.elapsed_seconds()), " of ",
      FormatDuration(job.budget().max_seconds()), "\n");
  if (job.has_best()) {
    absl::StrAppend(&out, "best      ", FormatLatency(job.best()), "  ",
                    FormatConfig(job.best().config()), "\n");
  }
  return out;
}

std::string FormatJobsTable(const v1::ListJobsResponse& jobs) {
  std::vector<std::vector<std::string>> rows = {
      {"JOB", "STATE", "TEMPLATE", "PROBLEM", "TRIALS", "BEST"}};
  for (const v1::Job& j : jobs.jobs()) {
    rows.push_back({j.job_id(), StateName(j.state()), j.template_name(),
                    FormatProblem(j.problem()),
                    absl::StrCat(j.trials_done(), "/", j.budget().max_trials()),
                    j.has_best() ? FormatLatency(j.best()) : "-"});
  }
  return FormatTable(rows);
}

namespace {

// The table of FormatBest: a PREDICTED column when the cost model ranked
// the results; dashes for a default config, never measured.
std::vector<std::vector<std::string>> BestRows(
    const v1::QueryBestResponse& best) {
  std::vector<std::vector<std::string>> rows = {
      {"RANK", "TEMPLATE", "CONFIG", "MEDIAN", "MIN", "P90", "CV", "TRIAL"}};
  if (best.predicted()) rows[0].insert(rows[0].begin() + 3, "PREDICTED");
  int rank = 1;
  for (const v1::RankedConfig& r : best.results()) {
    const v1::Latency& l = r.trial().latency();
    std::vector<std::string> row = {absl::StrCat(rank++), r.template_name(),
                                    FormatConfig(r.trial().config())};
    if (best.predicted()) {
      row.push_back(absl::StrFormat("%.2f us", r.predicted_us()));
    }
    if (!r.trial().has_latency()) {
      row.insert(row.end(), {"-", "-", "-", "-", r.fitted() ? "fitted" : "-"});
    } else {
      row.insert(row.end(),
                 {absl::StrFormat("%.2f us%s", l.median_us(),
                                  l.timed_against() > 0 ? "*" : ""),
                  l.min_us() > 0 ? absl::StrFormat("%.2f us", l.min_us()) : "-",
                  l.p90_us() > 0 ? absl::StrFormat("%.2f us", l.p90_us()) : "-",
                  absl::StrFormat("%.1f%%", 100 * l.cv()),
                  r.trial().trial_id() > 0 ? absl::StrCat(r.trial().trial_id())
                                           : "-"});
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace

std::string FormatBest(const v1::QueryBestResponse& best) {
  std::string out =
      absl::StrCat("device   ", FormatDevice(best.device()), "\n");
  if (best.results().empty()) {
    absl::StrAppend(&out, "no template supports this problem\n");
    return out;
  }
  if (best.ranking()) {
    absl::StrAppend(&out,
                    "no exact match, and this GPU's cost model is still "
                    "ranking this problem: the templates' default configs, "
                    "not measured (ask again for the model's answer)\n");
  } else if (best.defaults()) {
    absl::StrAppend(&out,
                    "no config tuned on this GPU for the templates that "
                    "suit this problem best runs on it: their default "
                    "configs, not measured (tune it: evotune submit)\n");
  } else if (best.predicted() && best.results(0).fitted()) {
    absl::StrAppend(
        &out,
        "no exact match: first the config its template fits to this problem "
        "(TRIAL fitted, not measured), predicted within 5% of the best "
        "config tuned for another problem (",
        FormatProblem(best.source_problem()),
        "); then configs tuned for other problems, ranked by this GPU's cost "
        "model (PREDICTED: on this problem; MEDIAN: measured on the problem "
        "it was tuned for)\n");
  } else if (best.predicted()) {
    absl::StrAppend(
        &out,
        "no exact match: configs tuned for other problems, ranked by this "
        "GPU's cost model (PREDICTED: on this problem; MEDIAN: measured on "
        "the problem it was tuned for; the first from ",
        FormatProblem(best.source_problem()), ")\n");
  } else if (best.transferred()) {
    absl::StrAppend(
        &out, "no exact match: transferred from the nearest tuned problem ",
        FormatProblem(best.source_problem()), "\n");
  } else {
    absl::StrAppend(&out, "exact match\n");
  }
  absl::StrAppend(&out, FormatTable(BestRows(best)));
  if (std::any_of(best.results().begin(), best.results().end(),
                  [](const v1::RankedConfig& r) {
                    return r.trial().latency().timed_against() > 0;
                  })) {
    absl::StrAppend(&out,
                    "*: timed again once a search of the problem ended, in "
                    "turns with the problem's other fastest configs, of its "
                    "template and the others near it (their order was "
                    "measured side by side); configs of a template that "
                    "search passed over rank after its starred ones\n");
  }
  if (!best.tuning_job_id().empty()) {
    absl::StrAppend(&out, "tuning this problem in the background as job ",
                    best.tuning_job_id(), " (evotune watch ",
                    best.tuning_job_id(),
                    "); ask again for its own configs once it has results\n");
  }
  return out;
}

namespace {

// "  e4m3 ...\n": the FP8 inputs of a template that reads any; or "".
std::string Fp8Line(const v1::TemplateInfo& t) {
  std::vector<std::string> what;
  if (t.kv_fp8()) what.push_back("K and V (an FP8 KV cache)");
  if (t.q_fp8()) {
    std::vector<std::string> on;
    for (uint32_t cc : t.q_fp8_compute_capabilities()) {
      on.push_back(absl::StrCat(cc / 10, ".", cc % 10));
    }
    what.push_back(absl::StrCat("Q, K and V (FP8 attention",
                                on.empty() ? "" : " on compute capability ",
                                absl::StrJoin(on, ", "), ")"));
  }
  if (what.empty()) return "";
  return absl::StrCat("  e4m3 ", absl::StrJoin(what, "; "), "\n");
}

}  // namespace

std::string FormatTemplates(const v1::ListTemplatesResponse& templates) {
  std::string out;
  for (const v1::TemplateInfo& t : templates.templates()) {
    std::vector<std::string> dims, dtypes;
    for (uint32_t d : t.head_dims()) dims.push_back(absl::StrCat(d));
    for (int d : t.dtypes())
      dtypes.push_back(d == v1::DTYPE_BF16 ? "bf16" : "fp16");
    absl::StrAppend(
        &out, t.name(), " @", t.source_hash(), "\n  ", t.description(),
        "\n  head_dim {", absl::StrJoin(dims, ", "), "}",
        t.value_head_dims() == "any" ? " (head_dim_v any of them)"
        : t.value_head_dims() == "narrower"
            ? " (head_dim_v any of them up to head_dim's width)"
            : "",
        ", dtype {", absl::StrJoin(dtypes, ", "), "}\n", Fp8Line(t));
    for (const v1::ParamSpec& p : t.params()) {
      absl::StrAppend(&out, "  ", p.name(), " {",
                      absl::StrJoin(p.values(), ", "), "}: ", p.help(), "\n");
    }
    for (const std::string& c : t.constraints()) {
      absl::StrAppend(&out, "  requires ", c, "\n");
    }
  }
  return out;
}

std::string FormatEvaluation(const v1::EvaluateConfigRequest& request,
                             const v1::EvaluateConfigResponse& response) {
  const v1::Trial& t = response.trial();
  std::string out = absl::StrCat(
      "template  ", request.template_name(), " @", response.template_hash(),
      "\n", "config    ", FormatConfig(t.config()), "\n", "problem   ",
      FormatProblem(request.problem()), "\n", "device    ",
      FormatDevice(response.device()), "\n");
  if (t.status() == v1::TRIAL_STATUS_OK) {
    absl::StrAppend(&out,
                    "check     passed (validated against the reference on "
                    "fresh random inputs)\n");
    const v1::Latency& l = t.latency();
    absl::StrAppend(
        &out,
        absl::StrFormat("latency   median %.2f us, min %.2f us, p90 %.2f us, "
                        "cv %.1f%%, %.1f TFLOP/s\n",
                        l.median_us(), l.min_us(), l.p90_us(), 100 * l.cv(),
                        response.tflops()));
  } else {
    absl::StrAppend(&out, "check     ", TrialStatusLabel(t.status()), ": ",
                    t.error(), "\n");
  }
  absl::StrAppend(&out, "trial     ", t.trial_id(),
                  response.cached() ? " (from the store, not measured again)"
                                    : " (measured now)",
                  "\n");
  return out;
}

std::string FormatProgress(const v1::Job& job, int width) {
  const double budget = std::max<uint32_t>(job.budget().max_trials(), 1);
  const double done = job.trials_done();
  const double fraction = std::min(1.0, done / budget);
  const int filled = static_cast<int>(fraction * width);
  const double elapsed = job.elapsed_seconds();
  double eta = done > 0 ? elapsed / done * (budget - done) : NAN;
  eta = std::min(eta, job.budget().max_seconds() - elapsed);
  return absl::StrCat(
      "[", std::string(filled, '#'), std::string(width - filled, '.'), "] ",
      job.trials_done(), "/", job.budget().max_trials(), " trials  best ",
      job.has_best() ? FormatLatency(job.best()) : "-", "  elapsed ",
      FormatDuration(elapsed), "  ETA ",
      job.finished_unix_s() != 0 ? "0:00" : FormatDuration(eta));
}

}  // namespace evotune
