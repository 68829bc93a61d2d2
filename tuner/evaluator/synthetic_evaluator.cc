#include "tuner/evaluator/synthetic_evaluator.h"

#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace evotune {
namespace {

// A hash that is the same in every process and build (absl::Hash is salted
// per process), FNV-1a.
uint64_t StableHash(absl::string_view text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

bool Holds(const Config& config, const Config& fault) {
  if (fault.empty()) return false;
  for (const auto& [name, value] : fault) {
    auto it = config.find(name);
    if (it == config.end() || it->second != value) return false;
  }
  return true;
}

// Ends the process the way a fatal fault does: at once, without cleanup.
[[noreturn]] void Die() {
  std::fflush(nullptr);
  raise(SIGKILL);
  std::_Exit(137);
}

}  // namespace

SyntheticEvaluator::SyntheticEvaluator(Options options)
    : options_(std::move(options)) {
  device_.name = kDeviceName;
  device_.cc_major = options_.cc_major;
  device_.cc_minor = options_.cc_minor;
  device_.driver_version = "synthetic";
  device_.nvrtc_version = "synthetic";
  device_.limits.smem_per_block_bytes = 100 * 1024;
  device_.limits.max_threads_per_block = 1024;
  if (!options_.log_path.empty()) {
    log_ = std::fopen(options_.log_path.c_str(), "a");
  }
}

SyntheticEvaluator::~SyntheticEvaluator() {
  if (log_ != nullptr) std::fclose(log_);
}

absl::StatusOr<TrialResult> SyntheticEvaluator::Evaluate(
    const KernelTemplate& t, const Config& config, const Problem& problem) {
  if (options_.delay > absl::ZeroDuration()) absl::SleepFor(options_.delay);
  const std::string key = ConfigKey(config);
  if (Holds(config, options_.crash_on)) Die();
  if (Holds(config, options_.hang_on)) {
    while (true) absl::SleepFor(absl::Hours(1));
  }
  if (Holds(config, options_.flaky_on)) {
    const std::string marker = absl::StrCat(
        options_.fault_dir, "/flaky-", StableHash(ProblemKey(problem) + key));
    if (!std::filesystem::exists(marker)) {
      std::ofstream(marker) << key << "\n";
      Die();
    }
  }
  const uint64_t h =
      StableHash(absl::StrCat(t.name, "|", ProblemKey(problem), "|", key));

  TrialResult r;
  if (h % 23 == 0) {
    r.status = TrialStatus::kCompileError;
    r.error = "synthetic compile error";
  } else if (h % 29 == 0) {
    r.status = TrialStatus::kIncorrect;
    r.error = "synthetic mismatch";
  } else {
    // A bowl in log2 of every parameter, centred per parameter name, scaled
    // by the problem's work, plus a fixed perturbation of up to 5%.
    double bowl = 0;
    for (const auto& [name, value] : config) {
      const double centre = 2.0 + static_cast<double>(StableHash(name) % 6);
      const double x =
          std::log2(static_cast<double>(std::max<int64_t>(value, 1)));
      bowl += 0.05 * (x - centre) * (x - centre);
    }
    const double work_us = 1.0 + ProblemFlops(problem) / 2e8;
    const double jitter = 1.0 + 0.05 * static_cast<double>(h % 1000) / 1000.0;
    r.median_us = work_us * (1.0 + bowl) * jitter;
    r.min_us = r.median_us * 0.98;
    r.p90_us = r.median_us * 1.03;
    r.cv = 0.01;
    r.samples = kFullTimingSamples;
  }
  if (log_ != nullptr) {
    std::fprintf(log_, "%s %s %s\n", t.name.c_str(),
                 ProblemKey(problem).c_str(), key.c_str());
    std::fflush(log_);
  }
  return r;
}

absl::StatusOr<TrialResult> SyntheticEvaluator::QuickEvaluate(
    const KernelTemplate& t, const Config& config, const Problem& problem) {
  absl::StatusOr<TrialResult> r = Evaluate(t, config, problem);
  if (r.ok() && r->status == TrialStatus::kOk) {
    r->samples = kQuickTimingSamples;
  }
  return r;
}

}  // namespace evotune
