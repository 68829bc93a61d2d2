#include "core/param_space.h"

#include <set>

#include "core/config.h"
#include "gtest/gtest.h"

namespace evotune {
namespace {

TEST(ConfigTest, KeyIsSortedAndParsesBack) {
  Config c = {{"WARPS", 4}, {"BLOCK_N", 64}};
  EXPECT_EQ(ConfigKey(c), "BLOCK_N=64,WARPS=4");
  absl::StatusOr<Config> parsed = ParseConfigKey(" WARPS = 4 , BLOCK_N=64");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(*parsed, c);
  EXPECT_FALSE(ParseConfigKey("WARPS=four").ok());
  EXPECT_FALSE(ParseConfigKey("WARPS=4,WARPS=8").ok());
  EXPECT_FALSE(ParseConfigKey("=4").ok());
}

TEST(ParamSpaceTest, EnumeratesTheProductOnce) {
  ParamSpace space({{"B", {2, 1}, ""}, {"A", {10, 20, 30}, ""}});
  EXPECT_EQ(space.Size(), 6);
  std::vector<Config> all = space.Enumerate();
  ASSERT_EQ(all.size(), 6u);
  std::set<std::string> keys;
  for (const Config& c : all) {
    EXPECT_TRUE(space.Contains(c).ok());
    keys.insert(ConfigKey(c));
  }
  EXPECT_EQ(keys.size(), 6u);
  EXPECT_EQ(space.params()[0].name, "A");     // Sorted by name.
  EXPECT_EQ(space.params()[1].values[0], 1);  // Values sorted.
}

TEST(ParamSpaceTest, ContainsNamesTheOffendingParameter) {
  ParamSpace space({{"A", {1, 2}, ""}});
  EXPECT_NE(space.Contains({{"A", 3}}).message().find("A=3"),
            std::string::npos);
  EXPECT_NE(space.Contains({}).message().find("A is missing"),
            std::string::npos);
  EXPECT_NE(space.Contains({{"A", 1}, {"Z", 1}}).message().find("Z"),
            std::string::npos);
}

}  // namespace
}  // namespace evotune
