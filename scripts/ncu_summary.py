#!/usr/bin/env python3
"""Per-kernel table of one profiled decode step from `ncu --csv` output.

  ncu_summary.py ncu.csv [step_ms]

Groups kernels by name (template arguments dropped), prints count, summed
GPU time, DRAM bytes read and the achieved read bandwidth, largest first.
With step_ms (the replayed step's wall time), also prints the time no
kernel was running (launch gaps, host waits).
"""
import csv
import re
import sys
from collections import defaultdict

SCALE = {"ns": 1e-9, "nsecond": 1e-9, "usecond": 1e-6, "us": 1e-6, "msecond": 1e-3, "ms": 1e-3,
         "second": 1.0, "s": 1.0, "byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9,
         "KB": 1e3, "MB": 1e6, "GB": 1e9, "B": 1}


def short(name):
    name = re.sub(r"<.*>", "", name)
    name = re.sub(r"\(.*\)", "", name)
    return name.replace("void ", "").strip()


def main():
    rows = [l for l in open(sys.argv[1], errors="replace")]
    start = next(i for i, l in enumerate(rows) if l.startswith('"ID"'))
    launches = defaultdict(dict)
    for r in csv.DictReader(rows[start:]):
        unit = r.get("Metric Unit") or ""
        if not r.get("Metric Value") or not r.get("Kernel Name"):
            continue
        try:
            v = float(r["Metric Value"].replace(",", "")) * SCALE.get(unit, 1.0)
        except ValueError:
            continue
        launches[(r["ID"], r["Kernel Name"])][r["Metric Name"]] = v
    agg = defaultdict(lambda: [0, 0.0, 0.0])
    for (_, name), m in launches.items():
        a = agg[short(name)]
        a[0] += 1
        a[1] += m.get("gpu__time_duration.sum", 0.0)
        a[2] += m.get("dram__bytes_read.sum", 0.0)
    total_t = sum(a[1] for a in agg.values())
    total_b = sum(a[2] for a in agg.values())
    print(f"{'kernel':58s} {'n':>5s} {'us':>9s} {'share':>6s} {'MB read':>9s} {'GB/s':>7s}")
    for name, (n, t, b) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
        print(f"{name[:58]:58s} {n:5d} {t*1e6:9.1f} {100*t/total_t:5.1f}% {b/1e6:9.1f} {b/t/1e9 if t else 0:7.0f}")
    print(f"{'total':58s} {len(launches):5d} {total_t*1e6:9.1f} {'':6s} {total_b/1e6:9.1f} {total_b/total_t/1e9:7.0f}")
    if len(sys.argv) > 2:
        step = float(sys.argv[2]) * 1e-3
        print(f"step {step*1e6:.1f} us; kernels {total_t*1e6:.1f} us; outside kernels {(step-total_t)*1e6:.1f} us")


if __name__ == "__main__":
    main()
