#include "tuner/evaluator/nvrtc_compiler.h"

#include <nvrtc.h>

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
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

std::string ArchName(int cc_major, int cc_minor) {
  // 9.0's cubins target the chip itself (sm_90a), so that templates may use
  // its own instructions (wgmma); they run on 9.0 devices only, which is
  // where they are compiled for.
  return absl::StrCat("sm_", cc_major, cc_minor,
                      cc_major == 9 && cc_minor == 0 ? "a" : "");
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

std::vector<std::string> BaseOptions(const std::string& arch) {
  return {absl::StrCat("--gpu-architecture=", arch), "-std=c++17",
          "--device-as-default-execution-space", "--ptxas-options=-v"};
}

}  // namespace

absl::StatusOr<CompileResult> CompileTemplate(const KernelTemplate& t,
                                              const Config& config,
                                              const Problem& problem,
                                              const std::string& arch) {
  std::vector<std::string> options = CompileDefines(config, problem);
  for (std::string& o : BaseOptions(arch)) options.push_back(std::move(o));
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
