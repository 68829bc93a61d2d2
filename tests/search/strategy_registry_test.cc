#include "tuner/search/strategy_registry.h"

#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace evotune {
namespace {

using ::testing::HasSubstr;

// Two parameters, 6 x 5 = 30 configs, all feasible.
SearchInputs Space() {
  SearchInputs inputs;
  inputs.space = ParamSpace(
      {{"A", {1, 2, 3, 4, 5, 6}, ""}, {"B", {10, 20, 30, 40, 50}, ""}});
  for (int64_t a : {1, 2, 3, 4, 5, 6}) {
    for (int64_t b : {10, 20, 30, 40, 50}) {
      inputs.feasible.push_back({{"A", a}, {"B", b}});
    }
  }
  inputs.seeds = {{{"A", 3}, {"B", 30}}};
  return inputs;
}

// Runs the strategy to its end (or 200 proposals), reporting each config
// with a latency from `latency`; returns the proposals in order.
template <typename Latency>
std::vector<std::string> RunToEnd(SearchStrategy& s, Latency latency) {
  std::vector<std::string> keys;
  while (!s.Done() && keys.size() < 200) {
    std::vector<Config> next = s.Propose(4);
    if (next.empty()) break;
    std::vector<std::pair<Config, TrialResult>> results;
    for (const Config& c : next) {
      keys.push_back(ConfigKey(c));
      TrialResult r;
      r.status = TrialStatus::kOk;
      r.median_us = r.min_us = r.p90_us = latency(c);
      results.push_back({c, r});
    }
    s.Report(results);
  }
  return keys;
}

double Bowl(const Config& c) {
  return 10 + std::abs(c.at("A") - 4) + std::abs(c.at("B") - 20) / 10.0;
}

TEST(StrategyRegistryTest, EveryStrategyIsDescribed) {
  ASSERT_GE(Strategies().size(), 3u);
  for (const StrategySpec& s : Strategies()) {
    EXPECT_FALSE(s.description.empty()) << s.name;
    EXPECT_EQ(s.description.find('\n'), std::string::npos) << s.name;
    std::set<std::string> names;
    for (const StrategyOption& o : s.options) {
      EXPECT_TRUE(names.insert(o.name).second) << s.name << "." << o.name;
      EXPECT_LE(o.min, o.default_value) << s.name << "." << o.name;
      EXPECT_LE(o.default_value, o.max) << s.name << "." << o.name;
      EXPECT_FALSE(o.help.empty()) << s.name << "." << o.name;
    }
    EXPECT_EQ(FindStrategy(s.name), &s);
  }
  EXPECT_EQ(FindStrategy("annealing"), nullptr);
}

// The contract of SearchStrategy, for every strategy with its defaults:
// only feasible configs, never one twice, the same run for the same seed.
TEST(StrategyRegistryTest, EveryStrategyKeepsTheContract) {
  const SearchInputs inputs = Space();
  std::set<std::string> feasible;
  for (const Config& c : inputs.feasible) feasible.insert(ConfigKey(c));
  for (const std::string& name : StrategyNames()) {
    auto a = MakeStrategy(name, inputs, 7);
    auto b = MakeStrategy(name, inputs, 7);
    ASSERT_TRUE(a.ok() && b.ok()) << name;
    const std::vector<std::string> run = RunToEnd(**a, Bowl);
    EXPECT_FALSE(run.empty()) << name;
    EXPECT_EQ(std::set<std::string>(run.begin(), run.end()).size(), run.size())
        << name << " proposed a config twice";
    for (const std::string& key : run) {
      EXPECT_EQ(feasible.count(key), 1u) << name << " proposed " << key;
    }
    EXPECT_EQ(RunToEnd(**b, Bowl), run) << name << " is not deterministic";
  }
}

TEST(StrategyRegistryTest, OptionsChangeTheSearch) {
  // A flat landscape never gains: the search stops after `patience`
  // generations, so a patience of 1 stops well before the default.
  auto flat = [](const Config&) { return 10.0; };
  auto patient = MakeStrategy("evolutionary", Space(), 1);
  auto hasty = MakeStrategy("evolutionary", Space(), 1, {{"patience", 1}});
  ASSERT_TRUE(patient.ok() && hasty.ok());
  EXPECT_LT(RunToEnd(**hasty, flat).size(), RunToEnd(**patient, flat).size());
}

TEST(StrategyRegistryTest, OptionsAreValidatedNamingTheField) {
  const StrategySpec& evo = *FindStrategy("evolutionary");
  absl::StatusOr<StrategyOptions> all =
      CompleteStrategyOptions(evo, {{"population", 16}});
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->size(), evo.options.size());
  EXPECT_EQ(all->at("population"), 16);
  EXPECT_EQ(all->at("patience"), 8);  // The default.

