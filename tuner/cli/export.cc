#include "tuner/cli/export.h"

#include <filesystem>
#include <fstream>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "tuner/cli/cli_format.h"
#include "tuner/wire/message_convert.h"

namespace evotune {
namespace {

absl::StatusOr<std::vector<std::string>> Keys(const std::string& spec) {
  std::vector<std::string> keys;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(spec, ec)) {
    for (absl::string_view k : absl::StrSplit(spec, ',', absl::SkipEmpty())) {
      keys.emplace_back(absl::StripAsciiWhitespace(k));
    }
    return keys;
  }
  std::ifstream in(spec);
  if (!in)
    return absl::NotFoundError(absl::StrCat("--problems: cannot read ", spec));
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view k = absl::StripAsciiWhitespace(line);
    if (!k.empty() && !absl::StartsWith(k, "#")) keys.emplace_back(k);
  }
  return keys;
}

}  // namespace

absl::StatusOr<std::vector<Problem>> ParseProblemList(const std::string& spec) {
  absl::StatusOr<std::vector<std::string>> keys = Keys(spec);
  if (!keys.ok()) return keys.status();
  if (keys->empty()) {
    return absl::InvalidArgumentError("--problems: no problem given");
  }
  std::vector<Problem> problems;
  std::set<std::string> seen;
  for (const std::string& key : *keys) {
    absl::StatusOr<Problem> p = ParseProblemKey(key);
    if (!p.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--problems: \"", key, "\" is no problem key (", p.status().message(),
          "); e.g. b1_h8_kv8_q512_k512_d64_full_fp16_bhsd"));
    }
    if (seen.insert(ProblemKey(*p)).second) problems.push_back(*p);
  }
  return problems;
}

std::string FormatExportedKernel(const v1::Kernel& k) {
  std::string source;
  if (k.defaults()) {
    source = "template default, not measured";
  } else if (k.transferred()) {
    source =
        absl::StrCat("transferred from ", FormatProblem(k.source_problem()),
                     k.predicted() ? " (cost model)" : "");
  } else {
    source = absl::StrCat("tuned, ", FormatLatency(k.trial()));
  }
  return absl::StrFormat("%s: %s %s (%s), %s, %d KB cubin",
                         FormatProblem(k.problem()), k.template_name(),
                         FormatConfig(k.config()), source, k.arch(),
                         (k.cubin().size() + 1023) / 1024);
}

}  // namespace evotune
