#include "tuner/search/strategy_registry.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace evotune {

// The generated table (cmake/strategy_table.cmake).
std::vector<StrategySpec> GeneratedStrategyTable();

const std::vector<StrategySpec>& Strategies() {
  static const auto* all = [] {
    auto* specs = new std::vector<StrategySpec>(GeneratedStrategyTable());
    std::sort(specs->begin(), specs->end(),
              [](const auto& a, const auto& b) { return a.name < b.name; });
    return specs;
  }();
  return *all;
}

const StrategySpec* FindStrategy(absl::string_view name) {
  for (const StrategySpec& s : Strategies()) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

std::vector<std::string> StrategyNames() {
  std::vector<std::string> names;
  for (const StrategySpec& s : Strategies()) names.push_back(s.name);
  return names;
}

absl::StatusOr<StrategyOptions> CompleteStrategyOptions(
    const StrategySpec& spec, const StrategyOptions& given) {
  StrategyOptions out;
  std::vector<std::string> known;
  for (const StrategyOption& o : spec.options) known.push_back(o.name);
  for (const auto& [name, value] : given) {
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "strategy_options: ", spec.name, " has no option \"", name, "\" (",
          known.empty() ? "it has none"
                        : absl::StrCat("it has ", absl::StrJoin(known, ", ")),
          ")"));
    }
  }
  for (const StrategyOption& o : spec.options) {
    auto it = given.find(o.name);
    const double v = it == given.end() ? o.default_value : it->second;
    if (!(v >= o.min && v <= o.max) || (o.integer && v != std::floor(v))) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "strategy_options.%s: must be %s in [%g, %g], got %g", o.name,
          o.integer ? "a whole number" : "a number", o.min, o.max, v));
    }
    out[o.name] = v;
  }
  return out;
}

absl::StatusOr<StrategyOptions> ParseStrategyOptions(absl::string_view text) {
  StrategyOptions out;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(item, absl::MaxSplits('=', 1));
    const absl::string_view name = absl::StripAsciiWhitespace(kv.first);
    double value = 0;
    if (name.empty() ||
        !absl::SimpleAtod(absl::StripAsciiWhitespace(kv.second), &value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("strategy_options: \"", item,
                       "\" is not NAME=number (e.g. population=16)"));
    }
    if (!out.emplace(std::string(name), value).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("strategy_options: ", name, " is given twice"));
    }
  }
  return out;
}

std::string FormatStrategyOptions(const StrategyOptions& options) {
  return absl::StrJoin(options, ",", [](std::string* out, const auto& kv) {
    absl::StrAppend(out, kv.first, "=", absl::StrFormat("%g", kv.second));
  });
}

absl::StatusOr<std::unique_ptr<SearchStrategy>> MakeStrategy(
    const std::string& name, SearchInputs inputs, uint64_t seed,
    const StrategyOptions& options) {
  const StrategySpec* spec = FindStrategy(name);
  if (spec == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("strategy: unknown strategy \"", name, "\" (one of ",
                     absl::StrJoin(StrategyNames(), ", "), ")"));
  }
  absl::StatusOr<StrategyOptions> complete =
      CompleteStrategyOptions(*spec, options);
  if (!complete.ok()) return complete.status();
  return spec->make(std::move(inputs), seed, *complete);
}

namespace {

// Every strategy a line, its options a line each below it: `name` and
// `option` start the lines, names stand between `quote`s.
std::string Listing(const char* name, const char* option, const char* quote) {
  std::string out;
  for (const StrategySpec& s : Strategies()) {
    absl::StrAppend(&out, name, quote, s.name, quote, ": ", s.description,
                    "\n");
    for (const StrategyOption& o : s.options) {
      absl::StrAppendFormat(&out, "%s%s%s%s (%g..%g, default %g): %s\n", option,
                            quote, o.name, quote, o.min, o.max, o.default_value,
                            o.help);
    }
  }
  return out;
}

}  // namespace

std::string StrategiesHelp() { return Listing("  ", "      ", ""); }

std::string StrategiesMarkdown() { return Listing("- ", "  - ", "`"); }

}  // namespace evotune
