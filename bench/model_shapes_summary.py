#!/usr/bin/env python3
"""The bars of a model's shapes (bench/model_shapes.py's plan, timed by
bench/sdpa_compare.py): per bundle, the shapes timed, how their kernels were
served (tuned, transferred, default), the served kernels' total time beside
the faster SDPA backend's, and the per-shape ratio SDPA / evotune (worst,
median, how many under 1.0); with the op asked (sdpa_compare --bundle),
the shapes it served with no kernel of that bundle (misses: SDPA
answered).

  python3 bench/model_shapes_summary.py RUN.json [--json SUMMARY.json]
      [--versus LABEL]

With --versus LABEL (a bundle of the run, e.g. one of exhaustive searches'
winners), each other bundle's time on each shape over LABEL's on the same
shape, timed in the same turns: the worst, the median and how many are
within 5%.
"""
import argparse
import collections
import json
import statistics


def label(name):
    """The bundle label of an entry named "I KIND [LABEL]"."""
    parts = name.split(" ", 2)
    return parts[2] if len(parts) > 2 else ""


def best_sdpa(row):
    times = [row.get(k) for k in ("flash_us", "cudnn_us")]
    times = [t for t in times if t]
    return min(times) if times else None


def summarize(rows):
    """{label: its bars} over the rows of one sdpa_compare run."""
    groups = collections.defaultdict(list)
    for row in rows:
        groups[label(row["name"])].append(row)
    out = {}
    for name, group in groups.items():
        timed = [r for r in group if best_sdpa(r) and r.get("us")]
        ratios = sorted(best_sdpa(r) / r["us"] for r in timed)
        served = collections.Counter(r.get("served", "?") for r in group)
        op_asked = [r for r in group if "op_kernel" in r]
        out[name] = {
            "shapes": len(group),
            "served": dict(served),
            "wrong": sum(not r.get("finite", True) for r in group),
            "evotune_total_us": sum(r["us"] for r in timed),
            "sdpa_total_us": sum(best_sdpa(r) for r in timed),
            "worst_ratio": ratios[0] if ratios else None,
            "median_ratio": statistics.median(ratios) if ratios else None,
            "under_1": sum(x < 1.0 for x in ratios),
            "op_misses": sum(r["op_kernel"] is None for r in op_asked),
        }
    return out


def versus(rows, ref):
    """{label: its time over ref's, shape by shape} of one run's rows."""
    times = collections.defaultdict(dict)
    for row in rows:
        if row.get("us"):
            times[row["name"].split(" ", 1)[0]][label(row["name"])] = row
    out = collections.defaultdict(lambda: {"per_shape": []})
    for shape, by_label in times.items():
        if ref not in by_label:
            continue
        for name, row in by_label.items():
            if name != ref:
                out[name]["per_shape"].append(
                    {"problem": row.get("problem", shape),
                     "ratio": row["us"] / by_label[ref]["us"]})
    for b in out.values():
        ratios = sorted(x["ratio"] for x in b["per_shape"])
        b.update(shapes=len(ratios), worst=ratios[-1],
                 median=statistics.median(ratios),
                 within_5pct=sum(x <= 1.05 for x in ratios))
    return dict(out)


def print_versus(ref, against):
    for name, b in against.items():
        print(f"{name} / {ref}: worst {b['worst']:.3f}, median "
              f"{b['median']:.3f}, {b['within_5pct']} of {b['shapes']} "
              "within 5%")
        for x in b["per_shape"]:
            print(f"  {x['problem']:<48} {x['ratio']:.3f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run")
    ap.add_argument("--json")
    ap.add_argument("--versus", help="a bundle label: every other bundle's "
                    "time on each shape over this one's")
    args = ap.parse_args()
    run = json.load(open(args.run))
    bars = summarize(run["results"])
    print(f"{run['gpu']}, {run['date']}, commit {run['commit']}")
    print(f"{'bundle':<24} {'shapes':>6} {'evotune ms':>10} {'SDPA ms':>8} "
          f"{'worst':>6} {'median':>6} {'<1.0':>5} {'op miss':>7}  served")
    for name, b in bars.items():
        fmt = lambda x: "-" if x is None else f"{x:.2f}"
        print(f"{name or '(one bundle)':<24} {b['shapes']:>6} "
              f"{b['evotune_total_us'] / 1e3:>10.2f} "
              f"{b['sdpa_total_us'] / 1e3:>8.2f} {fmt(b['worst_ratio']):>6} "
              f"{fmt(b['median_ratio']):>6} {b['under_1']:>5} "
              f"{b['op_misses']:>7}  {b['served']}")
    out = {"run": args.run, "gpu": run["gpu"], "date": run["date"],
           "commit": run["commit"], "bundles": bars}
    if args.versus:
        out["versus"] = {args.versus: versus(run["results"], args.versus)}
        print_versus(args.versus, out["versus"][args.versus])
    if args.json:
        json.dump(out, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
