// Times each recorded problem's fastest configs again on this GPU, together
// in turns (Evaluator::TimeInTurns), and writes them beside their recorded
// times. A recording times its configs one after another over minutes, so
// configs a few percent apart there may be in another order, or none apart,
// when timed side by side; search_curves --in_turns judges searches against
// these times.
//
//   retime_landscape --landscape=tests/data/flash_fwd_landscapes_h100.csv
//     --out=tests/data/flash_fwd_in_turns_h100.csv --commit=SHA
//
// Per problem it takes the configs recorded within --within of the recorded
// optimum, fastest first, at least --min_top and at most --max_top of them;
// each is checked against the reference again on fresh inputs (a kernel
// changed since the recording must still be correct) before it is timed.
// All that --runs times over, the whole recording again each run, so that
// a config's time (the median of its runs) does not rest on one moment's
// clocks. The output is a CSV, a row per config and run: problem_key,
// config (today's full key, as searches propose it), recorded_us, then the
// status and latencies in turns. With --cold_l2 every launch is timed
// alone after the L2 read, as a model's decode step meets a layer's K/V.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "kernel_templates/template_registry.h"
#include "tuner/evaluator/cuda_evaluator.h"
#include "tuner/evaluator/replay_evaluator.h"

ABSL_FLAG(std::string, landscape, "", "recorded landscape to time again");
ABSL_FLAG(std::string, out, "", "CSV to write");
ABSL_FLAG(std::string, commit, "", "the commit measured, for the header");
ABSL_FLAG(double, within, 0.10,
          "take the configs recorded this close to the recorded optimum");
ABSL_FLAG(int, min_top, 8, "but at least this many per problem");
ABSL_FLAG(int, max_top, 24, "and at most this many");
ABSL_FLAG(int, turns, 50, "timing samples per config, one per turn");
ABSL_FLAG(int, runs, 3,
          "time every problem this many times, the whole recording over "
          "again each run (a config's time is the median of its runs)");
ABSL_FLAG(bool, cold_l2, false,
          "time each launch alone after the L2 read (CudaEvaluatorOptions::"
          "cold_l2), not a sample's launches back to back");
ABSL_FLAG(std::vector<std::string>, problems, {},
          "only these problem keys (default: every recorded one)");

