#!/usr/bin/env python3
"""Sliding windows, logit softcapping, sinks and ALiBi through
evotune.torch.attention, beside FlexAttention with the same mask_mod /
score_mod (torch.compile'd) and evotune's own kernel without the option, in
interleaved turns in one process. Each call is captured in a CUDA graph of
`--reps` calls and replayed, so the times are the kernels'. TFLOP/s count
4*D per visible (query, key) pair; decode rows report the K/V bytes of the
visible keys a second. evotune's output is compared with FlexAttention's
(both independent of each other; the GPU tests hold both to an fp32
reference).

  PYTHONPATH=python:bench \\
  EVOTUNE_RUNTIME_LIBRARY=build/lib/libevotune_runtime.so \\
  python3 bench/score_mods.py --daemon 127.0.0.1:7433 [--json OUT.json]
"""

import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

import evotune.torch as et
from paged_decode import (bench_parser, rel_err, run_named, time_calls,
                          write_results)

_flex = torch.compile(flex_attention, dynamic=False)

# name: (batch, heads, kv_heads, seq_q, seq_k, head_dim, causal, window_left,
# softcap, baseline[, sinks[, alibi]]): the baseline is evotune's call
# without the option ("dense": the same shape without it; "keys": decode
# over the window's keys alone); sinks: gpt-oss's attention sinks, one logit
# per query head (FlexAttention's output rescaled by its LSE); alibi:
# BLOOM's slopes (FlexAttention's score_mod subtracts the bias).
SHAPES = [
    ("mistral-swa4096-32k", (1, 32, 8, 32768, 32768, 128, True, 4096, 0.0,
                             "dense")),
    ("gptoss-swa128-4k", (1, 64, 8, 4096, 4096, 64, True, 128, 0.0, "dense")),
    ("softcap50-4k", (2, 16, 8, 4096, 4096, 128, True, -1, 50.0, "dense")),
    ("softcap50-4k-full", (2, 16, 8, 4096, 4096, 128, False, -1, 50.0,
                           "dense")),
    ("decode-swa4096-32k", (8, 32, 8, 1, 32768, 128, True, 4096, 0.0,
                            "keys")),
    ("decode-softcap50-8k", (8, 32, 8, 1, 8192, 128, False, -1, 50.0,
                             "dense")),
    ("gptoss-sinks-swa128-4k", (1, 64, 8, 4096, 4096, 64, True, 128, 0.0,
                                "dense", True)),
    ("gptoss-sinks-4k", (1, 64, 8, 4096, 4096, 64, True, -1, 0.0, "dense",
                         True)),
    ("decode-gptoss-sinks-8k", (8, 64, 8, 1, 8192, 64, True, -1, 0.0,
                                "dense", True)),
    ("bloom-alibi-4k", (1, 32, 32, 4096, 4096, 128, True, -1, 0.0, "dense",
                        False, True)),
    ("alibi-4k-full", (2, 16, 16, 4096, 4096, 128, False, -1, 0.0, "dense",
                       False, True)),
    ("decode-bloom-alibi-8k", (8, 32, 32, 1, 8192, 128, False, -1, 0.0,
                               "dense", False, True)),
]


def bloom_slopes(heads):
    """BLOOM's ALiBi slopes for a power-of-two number of heads."""
    return torch.tensor([2 ** (-8 * (i + 1) / heads) for i in range(heads)],
                        device="cuda")


def visible_pairs(sq, sk, causal, left):
    """(query, key) pairs one head computes (bottom-right aligned)."""
    rows = torch.arange(sq, dtype=torch.float64) + (sk - sq)
    last = rows.clamp(max=sk - 1) if causal else torch.full_like(rows, sk - 1)
    first = (rows - left).clamp(min=0) if left >= 0 else torch.zeros_like(rows)
    return (last - first + 1).clamp(min=0).sum().item()


def flex_call(q, k, v, causal, left, cap, sinks=None, slopes=None):
    b, h, sq, _ = q.shape
    sk = k.shape[2]
    shift = sk - sq

    def mask_mod(b_, h_, qi, kv):
        seen = kv >= 0
        if causal:
            seen = seen & (kv <= qi + shift)
        if left >= 0:
            seen = seen & (kv >= qi + shift - left)
        return seen
    block_mask = create_block_mask(mask_mod, None, None, sq, sk,
                                   device="cuda")
    score_mod = None
    if cap > 0 or slopes is not None:
        def score_mod(score, b_, h_, qi, kv):
            if cap > 0:
                score = cap * torch.tanh(score / cap)
            if slopes is not None:
                score = score - slopes[h_] * (qi + shift - kv).abs()
            return score
    gqa = q.shape[1] != k.shape[1]
    if sinks is None:
        return lambda: _flex(q, k, v, score_mod=score_mod,
                             block_mask=block_mask, enable_gqa=gqa)

    def with_sinks():  # The sink column's share, from the rows' LSE.
        o, lse = _flex(q, k, v, score_mod=score_mod, block_mask=block_mask,
                       enable_gqa=gqa, return_lse=True)
        keep = torch.sigmoid(lse - sinks.view(1, -1, 1))
        return (o.float() * keep.unsqueeze(-1)).to(q.dtype)
    return with_sinks


