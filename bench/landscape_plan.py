#!/usr/bin/env python3
"""A plan for bench/sdpa_compare.py of the fastest recorded configs of a
landscape (tests/data/*_landscapes_*.csv): for each problem asked for, its
TOP fastest configs recorded ok, each compiled by bench/export_kernel (no
GPU needed) into OUT_DIR, so that they are timed side by side with PyTorch
SDPA in one process, under sdpa_compare's timing (back to back, or with
--cold_l2 each call alone from a cold L2).

  python3 bench/landscape_plan.py BIN_DIR LANDSCAPE.csv OUT_DIR TOP \\
      PROBLEM_KEY...            # writes OUT_DIR/plan.json

compiled for $ARCH (default sm_90a, as export_kernel names architectures).
"""
import csv
import json
import os
import subprocess
import sys


def fastest(landscape, key, top):
    """The top fastest configs of `key` recorded ok, with their times."""
    rows = []
    with open(landscape) as f:
        template = "unknown"
        lines = []
        for line in f:
            if line.startswith("# evotune landscape: every feasible "):
                template = line.split()[5]
            elif not line.startswith("#"):
                lines.append(line)
    if template == "unknown":
        sys.exit(f"landscape_plan: {landscape} does not name its template "
                 "(no '# evotune landscape: every feasible T config' line)")
    for row in csv.DictReader(lines):
        if row["problem_key"] == key and row["status"] == "ok":
            rows.append((float(row["median_us"]), row["config"]))
    if not rows:
        sys.exit(f"landscape_plan: {key} has no ok configs in {landscape}")
    return template, sorted(rows)[:top]


def main():
    if len(sys.argv) < 6:
        sys.exit(__doc__)
    bin_dir, landscape, out, top = sys.argv[1:5]
    if not top.isdigit() or int(top) < 1:
        sys.exit(f"landscape_plan: TOP must be a positive integer, not {top!r}")
    os.makedirs(out, exist_ok=True)
    plan = []
    for key in sys.argv[5:]:
        template, picks = fastest(landscape, key, int(top))
        for rank, (us, config) in enumerate(picks):
            name = f"{key.split('_bhsd')[0]}-r{rank}"
            prefix = os.path.join(out, name)
            subprocess.run([os.path.join(bin_dir, "export_kernel"),
                            f"--template_name={template}", f"--config={config}",
                            f"--problem={key}", f"--out={prefix}",
                            f"--arch={os.environ.get('ARCH', 'sm_90a')}"],
                           check=True)
            plan.append({"name": name, "bundle": prefix + ".evtb",
                         "problem": key, "recorded_us": us})
    with open(os.path.join(out, "plan.json"), "w") as f:
        json.dump(plan, f, indent=1)
    print(f"{len(plan)} kernels in {os.path.join(out, 'plan.json')}")


if __name__ == "__main__":
    main()
