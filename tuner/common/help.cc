#include "tuner/common/help.h"

#include <algorithm>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace evotune {

bool HelpRequested(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") break;
    if (arg == "--help" || arg == "-h" || arg == "-help" ||
        arg == "--helpfull" || arg == "--helpshort") {
      return true;
    }
  }
  return false;
}

std::string HelpText(const std::string& usage) {
  std::vector<const absl::CommandLineFlag*> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    // Abseil's own (--flagfile, --fromenv, ...) and its help flags.
    if (absl::StrContains(flag->Filename(), "absl/")) continue;
    flags.push_back(flag);
  }
  std::sort(flags.begin(), flags.end(),
            [](const absl::CommandLineFlag* a, const absl::CommandLineFlag* b) {
              return a->Name() < b->Name();
            });
  std::string out = absl::StrCat(usage, "\n\nflags:\n");
  for (const absl::CommandLineFlag* flag : flags) {
    absl::StrAppend(
        &out, "  --", flag->Name(), " (default: ",
        flag->DefaultValue().empty() ? "\"\"" : flag->DefaultValue(),
        ")\n      ", flag->Help(), "\n");
  }
  return out;
}

}  // namespace evotune
