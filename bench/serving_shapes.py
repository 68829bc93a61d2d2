#!/usr/bin/env python3
"""A plan for bench/sdpa_compare.py of random serving shapes, each served
by a daemon as it serves a problem nothing tuned (its fitted defaults, or a
transfer from what it has tuned on the GPU): decode steps, speculative
decode, prefill chunks against a prefix and whole prompts, over the head
layouts of open models, fp16 and bf16. The same seed draws the same shapes.

  python3 bench/serving_shapes.py --daemon 127.0.0.1:7433 [--count 60]
      [--seed 1] > PLAN.json
  python3 bench/sdpa_compare.py PLAN.json --interleave --json OUT.json
"""
import argparse
import json
import math
import random
import sys

from problem_keys import problem_key

# (query heads, KV heads, head_dim) of open models: Llama 3 8B and 70B,
# Llama 2 7B, Qwen2 0.5B and 7B, Mistral Nemo, GPT-2, an MQA model.
HEADS = ((32, 8, 128), (64, 8, 128), (32, 32, 128), (14, 2, 64),
         (28, 4, 128), (32, 8, 128), (12, 12, 64), (8, 1, 128), (16, 16, 64))


# Shapes once served far behind SDPA (MQA decode; two sequences of one head
# on a GPU of 132 multiprocessors), after the random ones.
REPORTED = ("b1_h8_kv1_q1_k2900_d128_full_bf16_bhsd",
            "b2_h1_kv1_q1_k3478_d128_full_bf16_bhsd")


def log_uniform(rng, lo, hi):
    return int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))


def shape(rng):
    """One problem: (kind, batch, seq_q, seq_k, causal)."""
    kind = rng.choice(("decode", "decode", "spec", "chunk", "prompt"))
    if kind == "decode":
        return kind, rng.choice((1, 2, 4, 8, 16, 32, 64)), 1, \
            log_uniform(rng, 128, 16384), False
    if kind == "spec":
        return kind, rng.choice((1, 4, 16, 32)), rng.randint(2, 8), \
            log_uniform(rng, 256, 8192), True
    if kind == "chunk":
        q = rng.choice((128, 256, 512, 1024))
        return kind, rng.choice((1, 2)), q, q + log_uniform(rng, 512, 8192), True
    seq = log_uniform(rng, 256, 4096)
    return kind, rng.choice((1, 2, 4)), seq, seq, rng.random() < 0.8


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--daemon", required=True)
    ap.add_argument("--count", type=int, default=60)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    plan = []
    for i in range(args.count):
        kind, batch, seq_q, seq_k, causal = shape(rng)
        heads, kv_heads, head_dim = rng.choice(HEADS)
        dtype = "bf16" if rng.random() < 0.75 else "fp16"
        key = problem_key(batch, heads, kv_heads, seq_q, seq_k, head_dim,
                          causal, dtype)
        plan.append({"name": f"{i} {kind}", "daemon": args.daemon,
                     "problem": key})
    for i, key in enumerate(REPORTED):
        plan.append({"name": f"reported {i}", "daemon": args.daemon,
                     "problem": key})
    json.dump(plan, sys.stdout, indent=1)


if __name__ == "__main__":
    main()
