#include "tuner/common/help.h"

#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

ABSL_FLAG(int, help_test_widgets, 3, "widgets to frobnicate");

namespace evotune {
namespace {

bool Asks(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return HelpRequested(static_cast<int>(argv.size()), argv.data());
}

TEST(HelpTest, RecognisesTheHelpFlags) {
  EXPECT_TRUE(Asks({"prog", "--help"}));
  EXPECT_TRUE(Asks({"prog", "submit", "-h"}));
  EXPECT_TRUE(Asks({"prog", "--helpfull"}));
  EXPECT_FALSE(Asks({"prog"}));
  EXPECT_FALSE(Asks({"prog", "--helpful_flag=1"}));
  EXPECT_FALSE(Asks({"prog", "--", "--help"}));
}

TEST(HelpTest, ListsTheProgramsFlagsWithoutPathsOrAbseilsOwn) {
  const std::string text = HelpText("prog: does things");
  EXPECT_EQ(text.rfind("prog: does things\n", 0), 0u);
  EXPECT_THAT(text, ::testing::HasSubstr("  --help_test_widgets (default: 3)\n"
                                         "      widgets to frobnicate\n"));
  EXPECT_THAT(text, ::testing::Not(::testing::HasSubstr("flagfile")));
  EXPECT_THAT(text, ::testing::Not(::testing::HasSubstr(".cc")));
}

}  // namespace
}  // namespace evotune