  auto unknown = CompleteStrategyOptions(evo, {{"temperature", 1}});
  EXPECT_TRUE(absl::IsInvalidArgument(unknown.status()));
  EXPECT_THAT(unknown.status().message(), HasSubstr("strategy_options:"));
  EXPECT_THAT(unknown.status().message(), HasSubstr("population"));
  auto range = CompleteStrategyOptions(evo, {{"step_prob", 1.5}});
  EXPECT_THAT(
      range.status().message(),
      HasSubstr("strategy_options.step_prob: must be a number in [0, 1]"));
  auto whole = CompleteStrategyOptions(evo, {{"population", 2.5}});
  EXPECT_THAT(whole.status().message(),
              HasSubstr("strategy_options.population: must be a whole number"));
  auto none = CompleteStrategyOptions(*FindStrategy("random"), {{"x", 1}});
  EXPECT_THAT(none.status().message(), HasSubstr("it has none"));
  // MakeStrategy validates too.
  EXPECT_TRUE(absl::IsInvalidArgument(
      MakeStrategy("evolutionary", Space(), 1, {{"population", 0}}).status()));
}

TEST(StrategyRegistryTest, OptionsParseAndFormat) {
  absl::StatusOr<StrategyOptions> o =
      ParseStrategyOptions(" population = 16, step_prob=0.3 ");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(*o, (StrategyOptions{{"population", 16}, {"step_prob", 0.3}}));
  EXPECT_EQ(FormatStrategyOptions(*o), "population=16,step_prob=0.3");
  EXPECT_EQ(*ParseStrategyOptions(FormatStrategyOptions(*o)), *o);
  EXPECT_TRUE(ParseStrategyOptions("")->empty());
  for (const char* bad : {"population", "population=x", "=3", "a=1,a=2"}) {
    auto s = ParseStrategyOptions(bad);
    EXPECT_TRUE(absl::IsInvalidArgument(s.status())) << bad;
    EXPECT_THAT(s.status().message(), HasSubstr("strategy_options")) << bad;
  }
}

TEST(StrategyRegistryTest, AnUnknownStrategyNamesTheField) {
  auto s = MakeStrategy("annealing", Space(), 0);
  EXPECT_TRUE(absl::IsInvalidArgument(s.status()));
  EXPECT_EQ(s.status().message().rfind("strategy:", 0), 0u);
  EXPECT_THAT(s.status().message(), HasSubstr("evolutionary"));
}

std::string Read(const std::string& path) {
  std::ifstream in(std::string(EVOTUNE_SOURCE_DIR) + "/" + path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// docs/results.md's strategy list is the table's (StrategiesMarkdown), so
// that it names every strategy and option as the code does.
TEST(StrategyRegistryTest, TheDocsListTheStrategyTable) {
  const std::string doc = Read("docs/results.md");
  const std::string begin =
      "strategy_registry_test fails, printing the list, "
      "when this one differs -->\n";
  const size_t from = doc.find(begin);
  const size_t to = doc.find("<!-- end of strategies -->");
  ASSERT_NE(from, std::string::npos) << "docs/results.md lost its markers";
  ASSERT_NE(to, std::string::npos) << "docs/results.md lost its markers";
  const std::string listed =
      doc.substr(from + begin.size(), to - from - begin.size());
  EXPECT_EQ(listed, StrategiesMarkdown())
      << "docs/results.md: replace the list between the strategies markers "
         "with:\n"
      << StrategiesMarkdown();
  EXPECT_THAT(listed, HasSubstr("`evolutionary`"));
}

}  // namespace
}  // namespace evotune
