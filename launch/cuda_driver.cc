#include "launch/cuda_driver.h"

#include <dlfcn.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace evotune {
namespace {

absl::Status NoDevice(absl::string_view why) {
  return absl::UnavailableError(absl::StrCat("no CUDA device: ", why));
}

absl::StatusOr<const CudaDriver*> Load() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* err = dlerror();
    return NoDevice(absl::StrCat("the NVIDIA driver library is not loadable (",
                                 err ? err : "libcuda.so.1", ")"));
  }
  auto* d = new CudaDriver;
  absl::Status missing;
  // Each entry point is looked up under the symbol that cuda.h maps its name
  // to (cuMemAlloc -> cuMemAlloc_v2, ...), so its ABI is exactly the declared
  // one. cuGetProcAddress by base name would hand out the newest version
  // instead (cuCtxSynchronize -> cuCtxSynchronize_v2, which takes a context).
  auto resolve = [&](auto& fn, const char* symbol) {
    void* p = dlsym(lib, symbol);
    if (p == nullptr) missing = NoDevice(absl::StrCat("driver lacks ", symbol));
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
  };
#define EVOTUNE_SYMBOL(name) #name
#define EVOTUNE_EXPANDED_SYMBOL(name) EVOTUNE_SYMBOL(name)
#define EVOTUNE_RESOLVE(name) resolve(d->name, EVOTUNE_EXPANDED_SYMBOL(name))
  EVOTUNE_RESOLVE(cuInit);
  EVOTUNE_RESOLVE(cuDriverGetVersion);
  EVOTUNE_RESOLVE(cuGetErrorString);
  EVOTUNE_RESOLVE(cuDeviceGetCount);
  EVOTUNE_RESOLVE(cuDeviceGet);
  EVOTUNE_RESOLVE(cuDeviceGetName);
  EVOTUNE_RESOLVE(cuDeviceGetAttribute);
  EVOTUNE_RESOLVE(cuDevicePrimaryCtxRetain);
  EVOTUNE_RESOLVE(cuCtxSetCurrent);
  EVOTUNE_RESOLVE(cuCtxSynchronize);
  EVOTUNE_RESOLVE(cuCtxGetDevice);
  EVOTUNE_RESOLVE(cuCtxPushCurrent);
  EVOTUNE_RESOLVE(cuCtxPopCurrent);
  EVOTUNE_RESOLVE(cuStreamGetCtx);
  EVOTUNE_RESOLVE(cuStreamIsCapturing);
  EVOTUNE_RESOLVE(cuThreadExchangeStreamCaptureMode);
  EVOTUNE_RESOLVE(cuMemsetD32Async);
  EVOTUNE_RESOLVE(cuModuleLoadData);
  EVOTUNE_RESOLVE(cuModuleUnload);
  EVOTUNE_RESOLVE(cuModuleGetFunction);
  EVOTUNE_RESOLVE(cuFuncSetAttribute);
  EVOTUNE_RESOLVE(cuFuncGetAttribute);
  EVOTUNE_RESOLVE(cuLaunchKernel);
  EVOTUNE_RESOLVE(cuMemAlloc);
  EVOTUNE_RESOLVE(cuMemFree);
  EVOTUNE_RESOLVE(cuMemcpyHtoD);
  EVOTUNE_RESOLVE(cuMemcpyDtoH);
  EVOTUNE_RESOLVE(cuMemsetD16);
  EVOTUNE_RESOLVE(cuStreamCreate);
  EVOTUNE_RESOLVE(cuStreamDestroy);
  EVOTUNE_RESOLVE(cuStreamSynchronize);
  EVOTUNE_RESOLVE(cuEventCreate);
  EVOTUNE_RESOLVE(cuEventDestroy);
  EVOTUNE_RESOLVE(cuEventRecord);
  EVOTUNE_RESOLVE(cuEventSynchronize);
  EVOTUNE_RESOLVE(cuEventElapsedTime);
  EVOTUNE_RESOLVE(cuTensorMapEncodeTiled);
  d->cuFuncLoad = reinterpret_cast<decltype(d->cuFuncLoad)>(
      dlsym(lib, EVOTUNE_EXPANDED_SYMBOL(cuFuncLoad)));
