#!/usr/bin/env python3
"""Plots best-so-far against trials from search_curves' CSV as an SVG.

One panel per problem: the median over seeds of best-so-far latency divided
by the problem's optimum (1.0 = optimum found), for each strategy variant.
Pure Python, no plotting library.

  python3 bench/plot_search_curves.py curves.csv out.svg
"""
import collections
import csv
import statistics
import sys

COLORS = {"evolutionary": "#d62728", "evolutionary-unseeded": "#ff9896",
          "random": "#1f77b4"}
W, H, COLS = 300, 210, 4  # Panel size and panels per row.
PAD_L, PAD_B, PAD_T = 40, 28, 22
Y_MAX = 1.5  # best / optimum


def main():
    src, out = sys.argv[1], sys.argv[2]
    runs = collections.defaultdict(lambda: collections.defaultdict(dict))
    for r in csv.DictReader(open(src)):
        runs[r["problem"]][r["strategy"]].setdefault(int(r["seed"]), {})[
            int(r["trial"])] = float(r["best_us"])
    problems = sorted(runs)
    rows = (len(problems) + COLS - 1) // COLS
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W * COLS}" '
           f'height="{H * rows + 30}" font-family="sans-serif" font-size="10">',
           '<rect width="100%" height="100%" fill="white"/>']
    for i, problem in enumerate(problems):
        x0, y0 = (i % COLS) * W, (i // COLS) * H
        optimum = min(v for s in runs[problem].values() for seed in s.values()
                      for v in seed.values())
        trials = max(t for s in runs[problem].values()
                     for seed in s.values() for t in seed)
        px = lambda t: x0 + PAD_L + (W - PAD_L - 10) * (t - 1) / (trials - 1)
        py = lambda y: y0 + PAD_T + (H - PAD_T - PAD_B) * (
            1 - (min(y, Y_MAX) - 1) / (Y_MAX - 1))
        svg.append(f'<text x="{x0 + PAD_L}" y="{y0 + 14}">{problem}</text>')
        svg.append(f'<rect x="{x0 + PAD_L}" y="{y0 + PAD_T}" '
                   f'width="{W - PAD_L - 10}" height="{H - PAD_T - PAD_B}" '
                   'fill="none" stroke="#999"/>')
        for y in (1.0, 1.03, 1.25, 1.5):
            svg.append(f'<line x1="{px(1)}" x2="{px(trials)}" y1="{py(y)}" '
                       f'y2="{py(y)}" stroke="#ddd"/><text x="{x0 + 4}" '
                       f'y="{py(y) + 3}">{y:.2f}</text>')
        x15 = px(0.15 * trials)
        svg.append(f'<line x1="{x15}" x2="{x15}" y1="{py(Y_MAX)}" '
                   f'y2="{py(1)}" stroke="#aaa" stroke-dasharray="3,3"/>')
        for t in (1, trials // 2, trials):
            svg.append(f'<text x="{px(t) - 6}" y="{y0 + H - 12}">{t}</text>')
        for strategy, seeds in sorted(runs[problem].items()):
            points = []
            for t in range(1, trials + 1):
                med = statistics.median(s[t] for s in seeds.values())
                points.append(f"{px(t):.1f},{py(med / optimum):.1f}")
            svg.append(f'<polyline fill="none" stroke-width="1.6" '
                       f'stroke="{COLORS.get(strategy, "#333")}" '
                       f'points="{" ".join(points)}"/>')
    ly = H * rows + 18
    for j, (name, color) in enumerate(COLORS.items()):
        svg.append(f'<line x1="{20 + j * 220}" x2="{40 + j * 220}" y1="{ly}" '
                   f'y2="{ly}" stroke="{color}" stroke-width="2"/>'
                   f'<text x="{45 + j * 220}" y="{ly + 4}">{name}</text>')
    svg.append(f'<text x="{W * COLS - 420}" y="{ly + 4}">median best-so-far '
               '/ optimum vs trials; dashed: 15% of the space</text>')
    svg.append("</svg>")
    open(out, "w").write("\n".join(svg))


if __name__ == "__main__":
    main()
