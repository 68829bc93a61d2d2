#!/usr/bin/env python3
"""FP8 attention prefill (e4m3 q, k and v, per-(sequence, KV head) descale
factors, bf16 output) through evotune.torch.fp8_attention, beside evotune's
bf16 attention, SDPA's backends on the bf16 tensors, and evotune's and
SDPA's attention on the dequantized ones (what fp8_attention runs where no
FP8 kernel serves, and what a user could run instead), in
interleaved turns in one process. Every call is first checked: FP8 ones
against an fp32 reference on the dequantized inputs (and evotune's against
the unquantized bf16 ones: what quantizing costs), bf16 ones against the
bf16 inputs. Each call is captured in a CUDA graph of `--reps` calls and
replayed, so the times are the kernels'. TFLOP/s count 4*B*H*Sq*Sk*D,
halved when causal.

  PYTHONPATH=python:bench \\
  EVOTUNE_RUNTIME_LIBRARY=build/lib/libevotune_runtime.so \\
  python3 bench/fp8_prefill.py --daemon 127.0.0.1:7433 [--only d64]
      [--json OUT.json]
"""

import torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel

import evotune.torch as et
from evotune import fp8_attention as fa
from paged_decode import (SDPA, bench_parser, rel_err, run_named, time_calls,
                          write_results)

# The suite's FP8 prefill shapes (../shared/bench/shapes.json): name,
# (batch, heads, kv_heads, seq, head_dim, causal).
SHAPES = [("long-d128", (2, 16, 16, 4096, 128, False)),
          ("8k-d128", (1, 16, 16, 8192, 128, False)),
          ("long-causal", (2, 16, 16, 4096, 128, True)),
          ("long-d64", (2, 16, 16, 4096, 64, False)),
          ("long-causal-d64", (2, 16, 16, 4096, 64, True))]


def calls(shape):
    """name: a zero-argument call; the fp32 references on the dequantized
    and on the bf16 inputs."""
    b, h, kvh, s, d, causal = shape
    q, k, v = (torch.randn(b, n, s, d, device="cuda", dtype=torch.bfloat16)
               for n in (h, kvh, kvh))
    q8, qd = et.quantize_fp8(q, reduce_dims=(2, 3))
    k8, kd = et.quantize_fp8(k, reduce_dims=(2, 3))
    v8, vd = et.quantize_fp8(v, reduce_dims=(2, 3))
    descale = fa._descales(q8, k8, (qd, kd, vd))
    deq16 = [lambda t=t, f=f: fa._dequantized(t, f, torch.bfloat16)
             for t, f in zip((q8, k8, v8), descale)]
    out = {
        "evotune_bf16": lambda: et.attention(q, k, v, causal),
        "evotune_fp8": lambda: et.fp8_attention(
            q8, k8, v8, causal, q_descale=qd, k_descale=kd, v_descale=vd),
        # What fp8_attention runs where no FP8 kernel serves the problem,
        # and SDPA on the tensors dequantized the same way.
        "evotune_on_dequantized": lambda: fa._dequantized_attention(
            q8, k8, v8, descale, causal, None, torch.bfloat16),
        "sdpa_on_dequantized": lambda: F.scaled_dot_product_attention(
            *(f() for f in deq16), is_causal=causal,
            enable_gqa=kvh != h)}
    for name, backend in SDPA.items():
        def sdpa(backend=backend):
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(q, k, v,
                                                      is_causal=causal)
        out[name] = sdpa
    deq = [fa._dequantized(t, f, torch.float32)
           for t, f in ((q8, qd), (k8, kd), (v8, vd))]
    want8 = F.scaled_dot_product_attention(*deq, is_causal=causal)
    want16 = F.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                            is_causal=causal)
    kernel = fa.kernel_for(q8, k8, causal)
    return out, want8, want16, kernel


def run_shape(name, shape, args):
    b, h, kvh, s, d, causal = shape
    fns, want8, want16, kernel = calls(shape)
    outs, us, skipped = time_calls(fns, args.reps, args.turns)
    fp8_calls = ("evotune_fp8", "evotune_on_dequantized",
                 "sdpa_on_dequantized")
    errors = {call: rel_err(o, want8 if call in fp8_calls else want16)
              for call, o in outs.items()}
    err_vs_bf16 = {call: rel_err(o, want16) for call, o in outs.items()}
    flops = 4 * b * h * s * s * d / (2 if causal else 1)
    row = {"name": name,
           "shape": dict(batch=b, heads=h, kv_heads=kvh, seq_q=s, seq_k=s,
                         head_dim=d, causal=causal),
           "fp8_kernel": kernel, "us": us,
           "tflops": {k: flops / t / 1e6 for k, t in us.items()},
           "rel_err": errors, "rel_err_vs_bf16_inputs": err_vs_bf16,
           "skipped": skipped,
           "fp8_speedup_over_bf16": us["evotune_bf16"] / us["evotune_fp8"]}
    sdpa = [t for k, t in us.items() if k.startswith("sdpa")]
    row["fastest_sdpa_us"] = min(sdpa) if sdpa else None
    return row


def line(row):
    return " ".join(
        [row["fp8_kernel"] or "(no FP8 kernel)"]
        + [f"{k}={t:.1f}us({row['tflops'][k]:.0f}TF)"
           for k, t in row["us"].items()]
        + [f"| fp8/bf16 {row['fp8_speedup_over_bf16']:.2f}x",
           "| err " + " ".join(f"{k}={e:.1e}"
                               for k, e in row["rel_err"].items()),
           f"| fp8 vs bf16 inputs "
           f"{row['rel_err_vs_bf16_inputs']['evotune_fp8']:.1e}",
           f"| skipped {list(row['skipped'])}"])


def main():
    args = bench_parser(reps=10, only=True).parse_args()
    et.use(daemon=args.daemon, wait=True)
    rows = run_named(SHAPES, run_shape, args, line)
    if args.json:
        write_results(args.json, args.commit, rows)


if __name__ == "__main__":
    main()
