#include "tuner/cli/model_report.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/envelope.h"
#include "tuner/cli/cli_format.h"
#include "tuner/cli/comparison.h"
#include "tuner/cli/html.h"
#include "tuner/wire/message_convert.h"

namespace evotune {
namespace {

constexpr int kWidth = 720;
constexpr int kHeight = 200;
constexpr int kBottom = 20;

// What a bucket's search found: its first and best OK times.
struct Found {
  std::string key;
  std::optional<double> first_us, best_us;
  double Gain() const {
    return first_us && best_us ? GainShare(*first_us, *best_us) : 0;
  }
};

Found FoundBy(const BucketSearch& b) {
  Found f;
  absl::StatusOr<Problem> p = ProblemFromProto(b.problem);
  f.key = p.ok() ? ProblemKey(*p) : FormatProblem(b.problem);
  f.first_us = FirstOkUs(b.events);
  if (b.job.has_best()) f.best_us = b.job.best().latency().median_us();
  return f;
}

// One bar per bucket, in order: height `values[i]` of the largest (named
// with `unit`, as "6.0 s"), class "gain" where the bucket's search gained
// kSmallGain or more.
std::string BarsSvg(const std::string& label, const std::string& unit,
                    const std::vector<double>& values,
                    const std::vector<Found>& found,
                    const std::vector<std::string>& titles) {
  const double top = std::max(
      1e-9,
      values.empty() ? 0 : *std::max_element(values.begin(), values.end()));
  const double step =
      static_cast<double>(kWidth) / std::max<size_t>(1, values.size());
  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
      "role=\"img\" aria-label=\"%s\">\n",
      kWidth, kHeight + kBottom, HtmlEscape(label));
  for (size_t i = 0; i < values.size(); ++i) {
    const double h = (kHeight - 4) * values[i] / top;
    absl::StrAppendFormat(
        &svg,
        "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
        "class=\"%s\"><title>%s</title></rect>\n",
        step * i, kHeight - h, std::max(1.0, step - 1), h,
        found[i].Gain() >= kSmallGain ? "gain" : "little",
        HtmlEscape(titles[i]));
  }
  absl::StrAppendFormat(&svg,
                        "<text x=\"0\" y=\"%d\" class=\"tick\">bucket 1</text>"
                        "<text x=\"%d\" y=\"%d\" text-anchor=\"end\" "
                        "class=\"tick\">bucket %d; the tallest bar %.1f "
                        "%s</text>\n",
                        kHeight + 14, kWidth, kHeight + 14,
                        static_cast<int>(values.size()), top, unit);
  return svg + "</svg>\n";
}

// The comparison run's row for the bucket's problem (its winner's where
// timed) with an SDPA time, or null.
const v1::SdpaComparisonRow* RowFor(const v1::SdpaComparison* run,
                                    const BucketSearch& b,
                                    const std::string& key) {
  if (run == nullptr) return nullptr;
  const v1::SdpaComparisonRow* row = nullptr;
  for (const v1::SdpaComparisonRow& r : run->results()) {
    if (r.problem() != key || !(r.has_flash_us() || r.has_cudnn_us())) {
      continue;
    }
    if (row == nullptr || IsJobWinner(r, b.job)) row = &r;
  }
  return row;
}

// The faster SDPA backend's time of a row.
double SdpaUs(const v1::SdpaComparisonRow& r) {
  return std::min(r.has_flash_us() ? r.flash_us() : 1e300,
                  r.has_cudnn_us() ? r.cudnn_us() : 1e300);
}

std::string Us(std::optional<double> us) {
  return us ? absl::StrFormat("%.2f us", *us) : "-";
}

std::string Table(const std::vector<BucketSearch>& buckets,
                  const std::vector<Found>& found,
                  const v1::SdpaComparison* run) {
  std::string out =
      "<table>\n<tr><th>bucket</th><th>state</th><th>kernel</th>"
      "<th>best</th><th>first trial</th><th>gain</th><th>trials</th>"
      "<th>seconds</th><th>compared: ours</th><th>faster SDPA</th>"
      "<th>SDPA / ours</th></tr>\n";
  for (size_t i = 0; i < buckets.size(); ++i) {
    const v1::Job& job = buckets[i].job;
    const Found& f = found[i];
    const v1::SdpaComparisonRow* row = RowFor(run, buckets[i], f.key);
    const std::string kernel =
        job.has_best() ? absl::StrCat(job.template_name(), " ",
                                      FormatConfig(job.best().config()))
                       : job.template_name();
    absl::StrAppendFormat(
        &out,
        "<tr><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td>"
        "<td>%.1f%%</td><td>%d</td><td>%.1f</td><td>%s</td><td>%s</td>"
        "<td>%s</td></tr>\n",
        HtmlEscape(f.key),
        job.job_id().empty() ? "not searched" : StateName(job.state()),
        HtmlEscape(kernel), Us(f.best_us), Us(f.first_us), 100 * f.Gain(),
        job.trials_done(), job.elapsed_seconds(), row ? Us(row->us()) : "-",
        row ? Us(SdpaUs(*row)) : "-",
        row && row->us() > 0
            ? absl::StrFormat("%.2fx", SdpaUs(*row) / row->us())
            : "-");
  }
  return out + "</table>\n";
}

std::string Summary(const std::string& about,
                    const std::vector<BucketSearch>& buckets,
                    const std::vector<Found>& found) {
  int searched = 0, gained = 0;
  int64_t trials = 0;
  double seconds = 0, first = 0, best = 0;
  for (size_t i = 0; i < buckets.size(); ++i) {
    const v1::Job& job = buckets[i].job;
    searched += job.state() == v1::JOB_STATE_SUCCEEDED;
    trials += job.trials_done();
    seconds += job.elapsed_seconds();
    gained += found[i].Gain() >= kSmallGain;
    if (found[i].first_us && found[i].best_us) {
      first += *found[i].first_us;
      best += *found[i].best_us;
    }
  }
  return absl::StrCat("<p>", HtmlEscape(about),
                      "</p>\n<dl>\n<dt>buckets</dt><dd>", buckets.size(), ", ",
                      searched, " searched</dd>\n<dt>budget</dt><dd>", trials,
                      " trials, ", FormatDuration(seconds),
                      " of searching</dd>\n<dt>gain</dt><dd>",
                      absl::StrFormat("%.1f%%", 100 * GainShare(first, best)),
                      " of the first trials' summed time; 3% or more on ",
                      gained, " buckets</dd>\n</dl>\n");
}

}  // namespace

