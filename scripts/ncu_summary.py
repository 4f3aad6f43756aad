#!/usr/bin/env python3
"""Per-kernel table of one profiled decode step from `ncu --csv` output.

  ncu_summary.py ncu.csv [step_ms] [--launches REGEX]

Groups kernels by name (template arguments dropped), prints count, summed
GPU time, DRAM bytes read and the achieved read bandwidth, largest first.
With step_ms (the replayed step's wall time), also prints the time no
kernel was running (launch gaps, host waits). With --launches, the kernels
whose full name matches REGEX are also listed one launch at a time (grid,
registers, issue-active and warps-active percentages, instructions, when the
CSV has those metrics), in launch order.
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
    args = sys.argv[1:]
    pattern = None
    if "--launches" in args:
        i = args.index("--launches")
        pattern = re.compile(args[i + 1])
        del args[i:i + 2]
    rows = [l for l in open(args[0], errors="replace")]
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
    if len(args) > 1:
        step = float(args[1]) * 1e-3
        print(f"step {step*1e6:.1f} us; kernels {total_t*1e6:.1f} us; outside kernels {(step-total_t)*1e6:.1f} us")

    if pattern:
        print(f"\n{'launch':>6s} {'kernel (template arguments)':70s} {'grid':>6s} {'regs':>4s} "
              f"{'us':>7s} {'MB':>7s} {'GB/s':>6s} {'issue%':>6s} {'warps%':>6s} {'Minst':>6s}")
        for (lid, name), m in sorted(launches.items(), key=lambda kv: int(kv[0][0])):
            if not pattern.search(name):
                continue
            t = m.get("gpu__time_duration.sum", 0.0)
            b = m.get("dram__bytes_read.sum", 0.0)
            targs = re.search(r"<(.*)>", name)
            print(f"{lid:>6s} {(targs.group(1) if targs else short(name))[:70]:70s} "
                  f"{m.get('launch__grid_size', 0):6.0f} {m.get('launch__registers_per_thread', 0):4.0f} "
                  f"{t*1e6:7.1f} {b/1e6:7.2f} {b/t/1e9 if t else 0:6.0f} "
                  f"{m.get('smsp__issue_active.avg.pct_of_peak_sustained_active', 0):6.1f} "
                  f"{m.get('sm__warps_active.avg.pct_of_peak_sustained_active', 0):6.1f} "
                  f"{m.get('smsp__inst_executed.sum', 0)/1e6:6.2f}")


if __name__ == "__main__":
    main()
