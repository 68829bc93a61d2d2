#include "core/param_space.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace evotune {

ParamSpace::ParamSpace(std::vector<Param> params) : params_(std::move(params)) {
  std::sort(params_.begin(), params_.end(),
            [](const Param& a, const Param& b) { return a.name < b.name; });
  for (Param& p : params_) std::sort(p.values.begin(), p.values.end());
}

const Param* ParamSpace::Find(const std::string& name) const {
  for (const Param& p : params_) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

int64_t ParamSpace::Size() const {
  int64_t size = 1;
  for (const Param& p : params_) size *= static_cast<int64_t>(p.values.size());
  return size;
}

std::vector<Config> ParamSpace::Enumerate() const {
  std::vector<Config> out;
  const int64_t size = Size();
  out.reserve(size);
  for (int64_t index = 0; index < size; ++index) {
    Config config;
    int64_t rest = index;
    for (auto it = params_.rbegin(); it != params_.rend(); ++it) {
      const int64_t n = static_cast<int64_t>(it->values.size());
      config[it->name] = it->values[rest % n];
      rest /= n;
    }
    out.push_back(std::move(config));
  }
  return out;
}

absl::Status ParamSpace::Contains(const Config& config) const {
  for (const auto& [name, value] : config) {
    const Param* p = Find(name);
    if (p == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown parameter ", name));
    }
    if (!std::binary_search(p->values.begin(), p->values.end(), value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter ", name, "=", value, " is not one of {",
                       absl::StrJoin(p->values, ", "), "}"));
    }
  }
  for (const Param& p : params_) {
    if (config.count(p.name) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter ", p.name, " is missing"));
    }
  }
  return absl::OkStatus();
}

}  // namespace evotune
