#include "tests/common/fake_cuda_driver.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "kernel_templates/common/attention_params.cuh"
#include "tuner/evaluator/random_inputs.h"
#include "tuner/evaluator/reference.h"

namespace evotune {
namespace {

FakeGpuState& State() {
  static FakeGpuState* const state = new FakeGpuState;
  return *state;
}

// Functions by the name they were looked up under; events by launch count.
std::map<CUfunction, std::string>& Functions() {
  static auto* const f = new std::map<CUfunction, std::string>;
  return *f;
}
std::map<CUevent, int>& Events() {
  static auto* const e = new std::map<CUevent, int>;
  return *e;
}
std::map<CUdeviceptr, size_t>& Allocations() {
  static auto* const a = new std::map<CUdeviceptr, size_t>;
  return *a;
}

template <typename T>
T* At(CUdeviceptr p) {
  return reinterpret_cast<T*>(static_cast<uintptr_t>(p));
}

CUresult GetErrorString(CUresult r, const char** s) {
  *s = r == CUDA_ERROR_ILLEGAL_ADDRESS ? "an illegal memory access (fake)"
                                       : "a fake driver error";
  return CUDA_SUCCESS;
}
CUresult DeviceGet(CUdevice* d, int ordinal) {
  *d = ordinal;
  return ordinal == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}
CUresult DeviceGetName(char* name, int len, CUdevice) {
  std::strncpy(name, "Fake H100", len);
  return CUDA_SUCCESS;
}
CUresult DeviceGetAttribute(int* v, CUdevice_attribute a, CUdevice) {
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
      *v = 9;
      break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
      *v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
      *v = State().smem_optin;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      *v = 1024;
      break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
      *v = 132;
      break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE:
      *v = 1 << 20;
      break;
    default:
      *v = 0;
  }
  return CUDA_SUCCESS;
}
CUresult DriverGetVersion(int* v) {
  *v = 13000;
  return CUDA_SUCCESS;
}
CUresult PrimaryCtxRetain(CUcontext* c, CUdevice) {
  *c = reinterpret_cast<CUcontext>(0x1);
  return CUDA_SUCCESS;
}
CUresult CtxSetCurrent(CUcontext) { return CUDA_SUCCESS; }
CUresult CtxPushCurrent(CUcontext) { return CUDA_SUCCESS; }
CUresult CtxPopCurrent(CUcontext* c) {
  *c = reinterpret_cast<CUcontext>(0x1);
  return CUDA_SUCCESS;
}
CUresult StreamIsCapturing(CUstream, CUstreamCaptureStatus* s) {
  *s = State().capturing ? CU_STREAM_CAPTURE_STATUS_ACTIVE
                         : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}
CUresult StreamGetCtx(CUstream, CUcontext* c) {
  *c = reinterpret_cast<CUcontext>(0x1);
  return CUDA_SUCCESS;
}
CUresult CtxGetDevice(CUdevice* d) {
  *d = 0;
  return CUDA_SUCCESS;
}
CUresult CtxSynchronize() {
  return State().faulted ? CUDA_ERROR_ILLEGAL_ADDRESS : CUDA_SUCCESS;
}
CUresult MemAlloc(CUdeviceptr* p, size_t bytes) {
  void* host = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  *p = reinterpret_cast<uintptr_t>(host);
  Allocations()[*p] = bytes;
  State().bytes_allocated += bytes;
  ++State().allocations;
  return CUDA_SUCCESS;
}
CUresult MemFree(CUdeviceptr p) {
  State().bytes_allocated -= Allocations()[p];
  Allocations().erase(p);
  std::free(At<void>(p));
  return CUDA_SUCCESS;
}
CUresult MemsetD16(CUdeviceptr p, unsigned short v, size_t n) {
  for (size_t i = 0; i < n; ++i) At<uint16_t>(p)[i] = v;
  return CUDA_SUCCESS;
}
CUresult MemsetD32Async(CUdeviceptr p, unsigned v, size_t n, CUstream) {
  for (size_t i = 0; i < n; ++i) At<uint32_t>(p)[i] = v;
  return CUDA_SUCCESS;
}
CUresult MemcpyHtoD(CUdeviceptr dst, const void* src, size_t bytes) {
  std::memcpy(At<void>(dst), src, bytes);
  return State().faulted ? CUDA_ERROR_ILLEGAL_ADDRESS : CUDA_SUCCESS;
}
CUresult MemcpyDtoH(void* dst, CUdeviceptr src, size_t bytes) {
  std::memcpy(dst, At<void>(src), bytes);
  return State().faulted ? CUDA_ERROR_ILLEGAL_ADDRESS : CUDA_SUCCESS;
}
thread_local CUstreamCaptureMode capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
CUresult ThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  std::swap(*mode, capture_mode);
  return CUDA_SUCCESS;
}
CUresult ModuleLoadData(CUmodule* m, const void* image) {
  *m = reinterpret_cast<CUmodule>(new int(0));
  ++State().module_loads;
  // A cubin is an ELF file; NVRTC's PTX opens with a comment.
  if (std::memcmp(image, "//", 2) == 0) ++State().ptx_module_loads;
  if (capture_mode == CU_STREAM_CAPTURE_MODE_RELAXED) {
    ++State().relaxed_module_loads;
  }
  return CUDA_SUCCESS;
}
CUresult FuncLoad(CUfunction) {
  ++State().function_loads;
  return CUDA_SUCCESS;
}
CUresult ModuleUnload(CUmodule m) {
  delete reinterpret_cast<int*>(m);
  return CUDA_SUCCESS;
}
CUresult ModuleGetFunction(CUfunction* f, CUmodule m, const char* name) {
  // One handle per module and name.
  static std::map<std::pair<CUmodule, std::string>, int*>* handles =
      new std::map<std::pair<CUmodule, std::string>, int*>;
  int*& h = (*handles)[{m, name}];
  if (h == nullptr) h = new int(0);
  *f = reinterpret_cast<CUfunction>(h);
  Functions()[*f] = name;
  return CUDA_SUCCESS;
}
CUresult FuncGetAttribute(int* v, CUfunction_attribute a, CUfunction) {
  *v = a == CU_FUNC_ATTRIBUTE_NUM_REGS           ? State().registers
       : a == CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES ? State().local_bytes
                                                 : 0;
  return CUDA_SUCCESS;
}
CUresult FuncSetAttribute(CUfunction, CUfunction_attribute, int) {
  return CUDA_SUCCESS;
}

