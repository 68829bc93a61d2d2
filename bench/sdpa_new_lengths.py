#!/usr/bin/env python3
"""SDPA's backends, one (or a set) at a time, on decode steps of key lengths
they have not seen, then on the same lengths again: the host time of a call
with a synchronize. What the op's fallback chooses from while a kernel is on
its way (each call of a decode loop is a new length then).

  python3 bench/sdpa_new_lengths.py [--lengths 40]

B=8, 32 query heads on 8 KV heads, one query, head_dim 128, bf16; with and
without enable_gqa (KV heads repeated).
"""
import argparse
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {
    "flash": [SDPBackend.FLASH_ATTENTION],
    "efficient": [SDPBackend.EFFICIENT_ATTENTION],
    "math": [SDPBackend.MATH],
    "flash, efficient, math": [SDPBackend.FLASH_ATTENTION,
                               SDPBackend.EFFICIENT_ATTENTION,
                               SDPBackend.MATH],
    "cudnn": [SDPBackend.CUDNN_ATTENTION],
}


def call_us(backends, q, k, v, n, gqa):
    torch.cuda.synchronize()
    start = time.perf_counter()
    with sdpa_kernel(backends):
        F.scaled_dot_product_attention(q, k[:, :, :n], v[:, :, :n],
                                       enable_gqa=gqa)
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lengths", type=int, default=40)
    args = ap.parse_args()
    b, h, kvh, d, count = 8, 32, 8, 128, args.lengths
    q = torch.randn(b, h, 1, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(b, kvh, 600 + 20 * count, d, device="cuda",
                    dtype=torch.bfloat16)
    v = torch.randn_like(k)
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    for _ in range(200):  # Clocks out of idle.
        a @ a
    start = 600
    for name, backends in BACKENDS.items():
        for gqa in (True, False):
            kk, vv = (k, v) if gqa else (t.repeat_interleave(h // kvh, 1)
                                         for t in (k, v))
            lengths = range(start, start + count)
            start += count
            try:
                new = [call_us(backends, q, kk, vv, n, gqa) for n in lengths]
                seen = [call_us(backends, q, kk, vv, n, gqa) for n in lengths]
            except RuntimeError as e:
                print(f"{name} gqa={gqa}: {str(e).splitlines()[0][:150]}")
                continue
            print(f"{name} gqa={gqa}: new lengths: first {new[0]:.0f} us, "
                  f"median {sorted(new)[count // 2]:.0f} us; seen again: "
                  f"median {sorted(seen)[count // 2]:.0f} us")


if __name__ == "__main__":
    main()
