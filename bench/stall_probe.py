#!/usr/bin/env python3
"""Records, every 100 ms, how late this machine woke a process sleeping 1 ms
at a time and how much CPU time the hypervisor stole (/proc/stat, all
CPUs), with the wall time, so that slow windows of a load run beside it can
be told apart: a window where the probe woke late or time was stolen was
slowed by the machine, not by the program measured.

  bench/stall_probe.py --seconds=300 --out=probe.csv
"""
import argparse
import os
import time

TICK_MS = 1000.0 / os.sysconf("SC_CLK_TCK")


def stolen_ms():
    """CPU-ms stolen from all CPUs since boot; 0 where not reported."""
    with open("/proc/stat") as stat:
        fields = stat.readline().split()
    return int(fields[8]) * TICK_MS if len(fields) > 8 else 0.0


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--window_ms", type=float, default=100)
    args = parser.parse_args()
    end = time.monotonic() + args.seconds
    with open(args.out, "w") as out:
        out.write("wall_s,late_ms,steal_ms\n")
        now = time.monotonic()
        window_end = now + args.window_ms / 1e3
        steal = stolen_ms()
        latest = 0.0
        while now < end:
            before = now
            time.sleep(0.001)
            now = time.monotonic()
            latest = max(latest, (now - before - 0.001) * 1e3)
            if now >= window_end:
                steal, was = stolen_ms(), steal
                out.write(f"{time.time():.3f},{latest:.2f},{steal - was:.0f}\n")
                out.flush()
                latest = 0.0
                window_end = now + args.window_ms / 1e3


if __name__ == "__main__":
    main()