// The random-fill kernel's arguments: out, n, seed, offset, bf16.
void Fill(void** args) {
  const CUdeviceptr out = *static_cast<CUdeviceptr*>(args[0]);
  const auto n = *static_cast<unsigned long long*>(args[1]);
  const auto seed = *static_cast<unsigned long long*>(args[2]);
  const float offset = *static_cast<float*>(args[3]);
  const DType dtype = *static_cast<int*>(args[4]) ? DType::kBf16 : DType::kFp16;
  for (unsigned long long i = 0; i < n; ++i) {
    At<uint16_t>(out)[i] = RandomInputBits(seed, i, offset, dtype);
  }
  ++State().fills;
}

// Element (b, h, row, c) of a [batch, heads, seq, head_dim] tensor.
float Element(const void* base, long long bs, long long hs, long long rs,
              int64_t b, int64_t h, int64_t r, int64_t c, DType dtype) {
  const uint16_t* p = static_cast<const uint16_t*>(base);
  return HalfBitsToFloat(p[b * bs + h * hs + r * rs + c], dtype);
}

// Sequence b's lengths and first rows, as common/sequence.cuh reads them
// (the fake's device memory is host memory).
struct FakeSequence {
  int64_t seq_q, seq_k, q_start, k_start;
};

FakeSequence SequenceAt(const AttentionParams& a, int64_t b) {
  FakeSequence s{a.seq_q, a.seq_k, 0, 0};
  if (a.cu_seqlens_q != nullptr) {
    s.q_start = a.cu_seqlens_q[b];
    s.seq_q = a.cu_seqlens_q[b + 1] - s.q_start;
  }
  if (a.cu_seqlens_k != nullptr) {
    s.k_start = a.cu_seqlens_k[b];
    s.seq_k = a.cu_seqlens_k[b + 1] - s.k_start;
  }
  if (a.seqused_k != nullptr &&
      State().kernel != FakeKernel::kIgnoresSequsedK) {
    s.seq_k = a.seqused_k[b];
  }
  if (State().kernel == FakeKernel::kDropsLastKey && s.seq_k > 1) --s.seq_k;
  return s;
}

