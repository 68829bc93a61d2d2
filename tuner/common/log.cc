#include "tuner/common/log.h"

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace evotune {
namespace {

void Write(absl::string_view level, absl::string_view message) {
  const std::string line =
      absl::StrCat(absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ ", absl::Now(),
                                    absl::UTCTimeZone()),
                   level, " ", message, "\n");
  // One fwrite per line keeps lines from different threads whole.
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

}  // namespace

void LogInfo(absl::string_view message) { Write("I", message); }
void LogError(absl::string_view message) { Write("E", message); }

}  // namespace evotune
