#!/usr/bin/env python3
"""One launch over a mixed batch of packed sequences (decode rows and
prefill chunks, lengths in device memory) through evotune.torch.
varlen_attention, beside what a PyTorch user runs instead on the same
packed batch: SDPA over nested jagged tensors and FlexAttention with a
document mask (compiled), timed in interleaved turns in one process.
Every output is checked against an fp32 reference per sequence, and the
evotune call is captured in a CUDA graph and replayed with new lengths.

  PYTHONPATH=python EVOTUNE_RUNTIME_LIBRARY=build/lib/libevotune_runtime.so \\
  python3 bench/varlen_compare.py --daemon 127.0.0.1:7433 [--json OUT.json]
"""
import argparse
import datetime
import json
import math
import random

import torch

import evotune.torch as et
from evotune.varlen import sdpa_per_sequence


def draw_lengths(rng, n, chunks, chunk, most):
    """(query, key) lengths: n - chunks decode rows (1 query, keys
    log-uniform in [1, most]) and `chunks` prefill chunks of `chunk`
    queries over a prefix (keys log-uniform in [chunk, most])."""
    out = []
    for i in range(n):
        lo = chunk if i < chunks else 1
        k = int(math.exp(rng.uniform(math.log(lo), math.log(most))))
        out.append((min(chunk, k) if i < chunks else 1, max(k, lo)))
    rng.shuffle(out)
    return out


def packed(lengths, heads, kv_heads, d, dtype, room=0):
    """q, k, v packed and cu_seqlens for `lengths` (plus `room` spare rows
    at the end of each tensor, for graph replays with other lengths)."""
    tq = sum(q for q, _ in lengths) + room
    tk = sum(k for _, k in lengths) + room
    q = torch.randn(tq, heads, d, device="cuda", dtype=dtype)
    k = torch.randn(tk, kv_heads, d, device="cuda", dtype=dtype)
    v = torch.randn(tk, kv_heads, d, device="cuda", dtype=dtype)
    return q, k, v, cumulative([a for a, _ in lengths]), cumulative(
        [b for _, b in lengths])


def cumulative(xs):
    out = [0]
    for x in xs:
        out.append(out[-1] + x)
    return torch.tensor(out, dtype=torch.int32, device="cuda")


def rel_err(got, want):
    return ((got.float() - want).norm() / want.norm()).item()


def reference(q, k, v, cu_q, cu_k):
    return sdpa_per_sequence(q.float(), k.float(), v.float(), cu_q, cu_k,
                             True, None)


def flex_fn(q, k, v, cu_q, cu_k):
    """FlexAttention over the packed batch with a per-document causal mask
    aligned bottom-right, or None when it is unavailable."""
    from torch.nn.attention.flex_attention import create_block_mask
    from torch.nn.attention.flex_attention import flex_attention
    n = cu_q.numel() - 1
    doc_q = torch.repeat_interleave(torch.arange(n, device="cuda"),
                                    (cu_q[1:] - cu_q[:-1]).long())
    doc_k = torch.repeat_interleave(torch.arange(n, device="cuda"),
                                    (cu_k[1:] - cu_k[:-1]).long())
    len_q = (cu_q[1:] - cu_q[:-1]).long()
    len_k = (cu_k[1:] - cu_k[:-1]).long()
    cq, ck = cu_q.long(), cu_k.long()

    def mask(b, h, qi, ki):
        dq, dk = doc_q[qi], doc_k[ki]
        pos_q = qi - cq[dq] + len_k[dq] - len_q[dq]
        return (dq == dk) & (ki - ck[dk] <= pos_q)

    block = create_block_mask(mask, None, None, q.shape[0], k.shape[0],
                              device="cuda")
    compiled = torch.compile(flex_attention)
    qt, kt, vt = (t.transpose(0, 1).unsqueeze(0) for t in (q, k, v))
    return lambda: compiled(qt, kt, vt, block_mask=block,
                            enable_gqa=True)[0].transpose(0, 1)


def njt_fn(q, k, v, cu_q, cu_k):
    """SDPA over nested jagged tensors (KV heads repeated: NJT SDPA takes
    no GQA), causal per sequence as NJT aligns it (top-left: equal to
    bottom-right only where a sequence has as many queries as keys, so its
    output is timed, not checked)."""
    group = q.shape[1] // k.shape[1]
    nq = torch.nested.nested_tensor_from_jagged(q, cu_q.long())
    nk = torch.nested.nested_tensor_from_jagged(
        k.repeat_interleave(group, 1), cu_k.long())
    nv = torch.nested.nested_tensor_from_jagged(
        v.repeat_interleave(group, 1), cu_k.long())
    qt, kt, vt = (t.transpose(1, 2) for t in (nq, nk, nv))
    return lambda: torch.nn.functional.scaled_dot_product_attention(
        qt, kt, vt, is_causal=True).transpose(1, 2).values()