def calls(shape):
    b, h, kvh, sq, sk, d, causal, left, cap, baseline, *rest = shape
    sinks = (torch.randn(h, device="cuda") * 2) if rest and rest[0] else None
    slopes = bloom_slopes(h) if rest[1:] and rest[1] else None
    q = torch.randn(b, h, sq, d, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(b, kvh, sk, d, device="cuda", dtype=torch.bfloat16)
            for _ in range(2))
    window = (left, -1)
    out = {"evotune": lambda: et.attention(q, k, v, causal, window_size=window,
                                           softcap=cap, sinks=sinks,
                                           alibi_slopes=slopes),
           "flex": flex_call(q, k, v, causal, left, cap, sinks, slopes)}
    if baseline == "dense":
        out["evotune_without"] = lambda: et.attention(q, k, v, causal)
        out["sdpa_without"] = lambda: et._sdpa(q, k, v, causal, None)
        base_keys = sk
    else:  # The window's keys alone, as a plain decode.
        base_keys = left + 1
        kw, vw = k[:, :, -base_keys:].contiguous(), v[:, :, -base_keys:]
        vw = vw.contiguous()
        out["evotune_without"] = lambda: et.attention(q, kw, vw, causal)
        out["sdpa_without"] = lambda: et._sdpa(q, kw, vw, causal, None)
    kernel = et.kernel_for(q, k, causal, v, window_size=window, softcap=cap,
                           sinks=sinks, alibi_slopes=slopes)
    return out, kernel, base_keys


def run_shape(name, shape, args):
    b, h, kvh, sq, sk, d, causal, left, cap, baseline, *rest = shape
    fns, kernel, base_keys = calls(shape)
    outs, us, skipped = time_calls(fns, args.reps, args.turns)
    pairs = visible_pairs(sq, sk, causal, left)
    base_pairs = visible_pairs(sq, base_keys, causal, -1)
    flops = {c: 4 * b * h * d * (base_pairs if c.endswith("_without")
                                 else pairs) for c in us}
    row = {"name": name,
           "shape": dict(batch=b, heads=h, kv_heads=kvh, seq_q=sq, seq_k=sk,
                         head_dim=d, causal=causal, window_left=left,
                         softcap=cap, sinks=bool(rest and rest[0]),
                         alibi=bool(rest[1:] and rest[1])),
           "kernel": kernel, "us": us,
           "tflops_visible": {c: flops[c] / t / 1e6 for c, t in us.items()},
           "skipped": skipped}
    if "flex" in outs and "evotune" in outs:
        row["rel_err_vs_flex"] = rel_err(outs["evotune"], outs["flex"].float())
    if "evotune_without" in outs and "sdpa_without" in outs:
        row["rel_err_without_vs_sdpa"] = rel_err(outs["evotune_without"],
                                                 outs["sdpa_without"].float())
    if "flex" in us:
        row["speedup_over_flex"] = us["flex"] / us["evotune"]
    if sq == 1:  # K/V bytes of the visible keys a second.
        keys = {c: (base_keys if c.endswith("_without") else
                    min(sk, left + 1) if left >= 0 else sk) for c in us}
        row["kv_tb_s"] = {c: 2 * b * kvh * keys[c] * d * 2 / t / 1e6
                          for c, t in us.items()}
    row["visible_rate_over_without"] = (
        row["tflops_visible"]["evotune"] /
        row["tflops_visible"]["evotune_without"])
    return row


def main():
    args = bench_parser(reps=10, only=True).parse_args()
    et.use(daemon=args.daemon, wait=True)
    rows = run_named(SHAPES, run_shape, args, lambda row: " ".join([
        str(row["kernel"]),
        *(f"{k}={t:.1f}us({row['tflops_visible'][k]:.0f}TF)"
          for k, t in row["us"].items()),
        f"| over flex {row.get('speedup_over_flex', 0):.2f}x",
        f"| rate/without {row['visible_rate_over_without']:.2f}",
        f"| err vs flex {row.get('rel_err_vs_flex', -1):.1e}",
        f"without vs sdpa {row.get('rel_err_without_vs_sdpa', -1):.1e}",
        f"| TB/s {row.get('kv_tb_s')} | skipped {row['skipped']}"]))
    if args.json:
        write_results(args.json, args.commit, rows)


if __name__ == "__main__":
    main()
