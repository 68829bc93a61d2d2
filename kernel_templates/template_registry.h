// The built-in kernel templates.
#ifndef EVOTUNE_KERNEL_TEMPLATES_TEMPLATE_REGISTRY_H_
#define EVOTUNE_KERNEL_TEMPLATES_TEMPLATE_REGISTRY_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "kernel_templates/kernel_template.h"

namespace evotune {

// Immutable after construction; safe to share between threads.
class TemplateRegistry {
 public:
  // The templates embedded in this binary, sorted by name. Test-only
  // templates (KernelTemplate::test_only) are among them only when the
  // environment has EVOTUNE_TEST_TEMPLATES=1; the daemon and its workers
  // must agree on it.
  static const TemplateRegistry& Builtin();

  explicit TemplateRegistry(std::vector<KernelTemplate> templates);

  // nullptr when no template has that name.
  const KernelTemplate* Find(absl::string_view name) const;
  const std::vector<KernelTemplate>& templates() const { return templates_; }
  // Every template's (name, hash), in the order of templates(): the
  // template versions a query over all of them asks the store for.
  std::vector<std::pair<std::string, std::string>> Versions() const;

 private:
  std::vector<KernelTemplate> templates_;
};

// A template is its folder: kernel_templates/NAME/ holds the kernel,
// NAME.cu, and its spec, NAME_spec.cc, which defines
//
//   KernelTemplate EVOTUNE_TEMPLATE_SPEC(NAME)(std::string source,
//                                             std::string hash) { ... }
//
// (in namespace evotune) returning the template named NAME with that source
// and hash. The build finds both files, embeds the kernel and registers the
// spec (cmake/embed_templates.cmake); a folder missing either fails the
// build.
#define EVOTUNE_TEMPLATE_SPEC(name) TemplateSpec_##name

}  // namespace evotune

#endif  // EVOTUNE_KERNEL_TEMPLATES_TEMPLATE_REGISTRY_H_
