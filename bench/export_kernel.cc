// Compiles one config of a template for one problem into a kernel bundle of
// that one kernel (the format `evotune export` writes and the runtime
// reads), so that bench/sdpa_compare.py runs exactly the kernel evotune
// measured, through the runtime, side by side with PyTorch in one process.
//
//   export_kernel --template_name=flash_fwd --config=BLOCK_M=64,...
//     --problem=b1_h8_kv8_q512_k512_d64_full_fp16_bhsd --arch=sm_90a
//     --out=DIR/x
// writes DIR/x.evtb and DIR/x.log (the compiler's log: registers, spills,
// warnings). With --source=FILE the template's source is read from FILE
// instead (its spec and shared headers stay): a kernel variant timed beside
// the built-in one without a rebuild. Its hash is then "edited". Without
// --config, the config an untuned problem is served (the template's first
// default that runs the problem on a GPU of --arch with --sms
// multiprocessors), printed as "config: ...".
#include <cstdio>
#include <fstream>
#include <iterator>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "kernel_templates/serving_defaults.h"
#include "kernel_templates/template_registry.h"
#include "tuner/evaluator/nvrtc_compiler.h"
#include "tuner/wire/kernel_bundle.h"
#include "tuner/wire/message_convert.h"

ABSL_FLAG(std::string, template_name, "flash_fwd", "kernel template");
ABSL_FLAG(std::string, config, "",
          "NAME=value,... (default: the config the problem is served "
          "untuned)");
ABSL_FLAG(std::string, problem, "", "problem key, as ProblemKey writes it");
ABSL_FLAG(std::string, arch, "sm_90a",
          "target architecture, as ArchName writes it");
ABSL_FLAG(std::string, out, "", "output path prefix");
ABSL_FLAG(std::string, source, "",
          "compile this file instead of the template's embedded source");
ABSL_FLAG(int, sms, 132,
          "without --config: the multiprocessors of the GPU the served "
          "config is fitted to");

namespace evotune {
namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "export_kernel: %s\n", message.c_str());
  return 1;
}

// A GPU of `arch` ("sm_90a", "sm_89"): its opt-in shared memory per block
// (227 KB from Hopper to Blackwell, the A100's 163 KB, 99 KB elsewhere)
// and `sms` multiprocessors.
absl::StatusOr<DeviceLimits> ArchLimits(absl::string_view arch, int sms) {
  absl::string_view digits = arch;
  int cc = 0;
  if (!absl::ConsumePrefix(&digits, "sm_") ||
      !absl::SimpleAtoi(absl::StripSuffix(digits, "a"), &cc) || cc < 80) {
    return absl::InvalidArgumentError(
        absl::StrCat("--arch: ", arch, " is not sm_80 or newer"));
  }
  if (sms <= 0 || sms > kMaxMultiprocessors) {
    return absl::InvalidArgumentError("--sms: 1 to 4096");
  }
  DeviceLimits limits;
  limits.smem_per_block_bytes = cc >= 90 && cc < 120   ? 232448
                                : cc == 80 || cc == 87 ? 166912
                                                       : 101376;
  limits.compute_capability = cc;
  limits.multiprocessors = sms;
  return limits;
}

// --config, or the config `problem` is served untuned on --arch.
absl::StatusOr<Config> ConfigToCompile(const KernelTemplate& t,
                                       const Problem& problem) {
  if (!absl::GetFlag(FLAGS_config).empty()) {
    absl::StatusOr<Config> config = ParseConfigKey(absl::GetFlag(FLAGS_config));
    if (!config.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--config: ", config.status().message()));
    }
    return config;
  }
  absl::StatusOr<DeviceLimits> limits =
      ArchLimits(absl::GetFlag(FLAGS_arch), absl::GetFlag(FLAGS_sms));
  if (!limits.ok()) return limits.status();
  std::vector<DefaultChoice> served = RankedDefaults({&t}, problem, *limits, 1);
  if (served.empty()) {
    return absl::InvalidArgumentError(
        "--config: none given, and no default config of --template_name "
        "runs --problem on --arch");
  }
  std::printf("config: %s\n", ConfigKey(served[0].config).c_str());
  return served[0].config;
}

// The kernel as the runtime loads it: the config named, compiled for --arch,
// with the problem's launch geometry (neither tuned nor transferred).
v1::Kernel KernelMessage(const KernelTemplate& t, const Config& config,
                         const Problem& problem, const CompileResult& r) {
  v1::Kernel k;
  *k.mutable_problem() = ProblemToProto(problem);
  k.set_template_name(t.name);
  k.set_template_hash(t.hash);
  *k.mutable_config() = ConfigToProto(config);
  k.set_arch(absl::GetFlag(FLAGS_arch));
  k.set_nvrtc_version(NvrtcVersion());
  k.set_kernel_name(t.kernel_name);
  k.set_cubin(r.cubin);
  k.set_ptx(r.ptx);
  *k.mutable_geometry() = GeometryToProto(t.geometry(config, problem));
  k.set_param_layout_version(kParamLayoutVersion);
  return k;
}

int Run() {
  const KernelTemplate* builtin =
      TemplateRegistry::Builtin().Find(absl::GetFlag(FLAGS_template_name));
  if (builtin == nullptr) return Fail("--template_name: unknown template");
  KernelTemplate edited = *builtin;
  if (const std::string path = absl::GetFlag(FLAGS_source); !path.empty()) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return Fail(absl::StrCat("--source: cannot read ", path));
    edited.source.assign(std::istreambuf_iterator<char>(in), {});
    edited.hash = "edited";
  }
  const KernelTemplate* t = &edited;
  absl::StatusOr<Problem> problem =
      ParseProblemKey(absl::GetFlag(FLAGS_problem));
  if (!problem.ok())
    return Fail(absl::StrCat("--problem: ", problem.status().message()));
  absl::StatusOr<Config> config = ConfigToCompile(*builtin, *problem);
  if (!config.ok()) return Fail(std::string(config.status().message()));
  if (absl::GetFlag(FLAGS_out).empty()) return Fail("--out is required");
  DeviceLimits unlimited;
  unlimited.smem_per_block_bytes = 1 << 30;
  if (absl::Status s = CheckConfig(*t, *config, *problem, unlimited); !s.ok()) {
    return Fail(absl::StrCat("--config: ", s.message()));
  }
  absl::StatusOr<CompileResult> r =
      CompileTemplate(*t, *config, *problem, absl::GetFlag(FLAGS_arch));
  if (!r.ok()) return Fail(r.status().ToString());
  if (!r->ok) return Fail(absl::StrCat("compile error:\n", r->log));
  const std::string out = absl::GetFlag(FLAGS_out);
  std::ofstream(out + ".log") << r->log;  // ptxas: registers, spills.
  v1::KernelBundle bundle;
  *bundle.add_kernels() = KernelMessage(*t, *config, *problem, *r);
  if (absl::Status s = WriteKernelBundle(out + ".evtb", bundle); !s.ok()) {
    return Fail(s.ToString());
  }
  return 0;
}

}  // namespace
}  // namespace evotune

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return evotune::Run();
}
