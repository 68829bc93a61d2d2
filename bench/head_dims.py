#!/usr/bin/env python3
"""Head dims other than 64 and 128 through evotune.torch.attention, beside
PyTorch SDPA's flash, cuDNN and efficient backends (those that run the
shape), in interleaved turns in one process. Each call is captured in a CUDA
graph of `--reps` calls and replayed, so the times are the kernels'. TFLOP/s
count 2 * (D + Dv) per visible (query, key) pair (Dv the values' head dim,
DeepSeek's MLA prefill 128 under 192); decode rows report K/V bytes a
second. evotune's output is compared with SDPA's (the GPU tests hold it to
an fp32 reference).

  PYTHONPATH=python:bench \\
  EVOTUNE_RUNTIME_LIBRARY=build/lib/libevotune_runtime.so \\
  python3 bench/head_dims.py --daemon 127.0.0.1:7433 [--json OUT.json]

The daemon serves what it has: tune the problems first (`evotune submit`)
to time tuned kernels, or leave them untuned to time the fitted defaults.
"""

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import evotune.torch as et
from paged_decode import (bench_parser, rel_err, run_named, time_calls,
                          write_results)
from score_mods import visible_pairs

# name: (batch, heads, kv_heads, seq_q, seq_k, head_dim, causal[,
# head_dim_v]).
SHAPES = [
    ("mla-d192v128-4k-causal", (2, 16, 16, 4096, 4096, 192, True, 128)),
    ("mla-d192v128-4k-full", (2, 16, 16, 4096, 4096, 192, False, 128)),
    ("d256-4k-full", (2, 16, 16, 4096, 4096, 256, False)),
    ("d256-4k-causal", (2, 16, 16, 4096, 4096, 256, True)),
    ("d192-4k-causal", (2, 16, 16, 4096, 4096, 192, True)),
    ("gemma2-d256-prefill-2k", (1, 16, 8, 2048, 2048, 256, True)),
    ("gemma2-d256-decode-8k", (8, 16, 8, 1, 8192, 256, False)),
    ("d192-decode-4k", (8, 16, 16, 1, 4096, 192, False)),
    ("phi3-d96-prefill-4k", (2, 32, 32, 4096, 4096, 96, True)),
    ("vit-d80-full-4k", (2, 16, 16, 4096, 4096, 80, False)),
    ("d32-4k-causal", (2, 32, 32, 4096, 4096, 32, True)),
    ("d96-decode-4k", (8, 32, 32, 1, 4096, 96, False)),
]

BACKENDS = {"sdpa_flash": SDPBackend.FLASH_ATTENTION,
            "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION,
            "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION}


def sdpa_call(q, k, v, causal, backend):
    gqa = q.shape[1] != k.shape[1]

    def call():
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                  enable_gqa=gqa)
    return call


def run_shape(name, shape, args):
    b, h, kvh, sq, sk, d, causal = shape[:7]
    dv = shape[7] if len(shape) > 7 else d
    q = torch.randn(b, h, sq, d, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(b, kvh, sk, dim, device="cuda", dtype=torch.bfloat16)
            for dim in (d, dv))
    fns = {"evotune": lambda: et.attention(q, k, v, causal)}
    for call, backend in BACKENDS.items():
        fns[call] = sdpa_call(q, k, v, causal, backend)
    outs, us, skipped = time_calls(fns, args.reps, args.turns)
    flops = 2 * b * h * (d + dv) * visible_pairs(sq, sk, causal, -1)
    row = {"name": name,
           "shape": dict(batch=b, heads=h, kv_heads=kvh, seq_q=sq, seq_k=sk,
                         head_dim=d, head_dim_v=dv, causal=causal),
           "kernel": et.kernel_for(q, k, causal, v), "us": us,
           "tflops": {c: flops / t / 1e6 for c, t in us.items()},
           "skipped": skipped}
    sdpa = {c: t for c, t in us.items() if c.startswith("sdpa")}
    if sdpa and "evotune" in us:
        fastest = min(sdpa, key=sdpa.get)
        row["fastest_sdpa"] = fastest
        row["speedup_over_fastest_sdpa"] = sdpa[fastest] / us["evotune"]
        row["rel_err_vs_fastest_sdpa"] = rel_err(outs["evotune"],
                                                 outs[fastest].float())
    if sq == 1:
        row["kv_tb_s"] = {c: b * kvh * sk * (d + dv) * 2 / t / 1e6
                          for c, t in us.items()}
    return row


def main():
    args = bench_parser(reps=10, only=True).parse_args()
    et.use(daemon=args.daemon, wait=True)
    rows = run_named(SHAPES, run_shape, args, lambda row: " ".join([
        str(row["kernel"]), *(f"{k}={t:.1f}us({row['tflops'][k]:.0f}TF)"
                              for k, t in row["us"].items()),
        f"| over fastest SDPA ({row.get('fastest_sdpa')})",
        f"{row.get('speedup_over_fastest_sdpa', 0):.2f}x",
        f"| err {row.get('rel_err_vs_fastest_sdpa', -1):.1e}",
        f"| TB/s {row.get('kv_tb_s')} | skipped {row['skipped']}"]))
    if args.json:
        write_results(args.json, args.commit, rows)


if __name__ == "__main__":
    main()
