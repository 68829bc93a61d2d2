#!/usr/bin/env python3
"""What a call of evotune.torch.attention costs on the host, piece by piece:
each piece called back to back N times on one decode step (B=8, 32 query
heads on 8 KV heads, D=128 bf16, 1 query on 1,024 keys of a 4,096-key cache)
with one synchronize at the end, in µs per call. A piece faster than the
kernel it launches measures the GPU's rate instead (plan.run alone is the
kernel's time); SDPA's eager call is beside it, and the same step through
flash_attn_with_kvcache (the whole cache, 1,024 keys used).

  PYTHONPATH=python EVOTUNE_RUNTIME_LIBRARY=build/lib/libevotune_runtime.so \\
  python3 bench/op_call_cost.py 127.0.0.1:7433 [--calls 3000]
"""
import argparse
import time

import torch
import torch.nn.functional as F

import evotune.torch as et
from evotune import checks
from evotune import torch as op

NO_MODS = (-1, -1, 0.0)


def timed(name, fn, calls):
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    per_call = (time.perf_counter() - start) / calls * 1e6
    print(f"{name:28s} {per_call:7.2f} us", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("daemon")
    ap.add_argument("--calls", type=int, default=3000)
    args = ap.parse_args()
    et.use(daemon=args.daemon, wait=True)
    b, h, kvh, d, n = 8, 32, 8, 128, 1024
    q = torch.randn(b, h, 1, d, device="cuda", dtype=torch.bfloat16)
    ck = torch.randn(b, kvh, 4096, d, device="cuda", dtype=torch.bfloat16)
    cv = torch.randn_like(ck)
    k, v = ck[:, :, :n], cv[:, :, :n]
    print(et.kernel_for(q, k, v=v, reason=True))
    # The same step through flash_attn_with_kvcache: FlashAttention's
    # [batch, seq, heads, dim] caches, the used lengths on the device.
    q_fa = q.transpose(1, 2).contiguous()
    ck_fa = ck.transpose(1, 2).contiguous()
    cv_fa = cv.transpose(1, 2).contiguous()
    used = torch.full((b,), n, dtype=torch.int32, device="cuda")
    entry = op._lookup(q, k, v, False, NO_MODS, None)
    stream = op._stream_id(q.device)
    pieces = [
        ("slice k,v", lambda: (ck[:, :, :n], cv[:, :, :n])),
        ("sdpa", lambda: F.scaled_dot_product_attention(
            q, k, v, enable_gqa=True)),
        ("et.attention", lambda: et.attention(q, k, v)),
        ("flash_attn_with_kvcache", lambda: et.flash_attn_with_kvcache(
            q_fa, ck_fa, cv_fa, cache_seqlens=used)),
        ("_attention_impl", lambda: op._attention_impl(q, k, v, False, None)),
        ("_lookup", lambda: op._lookup(q, k, v, False, NO_MODS, None)),
        ("_signature", lambda: op._signature(q, k, v, False, NO_MODS, None,
                                             stream)),
        ("_stream_id", lambda: op._stream_id(q.device)),
        ("q.device", lambda: q.device),
        ("q.get_device", lambda: q.get_device()),
        ("meta(q)", lambda: checks.meta(q)),
        ("eager", lambda: op.eager(q, k, v)),
        ("entry()", lambda: entry(q, k, v)),
        ("entry.serves", lambda: entry.serves(q, k, v)),
        ("empty_like", lambda: torch.empty_like(q)),
        ("plan.run", lambda: entry.plan.run(entry.args)),
        ("data_ptr x3", lambda: (q.data_ptr(), k.data_ptr(), v.data_ptr())),
        ("time.monotonic", time.monotonic),
        ("is_capturing", torch.cuda.is_current_stream_capturing),
    ]
    for name, fn in pieces:
        timed(name, fn, args.calls)


if __name__ == "__main__":
    main()
