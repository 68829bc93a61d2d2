#!/usr/bin/env python3
"""Sets a bench/host_stalls.sh run's latencies beside its probe: for each
load, per 100 ms window of due times, the slowest request against the CPU
time the hypervisor stole and how late the probe woke in that window; and
the load's p99 over all windows and over the quiet ones (nothing stolen,
the probe on time).

  bench/host_stalls_summary.py OUT_DIR [--slow_ms=1] [--json=FILE]
"""
import argparse
import csv
import json
import os


def read_marks(folder):
    with open(os.path.join(folder, "marks.txt")) as f:
        return {line.split()[0]: float(line.split()[1]) for line in f}


def read_probe(folder):
    with open(os.path.join(folder, "probe.csv")) as f:
        return [(float(r["wall_s"]), float(r["late_ms"]), float(r["steal_ms"]))
                for r in csv.DictReader(f)]


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * q))] if values else 0


def summarize(folder, load, start, probe, slow_ms):
    with open(os.path.join(folder, f"latency_{load}.csv")) as f:
        rows = [(float(r[0]), float(r[1])) for r in list(csv.reader(f))[1:]]
    windows = {}
    for due, latency_us in rows:
        windows.setdefault(int(due * 10), []).append(latency_us)
    # Each probe window (100 ms ending at its wall time) counts for the
    # load's windows it overlaps and the one after: the load's due times
    # start a little after its mark (the client connects first).
    machine = {}
    for wall, late_ms, steal_ms in probe:
        for w in range(int((wall - 0.1 - start) * 10),
                       int((wall - start) * 10) + 2):
            late, steal = machine.get(w, (0, 0))
            machine[w] = (max(late, late_ms), steal + steal_ms)
    quiet, slow, slow_with_steal = [], 0, 0
    for w, latencies in windows.items():
        late, steal = machine.get(w, (0, 0))
        if late < 3 and steal == 0:
            quiet.extend(latencies)
        if max(latencies) > slow_ms * 1000:
            slow += 1
            slow_with_steal += steal > 0 or late >= 3
    return {
        "load": load, "requests": len(rows),
        "p99_us": percentile([l for _, l in rows], 0.99),
        "quiet_requests": len(quiet), "quiet_p99_us": percentile(quiet, 0.99),
        "windows": len(windows), "slow_windows": slow,
        "slow_windows_with_steal_or_late_probe": slow_with_steal,
        "stolen_cpu_ms": sum(s for wall, _, s in probe
                             if 0 <= wall - start < max(windows) / 10 + 0.1),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("folder")
    parser.add_argument("--slow_ms", type=float, default=1.0)
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    marks = read_marks(args.folder)
    probe = read_probe(args.folder)
    out = [summarize(args.folder, name[len("load_"):], start, probe,
                     args.slow_ms)
           for name, start in marks.items() if name.startswith("load_")]
    for s in out:
        print(f"{s['load']:>3} connections: p99 {s['p99_us']:.0f} us over "
              f"{s['requests']} requests; quiet windows' p99 "
              f"{s['quiet_p99_us']:.0f} us over {s['quiet_requests']}; "
              f"{s['slow_windows']} of {s['windows']} windows slower than "
              f"{args.slow_ms:g} ms, {s['slow_windows_with_steal_or_late_probe']}"
              f" of them with time stolen or the probe late; "
              f"{s['stolen_cpu_ms']:.0f} CPU-ms stolen")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
