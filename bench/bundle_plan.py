#!/usr/bin/env python3
"""Turns a kernel bundle (`evotune export`) into a plan for
bench/sdpa_compare.py: each kernel's cubin and launch geometry as
bench/export_kernel writes them, so that the exported kernels are timed
beside PyTorch SDPA (and, with sdpa_compare.py --bundle, beside the PyTorch
op serving the same bundle). Needs the evotune package (pip install ./python).

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
    plan = []
    for i, k in enumerate(bundle.kernels):
        g = k.geometry
        key = problem_key(k.problem)
        config = ",".join(f"{p.name}={p.value}" for p in k.config.params)
        meta = {"template": k.template_name, "hash": k.template_hash,
                "config": config, "problem": key, "kernel": k.kernel_name,
                "grid": [g.grid_x, g.grid_y, g.grid_z],
                "block": g.block_threads, "smem": g.smem_bytes,
                "workspace_floats": g.workspace_floats,
                "counters": g.counters,
                "tma": [g.tma_q_rows, g.tma_kv_rows, g.tma_o_rows],
                "persistent": int(g.persistent)}
        base = os.path.join(out, f"k{i}")
        with open(base + ".cubin", "wb") as f:
            f.write(k.cubin)
        with open(base + ".json", "w") as f:
            json.dump(meta, f)
        plan.append({"name": key, "cubin": base + ".cubin",
                     "meta": base + ".json"})
    with open(os.path.join(out, "plan.json"), "w") as f:
        json.dump(plan, f, indent=1)
    print(f"{len(plan)} kernels: {os.path.join(out, 'plan.json')}")


if __name__ == "__main__":
    main()
