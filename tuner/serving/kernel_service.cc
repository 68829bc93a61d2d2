#include "tuner/serving/kernel_service.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "tuner/evaluator/nvrtc_compiler.h"

namespace evotune {

absl::StatusOr<CompiledKernel> NvrtcCompileKernel(const KernelTemplate& t,
                                                  const Config& config,
                                                  const Problem& problem,
                                                  const std::string& arch) {
  CompiledKernel kernel;
  for (const std::string& target : {arch, VirtualArchName(arch)}) {
    absl::StatusOr<CompileResult> r =
        CompileTemplate(t, config, problem, target);
    if (!r.ok()) return r.status();
    if (!r->ok) {
      return absl::InternalError(absl::StrCat("compiling ", t.name, " ",
                                              ConfigKey(config), " for ",
                                              target, ":\n", r->log));
    }
    if (!r->cubin.empty()) kernel.cubin = std::move(r->cubin);
    if (!r->ptx.empty()) kernel.ptx = std::move(r->ptx);
  }
  return kernel;
}

KernelService::KernelService(TuningService* tuning, ResultStore* store,
                             KernelCompileFn compile)
    : tuning_(tuning), store_(store), compile_(std::move(compile)) {}

absl::StatusOr<ServedKernel> KernelService::GetKernel(const BestQuery& query) {
  BestQuery best = query;
  best.k = 1;
  best.wait_for_model = true;  // A kernel is compiled once: the best answer.
  absl::StatusOr<BestAnswer> answer = tuning_->QueryBest(best);
  if (!answer.ok()) return answer.status();
  if (answer->results.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "problem: no template supports ", ProblemKey(query.problem)));
  }
  const RankedTrial& chosen = answer->results.front();
  const KernelTemplate* t = tuning_->templates().Find(chosen.template_name);
  if (t == nullptr || t->hash != chosen.template_hash) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the best config is of ", chosen.template_name, " version ",
        chosen.template_hash, ", which this daemon does not have"));
  }
  const DeviceInfo& device = answer->device;
  if (!NvrtcCompilesFor(device.cc_major, device.cc_minor)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "device: ", device.name, " (compute capability ", device.cc_major, ".",
        device.cc_minor, ") is no architecture NVRTC ", NvrtcVersion(),
        " compiles for"));
  }
  ServedKernel served;
  served.problem = query.problem;
  served.arch = ArchName(device.cc_major, device.cc_minor);
  served.nvrtc_version = NvrtcVersion();
  served.kernel_name = t->kernel_name;
  absl::StatusOr<CompiledKernel> compiled =
      Compiled(*t, chosen.trial.config, query.problem, served.arch);
  if (!compiled.ok()) return compiled.status();
  served.compiled = *std::move(compiled);
  served.geometry = t->geometry(chosen.trial.config, query.problem);
  served.answer = *std::move(answer);
  served.answer.results.resize(1);
  recent_.Add(query.device, query.problem);
  return served;
}

absl::StatusOr<CompiledKernel> KernelService::Compiled(
    const KernelTemplate& t, const Config& config, const Problem& problem,
    const std::string& arch) {
  const std::string key = CompileKey(t, config, problem, arch);
  absl::StatusOr<std::optional<CompiledKernel>> found =
      store_->FindCompiledKernel(key);
  if (!found.ok()) return found.status();
  if (found->has_value()) return **std::move(found);
  absl::StatusOr<CompiledKernel> compiled = compile_(t, config, problem, arch);
  if (!compiled.ok()) return compiled.status();
  if (absl::Status s = store_->PutCompiledKernel(key, *compiled); !s.ok()) {
    return s;
  }
  return compiled;
}

}  // namespace evotune
