// The kernel template sources, embedded into the binaries at build time by
// cmake/embed_templates.cmake. Nothing is read from disk at run time.
#ifndef EVOTUNE_KERNEL_TEMPLATES_EMBEDDED_SOURCES_H_
#define EVOTUNE_KERNEL_TEMPLATES_EMBEDDED_SOURCES_H_

#include <string>
#include <vector>

namespace evotune {

struct KernelTemplate;

struct EmbeddedFile {
  const char* name;    // Header: file name as included; template: its name.
  const char* source;  // NUL-terminated.
  const char* hash;    // Template version hash (16 hex digits); "" for headers.
  // Template: its spec (EVOTUNE_TEMPLATE_SPEC of template_registry.h);
  // nullptr for headers.
  KernelTemplate (*spec)(std::string source, std::string hash);
};

// Shared headers (kernel_templates/common/*.cuh), handed to NVRTC in memory.
const std::vector<EmbeddedFile>& EmbeddedHeaders();
// Templates (kernel_templates/<name>/<name>.cu), sorted by name.
const std::vector<EmbeddedFile>& EmbeddedTemplates();

}  // namespace evotune

#endif  // EVOTUNE_KERNEL_TEMPLATES_EMBEDDED_SOURCES_H_
