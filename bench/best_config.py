#!/usr/bin/env python3
"""Prints "TEMPLATE CONFIG PROBLEM_KEY" of the fastest config in the output
of `evotune --json best ... --k=1`, for bench/export_kernel.

    bench/best_config.py BEST.json
"""
import json
import sys

from problem_keys import problem_key


def main():
    best = json.load(open(sys.argv[1]))
    if not best.get("results"):
        sys.exit(f"{sys.argv[1]}: no tuned config for this problem")
    r = best["results"][0]
    p = best["source_problem"]
    config = ",".join(f"{x['name']}={x.get('value', 0)}"
                      for x in r["trial"]["config"]["params"])
    key = problem_key(p["batch"], p["heads"], p.get("kv_heads", p["heads"]),
                      p["seq_q"], p["seq_k"], p["head_dim"],
                      p.get("causal", False),
                      "bf16" if p["dtype"] == "DTYPE_BF16" else "fp16")
    print(r["template_name"], config, key)


if __name__ == "__main__":
    main()
