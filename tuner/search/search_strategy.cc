#include "tuner/search/search_strategy.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tuner/search/evolutionary_strategy.h"
#include "tuner/search/list_strategy.h"

namespace evotune {

const std::vector<std::string>& StrategyNames() {
  static const auto* names =
      new std::vector<std::string>{"evolutionary", "random", "exhaustive"};
  return *names;
}

absl::StatusOr<std::unique_ptr<SearchStrategy>> MakeStrategy(
    const std::string& name, SearchInputs inputs, uint64_t seed) {
  if (name == "evolutionary") {
    return std::make_unique<EvolutionaryStrategy>(std::move(inputs), seed,
                                                  EvolutionOptions{});
  }
  if (name == "random") {
    return std::make_unique<ListStrategy>(
        ListStrategy::Shuffled(std::move(inputs.feasible), seed));
  }
  if (name == "exhaustive") {
    return std::make_unique<ListStrategy>(std::move(inputs.feasible));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("strategy: unknown strategy \"", name, "\" (one of ",
                   absl::StrJoin(StrategyNames(), ", "), ")"));
}

}  // namespace evotune
