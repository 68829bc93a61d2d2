#!/usr/bin/env python3
"""How evenly flash_fwd_tma's persistent blocks share a causal problem's
tiles, modelled: each of `--sms` blocks takes its tiles in a fixed order
(`Tiles::At` in flash_fwd_tma.cu: tile n*sms + rank, rank = the block's
index on even turns and counted from the end on odd ones), a tile costing
its key blocks plus `--overhead` (its prologue and epilogue, in key
blocks). Printed per query length: the busiest block's work over the mean
(1.00: perfectly even) in each order; in the kernel's order, the busiest
block's work relative to the first length's (what the kernel's time
follows where the tiles, not the memory, bound it); and the busiest
block's work in the longest-first order over the kernel's.

  python3 bench/persistent_balance.py --batch 1 --heads 32 \\
      --seq 6583 6894 8192 [--block_m 128 --sms 132]

Orders: "heads" (tiles by (batch, head), then query block, the last
first: the kernel's until 2026-12-06, and still its order without a causal
mask), "longest" (query block major, the last first, then (batch, head):
every block's turns draw tiles of about one length; the kernel's order with
a causal mask since).
"""
import argparse


def tiles(order, heads, q_blocks):
    """Each tile's key blocks (causal, seq_q == seq_k), in `order`."""
    if order == "heads":
        return [q_blocks - r for _ in range(heads) for r in range(q_blocks)]
    return [q_blocks - r for r in range(q_blocks) for _ in range(heads)]


def busiest(costs, sms):
    """(the busiest block's work, the mean) over `sms` blocks."""
    work = [0.0] * sms
    for i, cost in enumerate(costs):
        turn, rank = divmod(i, sms)
        work[sms - 1 - rank if turn & 1 else rank] += cost
    return max(work), sum(work) / sms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, required=True)
    ap.add_argument("--seq", type=int, nargs="+", required=True)
    ap.add_argument("--block_m", type=int, default=128)
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--overhead", type=float, default=1.0)
    a = ap.parse_args()
    print(f"{'seq':>6} {'tiles':>6} {'turns':>6} {'heads max/mean':>15} "
          f"{'rel. time':>9} {'longest max/mean':>17} {'longest/heads':>13}")
    first = None
    for seq in a.seq:
        q_blocks = -(-seq // a.block_m)
        count = q_blocks * a.heads * a.batch
        top = {}
        for o in ("heads", "longest"):
            costs = [c + a.overhead
                     for c in tiles(o, a.heads * a.batch, q_blocks)]
            top[o] = busiest(costs, a.sms)
        first = first or top["heads"][0]
        print(f"{seq:>6} {count:>6} {count / a.sms:>6.1f} "
              f"{top['heads'][0] / top['heads'][1]:>15.2f} "
              f"{top['heads'][0] / first:>9.3f} "
              f"{top['longest'][0] / top['longest'][1]:>17.2f} "
              f"{top['longest'][0] / top['heads'][0]:>13.2f}")

if __name__ == "__main__":
    main()
