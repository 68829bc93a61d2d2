// --help for the evotune binaries: exit status 0, the program's own flags
// only, and no build-machine paths (absl's built-in --help exits 1 and
// lists every flag under the path of the file that defines it).
#ifndef EVOTUNE_TUNER_COMMON_HELP_H_
#define EVOTUNE_TUNER_COMMON_HELP_H_

#include <string>

namespace evotune {

// Whether the command line asks for help: --help, -h, -help, --helpfull or
// --helpshort anywhere before a lone "--".
bool HelpRequested(int argc, char** argv);

// `usage`, then every flag defined outside Abseil, sorted by name, each as
// "  --name (default: value)" followed by its help text.
std::string HelpText(const std::string& usage);

}  // namespace evotune

#endif  // EVOTUNE_TUNER_COMMON_HELP_H_
