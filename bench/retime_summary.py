#!/usr/bin/env python3
"""Summarises bench/retime_landscape output against the recording it timed.

For each problem: how many configs were timed in turns, the recorded
optimum and the fastest in turns (a config's time is the median of its
runs), how many configs are within --within of the fastest in each, and how
alike the two orders are (Spearman's rank correlation over the configs
timed). Several CSVs of one recording may be given (runs split over calls).

    bench/retime_summary.py RECORDING.csv RETIMED.csv... [--json OUT]
"""
import argparse
import csv
import gzip
import json
import statistics
import sys


def rows(path):
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        return list(csv.DictReader(line for line in f
                                   if not line.startswith("#")))


def ranks(values):
    order = sorted(range(len(values)), key=lambda i: values[i])
    r = [0] * len(values)
    for rank, i in enumerate(order):
        r[i] = rank
    return r


def spearman(a, b):
    if len(a) < 3:
        return None
    ra, rb = ranks(a), ranks(b)
    n = len(a)
    d2 = sum((x - y) ** 2 for x, y in zip(ra, rb))
    return 1 - 6 * d2 / (n * (n * n - 1))


def summarise(recording, retimed, within):
    recorded = {}
    for r in rows(recording):
        if r["status"] == "ok":
            recorded.setdefault(r["problem_key"], {})[r["config"]] = float(
                r["median_us"])
    timed = {}
    for path in retimed:
        for r in rows(path):
            if r["status"] == "ok":
                timed.setdefault(r["problem_key"], {}).setdefault(
                    r["config"], []).append(float(r["median_us"]))
    out = []
    for key in sorted(timed):
        times = {c: statistics.median(v) for c, v in timed[key].items()}
        rec = recorded.get(key, {})
        common = [c for c in times if c in rec]
        fastest = min(times.values())
        optimum = min(rec.values()) if rec else None
        out.append({
            "problem": key,
            "configs_timed": len(times),
            "runs": max(len(v) for v in timed[key].values()),
            "recorded_optimum_us": optimum,
            "fastest_in_turns_us": round(fastest, 3),
            "within_recorded": sum(1 for c in common
                                   if rec[c] <= optimum * (1 + within)),
            "within_in_turns": sum(1 for c in times
                                   if times[c] <= fastest * (1 + within)),
            "rank_correlation": spearman([rec[c] for c in common],
                                         [times[c] for c in common]),
        })
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("recording")
    p.add_argument("retimed", nargs="+")
    p.add_argument("--within", type=float, default=0.03)
    p.add_argument("--json")
    a = p.parse_args()
    table = summarise(a.recording, a.retimed, a.within)
    print(f"{'problem':45s} {'timed':>5s} {'recorded':>9s} {'in turns':>9s} "
          f"{'near rec':>8s} {'near turns':>10s} {'rho':>5s}")
    for t in table:
        rho = t["rank_correlation"]
        print(f"{t['problem']:45s} {t['configs_timed']:5d} "
              f"{t['recorded_optimum_us']:9.2f} {t['fastest_in_turns_us']:9.2f} "
              f"{t['within_recorded']:8d} {t['within_in_turns']:10d} "
              f"{'' if rho is None else f'{rho:5.2f}'}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(table, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
