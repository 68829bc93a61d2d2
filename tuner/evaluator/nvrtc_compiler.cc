#include "tuner/evaluator/nvrtc_compiler.h"

#include <nvrtc.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "kernel_templates/embedded_sources.h"

namespace evotune {
namespace {

absl::Status NvrtcError(nvrtcResult r, absl::string_view what) {
  return absl::InternalError(
      absl::StrCat("NVRTC ", what, ": ", nvrtcGetErrorString(r)));
}

struct ProgramDeleter {
  void operator()(nvrtcProgram* p) const {
    if (*p != nullptr) nvrtcDestroyProgram(p);
    delete p;
  }
};

}  // namespace

std::string NvrtcVersion() {
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  return absl::StrCat(major, ".", minor);
}

std::string CompileKey(const KernelTemplate& t, const Config& config,
                       const Problem& problem, const std::string& arch) {
  static const std::string* const nvrtc = new std::string(NvrtcVersion());
  // What CompileDefines reads of the problem: head_dim (and head_dim_v
  // where it differs), dtype, whether
  // its lengths live on the device, a paged problem's page size, and
  // whether it has a window, softcap, sinks or ALiBi (their values are
  // launch data).
  const std::string lengths =
      problem.layout == Layout::kDense ? "-"
      : problem.layout == Layout::kPaged
          ? absl::StrCat("-paged", problem.page_size, "-")
          : "-lengths-";
  return absl::StrCat(
      t.name, "-", t.hash, "-", arch, "-nvrtc", *nvrtc, "-d", problem.head_dim,
      HeadDimV(problem) != problem.head_dim
          ? absl::StrCat("v", problem.head_dim_v)
          : "",
      "-", DTypesName(problem), lengths, HasWindow(problem) ? "window-" : "",
      problem.softcap > 0 ? "softcap-" : "", problem.sinks ? "sinks-" : "",
      problem.alibi ? "alibi-" : "", ConfigKey(config));
}

bool NvrtcCompilesFor(int cc_major, int cc_minor) {
  int count = 0;
  if (nvrtcGetNumSupportedArchs(&count) != NVRTC_SUCCESS) return false;
  std::vector<int> archs(count);
  if (nvrtcGetSupportedArchs(archs.data()) != NVRTC_SUCCESS) return false;
  return std::find(archs.begin(), archs.end(), cc_major * 10 + cc_minor) !=
         archs.end();
}

std::string VirtualArchName(const std::string& arch) {
  return absl::StrCat("compute_", absl::StripPrefix(arch, "sm_"));
}

int ArchComputeCapability(const std::string& arch) {
  absl::string_view digits = arch;
  if (!absl::ConsumePrefix(&digits, "sm_") &&
      !absl::ConsumePrefix(&digits, "compute_")) {
    return 0;
  }
  if (!absl::ConsumeSuffix(&digits, "a")) absl::ConsumeSuffix(&digits, "f");
  int cc = 0;
  return absl::SimpleAtoi(digits, &cc) && cc > 0 ? cc : 0;
}

namespace {

absl::StatusOr<CompileResult> Compile(const std::string& source,
                                      const std::string& file_name,
                                      const std::vector<EmbeddedFile>& headers,
                                      const std::vector<std::string>& options) {
  std::vector<const char*> header_sources;
  std::vector<const char*> header_names;
  for (const EmbeddedFile& h : headers) {
    header_sources.push_back(h.source);
    header_names.push_back(h.name);
  }
  std::unique_ptr<nvrtcProgram, ProgramDeleter> program(new nvrtcProgram());
  if (nvrtcResult r =
          nvrtcCreateProgram(program.get(), source.c_str(), file_name.c_str(),
                             static_cast<int>(header_sources.size()),
                             header_sources.data(), header_names.data());
      r != NVRTC_SUCCESS) {
    return NvrtcError(r, "create program");
  }
  std::vector<const char*> option_ptrs;
  for (const std::string& o : options) option_ptrs.push_back(o.c_str());

  CompileResult result;
  const nvrtcResult compiled = nvrtcCompileProgram(
      *program, static_cast<int>(option_ptrs.size()), option_ptrs.data());
  size_t log_size = 0;
  nvrtcGetProgramLogSize(*program, &log_size);
  result.log.resize(log_size);
  if (log_size > 0) nvrtcGetProgramLog(*program, result.log.data());
  while (!result.log.empty() &&
         (result.log.back() == '\0' || result.log.back() == '\n')) {
    result.log.pop_back();
  }
  if (compiled == NVRTC_ERROR_COMPILATION) return result;
  if (compiled != NVRTC_SUCCESS) return NvrtcError(compiled, "compile");
  if (options.front().find("=compute_") != std::string::npos) {
    size_t ptx_size = 0;
    if (nvrtcResult r = nvrtcGetPTXSize(*program, &ptx_size);
        r != NVRTC_SUCCESS) {
      return NvrtcError(r, "get PTX size");
    }
    result.ptx.resize(ptx_size);
    if (nvrtcResult r = nvrtcGetPTX(*program, result.ptx.data());
        r != NVRTC_SUCCESS) {
      return NvrtcError(r, "get PTX");
    }
    while (!result.ptx.empty() && result.ptx.back() == '\0') {
      result.ptx.pop_back();
    }
    result.ok = true;
    return result;
  }
  size_t cubin_size = 0;
  if (nvrtcResult r = nvrtcGetCUBINSize(*program, &cubin_size);
      r != NVRTC_SUCCESS) {
    return NvrtcError(r, "get cubin size");
  }
  result.cubin.resize(cubin_size);
  if (nvrtcResult r = nvrtcGetCUBIN(*program, result.cubin.data());
      r != NVRTC_SUCCESS) {
    return NvrtcError(r, "get cubin");
  }
  result.ok = true;
  return result;
}

// The architecture comes first (Compile reads it back).
std::vector<std::string> BaseOptions(const std::string& arch) {
  std::vector<std::string> options = {absl::StrCat("--gpu-architecture=", arch),
                                      "-std=c++17",
                                      "--device-as-default-execution-space"};
  // ptxas runs only for a real architecture.
  if (!absl::StartsWith(arch, "compute_")) {
    options.push_back("--ptxas-options=-v");
  }
  return options;
}

}  // namespace

absl::StatusOr<CompileResult> CompileTemplate(const KernelTemplate& t,
                                              const Config& config,
                                              const Problem& problem,
                                              const std::string& arch) {
  std::vector<std::string> options = BaseOptions(arch);
  for (std::string& o : CompileDefines(config, problem)) {
    options.push_back(std::move(o));
  }
  return Compile(t.source, t.name + ".cu", EmbeddedHeaders(), options);
}

absl::StatusOr<std::string> CompileSource(const std::string& source,
                                          const std::string& file_name,
                                          const std::string& arch) {
  absl::StatusOr<CompileResult> r =
      Compile(source, file_name, {}, BaseOptions(arch));
  if (!r.ok()) return r.status();
  if (!r->ok) {
    return absl::InternalError(
        absl::StrCat("compiling ", file_name, ":\n", r->log));
  }
  return std::move(r->cubin);
}

}  // namespace evotune
