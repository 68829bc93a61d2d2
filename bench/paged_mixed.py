#!/usr/bin/env python3
"""An engine's mixed step over a paged KV cache in one launch: decode rows,
speculative rows and prefill chunks, queries packed by cu_seqlens_q, keys
in shuffled pages (evotune.PagedPlan, the kernel of
flash_attn_varlen_func(..., block_table=)), beside evotune's varlen kernel
and FlexAttention (document mask, causal bottom-right per sequence) on the
same batch with its K/V gathered into one packed tensor (the gather not
counted: a bound for a paged FlexAttention, which reads the same keys
through its block mask). Each call is checked against the fp32 reference
per sequence, captured in a CUDA graph where it can be (FlexAttention:
timed eagerly, compiled) and timed in interleaved turns.

  PYTHONPATH=python EVOTUNE_RUNTIME_LIBRARY=build/lib/libevotune_runtime.so \\
  python3 bench/paged_mixed.py --daemon 127.0.0.1:7433 [--json OUT.json]
"""
import argparse
import datetime
import json
import math
import random

import torch

import evotune.torch as et
from evotune.paged import sdpa_per_sequence
from paged_decode import graph_of, time_graphs
from varlen_compare import flex_fn, time_turns


def lengths(rng, args):
    """(queries, keys) per sequence: decode rows, speculative rows, prefill
    chunks against prefixes, keys log-uniform up to --max_keys."""
    def keys(least):
        return max(least, int(math.exp(rng.uniform(0, math.log(
            args.max_keys)))))
    rows = [(1, keys(1)) for _ in range(args.decode)]
    rows += [(args.spec_q, keys(args.spec_q)) for _ in range(args.spec)]
    rows += [(args.chunk, keys(args.chunk)) for _ in range(args.chunks)]
    rng.shuffle(rows)
    return rows


def paged_batch(rows, heads, kv_heads, d, page_size, dtype, gen):
    """q packed, the keys in shuffled pages, cu_seqlens_q, seqused_k, the
    block table, and the same K/V packed (gathered) with cu_seqlens_k."""
    width = max(-(-k // page_size) for _, k in rows)
    pages = len(rows) * width + 3
    q = torch.randn(sum(n for n, _ in rows), heads, d, device="cuda",
                    dtype=dtype)
    k_pages = torch.randn(pages, page_size, kv_heads, d, device="cuda",
                          dtype=dtype)
    v_pages = torch.randn_like(k_pages)
    order = torch.randperm(pages, generator=gen).cuda().int()
    table = order[:len(rows) * width].view(len(rows), width).contiguous()
    i32 = lambda xs: torch.tensor(xs, dtype=torch.int32, device="cuda")
    cu_q = i32([0] + list(torch.tensor([n for n, _ in rows]).cumsum(0)))
    used = i32([k for _, k in rows])
    cu_k = i32([0] + list(torch.tensor([k for _, k in rows]).cumsum(0)))
    gather = lambda t: torch.cat([  # noqa: E731
        t[table[b, :-(-k // page_size)].long()].flatten(0, 1)[:k]
        for b, (_, k) in enumerate(rows)])
    return q, k_pages, v_pages, cu_q, used, table, gather(k_pages), \
        gather(v_pages), cu_k


def run(rows, page_size, args, gen):
    dtype = torch.bfloat16
    q, kp, vp, cu_q, used, table, k, v, cu_k = paged_batch(
        rows, args.heads, args.kv_heads, args.head_dim, page_size, dtype, gen)
    max_q, max_k = max(n for n, _ in rows), max(k for _, k in rows)
    want = sdpa_per_sequence(q.float(), kp.float(), vp.float(), cu_q, used,
                             table, True, None)
    plan = et.PagedPlan(len(rows), args.heads, args.kv_heads, args.head_dim,
                        page_size, max_q, max_k, True, dtype,
                        max_pages=table.shape[1])
    varlen = et.VarlenPlan(len(rows), args.heads, args.kv_heads,
                           args.head_dim, max_q, max_k, True, dtype)
    out_p, out_v = torch.empty_like(q), torch.empty_like(q)
    calls = {"evotune_paged": lambda: plan.run(q, kp, vp, cu_q, used, table,
                                               out=out_p),
             "evotune_varlen": lambda: varlen.run(q, k, v, cu_q, cu_k,
                                                  out=out_v)}
    errors = {name: ((call().float() - want).norm() / want.norm()).item()
              for name, call in calls.items()}
    times = time_graphs({n: graph_of(c, args.reps) for n, c in calls.items()},
                        args.reps, args.turns)
    flex = flex_fn(q, k, v, cu_q, cu_k)
    errors["flex_gathered"] = ((flex().float() - want).norm() /
                               want.norm()).item()
    times.update(time_turns({"flex_gathered": flex}, args.turns, args.reps))
    visible = sum(n * k - n * (n - 1) / 2 for n, k in rows)
    return {"page_size": page_size, "sequences": len(rows),
            "total_q": q.shape[0], "total_k": k.shape[0], "max_q": max_q,
            "max_k": max_k, "kernel": plan.kernel,
            "varlen_kernel": varlen.kernel, "time_us": times,
            "rel_err_vs_fp32": errors,
            "flex_over_paged": times["flex_gathered"] /
            times["evotune_paged"],
            "paged_tflops": 4 * visible * args.heads * args.head_dim /
            times["evotune_paged"] / 1e6}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--daemon", required=True)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv_heads", type=int, default=8)
    ap.add_argument("--head_dim", type=int, default=128)
    ap.add_argument("--decode", type=int, default=32)
    ap.add_argument("--spec", type=int, default=4)
    ap.add_argument("--spec_q", type=int, default=8)
    ap.add_argument("--chunks", type=int, default=2)
    ap.add_argument("--chunk", type=int, default=1024)
    ap.add_argument("--max_keys", type=int, default=8192)
    ap.add_argument("--page_sizes", default="16,128")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--turns", type=int, default=7)
    ap.add_argument("--json")
    ap.add_argument("--commit", default="unknown")
    args = ap.parse_args()
    et.use(daemon=args.daemon, wait=True)
    gen = torch.Generator().manual_seed(0)
    rows = lengths(random.Random(0), args)
    results = []
    for page_size in map(int, args.page_sizes.split(",")):
        r = run(rows, page_size, args, gen)
        results.append(r)
        t = r["time_us"]
        print(f"pages of {page_size}: {r['sequences']} sequences, "
              f"{r['total_q']} queries, {r['total_k']} keys; paged "
              f"{t['evotune_paged']:.1f} us, varlen "
              f"{t['evotune_varlen']:.1f} us, flex (gathered) "
              f"{t['flex_gathered']:.1f} us: flex/paged "
              f"{r['flex_over_paged']:.2f}x; errors {r['rel_err_vs_fp32']}; "
              f"{r['kernel']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"bench": "paged_mixed", "commit": args.commit,
                       "date": datetime.date.today().isoformat(),
                       "gpu": torch.cuda.get_device_name(),
                       "torch": torch.__version__, "rows": rows,
                       "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
