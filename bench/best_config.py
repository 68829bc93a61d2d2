#!/usr/bin/env python3
"""Prints "TEMPLATE CONFIG PROBLEM_KEY" of the fastest config in the output
of `evotune --json best ... --k=1`, for bench/export_kernel.

    bench/best_config.py BEST.json
"""
import json
import sys


def main():
    best = json.load(open(sys.argv[1]))
    if not best.get("results"):
        sys.exit(f"{sys.argv[1]}: no tuned config for this problem")
    r = best["results"][0]
    p = best["source_problem"]
    config = ",".join(f"{x['name']}={x.get('value', 0)}"
                      for x in r["trial"]["config"]["params"])
    key = (f"b{p['batch']}_h{p['heads']}_kv{p.get('kv_heads', p['heads'])}"
           f"_q{p['seq_q']}_k{p['seq_k']}_d{p['head_dim']}_"
           f"{'causal' if p.get('causal') else 'full'}_"
           f"{'bf16' if p['dtype'] == 'DTYPE_BF16' else 'fp16'}_bhsd")
    print(r["template_name"], config, key)


if __name__ == "__main__":
    main()
