// Compiles one instantiation of a kernel template to a cubin with NVRTC.
// Works without a GPU: the architecture is given, not read off a device.
#ifndef EVOTUNE_TUNER_EVALUATOR_NVRTC_COMPILER_H_
#define EVOTUNE_TUNER_EVALUATOR_NVRTC_COMPILER_H_

#include <string>

#include "absl/status/statusor.h"
#include "kernel_templates/kernel_template.h"
#include "launch/cuda_driver.h"  // ArchName, which names compile targets

namespace evotune {

struct CompileResult {
  bool ok = false;
  std::string cubin;  // Set when ok, for a real architecture (sm_XY).
  std::string ptx;    // Set when ok, for a virtual one (compute_XY).
  std::string log;    // Compiler output, errors when !ok.
};

// Whether this NVRTC compiles for devices of that compute capability.
bool NvrtcCompilesFor(int cc_major, int cc_minor);

// The virtual architecture of a real one: "compute_90a" for "sm_90a".
std::string VirtualArchName(const std::string& arch);

// The compute capability (10 * major + minor) an architecture's code is
// for: 89 for "compute_89", 90 for "sm_90a"; 0 for a name of neither form.
int ArchComputeCapability(const std::string& arch);

// NVRTC's version, "13.0".
std::string NvrtcVersion();

// Names everything that changes a compiled instantiation: template version,
// architecture, NVRTC version, the problem fields the compiler sees
// (head_dim, dtype, whether lengths live on the device, the page size, a
// window, softcap or sinks: CompileDefines) and the config. Usable as a file
// name.
std::string CompileKey(const KernelTemplate& t, const Config& config,
                       const Problem& problem, const std::string& arch);

// `arch` is a real architecture ("sm_90a": a cubin) or a virtual one
// ("compute_90a": PTX). A compile error of the candidate is data (ok == false);
// a non-OK status means NVRTC itself failed (out of memory, bad options).
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
