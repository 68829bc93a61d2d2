#!/usr/bin/env python3
"""Decode and chunked-prefill steps over a paged KV cache through
evotune.torch.flash_attn_with_kvcache(block_table=...), beside the same
step on a dense cache (evotune's kv-cache kernel) and SDPA's backends on
the dense cache, in interleaved turns in one process. Every call is first
checked against an fp32 reference; each is then captured in a CUDA graph
of `--reps` calls and replayed, so the times are the kernels' (no host
overhead). Pages are in a shuffled order; every sequence has the step's
key length (SDPA takes one length). Reports microseconds a call and the
K/V stream in TB/s (K and V bytes read / time). --suite_decode takes the
suite's decode-gqa and decode-long shapes; --flex adds FlexAttention's
paged attention on decode steps (its own cache layout holding the same
pages); --read_floor a streaming read of the same K/V bytes (sdpa_compare's
read floor) and each evotune call's rate as a fraction of it.

  PYTHONPATH=python:bench \\
  EVOTUNE_RUNTIME_LIBRARY=build/lib/libevotune_runtime.so \\
  python3 bench/paged_decode.py --daemon 127.0.0.1:7433 [--json OUT.json]
"""
import argparse
import datetime
import json
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.bias import causal_lower_right

import evotune.torch as et
from evotune.kvcache import sdpa_per_sequence
from sdpa_compare import ReadFloor

# The suite's decode-gqa and decode-long (../shared/bench/shapes.json).
SUITE_DECODE = [(8, 1, 32, 8, 128, 8192), (1, 1, 64, 8, 128, 32768)]
# (batch, queries, heads, kv_heads, head_dim, keys): Llama-3-8B-like decode
# steps, an MQA step, and chunks of a prefill over a long prefix.
SHAPES = [(8, 1, 32, 8, 128, 4096), (32, 1, 32, 8, 128, 2048),
          (64, 1, 32, 8, 128, 1024), (4, 1, 32, 8, 128, 16384),
          (16, 1, 8, 1, 128, 8192), (4, 256, 32, 8, 128, 4096)]
