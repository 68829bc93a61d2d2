#include "tuner/evaluator/random_inputs.h"

#include "tuner/evaluator/reference.h"

namespace evotune {
namespace {

// splitmix64 of the index: independent streams per element, no state.
uint64_t Mix(uint64_t seed, uint64_t index) {
  uint64_t z = seed + (index + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

uint16_t RandomInputBits(uint64_t seed, uint64_t index, float offset,
                         DType dtype) {
  const float u =
      static_cast<float>(Mix(seed, index) & 0xffff) * (1.0f / 32768.0f) - 1.0f;
  return FloatToHalfBits(u + offset, dtype);
}

// Keep in step with RandomInputBits above.
const char kRandomFillSource[] = R"cuda(
extern "C" __global__ void evotune_random_fill(void* out,
                                               unsigned long long n,
                                               unsigned long long seed,
                                               float offset, int format) {
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x +
                              threadIdx.x;
       i < n; i += (unsigned long long)gridDim.x * blockDim.x) {
    unsigned long long z = seed + (i + 1) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    const float u =
        __fsub_rn(__fmul_rn((float)(unsigned)(z & 0xffff), 1.0f / 32768.0f),
                  1.0f);
    const float x = __fadd_rn(u, offset);
    unsigned short h = 0;
    if (format == 2) {
#if __CUDA_ARCH__ >= 890
      asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;"
          : "=h"(h)
          : "f"(0.f), "f"(x));
#endif
      static_cast<unsigned char*>(out)[i] = static_cast<unsigned char>(h);
      continue;
    }
    if (format == 1) {
      asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(x));
    } else {
      asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
    }
    static_cast<unsigned short*>(out)[i] = h;
  }
}
)cuda";

}  // namespace evotune
