// Helpers for the tests of search strategies.
#ifndef EVOTUNE_TESTS_SEARCH_STRATEGY_TESTING_H_
#define EVOTUNE_TESTS_SEARCH_STRATEGY_TESTING_H_

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tuner/search/search_strategy.h"

namespace evotune {

// One parameter X with values 0..n-1, all feasible.
inline SearchInputs LineSpace(int n) {
  SearchInputs inputs;
  std::vector<int64_t> values;
  for (int i = 0; i < n; ++i) {
    inputs.feasible.push_back({{"X", i}});
    values.push_back(i);
  }
  inputs.space = ParamSpace({{"X", values, ""}});
  return inputs;
}

// Everything the strategy proposes until Done(), three at a time, without
// reporting results; ConfigKey of each, in order.
inline std::vector<std::string> Drain(SearchStrategy& s) {
  std::vector<std::string> keys;
  while (!s.Done()) {
    std::vector<Config> next = s.Propose(3);
    EXPECT_FALSE(next.empty());
    if (next.empty()) break;
    for (const Config& c : next) keys.push_back(ConfigKey(c));
  }
  return keys;
}

}  // namespace evotune

#endif  // EVOTUNE_TESTS_SEARCH_STRATEGY_TESTING_H_