namespace evotune {
namespace {

struct Pick {
  Config config;
  double recorded_us;
};

// The configs of `key` to time again: recorded ok, fastest first, as the
// flags bound them.
std::vector<Pick> FastestRecorded(ReplayEvaluator& replay,
                                  const KernelTemplate& t,
                                  const std::string& key) {
  const Problem p = *ParseProblemKey(key);
  std::vector<Pick> ok;
  for (const Config& c : FeasibleConfigs(t, p, replay.device().limits)) {
    absl::StatusOr<TrialResult> r = replay.Evaluate(t, c, p);
    if (r.ok() && r->status == TrialStatus::kOk) {
      ok.push_back({c, r->median_us});
    }
  }
  std::sort(ok.begin(), ok.end(), [](const Pick& a, const Pick& b) {
    return a.recorded_us < b.recorded_us;
  });
  size_t n = 0;
  while (n < ok.size() &&
         ok[n].recorded_us <=
             ok[0].recorded_us * (1 + absl::GetFlag(FLAGS_within))) {
    ++n;
  }
  n = std::max<size_t>(n, absl::GetFlag(FLAGS_min_top));
  n = std::min<size_t>(n, absl::GetFlag(FLAGS_max_top));
  ok.resize(std::min(n, ok.size()));
  return ok;
}

void WriteHeader(std::ofstream& out, const ReplayEvaluator& replay,
                 const DeviceInfo& gpu) {
  out << "# evotune landscape timed again in turns: each problem's fastest "
         "recorded "
      << replay.template_name() << " configs\n"
      << "# gpu: " << gpu.name << ", " << gpu.driver_version << "\n"
      << "# recording: " << replay.device().name << "\n"
      << "# date: "
      << absl::FormatTime("%Y-%m-%d", absl::Now(), absl::UTCTimeZone())
      << "\n# commit: " << absl::GetFlag(FLAGS_commit)
      << "\n# turns: " << absl::GetFlag(FLAGS_turns)
      << "\n# runs: " << absl::GetFlag(FLAGS_runs)
      << " (every problem of the recording timed in turns, then again, "
         "minutes apart; a config's time is the median of its runs)\n"
      << "# l2: "
      << (absl::GetFlag(FLAGS_cold_l2)
              ? "cold (each launch timed alone after a read of twice the L2)"
              : "warm (a sample's launches back to back after the L2 read)")
      << "\n"
      << "problem_key,config,recorded_us,status,median_us,min_us,p90_us,cv\n";
}

std::vector<Config> Configs(const std::vector<Pick>& picks) {
  std::vector<Config> configs;
  for (const Pick& pick : picks) configs.push_back(pick.config);
  return configs;
}

// Times `key`'s picks in turns and appends them to `out`; prints a line of
// progress. An error when the evaluator cannot go on.
absl::Status Retime(Evaluator& gpu, const KernelTemplate& t,
                    const std::string& key, const std::vector<Pick>& picks,
                    std::ofstream& out) {
  const std::vector<Config> configs = Configs(picks);
  absl::StatusOr<std::vector<TrialResult>> timed =
      gpu.TimeInTurns(OfTemplate(t, configs), *ParseProblemKey(key),
                      absl::GetFlag(FLAGS_turns));
  if (!timed.ok()) return timed.status();
  double best = 0;
  int ok = 0;
  for (size_t i = 0; i < picks.size(); ++i) {
    const TrialResult& r = (*timed)[i];
    out << key << ",\"" << ConfigKey(picks[i].config) << "\","
        << absl::StrFormat("%.3f,%s,%.3f,%.3f,%.3f,%.4f\n",
                           picks[i].recorded_us, TrialStatusName(r.status),
                           r.median_us, r.min_us, r.p90_us, r.cv);
    if (r.status != TrialStatus::kOk) continue;
    ++ok;
    if (best == 0 || r.median_us < best) best = r.median_us;
  }
  out.flush();
  std::printf("%s: %d of %zu ok, fastest %.2f us in turns (recorded %.2f)\n",
              key.c_str(), ok, picks.size(), best,
              picks.empty() ? 0 : picks[0].recorded_us);
  std::fflush(stdout);
  return absl::OkStatus();
}

int Fail(const std::string& message) {
  std::fprintf(stderr, "retime_landscape: %s\n", message.c_str());
  return 1;
}

int Run() {
  if (absl::GetFlag(FLAGS_out).empty()) return Fail("--out is required");
  if (absl::GetFlag(FLAGS_turns) < 1) return Fail("--turns must be >= 1");
  if (absl::GetFlag(FLAGS_runs) < 1) return Fail("--runs must be >= 1");
  absl::StatusOr<std::unique_ptr<ReplayEvaluator>> replay =
      ReplayEvaluator::Load(absl::GetFlag(FLAGS_landscape));
  if (!replay.ok()) return Fail(replay.status().ToString());
  const KernelTemplate& t =
      *TemplateRegistry::Builtin().Find((*replay)->template_name());
  CudaEvaluatorOptions options;
  options.compile_threads =
      std::max(4, static_cast<int>(std::thread::hardware_concurrency()));
  options.cold_l2 = absl::GetFlag(FLAGS_cold_l2);
  absl::StatusOr<std::unique_ptr<Evaluator>> gpu = MakeCudaEvaluator(options);
  if (!gpu.ok()) return Fail(gpu.status().ToString());
  if ((*replay)->device().name.find((*gpu)->device().name) ==
      std::string::npos) {
    std::fprintf(
        stderr, "retime_landscape: note: timing on %s; the recording is a %s\n",
        (*gpu)->device().name.c_str(), (*replay)->device().name.c_str());
  }
  std::vector<std::string> keys = absl::GetFlag(FLAGS_problems);
  if (keys.empty()) keys = (*replay)->RecordedProblems();
  std::ofstream out(absl::GetFlag(FLAGS_out));
  if (!out) return Fail("--out: cannot write " + absl::GetFlag(FLAGS_out));
  WriteHeader(out, **replay, (*gpu)->device());
  std::vector<std::vector<Pick>> picks;
  for (const std::string& key : keys) {
    if ((*replay)->landscape().count(key) == 0) {
      return Fail("--problems: " + key + " is not in the landscape");
    }
    picks.push_back(FastestRecorded(**replay, t, key));
  }
  for (int run = 1; run <= absl::GetFlag(FLAGS_runs); ++run) {
    std::printf("run %d of %d\n", run, absl::GetFlag(FLAGS_runs));
    for (size_t i = 0; i < keys.size(); ++i) {
      if (i + 1 < keys.size()) {  // Compiled while this one is timed.
        (*gpu)->Prefetch(t, Configs(picks[i + 1]),
                         *ParseProblemKey(keys[i + 1]));
      }
      if (absl::Status s = Retime(**gpu, t, keys[i], picks[i], out); !s.ok()) {
        return Fail(keys[i] + ": " + s.ToString());
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace evotune

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return evotune::Run();
}
