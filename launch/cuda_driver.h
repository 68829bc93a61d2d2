// The CUDA driver API, loaded lazily with dlopen so that every binary starts
// on a machine without an NVIDIA driver; GPU work is then refused with
// "no CUDA device: ..." instead of a loader error.
#ifndef EVOTUNE_LAUNCH_CUDA_DRIVER_H_
#define EVOTUNE_LAUNCH_CUDA_DRIVER_H_

#include <cuda.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/trial.h"

namespace evotune {

// Entry points looked up under the symbols cuda.h maps their names to, so
// each has the ABI declared there. Immutable once loaded; the driver is
// thread-safe.
struct CudaDriver {
#define EVOTUNE_CU_FN(name) decltype(&::name) name = nullptr
  EVOTUNE_CU_FN(cuInit);
  EVOTUNE_CU_FN(cuDriverGetVersion);
  EVOTUNE_CU_FN(cuGetErrorString);
  EVOTUNE_CU_FN(cuDeviceGetCount);
  EVOTUNE_CU_FN(cuDeviceGet);
  EVOTUNE_CU_FN(cuDeviceGetName);
  EVOTUNE_CU_FN(cuDeviceGetAttribute);
  EVOTUNE_CU_FN(cuDevicePrimaryCtxRetain);
  EVOTUNE_CU_FN(cuCtxSetCurrent);
  EVOTUNE_CU_FN(cuCtxSynchronize);
  EVOTUNE_CU_FN(cuCtxGetDevice);
  EVOTUNE_CU_FN(cuCtxPushCurrent);
  EVOTUNE_CU_FN(cuCtxPopCurrent);
  EVOTUNE_CU_FN(cuStreamGetCtx);
  EVOTUNE_CU_FN(cuStreamIsCapturing);
  EVOTUNE_CU_FN(cuThreadExchangeStreamCaptureMode);
  EVOTUNE_CU_FN(cuMemsetD32Async);
  EVOTUNE_CU_FN(cuModuleLoadData);
  EVOTUNE_CU_FN(cuModuleUnload);
  EVOTUNE_CU_FN(cuModuleGetFunction);
  EVOTUNE_CU_FN(cuFuncSetAttribute);
  EVOTUNE_CU_FN(cuFuncGetAttribute);
  EVOTUNE_CU_FN(cuLaunchKernel);
  EVOTUNE_CU_FN(cuMemAlloc);
  EVOTUNE_CU_FN(cuMemFree);
  EVOTUNE_CU_FN(cuMemcpyHtoD);
  EVOTUNE_CU_FN(cuMemcpyDtoH);
  EVOTUNE_CU_FN(cuMemsetD16);
  EVOTUNE_CU_FN(cuStreamCreate);
  EVOTUNE_CU_FN(cuStreamDestroy);
  EVOTUNE_CU_FN(cuStreamSynchronize);
  EVOTUNE_CU_FN(cuEventCreate);
  EVOTUNE_CU_FN(cuEventDestroy);
  EVOTUNE_CU_FN(cuEventRecord);
  EVOTUNE_CU_FN(cuEventSynchronize);
  EVOTUNE_CU_FN(cuEventElapsedTime);
  EVOTUNE_CU_FN(cuTensorMapEncodeTiled);
  // Optional (drivers of CUDA 12.4 on; null before): loads a function its
  // module left to load lazily.
  EVOTUNE_CU_FN(cuFuncLoad);
#undef EVOTUNE_CU_FN

  // Loads the driver and calls cuInit(0) once per process. UNAVAILABLE with a
  // message starting "no CUDA device" when the library is missing, cuInit
  // fails, or no device is visible.
  static absl::StatusOr<const CudaDriver*> Get();

  // OK for CUDA_SUCCESS; otherwise INTERNAL "<what>: <driver's message>".
  absl::Status Check(CUresult result, absl::string_view what) const;
};

// Identity and limits of device `ordinal` (of the visible devices), all but
// nvrtc_version, which is the compiler's (NvrtcVersion(); this library does
// not link NVRTC): empty here. Through the machine's driver, or `d` (a
// test's fake).
absl::StatusOr<DeviceInfo> ProbeCudaDevice(int ordinal);
absl::StatusOr<DeviceInfo> ProbeCudaDevice(const CudaDriver& d, int ordinal);

// The cubin architecture of a device: "sm_89" for (8, 9); "sm_90a" for
// (9, 0), so that Hopper's own instructions are available.
std::string ArchName(int cc_major, int cc_minor);

}  // namespace evotune

#endif  // EVOTUNE_LAUNCH_CUDA_DRIVER_H_
