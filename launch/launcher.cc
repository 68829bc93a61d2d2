#include "launch/launcher.h"

#include <array>

namespace evotune {

absl::StatusOr<LaunchArgs> MakeLaunchArgs(EncodeTiledFn encode,
                                          const LaunchGeometry& geometry,
                                          const AttentionParams& params,
                                          const Problem& problem) {
  LaunchArgs args;
  args.params = params;
  if (geometry.uses_tma()) {
    absl::StatusOr<AttentionTensorMaps> maps =
        EncodeTensorMaps(encode, params, problem, geometry.tma);
    if (!maps.ok()) return maps.status();
    args.maps = *maps;
  }
  return args;
}

CUresult LaunchAttention(const CudaDriver& d, const LoadedKernel& kernel,
                         LaunchArgs& args, CUstream stream) {
  const LaunchGeometry& g = kernel.geometry;
  const std::array<int64_t, 3> grid = LaunchGrid(g, kernel.multiprocessors);
  void* params[] = {&args.params, &args.maps};
  return d.cuLaunchKernel(
      kernel.function, static_cast<unsigned>(grid[0]),
      static_cast<unsigned>(grid[1]), static_cast<unsigned>(grid[2]),
      static_cast<unsigned>(g.block_threads), 1, 1,
      static_cast<unsigned>(g.smem_bytes), stream, params, nullptr);
}

}  // namespace evotune
