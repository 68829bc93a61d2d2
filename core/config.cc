#include "core/config.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace evotune {

std::string ConfigKey(const Config& config) {
  return absl::StrJoin(config, ",", absl::PairFormatter("="));
}

absl::StatusOr<Config> ParseConfigKey(absl::string_view key) {
  Config config;
  for (absl::string_view item : absl::StrSplit(key, ',', absl::SkipEmpty())) {
    item = absl::StripAsciiWhitespace(item);
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(item, absl::MaxSplits('=', 1));
    absl::string_view name = absl::StripAsciiWhitespace(kv.first);
    int64_t value = 0;
    if (name.empty() ||
        !absl::SimpleAtoi(absl::StripAsciiWhitespace(kv.second), &value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("config item \"", item, "\" is not NAME=integer"));
    }
    if (!config.emplace(std::string(name), value).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("config names ", name, " twice"));
    }
  }
  return config;
}

}  // namespace evotune