#undef EVOTUNE_RESOLVE
#undef EVOTUNE_EXPANDED_SYMBOL
#undef EVOTUNE_SYMBOL
  if (!missing.ok()) {
    delete d;
    return missing;
  }
  const CUresult init = d->cuInit(0);
  if (init != CUDA_SUCCESS) {
    const char* msg = nullptr;
    d->cuGetErrorString(init, &msg);
    absl::Status s = NoDevice(absl::StrCat("cuInit failed: ", msg ? msg : "?"));
    delete d;
    return s;
  }
  int count = 0;
  if (d->cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) {
    delete d;
    return NoDevice("the driver sees no GPU");
  }
  return d;
}

// The kernel module's version ("580.159.04"), which identifies the driver
// more precisely than the CUDA API version; empty when unreadable.
std::string KernelDriverVersion() {
  std::ifstream in("/proc/driver/nvidia/version");
  std::string line;
  if (!std::getline(in, line)) return "";
  std::vector<absl::string_view> words =
      absl::StrSplit(line, ' ', absl::SkipEmpty());
  for (absl::string_view w : words) {
    if (!w.empty() && absl::ascii_isdigit(w[0]) &&
        w.find('.') != absl::string_view::npos) {
      return std::string(w);
    }
  }
  return "";
}

}  // namespace

absl::StatusOr<const CudaDriver*> CudaDriver::Get() {
  static const absl::StatusOr<const CudaDriver*>* driver =
      new absl::StatusOr<const CudaDriver*>(Load());
  return *driver;
}

absl::Status CudaDriver::Check(CUresult result, absl::string_view what) const {
  if (result == CUDA_SUCCESS) return absl::OkStatus();
  const char* msg = nullptr;
  cuGetErrorString(result, &msg);
  return absl::InternalError(
      absl::StrCat(what, ": ", msg ? msg : "unknown CUDA error"));
}

absl::StatusOr<DeviceInfo> ProbeCudaDevice(int ordinal) {
  absl::StatusOr<const CudaDriver*> driver = CudaDriver::Get();
  if (!driver.ok()) return driver.status();
  return ProbeCudaDevice(**driver, ordinal);
}

absl::StatusOr<DeviceInfo> ProbeCudaDevice(const CudaDriver& d, int ordinal) {
  CUdevice dev;
  if (absl::Status s = d.Check(d.cuDeviceGet(&dev, ordinal), "cuDeviceGet");
      !s.ok()) {
    return NoDevice(absl::StrCat("device ", ordinal, ": ", s.message()));
  }
  DeviceInfo info;
  char name[256] = {};
  if (absl::Status s = d.Check(d.cuDeviceGetName(name, sizeof(name), dev),
                               "cuDeviceGetName");
      !s.ok()) {
    return s;
  }
  info.name = name;
  int smem = 0, threads = 0, driver_version = 0;
  d.cuDeviceGetAttribute(&info.cc_major,
                         CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
  d.cuDeviceGetAttribute(&info.cc_minor,
                         CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
  d.cuDeviceGetAttribute(
      &smem, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev);
  d.cuDeviceGetAttribute(&threads, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                         dev);
  d.cuDeviceGetAttribute(&info.limits.multiprocessors,
                         CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
  d.cuDriverGetVersion(&driver_version);
  info.limits.smem_per_block_bytes = smem;
  info.limits.max_threads_per_block = threads;
  info.limits.compute_capability = 10 * info.cc_major + info.cc_minor;
  info.driver_version = KernelDriverVersion();
  if (info.driver_version.empty()) {
    info.driver_version = absl::StrCat("cuda-", driver_version / 1000, ".",
                                       (driver_version % 1000) / 10);
  }
  return info;
}

std::string ArchName(int cc_major, int cc_minor) {
  // 9.0's cubins target the chip itself (sm_90a), so that templates may use
  // its own instructions (wgmma); they run on 9.0 devices only, which is
  // where they are compiled for.
  return absl::StrCat("sm_", cc_major, cc_minor,
                      cc_major == 9 && cc_minor == 0 ? "a" : "");
}

}  // namespace evotune
