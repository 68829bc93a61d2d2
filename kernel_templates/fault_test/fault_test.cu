// fault_test: a test-only template whose kernels fail on purpose, to check
// that a search survives kernels that fault or never end. It is registered
// only when EVOTUNE_TEST_TEMPLATES=1 is set in the environment.
//
// Tunables (compile-time macros):
//   FAULT  1: write through an invalid device address (the launch fails with
//             an illegal-address error and the CUDA context is lost);
//          2: spin forever.
#include "attention_params.cuh"

extern "C" __global__ void attention_fwd(
    const __grid_constant__ AttentionParams p) {
#if FAULT == 1
  // An address no allocation can have.
  volatile float* bad = reinterpret_cast<volatile float*>(
      static_cast<unsigned long long>(0xdead0000ull) << 20);
  bad[threadIdx.x] = 1.f;
#else
  // clock64() is volatile: the loop cannot be optimized away, and it never
  // turns negative in the lifetime of a GPU.
  while (clock64() >= 0) {
  }
#endif
}