// The reference output into params.o, then the fault asked for.
void Attention(void** args) {
  const AttentionParams& a = *static_cast<AttentionParams*>(args[0]);
  FakeGpuState& st = State();
  const int64_t d = st.problem.head_dim;
  std::vector<float> q(d), k, v, out(d);
  uint16_t* o = static_cast<uint16_t*>(a.o);
  for (int64_t b = 0; b < a.batch; ++b) {
    const FakeSequence seq = SequenceAt(a, b);
    Problem p = st.problem;
    p.heads = a.heads;
    p.kv_heads = a.kv_heads;
    p.seq_q = seq.seq_q;
    p.seq_k = seq.seq_k;
    p.causal = a.causal != 0;
    p.window_left = a.window_left;
    p.window_right = a.window_right;
    p.softcap = a.softcap;
    k.assign(p.seq_k * d, 0.f);
    v.assign(p.seq_k * d, 0.f);
    for (int64_t h = 0; h < a.heads; ++h) {
      const int64_t kvh = h / (a.heads / a.kv_heads);
      for (int64_t j = 0; j < p.seq_k; ++j) {
        // A paged key's page and row there, as common/sequence.cuh's KeyRow
        // (a page is the problem's page_size rows, where the test set it,
        // else k_batch_stride / k_row_stride).
        int64_t at = b, row = seq.k_start + j;
        if (a.block_table != nullptr) {
          const int64_t page = st.problem.page_size > 0
                                   ? st.problem.page_size
                                   : a.k_batch_stride / a.k_row_stride;
          at = a.block_table[b * a.block_table_stride + j / page];
          row = j % page;
        }
        for (int64_t c = 0; c < d; ++c) {
          k[j * d + c] = Element(a.k, a.k_batch_stride, a.k_head_stride,
                                 a.k_row_stride, at, kvh, row, c, p.dtype);
          v[j * d + c] = Element(a.v, a.v_batch_stride, a.v_head_stride,
                                 a.v_row_stride, at, kvh, row, c, p.dtype);
        }
      }
      for (int64_t r = 0; r < p.seq_q; ++r) {
        for (int64_t c = 0; c < d; ++c) {
          q[c] = Element(a.q, a.q_batch_stride, a.q_head_stride, a.q_row_stride,
                         b, h, seq.q_start + r, c, p.dtype);
        }
        ReferenceRow(p, r, q.data(), k.data(), v.data(), out.data());
        const bool off =
            st.kernel == FakeKernel::kWrong && b == 0 && h == 0 && r == 0;
        for (int64_t c = 0; c < d; ++c) {
          const int64_t at = b * a.o_batch_stride + h * a.o_head_stride +
                             (seq.q_start + r) * a.o_row_stride + c;
          if (st.kernel == FakeKernel::kLeavesOneUnwritten && at == 5) continue;
          o[at] = FloatToHalfBits(out[c] + (off ? 0.25f : 0.f), p.dtype);
        }
      }
    }
  }
  if (st.kernel == FakeKernel::kRacy) o[3] ^= (st.attention_launches % 2) + 1;
  if (st.kernel == FakeKernel::kFaults) st.faulted = true;
  ++st.attention_launches;
}