SDPA = {"sdpa_flash": SDPBackend.FLASH_ATTENTION,
        "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION,
        "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION}


def rel_err(got, want):
    return ((got.float() - want).norm() / want.norm()).item()


def paged(t, page_size, gen):
    """The [batch, keys, kv_heads, d] cache `t` as shuffled pages (and
    three spare ones) and its block table."""
    b, n, h, d = t.shape
    per_seq = n // page_size
    order = torch.randperm(b * per_seq + 3, generator=gen).cuda()
    table = order[:b * per_seq].view(b, per_seq).int()
    pool = torch.zeros(b * per_seq + 3, page_size, h, d, dtype=t.dtype,
                       device="cuda")
    pool[table.long()] = t.view(b, per_seq, page_size, h, d)
    return pool, table


def flex_paged(q, k_pages, v_pages, table, used):
    """FlexAttention's paged attention (torch.nn.attention.experimental's
    PagedAttention over its own cache layout, [1, kv_heads, pages *
    page_size, head_dim], holding the same pages) for a decode step: a
    compiled call, or None where this PyTorch has none."""
    from torch.nn.attention.experimental._paged_attention import \
        PagedAttention
    from torch.nn.attention.flex_attention import (create_block_mask,
                                                   flex_attention)
    b, _, _, d = q.shape
    pages, page_size, kvh, _ = k_pages.shape
    width = table.shape[1]
    pa = PagedAttention(pages, page_size, b)
    rows = torch.arange(b, device="cuda")[:, None]
    pa.page_table[:b, :width] = table.long()
    pa.physical_to_logical[rows, table.long()] = torch.arange(
        width, device="cuda")
    caches = [t.permute(2, 0, 1, 3).reshape(kvh, pages * page_size, d)[None]
              .contiguous() for t in (k_pages, v_pages)]
    logical = create_block_mask(lambda b, h, qi, ki: ki >= 0, b, None, 1,
                                width * page_size,
                                BLOCK_SIZE=(128, page_size))
    mask = pa.convert_logical_block_mask(logical, kv_len=used.long())
    compiled = torch.compile(flex_attention)
    qt = q.transpose(1, 2)
    return lambda: compiled(qt, caches[0], caches[1], block_mask=mask,
                            enable_gqa=True).transpose(1, 2)


def calls(shape, page_sizes, dtype, gen, flex=False):
    """name: a zero-argument call of the step, and the fp32 reference."""
    b, sq, h, kvh, d, n = shape
    causal = sq > 1
    q = torch.randn(b, sq, h, d, device="cuda", dtype=dtype)
    k = torch.randn(b, n, kvh, d, device="cuda", dtype=dtype)
    v = torch.randn(b, n, kvh, d, device="cuda", dtype=dtype)
    used = torch.full((b,), n, dtype=torch.int32, device="cuda")
    out = {"evotune_dense": lambda: et.flash_attn_with_kvcache(
        q, k, v, cache_seqlens=used, causal=causal)}
    for p in page_sizes:
        kp, table = paged(k, p, gen)
        vp = torch.zeros_like(kp)  # V's pages by K's table.
        vp[table.long()] = v.view(b, n // p, p, kvh, d)
        out[f"evotune_paged{p}"] = (
            lambda kp=kp, vp=vp, table=table: et.flash_attn_with_kvcache(
                q, kp, vp, cache_seqlens=used, block_table=table,
                causal=causal))
        if flex and sq == 1:
            try:
                out[f"flex_paged{p}"] = flex_paged(q, kp, vp, table, used)
            except (ImportError, RuntimeError, TypeError) as e:
                print(f"flex_paged{p}: {str(e).splitlines()[0][:160]}")
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    mask = causal_lower_right(sq, n) if causal else None
    for name, backend in SDPA.items():
        def sdpa(backend=backend):
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(
                    qt, kt, vt, attn_mask=mask, enable_gqa=h != kvh
                ).transpose(1, 2)
        out[name] = sdpa
    want = sdpa_per_sequence(q.float(), k.float(), v.float(), used, causal,
                             None)
    return out, want


def graph_of(call, reps):
    call()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            call()
    return g


def time_graphs(graphs, reps, turns):
    """name: median microseconds a call over interleaved turns."""
    times = {name: [] for name in graphs}
    start, end = torch.cuda.Event(True), torch.cuda.Event(True)
    for _ in range(turns):
        for name, g in graphs.items():
            g.replay()  # Warm.
            start.record()
            g.replay()
            end.record()
            end.synchronize()
            times[name].append(start.elapsed_time(end) * 1e3 / reps)
    return {name: statistics.median(ts) for name, ts in times.items()}


def time_calls(fns, reps, turns):
    """Runs each call once, then times it as time_graphs does: (each call's
    output, its median microseconds, the first line of why a call failed,
    e.g. a backend that refuses the shape)."""
    outs, graphs, skipped = {}, {}, {}
    for name, fn in fns.items():
        try:
            outs[name] = fn()
            graphs[name] = graph_of(fn, reps)
        except Exception as e:  # A backend that refuses the shape.
            skipped[name] = str(e).splitlines()[0][:160]
    return outs, time_graphs(graphs, reps, turns), skipped


def run_named(shapes, run_shape, args, line):
    """run_shape(name, shape, args) for each (name, shape) whose name holds a
    part of args.only (comma-separated; all without it), each row printed
    as line(row) once measured; the rows."""
    rows = []
    for name, shape in shapes:
        if args.only and not any(o in name for o in args.only.split(",")):
            continue
        rows.append(run_shape(name, shape, args))
        print(name, line(rows[-1]), flush=True)
    return rows


def bench_parser(reps, only=False):
    """The arguments of the scripts that time evotune.torch beside other
    backends: --daemon, --reps (calls a graph), --turns, --json, --commit,
    and with `only` --only (for run_named)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--daemon", required=True)
    ap.add_argument("--reps", type=int, default=reps)
    ap.add_argument("--turns", type=int, default=7)
    ap.add_argument("--json")
    ap.add_argument("--commit", default="")
    if only:
        ap.add_argument("--only", default="",
                        help="comma-separated parts of the names to run")
    return ap


def run_shape(shape, args, gen):
    b, sq, h, kvh, d, n = shape
    fns, want = calls(shape, args.page_sizes, torch.bfloat16, gen, args.flex)
    outs, us, skipped = time_calls(fns, args.reps, args.turns)
    errors = {name: rel_err(o, want) for name, o in outs.items()}
    kv_bytes = 2 * b * kvh * n * d * 2
    row = {"shape": dict(batch=b, seq_q=sq, heads=h, kv_heads=kvh,
                         head_dim=d, seq_k=n, dtype="bf16",
                         causal=sq > 1),
           "us": us, "rel_err": errors, "skipped": skipped,
           "kv_tb_per_s": {k: kv_bytes / t / 1e6 for k, t in us.items()}}
    sdpa = [t for k, t in us.items() if k.startswith("sdpa")]
    row["fastest_sdpa_us"] = min(sdpa) if sdpa else None
    if args.read_floor:  # A streaming read of the same bytes, same run.
        floor = ReadFloor().us(kv_bytes)
        row["read_floor_us"] = floor
        row["read_rate_of_floor"] = {k: floor / t for k, t in us.items()
                                     if k.startswith("evotune")}
    return row



def write_results(path, commit, rows, **extra):
    """A run's JSON for bench/results/: the date, GPU, commit, torch, the
    rows and any `extra` fields."""
    with open(path, "w") as f:
        json.dump({"date": datetime.date.today().isoformat(),
                   "gpu": torch.cuda.get_device_name(),
                   "commit": commit, "torch": torch.__version__,
                   "rows": rows, **extra}, f, indent=1)

def main():
    ap = bench_parser(reps=20)
    ap.add_argument("--page_sizes", type=int, nargs="+", default=[16, 64])
    ap.add_argument("--suite_decode", action="store_true",
                    help="the suite's decode-gqa and decode-long shapes only")
    ap.add_argument("--flex", action="store_true",
                    help="FlexAttention's paged attention beside (decode)")
    ap.add_argument("--read_floor", action="store_true",
                    help="a streaming read of the K/V bytes beside")
    args = ap.parse_args()
    et.use(daemon=args.daemon, wait=True)
    gen = torch.Generator().manual_seed(1)
    rows = []
    for shape in SUITE_DECODE if args.suite_decode else SHAPES:
        row = run_shape(shape, args, gen)
        rows.append(row)
        fast = row["fastest_sdpa_us"]
        print(shape, " ".join(
            f"{k}={t:.1f}us({row['kv_tb_per_s'][k]:.2f}TB/s)"
            for k, t in row["us"].items()),
            "| paged/dense " + " ".join(
                f"{row['us'][k] / row['us']['evotune_dense']:.3f}"
                for k in row["us"] if k.startswith("evotune_paged")),
            "| fastest sdpa/paged " + " ".join(
                f"{fast / row['us'][k]:.3f}" for k in row["us"]
                if k.startswith("evotune_paged") and fast),
            "| max err", f"{max(row['rel_err'].values()):.2e}",
            "| skipped", list(row["skipped"]), flush=True)
    if args.json:
        write_results(args.json, args.commit, rows)


if __name__ == "__main__":
    main()
