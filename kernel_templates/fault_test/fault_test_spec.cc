// Parameter space and launch geometry of
// kernel_templates/fault_test/fault_test.cu (test-only).
#include "kernel_templates/template_registry.h"

namespace evotune {

KernelTemplate EVOTUNE_TEMPLATE_SPEC(fault_test)(std::string source,
                                                 std::string hash) {
  KernelTemplate t;
  t.name = "fault_test";
  t.description =
      "Test only: kernels that write through an invalid address (FAULT=1) or "
      "never end (FAULT=2).";
  t.source = std::move(source);
  t.hash = std::move(hash);
  t.test_only = true;
  t.space = ParamSpace({
      {"FAULT", {1, 2}, "1: invalid address, 2: endless loop"},
  });
  t.head_dims = {64, 128};
  t.dtypes = {DType::kFp16, DType::kBf16};
  t.geometry = [](const Config&, const Problem&) {
    LaunchGeometry g;
    g.block_threads = 32;
    return g;
  };
  return t;
}

}  // namespace evotune
