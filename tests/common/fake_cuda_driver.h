// A fake GPU behind the CudaDriver interface, for tests of what calls the
// driver (the CUDA evaluator's gates) on machines without one. Device memory
// is host memory; the random-fill kernel writes what the real one does; an
// attention kernel's launch writes the host reference output (or a chosen
// fault); events report a chosen time per attention launch.
//
// Every launch runs in one context (0x1), whatever the stream.
// One fake per process at a time (the driver's entry points are plain
// functions, so its state is global): FakeCudaDriver::Install() returns it.
#ifndef EVOTUNE_TESTS_COMMON_FAKE_CUDA_DRIVER_H_
#define EVOTUNE_TESTS_COMMON_FAKE_CUDA_DRIVER_H_

#include <cstdint>
#include <string>

#include "core/problem.h"
#include "launch/cuda_driver.h"

namespace evotune {

// What the fake's attention kernel does when launched.
enum class FakeKernel {
  kCorrect,             // Writes the reference output.
  kLeavesOneUnwritten,  // The reference, but one element left as it was.
  kRacy,                // The reference, one element differing every launch.
  kWrong,               // The reference with row 0 of head 0 off by 0.25.
  kRefusedLaunch,       // cuLaunchKernel answers CUDA_ERROR_INVALID_VALUE.
  kFaults,           // Launches; the context then reports an illegal address.
  kDropsLastKey,     // The reference without each sequence's last key.
  kIgnoresSequsedK,  // Reads every slot of a KV cache, used or not.
};

struct FakeGpuState {
  // The head_dim and dtype of attention launches (the launch parameters
  // carry the rest of the problem).
  Problem problem;
  FakeKernel kernel = FakeKernel::kCorrect;
  int local_bytes = 0;          // CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES (spills).
  int registers = 64;           // CU_FUNC_ATTRIBUTE_NUM_REGS.
  double us_per_launch = 12.5;  // What events measure per attention launch.
  int smem_optin = 227 * 1024;
  bool capturing = false;  // What cuStreamIsCapturing reports.
  // Counters of what the evaluator did.
  int attention_launches = 0;
  int module_loads = 0;
  // Of those, loaded by a thread in relaxed capture mode
  // (cuThreadExchangeStreamCaptureMode).
  int relaxed_module_loads = 0;
  // Of those, of PTX text (for the driver to compile) rather than a cubin.
  int ptx_module_loads = 0;
  int function_loads = 0;  // cuFuncLoad's.
  int allocations = 0;
  int fills = 0;
  int scrubs = 0;
  int64_t bytes_allocated = 0;  // Currently.
  bool faulted = false;
};

class FakeCudaDriver {
 public:
  // Resets the state and returns the driver (a compute capability 9.0 GPU
  // named "Fake H100", 132 multiprocessors).
  static const CudaDriver* Install();
  static FakeGpuState& state();
};

}  // namespace evotune

#endif  // EVOTUNE_TESTS_COMMON_FAKE_CUDA_DRIVER_H_
