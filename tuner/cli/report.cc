#include "tuner/cli/report.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tuner/cli/cli_format.h"
#include "tuner/cli/comparison.h"
#include "tuner/cli/html.h"

namespace evotune {
namespace {

constexpr int kWidth = 720;
constexpr int kHeight = 260;
constexpr int kLeft = 64;    // Room for the time axis labels.
constexpr int kBottom = 36;  // Room for the x axis labels.
constexpr int kTop = 28;     // The band where failures are marked.
constexpr int kTopTrials = 10;

const char* StatusColor(v1::TrialStatus s) {
  switch (s) {
    case v1::TRIAL_STATUS_OK:
      return "#1f77b4";
    case v1::TRIAL_STATUS_INCORRECT:
      return "#d62728";
    case v1::TRIAL_STATUS_CRASHED:
    case v1::TRIAL_STATUS_TIMEOUT:
      return "#9467bd";
    default:  // Compile errors, resource rejections.
      return "#7f7f7f";
  }
}

// Maps times (µs) to y on a log scale over [lo, hi].
struct TimeAxis {
  double lo = 1, hi = 10;
  double Y(double us) const {
    const double f = (std::log(us) - std::log(lo)) /
                     std::max(1e-9, std::log(hi) - std::log(lo));
    return kTop + (1 - f) * (kHeight - kTop - kBottom);
  }
  // Tick labels at the ends and the geometric middle.
  std::string Ticks() const {
    std::string out;
    for (double us : {lo, std::sqrt(lo * hi), hi}) {
      absl::StrAppendFormat(&out,
                            "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" "
                            "class=\"tick\">%.3g us</text>\n",
                            kLeft - 6, Y(us) + 4, us);
    }
    return out;
  }
};

TimeAxis AxisOf(const std::vector<v1::TrialEvent>& events) {
  TimeAxis a;
  bool any = false;
  for (const v1::TrialEvent& e : events) {
    if (e.trial().status() != v1::TRIAL_STATUS_OK) continue;
    const double us = e.trial().latency().median_us();
    if (!(us > 0)) continue;
    a.lo = any ? std::min(a.lo, us) : us;
    a.hi = any ? std::max(a.hi, us) : us;
    any = true;
  }
  if (a.hi <= a.lo * 1.05) {
    a.lo /= 1.05;
    a.hi *= 1.05;
  }
  return a;
}

std::string SvgOpen(const std::string& label) {
  return absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
      "role=\"img\" aria-label=\"%s\">\n<rect x=\"%d\" y=\"%d\" width=\"%d\" "
      "height=\"%d\" class=\"frame\"/>\n",
      kWidth, kHeight, HtmlEscape(label), kLeft, kTop, kWidth - kLeft - 8,
      kHeight - kTop - kBottom);
}

std::string ProgressSvg(const std::vector<v1::TrialEvent>& events) {
  const TimeAxis axis = AxisOf(events);
  const int n = std::max<int>(1, static_cast<int>(events.size()));
  auto x = [&](int i) {
    return kLeft + 8 + (kWidth - kLeft - 24) * (n == 1 ? 0.5 : i / (n - 1.0));
  };
  std::string svg = SvgOpen("time of every trial and the best so far");
  svg += axis.Ticks();
  std::string best_line;
  double best = 0;
  for (int i = 0; i < static_cast<int>(events.size()); ++i) {
    const v1::Trial& t = events[i].trial();
    const std::string title = HtmlEscape(
        absl::StrCat("#", events[i].sequence(), " ", FormatConfig(t.config()),
                     " ", TrialStatusLabel(t.status()), " ", FormatLatency(t)));
    if (t.status() != v1::TRIAL_STATUS_OK || !(t.latency().median_us() > 0)) {
      absl::StrAppendFormat(&svg,
                            "<text x=\"%.1f\" y=\"%d\" class=\"fail\" "
                            "fill=\"%s\"><title>%s</title>x</text>\n",
                            x(i) - 3, kTop - 8, StatusColor(t.status()), title);
      continue;
    }
    const double us = t.latency().median_us();
    absl::StrAppendFormat(&svg,
                          "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" "
                          "class=\"trial\"><title>%s</title></circle>\n",
                          x(i), axis.Y(us), title);
    if (best == 0 || us < best) {
      if (best != 0) {
        absl::StrAppendFormat(&best_line, " %.1f,%.1f", x(i), axis.Y(best));
      }
      best = us;
    }
    absl::StrAppendFormat(&best_line, " %.1f,%.1f", x(i), axis.Y(best));
  }
  if (!best_line.empty()) {
    absl::StrAppend(&svg, "<polyline points=\"", best_line,
                    "\" class=\"best\"/>\n");
  }
  absl::StrAppendFormat(&svg,
                        "<text x=\"%d\" y=\"%d\" class=\"tick\">trial 1</text>"
                        "<text x=\"%d\" y=\"%d\" text-anchor=\"end\" "
                        "class=\"tick\">trial %d</text>\n</svg>\n",
                        kLeft + 8, kHeight - 12, kWidth - 16, kHeight - 12,
                        static_cast<int>(events.size()));
  return svg;
}

// One strip per value of the parameter: the correct trials' times.
std::string ParamSvg(const std::string& name,
                     const std::vector<v1::TrialEvent>& events,
                     const TimeAxis& axis) {
  std::map<int64_t, std::vector<double>> by_value;
  for (const v1::TrialEvent& e : events) {
    const v1::Trial& t = e.trial();
    if (t.status() != v1::TRIAL_STATUS_OK) continue;
    for (const v1::ParamValue& p : t.config().params()) {
      if (p.name() == name)
        by_value[p.value()].push_back(t.latency().median_us());
    }
  }
  std::string svg = SvgOpen(absl::StrCat("time per value of ", name));
  svg += axis.Ticks();
  const int values = std::max<int>(1, static_cast<int>(by_value.size()));
  const double step = (kWidth - kLeft - 8.0) / values;
  int i = 0;
  for (auto& [value, times] : by_value) {
    const double cx = kLeft + step * (i++ + 0.5);
    std::sort(times.begin(), times.end());
    for (double us : times) {
      absl::StrAppendFormat(&svg,
                            "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" "
                            "class=\"trial\"/>\n",
                            cx, axis.Y(us));
    }
    absl::StrAppendFormat(
        &svg,
        "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" "
        "class=\"median\"/>\n<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" "
        "class=\"tick\">%d (%d)</text>\n",
        cx - step / 4, cx + step / 4, axis.Y(times[times.size() / 2]),
        axis.Y(times[times.size() / 2]), cx, kHeight - 12, value,
        static_cast<int>(times.size()));
  }
  svg += "</svg>\n";
  return svg;
}

std::string TopTable(const std::vector<v1::TrialEvent>& events) {
  std::vector<const v1::TrialEvent*> ok;
  for (const v1::TrialEvent& e : events) {
    if (e.trial().status() == v1::TRIAL_STATUS_OK) ok.push_back(&e);
  }
  std::sort(ok.begin(), ok.end(), [](const auto* a, const auto* b) {
    return a->trial().latency().median_us() < b->trial().latency().median_us();
  });
  if (ok.size() > kTopTrials) ok.resize(kTopTrials);
  std::string out =
      "<table>\n<tr><th>rank</th><th>config</th><th>median</th><th>min</th>"
      "<th>p90</th><th>cv</th><th>samples</th><th>trial</th></tr>\n";
  for (size_t i = 0; i < ok.size(); ++i) {
    const v1::Trial& t = ok[i]->trial();
    absl::StrAppendFormat(
        &out,
        "<tr><td>%d</td><td>%s</td><td>%.2f us</td><td>%.2f us</td>"
        "<td>%.2f us</td><td>%.1f%%</td><td>%d%s</td><td>#%d</td></tr>\n",
        i + 1, HtmlEscape(FormatConfig(t.config())), t.latency().median_us(),
        t.latency().min_us(), t.latency().p90_us(), 100 * t.latency().cv(),
        t.latency().samples(),
        t.latency().timed_against() > 0
            ? absl::StrCat(", in turns with ", t.latency().timed_against())
            : "",
        ok[i]->sequence());
  }
  return out + "</table>\n";
}

std::string Summary(const v1::Job& job) {
  std::string out = "<dl>\n";
  auto row = [&](const char* k, const std::string& v) {
    absl::StrAppend(&out, "<dt>", k, "</dt><dd>", HtmlEscape(v), "</dd>\n");
  };
  row("template",
      absl::StrCat(job.template_name(), " (", job.template_hash(), ")"));
  row("problem", FormatProblem(job.problem()));
  row("device", FormatDevice(job.device()));
  row("search", absl::StrCat(job.strategy(), ", seed ", job.seed(), ", ",
                             job.trials_done(), " trials in ",
                             FormatDuration(job.elapsed_seconds())));
  row("state", absl::StrCat(StateName(job.state()),
                            job.error().empty() ? "" : ": " + job.error()));
  if (job.has_best()) {
    row("best", absl::StrCat(FormatLatency(job.best()), " with ",
                             FormatConfig(job.best().config())));
  }
  return out + "</dl>\n";
}

// Horizontal bars of the comparison run's times: each evotune row, then
// SDPA's backends.
std::string ComparisonSvg(const JobComparison& c, const v1::Job& job) {
  std::vector<std::pair<std::string, double>> bars;
  for (const v1::SdpaComparisonRow& r : c.rows) {
    bars.push_back(
        {absl::StrCat(IsJobWinner(r, job) ? "winner " : "", r.template_name()),
         r.us()});
  }
  const v1::SdpaComparisonRow& first = c.rows.front();
  if (first.has_cudnn_us()) bars.push_back({"SDPA cuDNN", first.cudnn_us()});
  if (first.has_flash_us()) bars.push_back({"SDPA flash", first.flash_us()});
  double longest = 0;
  for (const auto& [label, us] : bars) longest = std::max(longest, us);
  constexpr int kBar = 22, kLabel = 170;
  const int height = kBar * static_cast<int>(bars.size()) + 8;
  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
      "role=\"img\" aria-label=\"times beside SDPA\">\n",
      kWidth, height);
  for (size_t i = 0; i < bars.size(); ++i) {
    const auto& [label, us] = bars[i];
    const double w = (kWidth - kLabel - 90) * us / std::max(1e-9, longest);
    const bool sdpa = label.rfind("SDPA", 0) == 0;
    absl::StrAppendFormat(
        &svg,
        "<text x=\"%d\" y=\"%d\" text-anchor=\"end\" class=\"tick\">%s</text>"
        "<rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%d\" class=\"%s\"/>"
        "<text x=\"%.1f\" y=\"%d\" class=\"tick\">%.2f us</text>\n",
        kLabel - 6, 4 + kBar * static_cast<int>(i) + 15, HtmlEscape(label),
        kLabel, 4 + kBar * static_cast<int>(i), w, kBar - 6,
        sdpa ? "sdpa" : "ours", kLabel + w + 6,
        4 + kBar * static_cast<int>(i) + 15, us);
  }
  return svg + "</svg>\n";
}

