#!/usr/bin/env python3
"""Outcome of every trial in an evotune store, per template and problem.

    bench/trial_statuses.py DB [--json OUT]

Prints, per (template, problem), how many trials ended in each status, then
every distinct error of a trial that did not run correctly, with its count
and one config that met it. Exits 1 when a launch was refused (a config the
space accepts that the driver would not launch), 0 otherwise.
"""
import argparse
import collections
import json
import re
import sqlite3
import sys

STATUS = {1: "ok", 2: "compile_error", 3: "resource_rejected",
          4: "incorrect", 5: "timeout", 6: "crashed"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("db")
    ap.add_argument("--json", help="also write the counts here")
    args = ap.parse_args()
    rows = sqlite3.connect(f"file:{args.db}?mode=ro", uri=True).execute(
        "SELECT tp.name, p.key, t.config_key, t.status, t.error FROM trials t "
        "JOIN problems p ON p.id = t.problem_id "
        "JOIN templates tp ON tp.id = t.template_id "
        "ORDER BY tp.name, p.key").fetchall()
    counts = collections.defaultdict(collections.Counter)
    errors = collections.defaultdict(list)
    for template, problem, config, status, error in rows:
        counts[(template, problem)][STATUS[status]] += 1
        if status != 1:
            # Numbers (registers, bytes) vary per config; the kind does not.
            kind = re.sub(r"\d+", "N", error.splitlines()[0] if error else "")
            errors[(STATUS[status], kind)].append(f"{template} {problem} {config}")
    names = sorted({s for c in counts.values() for s in c})
    print(f"{'template':16} {'problem':48} {'trials':>6} " +
          " ".join(f"{n:>17}" for n in names))
    for (template, problem), c in sorted(counts.items()):
        print(f"{template:16} {problem:48} {sum(c.values()):6} " +
              " ".join(f"{c[n]:17}" for n in names))
    print(f"\n{len(rows)} trials, {len(counts)} (template, problem) pairs")
    for (status, kind), where in sorted(errors.items()):
        print(f"{len(where):6} {status}: {kind[:160]}\n         e.g. {where[0]}")
    refused = [w for (s, k), ws in errors.items()
               if "launch: " in k for w in ws]
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"trials": len(rows), "launch_refused": len(refused),
                       "counts": [{"template": t, "problem": p, **c}
                                  for (t, p), c in sorted(counts.items())]},
                      f, indent=1)
    print(f"\nlaunches refused: {len(refused)}")
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
