#!/usr/bin/env python3
"""The settings bench/optin_ab_h200.sh's A/B favours, as shell exports.

  optin_pick.py optin_ab.txt   ->  e.g. "export FERRITE_CUDA_QUANT_FUSED_FP8=1"

Per variable, the value with the highest mean ratio of its rows (prefill and
decode tokens/s) to the first value's (the default), more than 1 % above it,
none of its rows more than 3 % below the default's. A variable with a missing
or failed run keeps its default (prints nothing).
"""
import re
import sys
from collections import OrderedDict


def main():
    runs = OrderedDict()  # var -> value -> {row: tokens/s}
    cur = None
    for line in open(sys.argv[1], errors="replace"):
        m = re.match(r"== (.*) (FERRITE_[A-Z0-9_]+)=(\S+)", line)
        if m:
            # Rows are keyed by the run's label too: one variable's A/B may
            # cover several models and formats.
            label = m.group(1)
            cur = runs.setdefault(m.group(2), OrderedDict()).setdefault(m.group(3), {})
            continue
        m = re.match(r"(prefill\s+\d+ tokens|decode\s+batch\s+\d+):\s+([\d.]+) tokens/s", line)
        if m and cur is not None:
            cur[label + " " + re.sub(r"\s+", " ", m.group(1))] = float(m.group(2))
    for var, values in runs.items():
        vals = list(values.items())
        if len(vals) < 2 or any(not rows for _, rows in vals):
            continue
        base_rows = vals[0][1]
        if any(set(rows) != set(base_rows) for _, rows in vals):
            continue

        def score(rows):  # mean ratio to the default over every row
            return sum(rows[k] / base_rows[k] for k in rows) / len(rows)

        ok = [(v, rows) for v, rows in vals if all(rows[k] >= 0.97 * base_rows[k] for k in rows)]
        best = max(ok, key=lambda vr: score(vr[1]))
        if best[0] != vals[0][0] and score(best[1]) > 1.01:
            print(f"export {var}={best[0]}")

if __name__ == "__main__":
    main()
