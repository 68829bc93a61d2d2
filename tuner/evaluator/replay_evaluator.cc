#include "tuner/evaluator/replay_evaluator.h"

#include <fstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "tuner/evaluator/device_header.h"

namespace evotune {
namespace {

// Splits one CSV line; fields may be double-quoted (commas inside).
std::vector<std::string> SplitCsv(const std::string& line) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (char c : line) {
    if (c == '"') {
      quoted = !quoted;
    } else if (c == ',' && !quoted) {
      fields.emplace_back();
    } else {
      fields.back() += c;
    }
  }
  return fields;
}

absl::StatusOr<TrialStatus> ParseStatus(absl::string_view name) {
  for (int s = 1; s <= 6; ++s) {
    if (TrialStatusName(static_cast<TrialStatus>(s)) == name) {
      return static_cast<TrialStatus>(s);
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown status ", name));
}

}  // namespace

absl::Status ReplayEvaluator::ReadComment(absl::string_view text,
                                          std::string* gpu, std::string* hash) {
  absl::StatusOr<bool> device_line = ReadDeviceHeaderLine(text, &device_);
  if (!device_line.ok() || *device_line) return device_line.status();
  text = absl::StripAsciiWhitespace(text);
  if (absl::ConsumePrefix(&text, "gpu:")) {
    *gpu = std::string(absl::StripAsciiWhitespace(text));
  } else if (absl::ConsumePrefix(&text, "template hash:")) {
    *hash = std::string(absl::StripAsciiWhitespace(text));
  } else if (absl::ConsumePrefix(&text, "evotune landscape: every feasible ")) {
    template_name_ = std::string(text.substr(0, text.find(' ')));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ReplayEvaluator>> ReplayEvaluator::Load(
    const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read landscape ", path));
  }
  std::unique_ptr<ReplayEvaluator> r(new ReplayEvaluator);
  // Without a "# shared memory per block" line (recordings made before it
  // was written), the limit admits every recorded config: unknown ones are
  // answered as rejected anyway.
  r->device_.limits.smem_per_block_bytes = int64_t{1} << 30;
  r->device_.limits.max_threads_per_block = 1024;
  std::string gpu = "unknown GPU", hash = "unknown";
  std::string line;
  int line_number = 0;
  bool header_seen = false;
  while (std::getline(in, line)) {
    ++line_number;
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", line_number, ": ", why));
    };
    absl::string_view text = absl::StripAsciiWhitespace(line);
    if (text.empty()) continue;
    if (absl::ConsumePrefix(&text, "#")) {
      if (absl::Status st = r->ReadComment(text, &gpu, &hash); !st.ok()) {
        return bad(st.message());
      }
      continue;
    }
    if (!header_seen) {
      header_seen = true;
      if (!absl::StartsWith(text, "problem,problem_key,config,status")) {
        return bad("expected the header problem,problem_key,config,status,...");
      }
      continue;
    }
    const std::vector<std::string> f = SplitCsv(std::string(text));
    if (f.size() != 8) return bad("expected 8 fields");
    absl::StatusOr<TrialStatus> status = ParseStatus(f[3]);
    if (!status.ok()) return bad(status.status().message());
    TrialResult result;
    result.status = *status;
    if (!absl::SimpleAtod(f[4], &result.median_us) ||
        !absl::SimpleAtod(f[5], &result.min_us) ||
        !absl::SimpleAtod(f[6], &result.p90_us) ||
        !absl::SimpleAtod(f[7], &result.cv)) {
      return bad("latency fields must be numbers");
    }
    if (result.status != TrialStatus::kOk) {
      result.error = "recorded as " + f[3];
    } else {
      result.samples = kFullTimingSamples;  // Recorded by full evaluations.
    }
    absl::StatusOr<Config> config = ParseConfigKey(f[2]);
    absl::StatusOr<Problem> problem = ParseProblemKey(f[1]);
    if (!config.ok() || !problem.ok())
      return bad("malformed config or problem");
    for (const auto& [name, value] : *config) r->recorded_params_.insert(name);
    r->landscape_[f[1]][ConfigKey(*config)] = result;
  }
  if (r->landscape_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": no trials"));
  }
  if (r->template_name_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": no \"# evotune landscape\" line names the template"));
  }
  r->device_.name =
      absl::StrCat("replay of ", gpu, " (", r->template_name_, "@", hash, ")");
  r->device_.driver_version = "replay";
  r->device_.nvrtc_version = "replay";
  return r;
}

absl::Status ReplayEvaluator::CanEvaluate(const KernelTemplate& t) const {
  if (t.name == template_name_) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("template_name: this daemon replays a landscape of ",
                   template_name_, " only"));
}

const TrialResult* ReplayEvaluator::Find(const KernelTemplate& t,
                                         const Config& config,
                                         const Problem& problem) const {
  auto p = landscape_.find(ProblemKey(problem));
  if (p == landscape_.end()) return nullptr;
  Config recorded;
  for (const auto& [name, value] : config) {
    if (recorded_params_.count(name) > 0) {
      recorded[name] = value;
      continue;
    }
    const Param* param = t.space.Find(name);
    if (param == nullptr || param->values.empty() ||
        value != param->values.front()) {
      return nullptr;
    }
  }
  auto c = p->second.find(ConfigKey(recorded));
  return c == p->second.end() ? nullptr : &c->second;
}

std::vector<std::string> ReplayEvaluator::RecordedProblems() const {
  std::vector<std::string> keys;
  for (const auto& [key, results] : landscape_) keys.push_back(key);
  return keys;
}

bool ReplayEvaluator::Covers(const KernelTemplate& t, const Config& config,
                             const Problem& problem) const {
  return t.name == template_name_ && Find(t, config, problem) != nullptr;
}

absl::StatusOr<TrialResult> ReplayEvaluator::Evaluate(const KernelTemplate& t,
                                                      const Config& config,
                                                      const Problem& problem) {
  if (absl::Status s = CanEvaluate(t); !s.ok()) {
    return absl::FailedPreconditionError(s.message());
  }
  if (landscape_.count(ProblemKey(problem)) == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "problem ", ProblemKey(problem), " is not in the replayed landscape"));
  }
  if (const TrialResult* r = Find(t, config, problem)) return *r;
  TrialResult r;
  r.status = TrialStatus::kResourceRejected;
  r.error = "not in the replayed landscape";
  return r;
}

}  // namespace evotune
