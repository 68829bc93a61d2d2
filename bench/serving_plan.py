#!/usr/bin/env python3
"""Turns a transfer_loo --tuned JSON into a plan for bench/sdpa_compare.py:
for every problem served untuned, the config the daemon serves it (the cost
model's, or the defaults the daemon answers with) and that problem's own
recorded optimum, each compiled by bench/export_kernel, so that both are
timed side by side on the GPU in one run.

  python3 bench/serving_plan.py LOO.json EXPORT_KERNEL OUT_DIR
      # writes OUT_DIR/plan.json and the bundles beside it
"""
import json
import os
import subprocess
import sys


def export(export_kernel, template, config, problem, out):
    subprocess.run([export_kernel, f"--template_name={template}",
                    f"--config={config}", f"--problem={problem}",
                    f"--out={out}"], check=True, stdout=subprocess.DEVNULL)
    return {"bundle": out + ".evtb", "problem": problem}


def main():
    loo_path, export_kernel, out_dir = sys.argv[1:4]
    rows = json.load(open(loo_path))["rows"]
    os.makedirs(out_dir, exist_ok=True)
    plan = []
    for i, r in enumerate(rows):
        for role in ("model", "optimum"):
            if not r[f"{role}_template"]:
                print(f"{r['problem']}: nothing served ({role})")
                continue
            name = f"{r['problem']} {'served' if role == 'model' else 'own-best'}"
            print(f"[{len(plan) + 1}/{2 * len(rows)}] {name}", flush=True)
            entry = export(export_kernel, r[f"{role}_template"],
                           r[f"{role}_config"], r["problem"],
                           os.path.join(out_dir, f"{i}_{role}"))
            plan.append({"name": name, **entry})
    with open(os.path.join(out_dir, "plan.json"), "w") as f:
        json.dump(plan, f, indent=1)


if __name__ == "__main__":
    main()
