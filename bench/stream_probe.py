#!/usr/bin/env python3
"""How fast the GPU reads one buffer, by how the read is laid out: every
block sweeping the whole buffer (sdpa_compare.py's read floor, with two
L2 policies and over a 4x larger buffer) against each
block reading its own contiguous slice, as a split-KV decode kernel does
(one slice of K and one of V per block, read side by side), into registers
or, as decode_fwd streams them, through per-warp cp.async rings.

  python3 bench/stream_probe.py [--mib 128] [--json OUT]

Prints, per layout, blocks, threads and 16-byte loads in flight per thread,
the time of one read and its TB/s.
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sdpa_compare import ReadFloor, raw_kernel, time_us  # noqa: E402

SOURCE = r"""
// Block b reads slice b of each of `parts` (1 or 2) equal parts of a (K and
// V: 2), the parts' slices side by side, UNROLL 16-byte loads in flight a
// thread. n counts 16-byte words.
extern "C" __global__ void sliced(const uint4* __restrict__ a, int n,
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

// As `sliced` with parts = 2, through shared memory: each warp walks every
// warps-th tile of TILE bytes of its block's K and V slices through a ring
// of STAGES tiles of each, 16-byte cp.async, STAGES - 1 tiles in flight
// (decode_fwd's stream without its math).
extern "C" __global__ void ringed(const uint4* __restrict__ a, int n,
                                  int parts, unsigned* out) {
  extern __shared__ uint4 smem[];
  constexpr int kChunks = TILE / 16;  // Of one tile, K or V.
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int warps = blockDim.x / 32;
  const long long part = n / 2, slice = part / gridDim.x;
  const uint4* k = a + (long long)blockIdx.x * slice;
  const uint4* v = k + part;
  uint4* ring = smem + (long long)warp * STAGES * 2 * kChunks;
  const long long tiles = slice / kChunks;
  auto issue = [&](long long t, int stage) {
    if (t < tiles) {
      for (int c = lane; c < kChunks; c += 32) {
        const unsigned dk = (unsigned)__cvta_generic_to_shared(
            ring + stage * 2 * kChunks + c);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dk),
                     "l"(k + t * kChunks + c));
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(
                         dk + 16 * kChunks),
                     "l"(v + t * kChunks + c));
      }
    }
    asm volatile("cp.async.commit_group;\n" ::);
  };
  unsigned acc = 0;
  long long t = warp;
  for (int s = 0; s < STAGES - 1; ++s) issue(t + (long long)s * warps, s);
  for (int s = 0; t < tiles; t += warps, s = (s + 1) % STAGES) {
    issue(t + (long long)(STAGES - 1) * warps, (s + STAGES - 1) % STAGES);
    asm volatile("cp.async.wait_group %0;\n" ::"n"(STAGES - 1));
    __syncwarp();
    const uint4 x = ring[s * 2 * kChunks + lane];
    acc ^= x.x ^ x.w;
    __syncwarp();
  }
  if (acc == 0x9e3779b9u) out[0] = acc + parts;
}
"""


def probe_kernel(kernel, unroll, tile=8192, stages=3):
    """SOURCE's `kernel` compiled with these constants."""
    return raw_kernel(SOURCE, kernel, (f"-DUNROLL={unroll}", f"-DTILE={tile}",
                                       f"-DSTAGES={stages}"))


def time_row(fn, kernel, blocks, threads, smem, buf, out, extra):
    """Times one read of `buf` by `fn`; prints and returns its row."""
    args = [buf, buf.numel() // 16, extra.get("parts", 2), out]
    us = time_us(lambda: fn(grid=(blocks, 1, 1), block=(threads, 1, 1),
                            args=args, shared_mem=smem))
    row = {"kernel": kernel, "blocks": blocks, "threads": threads, **extra,
           "us": us, "tbps": buf.numel() / us / 1e6}
    print(f"{kernel:>6} blocks {blocks:>5} threads {threads:>4} {extra}: "
          f"{us:8.2f} us {row['tbps']:.2f} TB/s", flush=True)
    return row


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
    # The read floor's kernel: its loads evict first (as sdpa_compare.py
    # times it) or take L2's default policy, and the same read of a buffer
    # 4x larger, per 128 MiB: what L2 (50 MB) keeps between the timed
    # launches counts less there.
    rows = []
    for load, scale in (("__ldcs", 1), ("__ldcg", 1), ("__ldcs", 4),
                        ("__ldcg", 4)):
        us = ReadFloor(load).us(scale * buf.numel()) / scale
        rows.append({"kernel": "floor", "load": load, "mib": scale * args.mib,
                     "blocks": 8 * sms, "threads": 256, "us": us,
                     "tbps": buf.numel() / us / 1e6})
        print(f" floor {load} over {scale * args.mib} MiB, per {args.mib} "
              f"MiB: {us:8.2f} us {rows[-1]['tbps']:.2f} TB/s", flush=True)
    for unroll in (4, 8):
        fn = probe_kernel("sliced", unroll)
        for parts, blocks, threads in (
                (2, 128, 128), (2, 128, 256), (2, 128, 512), (2, 128, 1024),
                (2, 132, 512), (1, 128, 512), (2, 256, 512), (2, 1024, 256)):
            rows.append(time_row(fn, "sliced", blocks, threads, 0, buf, out,
                                 {"parts": parts, "unroll": unroll}))
    for warps, tile, stages in ((4, 8192, 3), (4, 8192, 2), (8, 4096, 3),
                                (8, 8192, 2), (16, 2048, 3), (16, 4096, 2)):
        smem = warps * stages * 2 * tile
        if smem > 227 * 1024:
            continue
        fn = probe_kernel("ringed", 4, tile, stages)
        fn.set_shared_memory_config(smem)
        rows.append(time_row(fn, "ringed", 128, 32 * warps, smem, buf, out,
                             {"tile_bytes": tile, "stages": stages}))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(0),
                       "mib": args.mib, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
