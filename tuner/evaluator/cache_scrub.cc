#include "tuner/evaluator/cache_scrub.h"

#include <algorithm>

namespace evotune {

const char kCacheScrubSource[] = R"cuda(
extern "C" __global__ void evotune_cache_scrub(const uint4* p,
                                               unsigned long long n,
                                               unsigned* sink) {
  unsigned x = 0;
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x +
                              threadIdx.x;
       i < n; i += (unsigned long long)gridDim.x * blockDim.x) {
    const uint4 v = p[i];
    x ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (x == 0x9e3779b9u) *sink = x;
}
)cuda";

size_t CacheScrubBytes(int l2_bytes) {
  const size_t twice = 2 * static_cast<size_t>(std::max(l2_bytes, 1 << 20));
  return (twice + 15) / 16 * 16;
}

}  // namespace evotune