std::string Ratio(const v1::SdpaComparisonRow& r, bool has, double sdpa_us) {
  return has && r.us() > 0 ? absl::StrFormat("%.2fx", sdpa_us / r.us()) : "-";
}

std::string ComparisonSection(const JobComparison& c, const v1::Job& job) {
  const v1::SdpaComparison& run = c.run;
  std::string out = absl::StrCat(
      "<h2>Beside PyTorch SDPA</h2>\n<p>Timed in one process by "
      "bench/sdpa_compare.py on ",
      HtmlEscape(run.gpu()), " (", HtmlEscape(run.date()), ", commit ",
      HtmlEscape(run.commit()), ", torch ", HtmlEscape(run.torch()),
      "): the same inputs for every kernel, CUDA graphs, the median per "
      "call. These times are that run's, not this job's trials'; a ratio "
      "above 1 means the evotune kernel is faster.</p>\n");
  if (!IsJobWinner(c.rows.front(), job)) {
    absl::StrAppend(&out,
                    "<p>That run did not time this job's winner; its rows "
                    "are other kernels for the same problem.</p>\n");
  }
  absl::StrAppend(&out, ComparisonSvg(c, job),
                  "<table>\n<tr><th>kernel</th><th>config</th><th>time</th>"
                  "<th>TFLOP/s</th><th>SDPA cuDNN / ours</th>"
                  "<th>SDPA flash / ours</th><th>rel. error</th></tr>\n");
  for (const v1::SdpaComparisonRow& r : c.rows) {
    absl::StrAppendFormat(
        &out,
        "<tr><td>%s%s</td><td>%s</td><td>%.2f us</td><td>%.1f</td><td>%s</td>"
        "<td>%s</td><td>%.1e%s</td></tr>\n",
        HtmlEscape(r.template_name()),
        IsJobWinner(r, job) ? " (this job's winner)" : "",
        HtmlEscape(r.config()), r.us(), r.tflops(),
        Ratio(r, r.has_cudnn_us(), r.cudnn_us()),
        Ratio(r, r.has_flash_us(), r.flash_us()), r.rel_err(),
        r.finite() ? "" : ", NON-FINITE OUTPUT");
  }
  return out + "</table>\n";
}

}  // namespace

