#!/usr/bin/env python3
"""A plan for bench/sdpa_compare.py of random shapes drawn from a model's
serving envelope, each served from the bundle `evotune tune-model` wrote
(the runtime serves a shape with the kernel of the smallest bucket holding
it), so that every shape is timed beside SDPA's backends in one run: decode
steps (and speculative ones), whole prompts and prefill chunks, as the
envelope bounds them. The same seed draws the same shapes.

  python3 bench/model_shapes.py --bundle MODEL.evtb --heads 32 --kv_heads 8 \\
      --head_dim 128 [--max_batch 256 --max_context 8192 --prefill_chunk 2048
      --max_prefill_tokens 8192 --decode_queries 1,4] [--count 200] > PLAN.json
  python3 bench/sdpa_compare.py PLAN.json --interleave --json OUT.json
  python3 bench/model_shapes_summary.py OUT.json

With --bundle given several times (e.g. bundles of one envelope tuned by the
evolutionary search, by random search, and of the fitted defaults alone),
each shape is an entry per bundle, named "I KIND LABEL" (LABEL the bundle's
file name): sdpa_compare times them together, in turns, beside SDPA.
With --problems FILE, the shapes are FILE's problem keys (one a line, e.g.
buckets picked for an exhaustive search) instead of drawn ones.
"""
import argparse
import json
import math
import os
import random
import sys

from problem_keys import problem_key


def log_uniform(rng, lo, hi):
    return int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))


def draw(rng, a):
    """(kind, batch, seq_q, seq_k, causal) of one call within the envelope."""
    kind = rng.choice(("decode", "decode", "prompt", "chunk"))
    if kind == "chunk" and a.prefill_chunk == 0:
        kind = "prompt"
    if kind == "decode":
        q = rng.choice(a.decode_queries)
        return (kind, log_uniform(rng, 1, a.max_batch), q,
                log_uniform(rng, max(q, 16), a.max_context), q > 1)
    if kind == "prompt":
        seq = log_uniform(rng, 16, a.max_context)
        most = max(1, min(a.max_batch, a.max_prefill_tokens // seq))
        return kind, rng.randint(1, most), seq, seq, True
    q = rng.randint(1, a.prefill_chunk)
    most = max(1, min(a.max_batch, a.max_prefill_tokens // q))
    return kind, rng.randint(1, most), q, q + log_uniform(
        rng, 1, max(1, a.max_context - q)), True


def bundle_label(path):
    """A bundle's name in the plan's entries: its file's, no extension."""
    return os.path.splitext(os.path.basename(path))[0]


def shapes(a):
    """(kind, problem key) of each shape: drawn, or --problems' keys."""
    if a.problems:
        with open(a.problems) as f:
            return [("bucket", line.strip()) for line in f if line.strip()]
    rng = random.Random(a.seed)
    out = []
    for _ in range(a.count):
        kind, batch, seq_q, seq_k, causal = draw(rng, a)
        out.append((kind, problem_key(batch, a.heads, a.kv_heads, seq_q,
                                      seq_k, a.head_dim, causal, a.dtype)))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bundle", required=True, action="append",
                    help="the bundle serving the shapes; given more than "
                    "once, each shape once per bundle (timed together)")
    ap.add_argument("--heads", type=int, required=True)
    ap.add_argument("--kv_heads", type=int, required=True)
    ap.add_argument("--head_dim", type=int, required=True)
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"))
    ap.add_argument("--max_batch", type=int, default=256)
    ap.add_argument("--max_context", type=int, default=8192)
    ap.add_argument("--prefill_chunk", type=int, default=2048)
    ap.add_argument("--max_prefill_tokens", type=int, default=8192)
    ap.add_argument("--decode_queries", default="1,4")
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--problems", help="a file of problem keys, one a line: "
                    "these shapes instead of drawn ones")
    a = ap.parse_args()
    a.decode_queries = [int(q) for q in a.decode_queries.split(",")]
    plan = []
    for i, (kind, key) in enumerate(shapes(a)):
        for bundle in a.bundle:
            label = "" if len(a.bundle) == 1 else f" {bundle_label(bundle)}"
            plan.append({"name": f"{i} {kind}{label}", "bundle": bundle,
                         "problem": key})
    json.dump(plan, sys.stdout, indent=1)


if __name__ == "__main__":
    main()
