#!/usr/bin/env python3
"""Summarises the confirmations in an evotuned log.

Once a job's search ends, evotuned times its fastest configs again together,
in turns, and logs one line per job: each config's median alone (as the
search timed it) and in turns. For each job this prints how far the times
moved, and whether the fastest changed.

    bench/confirm_summary.py EVOTUNED_LOG [--sweep SWEEP_OUT] [--json OUT]

SWEEP_OUT, the output of bench/run_sweep.sh, names each job's problem and
template.
"""
import argparse
import json
import re
import statistics
import sys

LINE = re.compile(r"job (\S+): its (\d+) fastest timed again together, "
                  r"(\d+) turns \(us alone -> in turns\): (.*)$")
ENTRY = re.compile(r"(\S+) ([0-9.]+) -> (\S+)$")
SWEEP_JOB = re.compile(r"^(\S+) (\S+): job (j[0-9a-f]+) ")


def job_names(path):
    """Job id -> "problem template", from run_sweep.sh's output."""
    names = {}
    with open(path) as f:
        for line in f:
            m = SWEEP_JOB.match(line)
            if m:
                names[m.group(3)] = f"{m.group(1)} {m.group(2)}"
    return names


def parse(path):
    jobs = []
    with open(path) as f:
        for line in f:
            m = LINE.search(line.rstrip("\n"))
            if not m:
                continue
            configs = []
            for part in m.group(4).split("; "):
                e = ENTRY.match(part)
                if not e:
                    sys.exit(f"cannot read '{part}' in: {line}")
                after = e.group(3)
                configs.append({
                    "config": e.group(1),
                    "alone_us": float(e.group(2)),
                    "in_turns_us": float(after) if re.match(r"[0-9.]+$", after)
                    else None,
                    "status": "ok" if re.match(r"[0-9.]+$", after) else after,
                })
            jobs.append({"job": m.group(1), "turns": int(m.group(3)),
                         "configs": configs})
    return jobs


def summarise(job):
    ok = [c for c in job["configs"] if c["in_turns_us"] is not None]
    moves = [c["in_turns_us"] / c["alone_us"] - 1 for c in ok]
    fastest_in_turns = min(ok, key=lambda c: c["in_turns_us"]) if ok else None
    first = job["configs"][0]
    return {
        "job": " ".join(filter(None, [job["job"], job.get("name")])),
        "configs": len(job["configs"]),
        "failed_in_turns": len(job["configs"]) - len(ok),
        "median_move": statistics.median(moves) if moves else None,
        "largest_move": max(moves, key=abs) if moves else None,
        "fastest_changed": fastest_in_turns is not None
        and fastest_in_turns["config"] != first["config"],
        "fastest_gain": (first["in_turns_us"] / fastest_in_turns["in_turns_us"]
                         - 1) if fastest_in_turns and first["in_turns_us"]
        else None,
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("log")
    p.add_argument("--sweep", help="run_sweep.sh's output: job names")
    p.add_argument("--json", help="write the jobs and summaries here")
    a = p.parse_args()
    jobs = parse(a.log)
    if not jobs:
        sys.exit(f"{a.log}: no confirmation lines")
    names = job_names(a.sweep) if a.sweep else {}
    for j in jobs:
        j["name"] = names.get(j["job"], "")
    rows = [summarise(j) for j in jobs]
    print("| job | configs | failed | median move | largest move | fastest "
          "changed | search's first, in turns, vs the fastest |")
    print("|---|---|---|---|---|---|---|")
    pct = lambda x: "-" if x is None else f"{100 * x:+.1f}%"
    for r in rows:
        print(f"| {r['job']} | {r['configs']} | {r['failed_in_turns']} | "
              f"{pct(r['median_move'])} | {pct(r['largest_move'])} | "
              f"{'yes' if r['fastest_changed'] else 'no'} | "
              f"{pct(r['fastest_gain'])} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"jobs": jobs, "summary": rows}, f, indent=1)


if __name__ == "__main__":
    main()
