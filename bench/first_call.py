#!/usr/bin/env python3
"""Where the first call of a process goes, in daemon mode: the time of
use(), of the runtime's first plan of a decode problem (answered, or
UNAVAILABLE once the op's wait ran out), of the answer's arrival, of the
process's first SDPA call (what answers meanwhile), of the kernel's first
and second launches, and of the op's first and second calls of the next
key bucket. Run it in a fresh process against a warm daemon; with
--prefetch N, after a process that ran the same calls (the kernels the
daemon served lately fetched ahead by use()).

  PYTHONPATH=python EVOTUNE_RUNTIME_LIBRARY=build/lib/libevotune_runtime.so \\
  python3 bench/first_call.py --daemon 127.0.0.1:7433 [--wait 0.005]
      [--prefetch 64] [--profile]
"""
import argparse
import cProfile
import json
import pstats
import time

import torch

import evotune.torch as et
from evotune import runtime as rt


def ms(fn):
    """(milliseconds of fn() with the GPU synchronized after, its value)."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    value = fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e3, value


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--daemon", required=True)
    ap.add_argument("--wait", type=float, default=0.005)
    ap.add_argument("--keys", type=int, default=512)
    ap.add_argument("--prefetch", type=int, default=0,
                    help="kernels the daemon served lately fetched ahead by "
                    "use(), given a second to come before the first plan "
                    "(default 0: none, the first call as it was)")
    ap.add_argument("--profile", action="store_true",
                    help="print the first call's profile (cProfile)")
    args = ap.parse_args()
    b, h, kvh, d = 8, 32, 8, 128
    q = torch.randn(b, h, 1, d, device="cuda", dtype=torch.bfloat16)
    cache = torch.randn(b, kvh, 4 * args.keys, d, device="cuda",
                        dtype=torch.bfloat16)
    torch.cuda.synchronize()
    row = {"wait_s": args.wait}
    row["use_ms"], _ = ms(lambda: et.use(daemon=args.daemon, wait=args.wait,
                                         prefetch=args.prefetch))
    if args.prefetch:
        time.sleep(1.0)
    n = args.keys
    p = rt.Problem(b, h, kvh, 1, n, d, 0, 1)
    stream = et._stream_id(q.device)
    row["first_plan_ms"], (plan, why) = ms(
        lambda: et.plan_problem(p, stream))
    row["first_plan"] = "plan" if plan is not None else str(why)
    k = cache[:, :, :n]
    if plan is None:
        row["first_sdpa_ms"], _ = ms(lambda: et._sdpa(q, k, k, False, None,
                                                      setup_free=True))
        row["arrival_ms"], _ = ms(lambda: et.kernel_for(q, k))
    if args.profile:  # The first call's Python calls, by cumulative time.
        profile = cProfile.Profile()
        profile.enable()
    row["first_call_ms"], _ = ms(lambda: et.attention(q, k, k))
    if args.profile:
        profile.disable()
        pstats.Stats(profile).sort_stats("cumulative").print_stats(25)
    row["second_call_ms"], _ = ms(lambda: et.attention(q, k, k))
    k2 = cache[:, :, :n + 1]  # The next key bucket.
    row["next_bucket_first_ms"], _ = ms(lambda: et.attention(q, k2, k2))
    row["next_bucket_second_ms"], _ = ms(lambda: et.attention(q, k2, k2))
    row["served"] = et.kernel_for(q, k2)
    print(json.dumps(row))


if __name__ == "__main__":
    main()
