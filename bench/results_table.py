#!/usr/bin/env python3
"""The results at a glance: one table from the committed suite runs that
bench/summary_runs.txt names (sdpa_compare.py's JSON), at the top of
bench/RESULTS.md and, a few rows of it, in README.md.

    bench/results_table.py            print the table
    bench/results_table.py --write    rewrite both tables in place
    bench/results_table.py --check    exit 1 if either differs (a test)

Each row: a suite problem of a run, its class (prefill, decode, speculative
decode), evotune's template and time, the faster SDPA backend's time in the
same run, SDPA / evotune (above 1: evotune is faster), TFLOP/s and TB/s of
the bytes the problem must move, and the run's GPU, date, commit and file.
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RUNS = os.path.join(HERE, "summary_runs.txt")
# File -> the problems it shows (None: every row of every run; a tuple:
# those problems, of the GPU of the first run listed).
TARGETS = {
    os.path.join(HERE, "RESULTS.md"): None,
    os.path.join(ROOT, "README.md"): ("seed", "long-causal", "8k-d128",
                                      "batch-d128", "decode-gqa",
                                      "decode-long", "decode-d64",
                                      "spec-decode"),
}
BEGIN = "<!-- results table: bench/results_table.py --write -->"
END = "<!-- end of results table -->"


def problem_class(key):
    """prefill, decode (one query) or speculative decode (a few)."""
    seq_q = int(key.split("_")[3][1:])
    causal = "_causal_" in key
    kind = ("decode" if seq_q == 1 else
            "spec decode" if seq_q <= 16 else "prefill")
    return f"{kind}{', causal' if causal and seq_q > 1 else ''}"


def anchor(heading):
    """The link target a Markdown renderer (GitHub's rule) gives a heading."""
    kept = "".join(c for c in heading.lower() if c.isalnum() or c in " -_")
    return kept.replace(" ", "-")


def runs():
    """(path relative to bench/, RESULTS.md anchor, run) of each line of
    summary_runs.txt: "JSON_PATH | heading of its RESULTS.md entry"."""
    with open(RUNS) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            path, heading = (x.strip() for x in line.split("|", 1))
            with open(os.path.join(HERE, "RESULTS.md")) as results:
                if f"\n## {heading}\n" not in results.read():
                    sys.exit(f"results_table.py: RESULTS.md has no entry "
                             f"'## {heading}'")
            with open(os.path.join(HERE, path)) as run:
                yield path, anchor(heading), json.load(run)


def rows(names=None):
    out, first_gpu = [], None
    for path, entry, run in runs():
        gpu = run["gpu"].replace("NVIDIA ", "").split(",")[0]
        first_gpu = first_gpu or gpu
        if names is not None and gpu != first_gpu:
            continue
        for r in run["results"]:
            if names is not None and r["name"] not in names:
                continue
            backends = {"cuDNN": r.get("cudnn_us"), "flash": r.get("flash_us")}
            backend, sdpa = min(((b, us) for b, us in backends.items() if us),
                                key=lambda x: x[1])
            out.append(
                f"| {r['name']} | {problem_class(r['problem'])} | "
                f"{r['template']} | {r['us']:.1f} | {sdpa:.1f} ({backend}) | "
                f"{sdpa / r['us']:.2f} | {r['tflops']:.0f} | "
                f"{r['tbps']:.2f} | {gpu} | {run['date']} | "
                f"{run['commit']} | [entry](RESULTS.md#{entry}), "
                f"[json]({path}) |")
    return out


def table(names=None, link_prefix=""):
    head = ("| problem | class | template | evotune µs | best SDPA µs | "
            "SDPA / evotune | TFLOP/s | TB/s | GPU | date | commit | run |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|---|\n")
    body = "\n".join(rows(names)).replace("](", "](" + link_prefix)
    return head + body + "\n"


def render(path, names):
    """`path`'s text with its table region rewritten."""
    with open(path) as f:
        text = f.read()
    if BEGIN not in text or END not in text:
        sys.exit(f"results_table.py: {path} has no region between "
                 f"'{BEGIN}' and '{END}'")
    before, rest = text.split(BEGIN, 1)
    after = rest.split(END, 1)[1]
    prefix = "" if path.startswith(HERE) else "bench/"
    return before + BEGIN + "\n" + table(names, prefix) + END + after, text


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true")
    mode.add_argument("--check", action="store_true")
    args = parser.parse_args()
    if not (args.write or args.check):
        print(table(), end="")
        return 0
    stale = []
    for path, names in TARGETS.items():
        new, old = render(path, names)
        if new != old:
            stale.append(os.path.relpath(path, ROOT))
            if args.write:
                with open(path, "w") as f:
                    f.write(new)
    if args.check and stale:
        print(f"results_table.py: the table of {', '.join(stale)} is not "
              "the one bench/summary_runs.txt makes; run "
              "bench/results_table.py --write", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
