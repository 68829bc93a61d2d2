// fp16/bf16 <-> fp32 conversions for the templates, in PTX so that the
// templates need no toolkit header. The element type is chosen by the macro
// EVT_BF16 (1 for bf16, 0 for fp16) that the compiler defines.
#ifndef EVOTUNE_KERNEL_TEMPLATES_COMMON_DTYPE_CUH_
#define EVOTUNE_KERNEL_TEMPLATES_COMMON_DTYPE_CUH_

typedef unsigned short evt_elem;  // Raw 16-bit storage of one element.

__device__ __forceinline__ float evt_to_float(evt_elem x) {
#if EVT_BF16
  return __uint_as_float(static_cast<unsigned>(x) << 16);
#else
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x));
  return f;
#endif
}

__device__ __forceinline__ evt_elem evt_from_float(float f) {
  evt_elem x;
#if EVT_BF16
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(x) : "f"(f));
#else
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(x) : "f"(f));
#endif
  return x;
}

#endif  // EVOTUNE_KERNEL_TEMPLATES_COMMON_DTYPE_CUH_
