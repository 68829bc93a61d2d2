#!/usr/bin/env python3
"""Decode over an FP8 KV cache (float8_e4m3fn K and V, per-(sequence, KV
head) descale factors) through evotune.torch.flash_attn_with_kvcache,
beside the same step on evotune's bf16 cache and SDPA's backends on the
bf16 cache, in interleaved turns in one process, with streaming reads of
the FP8 and the bf16 K/V bytes (sdpa_compare's read floor). Every call is
first checked: the FP8 one against an fp32 reference on the dequantized
cache, and beside it its error against the unquantized bf16 cache (what
quantizing costs). Each call is captured in a CUDA graph of `--reps` calls
and replayed, so the times are the kernels'. --page_sizes adds paged FP8
caches (pages shuffled, the same factors).

  PYTHONPATH=python:bench \\
  EVOTUNE_RUNTIME_LIBRARY=build/lib/libevotune_runtime.so \\
  python3 bench/fp8_decode.py --daemon 127.0.0.1:7433 [--json OUT.json]
"""

import torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel
from torch.nn.attention.bias import causal_lower_right

import evotune.torch as et
from evotune.kvcache import sdpa_per_sequence
from paged_decode import (SDPA, bench_parser, paged, rel_err, time_calls,
                          write_results)
from sdpa_compare import ReadFloor

# (batch, queries, heads, kv_heads, head_dim, keys): the suite's
# decode-gqa and decode-long first (../shared/bench/shapes.json), then a
# larger batch, MQA, a speculative step and head_dim 64.
SHAPES = [(8, 1, 32, 8, 128, 8192), (1, 1, 64, 8, 128, 32768),
          (32, 1, 32, 8, 128, 2048), (16, 1, 8, 1, 128, 8192),
          (8, 4, 32, 8, 128, 4096), (8, 1, 32, 8, 64, 8192)]


