// The built-in kernel templates.
#ifndef EVOTUNE_KERNEL_TEMPLATES_TEMPLATE_REGISTRY_H_
#define EVOTUNE_KERNEL_TEMPLATES_TEMPLATE_REGISTRY_H_

#include <memory>
#include <vector>

#include "absl/strings/string_view.h"
#include "kernel_templates/kernel_template.h"

namespace evotune {

// Immutable after construction; safe to share between threads.
class TemplateRegistry {
 public:
  // The templates embedded in this binary. Test-only templates (fault_test)
  // are among them only when the environment has EVOTUNE_TEST_TEMPLATES=1;
  // the daemon and its workers must agree on it.
  static const TemplateRegistry& Builtin();

  explicit TemplateRegistry(std::vector<KernelTemplate> templates);

  // nullptr when no template has that name.
  const KernelTemplate* Find(absl::string_view name) const;
  const std::vector<KernelTemplate>& templates() const { return templates_; }

 private:
  std::vector<KernelTemplate> templates_;
};

// Specs of the built-in templates (each in kernel_templates/<name>/), given
// the embedded source and its hash.
KernelTemplate MakeNaiveTemplate(std::string source, std::string hash);
KernelTemplate MakeFlashFwdTemplate(std::string source, std::string hash);
KernelTemplate MakeFlashFwdSm90Template(std::string source, std::string hash);
KernelTemplate MakeFlashFwdTmaTemplate(std::string source, std::string hash);
KernelTemplate MakeDecodeFwdTemplate(std::string source, std::string hash);
// Test only: registered when EVOTUNE_TEST_TEMPLATES=1.
KernelTemplate MakeFaultTestTemplate(std::string source, std::string hash);

}  // namespace evotune

#endif  // EVOTUNE_KERNEL_TEMPLATES_TEMPLATE_REGISTRY_H_
