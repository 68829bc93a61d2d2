#include "tuner/common/xdg.h"

#include <map>
#include <string>

#include "gtest/gtest.h"

namespace evotune {
namespace {

// An environment of these variables only.
GetEnvFn Env(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

TEST(XdgTest, TheVariableWinsOverHome) {
  EXPECT_EQ(XdgDir("XDG_STATE_HOME", ".local/state",
                   Env({{"XDG_STATE_HOME", "/x/state"}, {"HOME", "/h"}})),
            "/x/state/evotune");
}

TEST(XdgTest, UnsetOrEmptyFallsBackUnderHome) {
  EXPECT_EQ(XdgDir("XDG_CACHE_HOME", ".cache", Env({{"HOME", "/h"}})),
            "/h/.cache/evotune");
  EXPECT_EQ(XdgDir("XDG_CACHE_HOME", ".cache",
                   Env({{"XDG_CACHE_HOME", ""}, {"HOME", "/h"}})),
            "/h/.cache/evotune");
}

TEST(XdgTest, WithoutAHomeItIsRelativeToTheWorkingDirectory) {
  EXPECT_EQ(XdgDir("XDG_CACHE_HOME", ".cache", Env({})), "./.cache/evotune");
}

}  // namespace
}  // namespace evotune
