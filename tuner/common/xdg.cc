#include "tuner/common/xdg.h"

#include <cstdlib>

namespace evotune {

std::filesystem::path XdgDir(const char* xdg_variable, const char* fallback) {
  const char* value = std::getenv(xdg_variable);
  if (value != nullptr && *value != '\0') {
    return std::filesystem::path(value) / "evotune";
  }
  const char* home = std::getenv("HOME");
  return std::filesystem::path(home ? home : ".") / fallback / "evotune";
}

}  // namespace evotune
