// The tunable parameters of a kernel template.
#ifndef EVOTUNE_CORE_PARAM_SPACE_H_
#define EVOTUNE_CORE_PARAM_SPACE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/config.h"

namespace evotune {

struct Param {
  std::string name;
  // Allowed values in increasing order (parameters are ordered, so that a
  // search can step to a neighbouring value).
  std::vector<int64_t> values;
  std::string help;
};

// The cartesian product of its parameters' values. Constraints between
// parameters live with the template (kernel_templates/); this class only knows
// names and values. Immutable after construction, so safe to share.
class ParamSpace {
 public:
  ParamSpace() = default;
  explicit ParamSpace(std::vector<Param> params);

  const std::vector<Param>& params() const { return params_; }
  const Param* Find(const std::string& name) const;

  // Number of configs in the product.
  int64_t Size() const;

  // Every config of the product, in a fixed order (the last parameter in
  // name order varies fastest).
  std::vector<Config> Enumerate() const;

  // OK when config names exactly the space's parameters, each with an allowed
  // value; otherwise INVALID_ARGUMENT naming the first offending parameter.
  absl::Status Contains(const Config& config) const;

 private:
  std::vector<Param> params_;  // Sorted by name.
};

}  // namespace evotune

#endif  // EVOTUNE_CORE_PARAM_SPACE_H_
