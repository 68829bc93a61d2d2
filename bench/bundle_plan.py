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


def problem_key(p):
    dtype = "bf16" if p.dtype == evotune_pb2.DTYPE_BF16 else "fp16"
    return (f"b{p.batch}_h{p.heads}_kv{p.kv_heads}_q{p.seq_q}_k{p.seq_k}"
            f"_d{p.head_dim}_{'causal' if p.causal else 'full'}_{dtype}_bhsd")


def main():
    bundle_path, out = sys.argv[1:3]
    bundle = bundle_pb2.KernelBundle()
    with open(bundle_path, "rb") as f:
        bundle.ParseFromString(f.read())
    os.makedirs(out, exist_ok=True)
    path = os.path.abspath(bundle_path)
    # One entry per problem: the runtime serves the kernel of this GPU's
    # architecture where the bundle holds several.
    keys = dict.fromkeys(problem_key(k.problem) for k in bundle.kernels)
    plan = [{"name": key, "bundle": path, "problem": key} for key in keys]
    with open(os.path.join(out, "plan.json"), "w") as f:
        json.dump(plan, f, indent=1)
    print(f"{len(plan)} kernels: {os.path.join(out, 'plan.json')}")


if __name__ == "__main__":
    main()
