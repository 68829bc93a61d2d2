#include "tuner/common/xdg.h"

namespace evotune {

std::filesystem::path XdgDir(const char* xdg_variable, const char* fallback,
                             const GetEnvFn& getenv) {
  const char* value = getenv(xdg_variable);
  if (value != nullptr && *value != '\0') {
    return std::filesystem::path(value) / "evotune";
  }
  const char* home = getenv("HOME");
  return std::filesystem::path(home ? home : ".") / fallback / "evotune";
}

}  // namespace evotune
