// Leave-one-problem-out on recorded landscapes: the config served for a
// problem never tuned, by the cost model and by the nearest-problem rule,
// against that problem's recorded optimum.
//
//   transfer_loo --landscapes=tests/data/flash_fwd_landscapes_h100.csv
//     [--json=OUT.json] [--rounds=500]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "tuner/model/leave_one_out.h"

ABSL_FLAG(std::string, landscapes, "tests/data/flash_fwd_landscapes_h100.csv",
          "recorded landscapes, comma-separated");
ABSL_FLAG(std::string, json, "", "write the table here as JSON");
ABSL_FLAG(int, rounds, 500, "boosting rounds of each model");
ABSL_FLAG(std::string, tuned, "",
          "problem keys, comma-separated: serve every other recorded problem "
          "from these only (one model), instead of leaving one out at a time");

namespace evotune {
namespace {

// A number as JSON has it: null for infinity (a served config that failed
// on the problem left out).
std::string JsonNumber(double x) {
  return std::isfinite(x) ? absl::StrFormat("%.4f", x) : "null";
}

// "NAME_template": ..., "NAME_config": ... of a served config.
std::string JsonChoice(const std::string& name, const Choice& c) {
  return absl::StrFormat("\"%s_template\": \"%s\", \"%s_config\": \"%s\"", name,
                         c.template_name, name, ConfigKey(c.config));
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2]
                      : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

int Run() {
  std::vector<RecordedLandscape> landscapes;
  for (absl::string_view path :
       absl::StrSplit(absl::GetFlag(FLAGS_landscapes), ',')) {
    absl::StatusOr<RecordedLandscape> l =
        LoadRecordedLandscape(std::string(path), TemplateRegistry::Builtin());
    if (!l.ok()) {
      std::fprintf(stderr, "%s\n", l.status().ToString().c_str());
      return 1;
    }
    landscapes.push_back(*std::move(l));
  }
  const absl::StatusOr<DeviceLimits> limits = SharedLimits(landscapes);
  if (!limits.ok()) {
    std::fprintf(stderr, "%s\n", limits.status().ToString().c_str());
    return 1;
  }
  CostModelOptions options;
  options.booster.rounds = absl::GetFlag(FLAGS_rounds);
  std::set<std::string> tuned;
  for (absl::string_view key :
       absl::StrSplit(absl::GetFlag(FLAGS_tuned), ',', absl::SkipEmpty())) {
    tuned.insert(std::string(key));
  }
  absl::StatusOr<std::vector<LeftOut>> rows =
      LeaveOneProblemOut(landscapes, *limits, options, tuned);
  if (!rows.ok()) {
    std::fprintf(stderr, "%s\n", rows.status().ToString().c_str());
    return 1;
  }
  std::printf("%-46s %10s | %14s | %14s\n", "problem left out", "optimum",
              "cost model", "nearest rule");
  std::vector<double> model, nearest;
  std::string json = "{\n \"rows\": [\n";
  for (const LeftOut& r : *rows) {
    model.push_back(r.model.us / r.optimum.us);
    nearest.push_back(r.nearest.us / r.optimum.us);
    std::printf("%-46s %8.2fus | %8.2fus %4.2fx | %8.2fus %4.2fx\n",
                r.problem.c_str(), r.optimum.us, r.model.us, model.back(),
                r.nearest.us, nearest.back());
    json += absl::StrFormat(
        "  {\"problem\": \"%s\", \"optimum_us\": %s, \"model_us\": %s, "
        "\"nearest_us\": %s, %s, %s, %s}%s\n",
        r.problem, JsonNumber(r.optimum.us), JsonNumber(r.model.us),
        JsonNumber(r.nearest.us), JsonChoice("optimum", r.optimum),
        JsonChoice("model", r.model), JsonChoice("nearest", r.nearest),
        &r == &rows->back() ? "" : ",");
  }
  const double model_median = Median(model), nearest_median = Median(nearest);
  const double model_worst = *std::max_element(model.begin(), model.end());
  const double nearest_worst =
      *std::max_element(nearest.begin(), nearest.end());
  std::printf(
      "served / optimum: cost model median %.3f worst %.3f; nearest rule "
      "median %.3f worst %.3f\nbar (median <= 1.10, worst <= 1.30): %s\n",
      model_median, model_worst, nearest_median, nearest_worst,
      model_median <= 1.10 && model_worst <= 1.30 ? "met" : "NOT met");
  if (!tuned.empty()) {
    const int within = static_cast<int>(std::count_if(
        model.begin(), model.end(), [](double r) { return r <= 1.15; }));
    std::printf(
        "served from %zu tuned problems: %d of %zu within 15%% of "
        "their own optimum (bar: all): %s\n",
        tuned.size(), within, model.size(),
        within == static_cast<int>(model.size()) ? "met" : "NOT met");
  }
  json += absl::StrFormat(
      " ],\n \"model_median\": %s, \"model_worst\": %s,\n"
      " \"nearest_median\": %s, \"nearest_worst\": %s\n}\n",
      JsonNumber(model_median), JsonNumber(model_worst),
      JsonNumber(nearest_median), JsonNumber(nearest_worst));
  if (!absl::GetFlag(FLAGS_json).empty()) {
    std::ofstream(absl::GetFlag(FLAGS_json)) << json;
  }
  return 0;
}

}  // namespace
}  // namespace evotune

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return evotune::Run();
}