std::optional<double> FirstOkUs(const std::vector<v1::TrialEvent>& events) {
  for (const v1::TrialEvent& e : events) {
    if (e.trial().status() == v1::TRIAL_STATUS_OK) {
      return e.trial().latency().median_us();
    }
  }
  return std::nullopt;
}

std::string ModelReportHtml(const std::string& about,
                            const std::vector<BucketSearch>& buckets,
                            const v1::SdpaComparison* comparison) {
  std::vector<Found> found;
  std::vector<double> seconds, gains;
  std::vector<std::string> titles;
  for (const BucketSearch& b : buckets) {
    found.push_back(FoundBy(b));
    seconds.push_back(b.job.elapsed_seconds());
    gains.push_back(100 * found.back().Gain());
    titles.push_back(absl::StrFormat("%s: %d trials, %.1f s, gain %.1f%%",
                                     found.back().key, b.job.trials_done(),
                                     b.job.elapsed_seconds(), gains.back()));
  }
  std::string body = Summary(about, buckets, found);
  absl::StrAppend(
      &body,
      "<h2>Where the budget went</h2>\n<p>Seconds of search per bucket, in "
      "the envelope's order (hover for the bucket); green where the search "
      "gained 3% or more over its first trial.</p>\n",
      BarsSvg("seconds of search per bucket", "s", seconds, found, titles),
      "<h2>What it bought</h2>\n<p>The gain of each bucket's best kernel "
      "over its search's first trial (the first seed: the nearest tuned "
      "problem's best, else the fitted config).</p>\n",
      BarsSvg("gain per bucket", "%", gains, found, titles),
      "<h2>Buckets</h2>\n");
  if (comparison != nullptr) {
    absl::StrAppend(
        &body, "<p>SDPA times from bench/sdpa_compare.py on ",
        HtmlEscape(comparison->gpu()), " (", HtmlEscape(comparison->date()),
        ", commit ", HtmlEscape(comparison->commit()),
        "): the evotune kernel it timed for the bucket (this run's winner "
        "where it timed that) and the faster of SDPA's flash and cuDNN "
        "backends, in one process; a ratio above 1 means evotune's kernel is "
        "faster.</p>\n");
  }
  absl::StrAppend(&body, Table(buckets, found, comparison));
  return HtmlPage("evotune model report", body);
}

}  // namespace evotune