CUresult LaunchKernel(CUfunction f, unsigned, unsigned, unsigned, unsigned,
                      unsigned, unsigned, unsigned, CUstream, void** args,
                      void**) {
  FakeGpuState& st = State();
  if (st.faulted) return CUDA_ERROR_ILLEGAL_ADDRESS;
  const std::string& name = Functions()[f];
  if (name == "evotune_random_fill") {
    Fill(args);
  } else if (name == "evotune_cache_scrub") {
    ++st.scrubs;
  } else {
    if (st.kernel == FakeKernel::kRefusedLaunch) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    Attention(args);
  }
  return CUDA_SUCCESS;
}

CUresult EventCreate(CUevent* e, unsigned) {
  *e = reinterpret_cast<CUevent>(new int(0));
  return CUDA_SUCCESS;
}
CUresult EventDestroy(CUevent e) {
  Events().erase(e);
  delete reinterpret_cast<int*>(e);
  return CUDA_SUCCESS;
}
CUresult EventRecord(CUevent e, CUstream) {
  Events()[e] = State().attention_launches;
  return CUDA_SUCCESS;
}
CUresult EventSynchronize(CUevent) {
  return State().faulted ? CUDA_ERROR_ILLEGAL_ADDRESS : CUDA_SUCCESS;
}
CUresult EventElapsedTime(float* ms, CUevent start, CUevent stop) {
  *ms = static_cast<float>((Events()[stop] - Events()[start]) *
                           State().us_per_launch / 1000.0);
  return CUDA_SUCCESS;
}

}  // namespace

FakeGpuState& FakeCudaDriver::state() { return State(); }

const CudaDriver* FakeCudaDriver::Install() {
  State() = FakeGpuState();
  static CudaDriver* const d = [] {
    auto* d = new CudaDriver;
    d->cuGetErrorString = GetErrorString;
    d->cuDeviceGet = DeviceGet;
    d->cuDeviceGetName = DeviceGetName;
    d->cuDeviceGetAttribute = DeviceGetAttribute;
    d->cuDriverGetVersion = DriverGetVersion;
    d->cuDevicePrimaryCtxRetain = PrimaryCtxRetain;
    d->cuCtxSetCurrent = CtxSetCurrent;
    d->cuCtxPushCurrent = CtxPushCurrent;
    d->cuCtxPopCurrent = CtxPopCurrent;
    d->cuStreamGetCtx = StreamGetCtx;
    d->cuStreamIsCapturing = StreamIsCapturing;
    d->cuThreadExchangeStreamCaptureMode = ThreadExchangeStreamCaptureMode;
    d->cuCtxGetDevice = CtxGetDevice;
    d->cuCtxSynchronize = CtxSynchronize;
    d->cuMemAlloc = MemAlloc;
    d->cuMemFree = MemFree;
    d->cuMemsetD16 = MemsetD16;
    d->cuMemsetD32Async = MemsetD32Async;
    d->cuMemcpyDtoH = MemcpyDtoH;
    d->cuMemcpyHtoD = MemcpyHtoD;
    d->cuModuleLoadData = ModuleLoadData;
    d->cuFuncLoad = FuncLoad;
    d->cuModuleUnload = ModuleUnload;
    d->cuModuleGetFunction = ModuleGetFunction;
    d->cuFuncGetAttribute = FuncGetAttribute;
    d->cuFuncSetAttribute = FuncSetAttribute;
    d->cuLaunchKernel = LaunchKernel;
    d->cuEventCreate = EventCreate;
    d->cuEventDestroy = EventDestroy;
    d->cuEventRecord = EventRecord;
    d->cuEventSynchronize = EventSynchronize;
    d->cuEventElapsedTime = EventElapsedTime;
    return d;
  }();
  return d;
}

}  // namespace evotune
