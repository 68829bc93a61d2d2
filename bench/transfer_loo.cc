// Leave-one-problem-out on recorded landscapes: the config served for a
// problem never tuned, by the cost model and by the nearest-problem rule,
// against that problem's recorded optimum.
//
//   transfer_loo --landscapes=tests/data/flash_fwd_landscapes_h100.csv
//     [--json=OUT.json]
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "tuner/model/leave_one_out.h"

ABSL_FLAG(std::string, landscapes, "tests/data/flash_fwd_landscapes_h100.csv",
          "recorded landscapes, comma-separated");
ABSL_FLAG(std::string, json, "", "write the table here as JSON");

namespace evotune {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2]
                      : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

int Run() {
  std::vector<RecordedLandscape> landscapes;
  for (absl::string_view path :
       absl::StrSplit(absl::GetFlag(FLAGS_landscapes), ',')) {
    absl::StatusOr<RecordedLandscape> l = LoadRecordedLandscape(
        std::string(path), TemplateRegistry::Builtin(), H100Limits());
    if (!l.ok()) {
      std::fprintf(stderr, "%s\n", l.status().ToString().c_str());
      return 1;
    }
    landscapes.push_back(*std::move(l));
  }
  absl::StatusOr<std::vector<LeftOut>> rows =
      LeaveOneProblemOut(landscapes, H100Limits());
  if (!rows.ok()) {
    std::fprintf(stderr, "%s\n", rows.status().ToString().c_str());
    return 1;
  }
  std::printf("%-46s %10s | %14s | %14s\n", "problem left out", "optimum",
              "cost model", "nearest rule");
  std::vector<double> model, nearest;
  std::string json = "{\n \"rows\": [\n";
  for (const LeftOut& r : *rows) {
    model.push_back(r.model_us / r.optimum_us);
    nearest.push_back(r.nearest_us / r.optimum_us);
    std::printf("%-46s %8.2fus | %8.2fus %4.2fx | %8.2fus %4.2fx\n",
                r.problem.c_str(), r.optimum_us, r.model_us, model.back(),
                r.nearest_us, nearest.back());
    json += absl::StrFormat(
        "  {\"problem\": \"%s\", \"optimum_us\": %.3f, \"model_us\": %.3f, "
        "\"nearest_us\": %.3f}%s\n",
        r.problem, r.optimum_us, r.model_us, r.nearest_us,
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
  json += absl::StrFormat(
      " ],\n \"model_median\": %.4f, \"model_worst\": %.4f,\n"
      " \"nearest_median\": %.4f, \"nearest_worst\": %.4f\n}\n",
      model_median, model_worst, nearest_median, nearest_worst);
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
