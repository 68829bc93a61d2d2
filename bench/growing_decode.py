#!/usr/bin/env python3
"""A decode loop whose key length grows by one each step, through the op
evotune.torch.attention (bundle or daemon mode) beside SDPA's eager loop,
in one process: the time of the op's first pass (every length new to it),
its second pass (every length seen), SDPA's loop after a pass of its own
(its backends set up per shape too), and the GPU memory in use before and
after the first pass and, with --lengths, after that many more distinct
lengths (run before any SDPA call: the op's memory alone). Every output of
the second pass, and every 16th of the first, is checked against SDPA's.

  PYTHONPATH=python EVOTUNE_RUNTIME_LIBRARY=build/lib/libevotune_runtime.so \\
  python3 bench/growing_decode.py --daemon 127.0.0.1:7433 [--steps 1024]
      [--start 512] [--lengths 10000] [--json OUT.json]

Each step is one call on [batch, heads, 1, head_dim] queries against keys and
values of the step's length (views of one preallocated cache, as an engine
holds it; with --kvcache, flash_attn_with_kvcache on the whole cache with
the length in a device tensor); a pass's time is wall time with a
synchronize at its end.
"""
import argparse
import cProfile
import datetime
import json
import pstats
import time

import torch
import torch.nn.functional as F

import evotune.torch as et


def sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)


def run_pass(fn, q, cache_k, cache_v, lengths, keep=None, steps=None):
    """Wall time of one call of fn per length, in seconds. With `keep` (a
    dict), every 16th step's output is kept there by length; with `steps`
    (a list), each call's host time is appended to it, in seconds."""
    torch.cuda.synchronize()
    start = last = time.perf_counter()
    for i, n in enumerate(lengths):
        o = fn(q, cache_k[:, :, :n], cache_v[:, :, :n])
        if keep is not None and i % 16 == 0:
            keep[n] = o
        if steps is not None:
            now = time.perf_counter()
            steps.append(now - last)
            last = now
    torch.cuda.synchronize()
    return time.perf_counter() - start


