// KernelService: GetKernel's logic. The best config for a problem, as
// QueryBest answers it, compiled for the device's architecture (cubin and
// PTX, kept in the store so that each instantiation compiles once), with
// the launch geometry for that problem. Needs no GPU: NVRTC compiles for
// any architecture. Thread-safe.
#ifndef EVOTUNE_TUNER_SERVING_KERNEL_SERVICE_H_
#define EVOTUNE_TUNER_SERVING_KERNEL_SERVICE_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernel_templates/kernel_template.h"
#include "storage/result_store.h"
#include "tuner/serving/recent_problems.h"
#include "tuner/serving/tuning_service.h"

namespace evotune {

struct ServedKernel {
  Problem problem;  // The asked one.
  // QueryBest's answer; results[0] is the config compiled.
  BestAnswer answer;
  std::string arch;  // "sm_90a"
  std::string nvrtc_version;
  std::string kernel_name;
  CompiledKernel compiled;
  LaunchGeometry geometry;  // For `problem`.
  int param_layout_version = kParamLayoutVersion;
};

// Compiles one instantiation: the cubin for `arch` (a real architecture) and
// the PTX of its virtual architecture. A compile error is INTERNAL with the
// compiler's log.
using KernelCompileFn = std::function<absl::StatusOr<CompiledKernel>(
    const KernelTemplate& t, const Config& config, const Problem& problem,
    const std::string& arch)>;

// The real compiler (NVRTC).
absl::StatusOr<CompiledKernel> NvrtcCompileKernel(const KernelTemplate& t,
                                                  const Config& config,
                                                  const Problem& problem,
                                                  const std::string& arch);

class KernelService {
 public:
  // `tuning` and `store` must outlive the service.
  KernelService(TuningService* tuning, ResultStore* store,
                KernelCompileFn compile = NvrtcCompileKernel);

  // Errors: those of QueryBest (INVALID_ARGUMENT naming the field);
  // FAILED_PRECONDITION naming "device" when NVRTC cannot compile for the
  // device (a synthetic one), or when no template supports the problem or
  // the answer's template version is not this daemon's; INTERNAL when the
  // compile fails (nothing is cached then).
  // `query` as QueryBest takes it; only its first config is compiled
  // (query.k is ignored).
  absl::StatusOr<ServedKernel> GetKernel(const BestQuery& query);

  // Up to `limit` problems GetKernel served for `device` (query.device as
  // given), the most recently served first (RecentProblems).
  std::vector<Problem> Recent(const std::string& device, size_t limit) const {
    return recent_.Recent(device, limit);
  }

 private:
  absl::StatusOr<CompiledKernel> Compiled(const KernelTemplate& t,
                                          const Config& config,
                                          const Problem& problem,
                                          const std::string& arch);

  TuningService* const tuning_;
  ResultStore* const store_;
  const KernelCompileFn compile_;
  RecentProblems recent_;
};

}  // namespace evotune

#endif  // EVOTUNE_TUNER_SERVING_KERNEL_SERVICE_H_
