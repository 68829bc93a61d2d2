// Per-user state and cache directories (XDG base directories).
#ifndef EVOTUNE_TUNER_COMMON_XDG_H_
#define EVOTUNE_TUNER_COMMON_XDG_H_

#include <filesystem>

namespace evotune {

// $<xdg_variable>/evotune, or ~/<fallback>/evotune when it is unset.
std::filesystem::path XdgDir(const char* xdg_variable, const char* fallback);

}  // namespace evotune

#endif  // EVOTUNE_TUNER_COMMON_XDG_H_
