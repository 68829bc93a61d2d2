#include "kernel_templates/template_registry.h"

#include <cstdlib>
#include <functional>
#include <map>

#include "kernel_templates/embedded_sources.h"

namespace evotune {
namespace {

using SpecFactory = std::function<KernelTemplate(std::string, std::string)>;

const std::map<std::string, SpecFactory>& SpecFactories() {
  static const auto* factories = new std::map<std::string, SpecFactory>{
      {"decode_fwd", MakeDecodeFwdTemplate},
      {"fault_test", MakeFaultTestTemplate},
      {"flash_fwd", MakeFlashFwdTemplate},
      {"flash_fwd_sm90", MakeFlashFwdSm90Template},
      {"flash_fwd_tma", MakeFlashFwdTmaTemplate},
      {"naive", MakeNaiveTemplate},
  };
  return *factories;
}

bool TestTemplatesWanted() {
  const char* value = std::getenv("EVOTUNE_TEST_TEMPLATES");
  return value != nullptr && std::string(value) == "1";
}

bool IsTestOnly(const std::string& name) { return name == "fault_test"; }

}  // namespace

const TemplateRegistry& TemplateRegistry::Builtin() {
  static const TemplateRegistry* registry = [] {
    std::vector<KernelTemplate> templates;
    for (const EmbeddedFile& file : EmbeddedTemplates()) {
      if (IsTestOnly(file.name) && !TestTemplatesWanted()) continue;
      auto it = SpecFactories().find(file.name);
      if (it == SpecFactories().end()) {
        // A source without a spec is a build mistake, not a user error.
        std::abort();
      }
      templates.push_back(it->second(file.source, file.hash));
    }
    return new TemplateRegistry(std::move(templates));
  }();
  return *registry;
}

TemplateRegistry::TemplateRegistry(std::vector<KernelTemplate> templates)
    : templates_(std::move(templates)) {}

const KernelTemplate* TemplateRegistry::Find(absl::string_view name) const {
  for (const KernelTemplate& t : templates_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

}  // namespace evotune
