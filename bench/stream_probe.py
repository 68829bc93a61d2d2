#!/usr/bin/env python3
"""How fast the GPU reads one buffer, by how the read is laid out: every
block sweeping the whole buffer (sdpa_compare.py's read floor) against each
block reading its own contiguous slice, as a split-KV decode kernel does
(one slice of K and one of V per block, read side by side).

  python3 bench/stream_probe.py [--mib 128] [--json OUT]

Prints, per layout, blocks, threads and 16-byte loads in flight per thread,
the time of one read and its TB/s.
"""
import argparse
import ctypes
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sdpa_compare import _cuda, check, time_us  # noqa: E402

SOURCE = r"""
// Block b reads slice b of each of `parts` (1 or 2) equal parts of a (K and
// V: 2),
// the parts' slices side by side, UNROLL 16-byte loads in flight a thread.
extern "C" __global__ void sliced(const uint4* __restrict__ a, long long n,
                                  int parts, unsigned* out) {
  const long long part = n / parts, slice = part / gridDim.x;
  const long long begin = (long long)blockIdx.x * slice;
  unsigned acc = 0;
  for (long long i = threadIdx.x; i < slice; i += UNROLL * blockDim.x) {
    uint4 x[2][UNROLL];  // Both parts' loads issued before any is used.
#pragma unroll
    for (int p = 0; p < 2; ++p) {
      const uint4* s = a + p * part + begin;
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const long long j = i + (long long)u * blockDim.x;
        x[p][u] = p < parts && j < slice ? __ldcs(s + j)
                                         : make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int p = 0; p < 2; ++p) {
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) acc ^= x[p][u].x ^ x[p][u].w;
    }
  }
  if (acc == 0x9e3779b9u) out[0] = acc;  // Keeps the loads.
}

// Every block sweeps the whole buffer, a grid-wide stride apart.
extern "C" __global__ void swept(const uint4* __restrict__ a, long long n,
                                 int parts, unsigned* out) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  unsigned acc = 0;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += UNROLL * stride) {
    uint4 x[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const long long j = i + u * stride;
      x[u] = j < n ? __ldcs(a + j) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) acc ^= x[u].x ^ x[u].w;
  }
  if (acc == 0x9e3779b9u) out[0] = acc + parts;
}
"""


def compile_module(unroll):
    nvrtc = ctypes.CDLL("libnvrtc.so.13")
    prog = ctypes.c_void_p()
    check(nvrtc.nvrtcCreateProgram(ctypes.byref(prog), SOURCE.encode(),
                                   b"probe.cu", 0, None, None), "create")
    major, minor = torch.cuda.get_device_capability()
    opts = [f"--gpu-architecture=sm_{major}{minor}", f"-DUNROLL={unroll}"]
    arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
    check(nvrtc.nvrtcCompileProgram(prog, len(opts), arr), "compile")
    size = ctypes.c_size_t()
    check(nvrtc.nvrtcGetCUBINSize(prog, ctypes.byref(size)), "cubin size")
    cubin = ctypes.create_string_buffer(size.value)
    check(nvrtc.nvrtcGetCUBIN(prog, cubin), "cubin")
    module = ctypes.c_void_p()
    check(_cuda.cuModuleLoadData(ctypes.byref(module), cubin), "load")
    return module, cubin


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=128,
                    help="buffer size (128: decode-long's K and V)")
    ap.add_argument("--json")
    args = ap.parse_args()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    buf = torch.empty(args.mib << 20, dtype=torch.uint8, device="cuda")
    buf.random_()
    out = torch.zeros(1, dtype=torch.int32, device="cuda")
    rows = []
    for unroll in (4, 8):
        module, _ = compile_module(unroll)
        for kernel, parts, blocks, threads in (
                ("swept", 1, 8 * sms, 256), ("sliced", 2, 128, 128),
                ("sliced", 2, 128, 256), ("sliced", 2, 128, 512),
                ("sliced", 2, 128, 1024), ("sliced", 2, 132, 512),
                ("sliced", 1, 128, 512), ("sliced", 2, 256, 512),
                ("sliced", 2, 1024, 256)):
            fn = ctypes.c_void_p()
            check(_cuda.cuModuleGetFunction(ctypes.byref(fn), module,
                                            kernel.encode()), "function")
            vals = (ctypes.c_void_p(buf.data_ptr()),
                    ctypes.c_longlong(buf.numel() // 16), ctypes.c_int(parts),
                    ctypes.c_void_p(out.data_ptr()))
            argv = (ctypes.c_void_p * 4)(*[ctypes.cast(ctypes.pointer(v),
                                                       ctypes.c_void_p)
                                           for v in vals])

            def launch():
                check(_cuda.cuLaunchKernel(
                    fn, blocks, 1, 1, threads, 1, 1, 0,
                    ctypes.c_void_p(torch.cuda.current_stream().cuda_stream),
                    argv, None), "launch")
            us = time_us(launch)
            row = {"kernel": kernel, "parts": parts, "blocks": blocks,
                   "threads": threads, "unroll": unroll, "us": us,
                   "tbps": buf.numel() / us / 1e6}
            rows.append(row)
            print(f"{kernel:>6} parts {parts} blocks {blocks:>5} threads "
                  f"{threads:>4} unroll {unroll}: {us:8.2f} us "
                  f"{row['tbps']:.2f} TB/s", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(0),
                       "mib": args.mib, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