def calls(shape, page_sizes, gen):
    """name: a zero-argument call; the fp32 references on the dequantized
    and on the bf16 cache."""
    b, sq, h, kvh, d, n = shape
    causal = sq > 1
    q = torch.randn(b, sq, h, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(b, n, kvh, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(b, n, kvh, d, device="cuda", dtype=torch.bfloat16)
    k8, k_descale = et.quantize_fp8(k, reduce_dims=(1, 3))
    v8, v_descale = et.quantize_fp8(v, reduce_dims=(1, 3))
    used = torch.full((b,), n, dtype=torch.int32, device="cuda")
    out = {
        "evotune_bf16": lambda: et.flash_attn_with_kvcache(
            q, k, v, cache_seqlens=used, causal=causal),
        "evotune_fp8": lambda: et.flash_attn_with_kvcache(
            q, k8, v8, cache_seqlens=used, causal=causal,
            k_descale=k_descale, v_descale=v_descale)}
    for p in page_sizes:
        kp, table = paged(k8.view(torch.uint8), p, gen)
        vp = torch.zeros_like(kp)
        vp[table.long()] = v8.view(torch.uint8).view(b, n // p, p, kvh, d)
        kp, vp = (t.view(torch.float8_e4m3fn) for t in (kp, vp))
        out[f"evotune_fp8_paged{p}"] = (
            lambda kp=kp, vp=vp, table=table: et.flash_attn_with_kvcache(
                q, kp, vp, cache_seqlens=used, block_table=table,
                causal=causal, k_descale=k_descale, v_descale=v_descale))
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    mask = causal_lower_right(sq, n) if causal else None
    for name, backend in SDPA.items():
        def sdpa(backend=backend):
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(
                    qt, kt, vt, attn_mask=mask, enable_gqa=h != kvh
                ).transpose(1, 2)
        out[name] = sdpa
    dequantized = [(t.float() * s[:, None, :, None])
                   for t, s in ((k8, k_descale), (v8, v_descale))]
    want8 = sdpa_per_sequence(q.float(), *dequantized, used, causal, None)
    want16 = sdpa_per_sequence(q.float(), k.float(), v.float(), used, causal,
                               None)
    return out, want8, want16


def run_shape(shape, args, gen):
    b, sq, h, kvh, d, n = shape
    fns, want8, want16 = calls(shape, args.page_sizes, gen)
    outs, us, skipped = time_calls(fns, args.reps, args.turns)
    errors = {name: rel_err(o, want8 if name.startswith("evotune_fp8")
                            else want16) for name, o in outs.items()}
    err_vs_bf16 = {name: rel_err(o, want16) for name, o in outs.items()}
    elems = 2 * b * kvh * n * d
    floor = ReadFloor()
    row = {"shape": dict(batch=b, seq_q=sq, heads=h, kv_heads=kvh,
                         head_dim=d, seq_k=n, dtype="bf16",
                         causal=sq > 1),
           "us": us, "rel_err": errors, "rel_err_vs_bf16_cache": err_vs_bf16,
           "skipped": skipped,
           "read_floor_us": {"fp8": floor.us(elems), "bf16": floor.us(2 * elems)}}
    row["kv_tb_per_s"] = {
        k: elems * (1 if k.startswith("evotune_fp8") else 2) / t / 1e6
        for k, t in us.items()}
    row["fp8_speedup_over_bf16"] = us["evotune_bf16"] / us["evotune_fp8"]
    row["read_rate_of_floor"] = {
        k: row["read_floor_us"]["fp8" if k.startswith("evotune_fp8")
                                else "bf16"] / t
        for k, t in us.items() if k.startswith("evotune")}
    sdpa = [t for k, t in us.items() if k.startswith("sdpa")]
    row["fastest_sdpa_us"] = min(sdpa) if sdpa else None
    return row


def fit(xs, ys):
    """Least-squares (intercept, slope) of ys over xs."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum(
        (x - mx) ** 2 for x in xs)
    return my - slope * mx, slope


def sweep(args, gen):
    """decode-long's step at each of --sweep_keys key counts: a line
    through each call's times, whose intercept is its fixed cost a launch
    (launch, pipeline ramp, split merge) and whose slope its streaming
    rate."""
    rows = []
    for n in args.sweep_keys:
        rows.append(run_shape((1, 1, 64, 8, 128, n), args, gen))
    out = {}
    for name in ("evotune_bf16", "evotune_fp8"):
        mb = [2 * 8 * r["shape"]["seq_k"] * 128 *
              (1 if name == "evotune_fp8" else 2) / 1e6 for r in rows]
        us = [r["us"][name] for r in rows]
        a, b = fit(mb, us)
        out[name] = {"fixed_us": a, "stream_tb_per_s": 1 / b}
    for kind in ("fp8", "bf16"):
        mb = [2 * 8 * r["shape"]["seq_k"] * 128 * (1 if kind == "fp8" else 2)
              / 1e6 for r in rows]
        a, b = fit(mb, [r["read_floor_us"][kind] for r in rows])
        out[f"read_floor_{kind}"] = {"fixed_us": a, "stream_tb_per_s": 1 / b}
    for name, f in out.items():
        print(f"{name}: fixed {f['fixed_us']:.1f} us, stream "
              f"{f['stream_tb_per_s']:.2f} TB/s", flush=True)
    return rows, out


def main():
    ap = bench_parser(reps=20)
    ap.add_argument("--page_sizes", type=int, nargs="*", default=[64])
    ap.add_argument("--sweep_keys", type=int, nargs="*", default=[],
                    help="decode-long at these key counts instead, with "
                    "each call's fixed cost and streaming rate")
    args = ap.parse_args()
    et.use(daemon=args.daemon, wait=True)
    gen = torch.Generator().manual_seed(1)
    if args.sweep_keys:
        rows, fits = sweep(args, gen)
        if args.json:
            write_results(args.json, args.commit, rows, fits=fits)
        return
    rows = []
    for shape in SHAPES:
        row = run_shape(shape, args, gen)
        rows.append(row)
        print(shape, " ".join(
            f"{k}={t:.1f}us({row['kv_tb_per_s'][k]:.2f}TB/s)"
            for k, t in row["us"].items()),
            f"| fp8/bf16 speedup {row['fp8_speedup_over_bf16']:.2f}",
            "| of read floor " + " ".join(
                f"{k}={r:.2f}" for k, r in row["read_rate_of_floor"].items()),
            "| err " + " ".join(f"{k}={e:.1e}"
                                for k, e in row["rel_err"].items()),
            "| fp8 err vs bf16 cache " + " ".join(
                f"{k}={e:.1e}" for k, e in row["rel_err_vs_bf16_cache"].items()
                if k.startswith("evotune_fp8")),
            "| skipped", list(row["skipped"]), flush=True)
    if args.json:
        write_results(args.json, args.commit, rows)


if __name__ == "__main__":
    main()