def time_turns(fns, turns, reps):
    """Median µs per call of each fn, in interleaved turns."""
    samples = {name: [] for name in fns}
    for _ in range(turns):
        for name, fn in fns.items():
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(reps):
                fn()
            end.record()
            end.synchronize()
            samples[name].append(start.elapsed_time(end) * 1e3 / reps)
    return {n: sorted(s)[len(s) // 2] for n, s in samples.items()}


def graph_replay_check(rng, args, dtype):
    """Captures one varlen call, then writes other lengths (same bucket)
    into its cu_seqlens and replays: the worst error of the replays."""
    lengths = draw_lengths(rng, args.sequences, args.chunks, args.chunk,
                           args.max_len)
    room = 4096
    q, k, v, cu_q, cu_k = packed(lengths, args.heads, args.kv_heads,
                                 args.head_dim, dtype, room)
    call = lambda: et.varlen_attention(q, k, v, cu_q, cu_k, args.chunk,
                                       args.max_len, causal=True)
    call()  # Loads the kernel and sizes the scratch outside capture.
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = call()
    worst = 0.0
    for _ in range(3):
        new = draw_lengths(rng, args.sequences, args.chunks, args.chunk,
                           args.max_len)
        if sum(a for a, _ in new) > q.shape[0] or \
                sum(b for _, b in new) > k.shape[0]:
            continue
        cu_q.copy_(cumulative([a for a, _ in new]))
        cu_k.copy_(cumulative([b for _, b in new]))
        graph.replay()
        want = reference(q, k, v, cu_q, cu_k)
        rows = int(cu_q[-1])
        worst = max(worst, rel_err(out[:rows], want[:rows]))
    return worst


def main():
    ap = argparse.ArgumentParser()
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--daemon")
    mode.add_argument("--bundle")
    ap.add_argument("--sequences", type=int, default=64)
    ap.add_argument("--chunks", type=int, default=4)
    ap.add_argument("--chunk", type=int, default=512)
    ap.add_argument("--max_len", type=int, default=4096)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv_heads", type=int, default=8)
    ap.add_argument("--head_dim", type=int, default=128)
    ap.add_argument("--turns", type=int, default=15)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json")
    ap.add_argument("--commit", default="unknown")
    args = ap.parse_args()
    et.use(daemon=args.daemon, wait=True) if args.daemon else et.use(
        bundle=args.bundle)
    rng = random.Random(0)
    torch.manual_seed(0)
    dtype = torch.bfloat16
    lengths = draw_lengths(rng, args.sequences, args.chunks, args.chunk,
                           args.max_len)
    q, k, v, cu_q, cu_k = packed(lengths, args.heads, args.kv_heads,
                                 args.head_dim, dtype)
    ours = lambda: et.varlen_attention(q, k, v, cu_q, cu_k, args.chunk,
                                       args.max_len, causal=True)
    print("reference", flush=True)
    want = reference(q, k, v, cu_q, cu_k)
    print("evotune's first call", flush=True)
    errors = {"evotune": rel_err(ours(), want)}
    print(f"evotune rel err {errors['evotune']:.1e}", flush=True)
    fns = {"evotune": ours}
    failed = {}
    for name, make in (("flex", flex_fn), ("sdpa_njt", njt_fn)):
        print(name, flush=True)
        try:
            fn = make(q, k, v, cu_q, cu_k)
            got = fn()
            if name == "flex":
                errors[name] = rel_err(got, want)
            fns[name] = fn
        except Exception as e:  # Reported, not fatal: the others still run.
            failed[name] = f"{type(e).__name__}: {e}"[:300]
    print("timing", flush=True)
    times = time_turns(fns, args.turns, args.reps)
    others = [times[n] for n in times if n != "evotune"]
    best_other = min(others) if others else float("nan")
    graph_err = graph_replay_check(rng, args, dtype)
    row = {"lengths": lengths, "times_us": times, "rel_err_vs_fp32": errors,
           "failed": failed, "speedup_vs_best_other":
           best_other / times["evotune"], "graph_replay_rel_err": graph_err,
           "total_q": int(cu_q[-1]), "total_k": int(cu_k[-1])}
    print(f"{args.sequences} sequences ({args.chunks} chunks of "
          f"{args.chunk}), keys up to {args.max_len}; total q "
          f"{row['total_q']}, k {row['total_k']}; H={args.heads} "
          f"KV={args.kv_heads} D={args.head_dim} bf16 causal")
    print("median us: " + ", ".join(f"{n} {t:.1f}" for n, t in times.items())
          + f"; evotune vs the faster other {row['speedup_vs_best_other']:.2f}x")
    print(f"rel err vs fp32: {errors}; graph replays with new lengths: "
          f"{graph_err:.1e}; failed: {failed}")
    if args.json:
        header = {"gpu": torch.cuda.get_device_name(),
                  "torch": torch.__version__,
                  "date": datetime.date.today().isoformat(),
                  "commit": args.commit, "args": vars(args)}
        with open(args.json, "w") as f:
            json.dump({**header, **row}, f, indent=1)


if __name__ == "__main__":
    main()