def slowest(steps, lengths, count=8):
    """The `count` slowest calls of a pass ([length, µs]) and the host time
    all calls took beyond the median call's, in µs."""
    median = sorted(steps)[len(steps) // 2]
    top = sorted(range(len(steps)), key=lambda i: -steps[i])[:count]
    return ([[lengths[i], round(steps[i] * 1e6, 1)] for i in top],
            round(sum(max(0.0, t - median) for t in steps) * 1e6, 1))


def worst_error(outputs, q, cache_k, cache_v):
    """The largest relative error of kept outputs against SDPA's."""
    worst = 0.0
    for n, got in outputs.items():
        want = sdpa(q, cache_k[:, :, :n], cache_v[:, :, :n]).float()
        worst = max(worst, ((got.float() - want).norm() / want.norm()).item())
    return worst


def profile(fn):
    """Runs fn under cProfile; prints where the time went."""
    prof = cProfile.Profile()
    prof.enable()
    fn()
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(20)


def warm_clocks(seconds=0.5):
    """Keeps the GPU busy for a while, so that its clocks have left idle
    before the first pass is timed (at idle clocks a decode step's kernel
    takes several times its time, and the first pass would pay for it)."""
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(8):
            a @ a
        torch.cuda.synchronize()


def used_bytes():
    free, total = torch.cuda.mem_get_info()
    return total - free


def main():
    ap = argparse.ArgumentParser()
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--daemon")
    mode.add_argument("--bundle")
    ap.add_argument("--steps", type=int, default=1024)
    ap.add_argument("--start", type=int, default=512)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv_heads", type=int, default=8)
    ap.add_argument("--head_dim", type=int, default=128)
    ap.add_argument("--lengths", type=int, default=0,
                    help="then this many more distinct lengths, for memory")
    ap.add_argument("--kvcache", action="store_true",
                    help="through flash_attn_with_kvcache over the whole "
                    "cache (one problem) instead of attention on each "
                    "length's view")
    ap.add_argument("--profile", type=int, default=0,
                    help="then profile (cProfile) a pass over this many new "
                    "lengths and a pass over them again")
    ap.add_argument("--wait", type=float,
                    help="daemon mode: seconds the first call of a new kind "
                    "of problem waits for the daemon's kernel before SDPA "
                    "answers meanwhile (the op's default if not given; inf: "
                    "until it comes)")
    ap.add_argument("--prefetch", type=int,
                    help="daemon mode: kernels the daemon served lately "
                    "fetched ahead by use() (the op's default if not given)")
    ap.add_argument("--json")
    ap.add_argument("--commit", default="unknown")
    args = ap.parse_args()
    if args.daemon:
        given = {"wait": args.wait, "prefetch": args.prefetch}
        et.use(daemon=args.daemon,
               **{k: v for k, v in given.items() if v is not None})
    else:
        et.use(bundle=args.bundle)
    most = args.start + max(args.steps, args.lengths) + args.profile
    b, h, kvh, d = args.batch, args.heads, args.kv_heads, args.head_dim
    torch.manual_seed(0)
    q = torch.randn(b, h, 1, d, device="cuda", dtype=torch.bfloat16)
    cache_k = torch.randn(b, kvh, most, d, device="cuda", dtype=torch.bfloat16)
    cache_v = torch.randn(b, kvh, most, d, device="cuda", dtype=torch.bfloat16)
    lengths = range(args.start, args.start + args.steps)
    op = lambda q, k, v: et.attention(q, k, v)
    if args.kvcache:
        # The same memory as FlashAttention's [batch, seq, kv_heads,
        # head_dim] cache, the step's length in a device tensor.
        lens = torch.empty(b, dtype=torch.int32, device="cuda")
        kc, vc = cache_k.transpose(1, 2), cache_v.transpose(1, 2)

        def op(q, k, v):
            lens.fill_(k.shape[2])
            return et.flash_attn_with_kvcache(
                q.transpose(1, 2), kc, vc, cache_seqlens=lens).transpose(1, 2)
    warm_clocks()
    before = used_bytes()
    first_outputs = {}  # The first pass's, checked after the timing.
    first_steps = []
    first = run_pass(op, q, cache_k, cache_v, lengths, first_outputs,
                     first_steps)
    after_first = used_bytes()
    second_steps = []
    second = run_pass(op, q, cache_k, cache_v, lengths, steps=second_steps)
    more = {}
    if args.lengths:  # Before SDPA runs: the op's memory alone.
        span = range(args.start + args.steps, args.start + args.lengths)
        more = {"lengths_s": run_pass(op, q, cache_k, cache_v, span),
                "after_lengths": used_bytes(), "distinct_lengths": args.lengths}
    # SDPA's own setup (cuDNN plans each new shape).
    sdpa_first = run_pass(sdpa, q, cache_k, cache_v, lengths)
    sdpa_s = run_pass(sdpa, q, cache_k, cache_v, lengths)
    worst = 0.0
    for n in lengths:
        k, v = cache_k[:, :, :n], cache_v[:, :, :n]
        want = sdpa(q, k, v).float()
        got = op(q, k, v).float()
        worst = max(worst, ((got - want).norm() / want.norm()).item())
    first_worst = worst_error(first_outputs, q, cache_k, cache_v)
    served = et.kernel_for(q, cache_k[:, :, :args.start], reason=True)
    served_last = et.kernel_for(q, cache_k[:, :, :lengths[-1]], reason=True)
    row = {"first_s": first, "second_s": second, "sdpa_s": sdpa_s,
           "sdpa_first_s": sdpa_first,
           "first_slowest_us": slowest(first_steps, lengths),
           "second_slowest_us": slowest(second_steps, lengths),
           "first_over_second": first / second,
           "second_over_sdpa": second / sdpa_s,
           "per_step_us": {"first": first / args.steps * 1e6,
                           "second": second / args.steps * 1e6,
                           "sdpa": sdpa_s / args.steps * 1e6},
           "worst_rel_err_vs_sdpa": worst,
           "first_pass_worst_rel_err_vs_sdpa": first_worst,
           "served_last": list(served_last),
           "memory_bytes": {"before": before, "after_first": after_first},
           "served": list(served)}
    if more:
        row["memory_bytes"]["after_lengths"] = more.pop("after_lengths")
        row.update(more)
        row["lengths_over_first_memory"] = (
            row["memory_bytes"]["after_lengths"] / after_first)
    mem = row["memory_bytes"]
    print(f"{args.steps} steps from {args.start} keys, B={b} H={h} KV={kvh} "
          f"D={d} bf16; served: {served}")
    print(f"op first pass {first * 1e3:.1f} ms, second {second * 1e3:.1f} ms "
          f"({row['first_over_second']:.2f}x), SDPA {sdpa_s * 1e3:.1f} ms "
          f"(its first pass {sdpa_first * 1e3:.1f} ms) "
          f"(second / SDPA {row['second_over_sdpa']:.2f}x); worst rel err "
          f"against SDPA {worst:.1e} (first pass, every 16th step: "
          f"{first_worst:.1e}); the last length served by {served_last}")
    for name in ("first", "second"):
        top, excess = row[f"{name}_slowest_us"]
        print(f"{name} pass: {excess:.0f} us beyond the median call; slowest "
              "calls (keys, us): " + ", ".join(f"{n} {t}" for n, t in top))
    print("GPU memory in use: " + ", ".join(
        f"{k} {v / 2**20:.1f} MiB" for k, v in mem.items()))
    if args.profile:
        fresh = range(most - args.profile, most)
        for label in ("new lengths", "the same lengths again"):
            print(f"profile of a pass over {args.profile} {label}:")
            profile(lambda: run_pass(op, q, cache_k, cache_v, fresh))
    if args.json:
        header = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                  "date": datetime.date.today().isoformat(),
                  "commit": args.commit, "mode": "daemon" if args.daemon
                  else "bundle", "args": vars(args)}
        with open(args.json, "w") as f:
            json.dump({**header, **row}, f, indent=1)


if __name__ == "__main__":
    main()
