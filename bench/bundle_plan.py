#!/usr/bin/env python3
"""Turns a kernel bundle (`evotune export`) into a plan for
bench/sdpa_compare.py: one entry per kernel, the bundle and its problem, so
that the exported kernels are timed beside PyTorch SDPA (and, with
sdpa_compare.py --bundle, beside the PyTorch op serving the same bundle).
Needs the evotune package (pip install ./python).

  python3 bench/bundle_plan.py KERNELS.evtb OUT_DIR   # writes OUT_DIR/plan.json
"""
import json
import os
import sys

from evotune.v1 import bundle_pb2, evotune_pb2
from problem_keys import problem_key


def key_of(p):
    """The key of a bundle's problem (a v1.Problem)."""
    return problem_key(p.batch, p.heads, p.kv_heads, p.seq_q, p.seq_k,
                       p.head_dim, p.causal,
                       "bf16" if p.dtype == evotune_pb2.DTYPE_BF16 else "fp16")


def main():
    bundle_path, out = sys.argv[1:3]
    bundle = bundle_pb2.KernelBundle()
    with open(bundle_path, "rb") as f:
        bundle.ParseFromString(f.read())
    os.makedirs(out, exist_ok=True)
    path = os.path.abspath(bundle_path)
    # One entry per problem: the runtime serves the kernel of this GPU's
    # architecture where the bundle holds several.
    keys = dict.fromkeys(key_of(k.problem) for k in bundle.kernels)
    plan = [{"name": key, "bundle": path, "problem": key} for key in keys]
    with open(os.path.join(out, "plan.json"), "w") as f:
        json.dump(plan, f, indent=1)
    print(f"{len(plan)} kernels: {os.path.join(out, 'plan.json')}")


if __name__ == "__main__":
    main()