std::string JobReportHtml(const v1::Job& job,
                          const std::vector<v1::TrialEvent>& events,
                          const JobComparison* comparison) {
  std::string html = Summary(job);
  absl::StrAppend(&html,
                  "<h2>Search progress</h2>\n<p>Median time of every trial "
                  "(log scale, hover for its config), the best so far in "
                  "orange; failed trials are marked x along the top (red: "
                  "incorrect, purple: crashed or timed out, grey: did not "
                  "compile or fit).</p>\n",
                  ProgressSvg(events));
  const TimeAxis axis = AxisOf(events);
  absl::StrAppend(&html,
                  "<h2>Parameters</h2>\n<p>Times of the correct trials per "
                  "value (trials in brackets), the median in orange.</p>\n");
  if (!events.empty()) {
    for (const v1::ParamValue& p : events[0].trial().config().params()) {
      absl::StrAppend(&html, "<h3>", HtmlEscape(p.name()), "</h3>\n",
                      ParamSvg(p.name(), events, axis));
    }
  }
  absl::StrAppend(&html, "<h2>Fastest trials</h2>\n", TopTable(events));
  if (comparison != nullptr && !comparison->rows.empty()) {
    absl::StrAppend(&html, ComparisonSection(*comparison, job));
  }
  return HtmlPage(absl::StrCat("evotune job ", job.job_id()), html);
}

}  // namespace evotune
