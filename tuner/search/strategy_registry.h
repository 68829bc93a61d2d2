// The search strategies, from one table. A strategy is its file pair in
// tuner/search/strategies/: NAME_strategy.cc defines
//
//   StrategySpec EVOTUNE_STRATEGY_SPEC(NAME)() { ... }
//
// (its name, a one-line description, its documented options and a factory),
// and the build generates the table from the files it finds there (a file
// without its spec function fails to link). Validation, `evotune --help`,
// the proto comment and the docs' list all come from (or are checked
// against) this table.
#ifndef EVOTUNE_TUNER_SEARCH_STRATEGY_REGISTRY_H_
#define EVOTUNE_TUNER_SEARCH_STRATEGY_REGISTRY_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tuner/search/search_strategy.h"

namespace evotune {

// One tunable of a strategy: a number in [min, max], whole when `integer`.
struct StrategyOption {
  std::string name;
  double min = 0;
  double max = 0;
  double default_value = 0;
  bool integer = false;
  std::string help;
};

// Option values by name.
using StrategyOptions = std::map<std::string, double>;

struct StrategySpec {
  std::string name;
  std::string description;  // One line.
  std::vector<StrategyOption> options;
  // Gets every option of `options` (the defaults filled in), validated.
  std::function<std::unique_ptr<SearchStrategy>(
      SearchInputs inputs, uint64_t seed, const StrategyOptions& options)>
      make;
};

#define EVOTUNE_STRATEGY_SPEC(NAME) EvotuneStrategySpec_##NAME

// Every strategy, sorted by name.
const std::vector<StrategySpec>& Strategies();
// nullptr for an unknown name.
const StrategySpec* FindStrategy(absl::string_view name);
std::vector<std::string> StrategyNames();

// `given` checked against the strategy's options, the defaults filled in:
// INVALID_ARGUMENT naming "strategy_options" for an option the strategy
// does not have, "strategy_options.NAME" for a value out of its range or
// not whole where it must be.
absl::StatusOr<StrategyOptions> CompleteStrategyOptions(
    const StrategySpec& spec, const StrategyOptions& given);

// "NAME=value,..." (as FormatStrategyOptions writes it) to values;
// INVALID_ARGUMENT naming "strategy_options" when it is not that. Empty
// text is no options.
absl::StatusOr<StrategyOptions> ParseStrategyOptions(absl::string_view text);
std::string FormatStrategyOptions(const StrategyOptions& options);

// The strategy `name` with `options` (validated, defaults filled in).
// INVALID_ARGUMENT naming "strategy" for an unknown name.
absl::StatusOr<std::unique_ptr<SearchStrategy>> MakeStrategy(
    const std::string& name, SearchInputs inputs, uint64_t seed,
    const StrategyOptions& options = {});

// Each strategy with its description and options, for --help.
std::string StrategiesHelp();
// The same as a Markdown list, as docs/results.md shows it (a test keeps the
// two equal).
std::string StrategiesMarkdown();

}  // namespace evotune

#endif  // EVOTUNE_TUNER_SEARCH_STRATEGY_REGISTRY_H_
