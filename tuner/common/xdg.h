// Per-user state and cache directories (XDG base directories).
#ifndef EVOTUNE_TUNER_COMMON_XDG_H_
#define EVOTUNE_TUNER_COMMON_XDG_H_

#include <cstdlib>
#include <filesystem>
#include <functional>

namespace evotune {

// The environment's variables (std::getenv; tests give their own).
using GetEnvFn = std::function<const char*(const char*)>;

// $<xdg_variable>/evotune, or $HOME/<fallback>/evotune when it is unset or
// empty (./<fallback>/evotune without a HOME).
std::filesystem::path XdgDir(const char* xdg_variable, const char* fallback,
                             const GetEnvFn& getenv = std::getenv);

}  // namespace evotune

#endif  // EVOTUNE_TUNER_COMMON_XDG_H_
