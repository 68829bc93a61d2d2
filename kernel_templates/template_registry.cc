#include "kernel_templates/template_registry.h"

#include <cstdlib>
#include <string>

#include "kernel_templates/embedded_sources.h"

namespace evotune {
namespace {

bool TestTemplatesWanted() {
  const char* value = std::getenv("EVOTUNE_TEST_TEMPLATES");
  return value != nullptr && std::string(value) == "1";
}

}  // namespace

const TemplateRegistry& TemplateRegistry::Builtin() {
  static const TemplateRegistry* registry = [] {
    std::vector<KernelTemplate> templates;
    for (const EmbeddedFile& file : EmbeddedTemplates()) {
      KernelTemplate t = file.spec(file.source, file.hash);
      if (t.test_only && !TestTemplatesWanted()) continue;
      templates.push_back(std::move(t));
    }
    return new TemplateRegistry(std::move(templates));
  }();
  return *registry;
}

TemplateRegistry::TemplateRegistry(std::vector<KernelTemplate> templates)
    : templates_(std::move(templates)) {}

std::vector<std::pair<std::string, std::string>> TemplateRegistry::Versions()
    const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const KernelTemplate& t : templates_) out.push_back({t.name, t.hash});
  return out;
}

const KernelTemplate* TemplateRegistry::Find(absl::string_view name) const {
  for (const KernelTemplate& t : templates_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

}  // namespace evotune
