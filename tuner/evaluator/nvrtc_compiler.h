// Compiles one instantiation of a kernel template to a cubin with NVRTC.
// Works without a GPU: the architecture is given, not read off a device.
#ifndef EVOTUNE_TUNER_EVALUATOR_NVRTC_COMPILER_H_
#define EVOTUNE_TUNER_EVALUATOR_NVRTC_COMPILER_H_

#include <string>

#include "absl/status/statusor.h"
#include "kernel_templates/kernel_template.h"

namespace evotune {

struct CompileResult {
  bool ok = false;
  std::string cubin;  // Set when ok.
  std::string log;    // Compiler output, errors when !ok.
};

// "sm_89" for (8, 9); "sm_90a" for (9, 0), so that Hopper's own
// instructions are available.
std::string ArchName(int cc_major, int cc_minor);

// A compile error of the candidate is data (ok == false); a non-OK status
// means NVRTC itself failed (out of memory, bad options).
absl::StatusOr<CompileResult> CompileTemplate(const KernelTemplate& t,
                                              const Config& config,
                                              const Problem& problem,
                                              const std::string& arch);

// Compiles a self-contained source (no template, no headers) to a cubin; a
// compile error is INTERNAL with the log. For the evaluator's own kernels.
absl::StatusOr<std::string> CompileSource(const std::string& source,
                                          const std::string& file_name,
                                          const std::string& arch);

}  // namespace evotune

#endif  // EVOTUNE_TUNER_EVALUATOR_NVRTC_COMPILER_H_
