#!/usr/bin/env python3
"""When each block of the cluster decode attention reached each phase, inside real decode steps.

  FERRITE_CUDA_CLUSTER_TRACE=16384 ferrite bench ... 2> log
  python3 scripts/cluster_trace_summary.py log [--launches 400]

Reads the `cluster_trace,...` lines (ClusterTraceRecord, kernels/attention_decode.cuh): a
block's %globaltimer at its start and end and its SM clock at each phase. The SM clock is
converted to ns with the rate the records give (their global span over their clock span).
A launch is a set of blocks whose [start, end] intervals chain into one another; only whole
launches (as many records as the grid's blocks) of the last --launches are kept. Times are
relative to the launch's first PDL-wait return (W, ~ the Q/K/V projection's completion):
  - for each phase, when its first and its last block reached it (median over launches);
  - per phase, the median over blocks and launches of the time a block spent in it.
"""
import argparse
import statistics
import sys
from collections import defaultdict

PHASES = [
    "prologue issued (PDL wait called)",
    "PDL wait returned",
    "token's q/k/v rows done",
    "cached rows in shared memory",
    "softmax",
    "P x V",
    "first cluster barrier",
    "merge stored",
    "last cluster barrier",
    "first copy about to be issued",
    "every K/V copy issued",
]
# The phases in the order a block passes them.
ORDER = [9, 10, 0, 1, 2, 3, 4, 5, 6, 7, 8]


def read(path):
    records = []
    with open(path, errors="replace") as f:
        for line in f:
            if not line.startswith("cluster_trace,"):
                continue
            fields = line.strip().split(",")[1:]
            if len(fields) != 16 or not fields[0].isdigit():
                continue  # the header line
            v = [int(x) for x in fields]
            records.append({"start": v[0], "end": v[1], "clock": v[2:13], "block": v[13],
                            "blocks": v[14], "smid": v[15]})
    return records


def launches(records):
    out, cur, cur_end = [], [], -1
    for r in sorted(records, key=lambda r: r["start"]):
        if cur and r["start"] > cur_end:
            out.append(cur)
            cur, cur_end = [], -1
        cur.append(r)
        cur_end = max(cur_end, r["end"])
    if cur:
        out.append(cur)
    return [l for l in out if len(l) == l[0]["blocks"] and
            len({r["block"] for r in l}) == len(l)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log")
    ap.add_argument("--launches", type=int, default=400)
    args = ap.parse_args()
    records = read(args.log)
    if not records:
        sys.exit(f"{args.log}: no cluster_trace records (FERRITE_CUDA_CLUSTER_TRACE unset?)")
    spans = [(r["end"] - r["start"], r["clock"][8]) for r in records if r["clock"][8] > 0]
    ns_per_clock = sum(s for s, _ in spans) / max(1, sum(c for _, c in spans))
    whole = launches(records)[-args.launches:]
    print(f"{len(records)} records, {len(whole)} whole launches kept; SM clock "
          f"{1.0 / ns_per_clock:.3f} GHz (global span / clock span)")
    by_grid = defaultdict(list)
    for l in whole:
        by_grid[l[0]["blocks"]].append(l)
    for blocks, group in sorted(by_grid.items()):
        first = defaultdict(list)  # phase -> first block's time after W, per launch
        last = defaultdict(list)
        in_phase = defaultdict(list)
        starts_first, starts_last, ends = [], [], []
        for l in group:
            at = [[r["start"] + c * ns_per_clock for c in r["clock"]] for r in l]
            w = min(a[1] for a in at)
            starts_first.append(min(r["start"] for r in l) - w)
            starts_last.append(max(r["start"] for r in l) - w)
            ends.append(max(r["end"] for r in l) - w)
            for i in range(len(PHASES)):
                first[i].append(min(a[i] for a in at) - w)
                last[i].append(max(a[i] for a in at) - w)
            for r in l:
                prev = 0
                for i in ORDER:
                    c = r["clock"][i]
                    in_phase[i].append((c - prev) * ns_per_clock)
                    prev = c
        med = lambda xs: statistics.median(xs) / 1000.0
        print(f"\n== grid of {blocks} blocks: {len(group)} launches (us from W, medians)")
        print(f"  blocks start: first {med(starts_first):+.2f}, last {med(starts_last):+.2f}; "
              f"last block ends {med(ends):+.2f}")
        print(f"  {'phase':<36} {'first':>8} {'last':>8} {'a block in it':>14}")
        for i in ORDER:
            name = PHASES[i]
            print(f"  {name:<36} {med(first[i]):>+8.2f} {med(last[i]):>+8.2f} "
                  f"{med(in_phase[i]):>14.2f}")


if __name__ == "__main__":
    main()
