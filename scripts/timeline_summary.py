#!/usr/bin/env python3
"""Where a replayed CUDA-graph step's time goes, from bench/cuda/kernel_timeline.cc's CSV.

  python3 scripts/timeline_summary.py timeline.csv [--kernels 16] [--steps 20]

The steps are the graph launches (kernels sharing one correlation id and a graph id) of the
most common kernel count among the last graph launches (the decode graph of the batch
benched); the last --steps of them are summarised:
  - the step's period (one launch's first start to the next launch's first start) and its
    span (first start to last end), median over the steps;
  - per kernel name: launches a step, the summed kernel time (as ncu would add it up, but
    with the real overlaps), and the *exposed* time: each instant of the step is charged to the
    oldest kernel still running (a kernel that started early under programmatic dependent
    launch and waits on its predecessor is charged only once its predecessor has ended), and
    instants with no kernel running to "(idle)";
  - the first --kernels kernels of the median step in order: start offset, duration, overlap
    with the previous kernel (negative = gap), grid and block.
"""
import argparse
import csv
import re
import shutil
import statistics
import subprocess
import sys
from collections import defaultdict


def short_names(names):
    """Mangled -> short readable names (c++filt when present, else the mangled name's
    identifiers), without namespaces, template arguments or parameters."""
    out = {}
    names = sorted(set(names))
    demangled = names
    if shutil.which("c++filt"):
        r = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True)
        if r.returncode == 0 and len(r.stdout.splitlines()) == len(names):
            demangled = r.stdout.splitlines()
    for m, d in zip(names, demangled):
        s = d
        if s == m and s.startswith("_Z"):
            ids = re.findall(r"\d+([A-Za-z_][A-Za-z0-9_]*)", s)
            s = ids[-1] if ids else s
        else:
            # Strip parameters and template arguments (nested), keep the last scope.
            depth, base = 0, []
            for ch in s:
                if ch in "<(":
                    depth += 1
                elif ch in ">)":
                    depth -= 1
                elif depth == 0:
                    base.append(ch)
            s = "".join(base).split("::")[-1].strip() or d
            s = s.split(" ")[-1]
        out[m] = s
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--kernels", type=int, default=16)
    ap.add_argument("--steps", type=int, default=20)
    a = ap.parse_args()
    rows = []
    with open(a.csv) as f:
        for r in csv.DictReader(f):
            rows.append(r)
    if not rows:
        sys.exit("timeline_summary: no kernels")
    names = short_names(r["name"] for r in rows)
    groups = defaultdict(list)
    for r in rows:
        if r["graph_id"] != "0":
            groups[int(r["correlation"])].append(
                (int(r["start_ns"]), int(r["end_ns"]), names[r["name"]], r["grid"], r["block"]))
    if not groups:
        sys.exit("timeline_summary: no graph launches in the trace")
    order = sorted(groups, key=lambda c: min(k[0] for k in groups[c]))
    tail = order[-max(4 * a.steps, 40):]
    sizes = [len(groups[c]) for c in tail]
    size = max(set(sizes), key=sizes.count)
    steps = [sorted(groups[c]) for c in order if len(groups[c]) == size]
    if len(steps) < 2:
        sys.exit("timeline_summary: fewer than two graph launches of one size")
    periods = [b[0][0] - s[0][0] for s, b in zip(steps, steps[1:])]
    steps, periods = steps[-a.steps - 1:-1], periods[-a.steps:]
    spans = [max(k[1] for k in s) - s[0][0] for s in steps]
    print(f"{len(steps)} steps of {size} kernels: period {statistics.median(periods) / 1e3:.1f} us "
          f"(min {min(periods) / 1e3:.1f}), span {statistics.median(spans) / 1e3:.1f} us")
    summed = defaultdict(float)
    exposed = defaultdict(float)
    count = defaultdict(int)
    for s in steps:
        for k in s:
            summed[k[2]] += (k[1] - k[0]) / len(steps)
            count[k[2]] += 1
        # Charge each instant to the oldest running kernel: events sorted by time.
        events = sorted({k[0] for k in s} | {k[1] for k in s})
        for lo, hi in zip(events, events[1:]):
            running = [k for k in s if k[0] <= lo and k[1] >= hi]
            who = min(running)[2] if running else "(idle)"
            exposed[who] += (hi - lo) / len(steps)
    span = statistics.median(spans)
    print(f"\n{'kernel':44s} {'a step':>6s} {'summed us':>10s} {'exposed us':>10s} {'share':>6s}")
    for n in sorted(exposed, key=lambda n: -exposed[n]):
        print(f"{n[:44]:44s} {count[n] / len(steps):6.0f} {summed[n] / 1e3:10.1f} "
              f"{exposed[n] / 1e3:10.1f} {100 * exposed[n] / span:5.1f}%")
    med = steps[sorted(range(len(steps)), key=lambda i: spans[i])[len(steps) // 2]]
    t0 = med[0][0]
    print(f"\nthe median step's first {a.kernels} kernels (us: start, duration, overlap with "
          f"the previous kernel's end; grid x block)")
    prev_end = None
    for k in med[:a.kernels]:
        ov = "" if prev_end is None else f"{(prev_end - k[0]) / 1e3:8.2f}"
        print(f"  {(k[0] - t0) / 1e3:9.2f} {(k[1] - k[0]) / 1e3:8.2f} {ov:>8s}  {k[2][:40]:40s} "
              f"{k[3]} x {k[4]}")
        prev_end = k[1] if prev_end is None else max(prev_end, k[1])


if __name__ == "__main__":
    main()
