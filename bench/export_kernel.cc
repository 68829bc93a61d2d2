// Compiles one config of a template for one problem and writes the cubin and
// its launch geometry, so that bench/sdpa_compare.py can launch exactly the
// kernel evotune measured, side by side with PyTorch, in one process.
//
//   export_kernel --template_name=flash_fwd --config=BLOCK_M=64,...
//     --problem=b1_h8_kv8_q512_k512_d64_full_fp16_bhsd --arch=sm_90a
//     --out=DIR/x
// writes DIR/x.cubin, DIR/x.json and DIR/x.log (the compiler's log:
// registers, spills, warnings). With --source=FILE the template's
// source is read from FILE instead (its spec and shared headers stay): a
// kernel variant timed beside the built-in one without a rebuild. Its hash
// is then "edited".
#include <cstdio>
#include <fstream>
#include <iterator>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernel_templates/template_registry.h"
#include "tuner/evaluator/nvrtc_compiler.h"

ABSL_FLAG(std::string, template_name, "flash_fwd", "kernel template");
ABSL_FLAG(std::string, config, "", "NAME=value,...");
ABSL_FLAG(std::string, problem, "", "problem key, as ProblemKey writes it");
ABSL_FLAG(std::string, arch, "sm_90a",
          "target architecture, as ArchName writes it");
ABSL_FLAG(std::string, out, "", "output path prefix");
ABSL_FLAG(std::string, source, "",
          "compile this file instead of the template's embedded source");

namespace evotune {
namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "export_kernel: %s\n", message.c_str());
  return 1;
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
  absl::StatusOr<Config> config = ParseConfigKey(absl::GetFlag(FLAGS_config));
  if (!config.ok())
    return Fail(absl::StrCat("--config: ", config.status().message()));
  absl::StatusOr<Problem> problem =
      ParseProblemKey(absl::GetFlag(FLAGS_problem));
  if (!problem.ok())
    return Fail(absl::StrCat("--problem: ", problem.status().message()));
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
  std::ofstream(out + ".cubin", std::ios::binary) << r->cubin;
  std::ofstream(out + ".log") << r->log;  // ptxas: registers, spills.
  const LaunchGeometry g = t->geometry(*config, *problem);
  std::ofstream(out + ".json") << absl::StrFormat(
      "{\"template\": \"%s\", \"hash\": \"%s\", \"config\": \"%s\", "
      "\"problem\": \"%s\", \"kernel\": \"%s\", \"grid\": [%d, %d, %d], "
      "\"block\": %d, \"smem\": %d, \"workspace_floats\": %d, "
      "\"counters\": %d, \"tma\": [%d, %d, %d], \"persistent\": %d}\n",
      t->name, t->hash, ConfigKey(*config), ProblemKey(*problem),
      t->kernel_name, g.grid[0], g.grid[1], g.grid[2], g.block_threads,
      g.smem_bytes, g.workspace_floats, g.counters, g.tma.q_rows, g.tma.kv_rows,
      g.tma.o_rows, g.persistent ? 1 : 0);
  return 0;
}

}  // namespace
}  // namespace evotune

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return evotune::Run();
}
