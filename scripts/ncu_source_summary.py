#!/usr/bin/env python3
"""The SASS instructions a kernel's sampled warps stall on, from ncu's source page.

    ncu -i REP.ncu-rep --page source --csv --print-source sass > sass.csv
    python3 scripts/ncu_source_summary.py sass.csv [--top 40]

ncu writes one table per profiled kernel (a header row naming the columns, then a
row per instruction); the header's exact column names vary between ncu versions,
so they are found by substring: the address, the SASS text and the warp-stall
sample count ("Warp Stall Sampling (All Samples)", else any "Samples" column).
For each table: its total samples, then the top instructions by samples with
their share and the --context instructions before each (what the stalled one waits on is
usually just above it)."""
import argparse
import csv
import sys


def find(header, *keys):
    for k in keys:
        for i, h in enumerate(header):
            if k.lower() in h.lower():
                return i
    return None


def number(s):
    try:
        return float(s.replace(",", ""))
    except ValueError:
        return 0.0


def tables(rows):
    cur = None
    name = ""
    for r in rows:
        if r and r[0] == "Kernel Name":
            name = r[1] if len(r) > 1 else ""
            continue
        if r and any("Source" == c.strip() or "Address" in c for c in r[:3]) and \
                any("Sampl" in c for c in r):
            if cur:
                yield cur
            cur = (r, [], name)
        elif cur is not None and r:
            cur[1].append(r)
    if cur:
        yield cur


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--context", type=int, default=2)
    args = ap.parse_args()
    rows = list(csv.reader(open(args.csv, newline="", errors="replace")))
    found = False
    for n, (header, body, name) in enumerate(tables(rows)):
        found = True
        ia = find(header, "Address")
        isrc = find(header, "Source")
        isamp = find(header, "Warp Stall Sampling (All", "Sampling (All", "Samples")
        if isamp is None or isrc is None:
            print("table %d: no sample / source column in %s" % (n, header))
            continue
        total = sum(number(r[isamp]) for r in body if len(r) > isamp)
        print("== table %d %s: %d instructions, %d samples (%s)" %
              (n, name[:110], len(body), total, header[isamp]))
        order = sorted(range(len(body)), key=lambda i: -number(body[i][isamp])
                       if len(body[i]) > isamp else 0)
        for i in order[:args.top]:
            r = body[i]
            s = number(r[isamp])
            if s <= 0:
                break
            addr = r[ia] if ia is not None else str(i)
            print("%6d %5.1f%%  %s  %s" % (s, 100 * s / max(total, 1), addr, r[isrc].strip()))
            for j in range(max(0, i - args.context), i):
                print("              %s  %s" % (body[j][ia] if ia is not None else j,
                                              body[j][isrc].strip()))
    if not found:
        print("no tables recognised; the first rows:")
        for r in rows[:8]:
            print(r)


if __name__ == "__main__":
    sys.exit(main())
