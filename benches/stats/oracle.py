#!/usr/bin/env python3
"""Recompute sbs-profile's Welch comparisons from the raw samples of a JSON report
(`sbs-profile compare --format json A B`) with scipy, and print both side by side.

Usage: oracle.py REPORT.json
"""
import json
import sys

from scipy import stats

report = json.load(open(sys.argv[1]))
benches = report["benchmarks"]
ref = {m["id"]: m for m in benches[0]["metrics"]}
worst = 0.0
print(f"{'metric':10} {'sbs ci_low':>14} {'scipy ci_low':>14} {'sbs ci_high':>14} {'scipy ci_high':>14} {'sbs p':>10} {'scipy p':>10}")
for b in benches[1:]:
    for m in b["metrics"]:
        c = m.get("comparison")
        if not c or c["method"] not in ("welch_t", "welch_z"):
            continue
        r = ref[m["id"]]
        res = stats.ttest_ind(m["samples"], r["samples"], equal_var=False)
        if c["method"] == "welch_t":
            ci = res.confidence_interval(c["confidence"])
            lo, hi = ci.low, ci.high
        else:  # normal quantile for large samples
            import math
            se = math.sqrt(stats.tvar(m["samples"]) / len(m["samples"]) + stats.tvar(r["samples"]) / len(r["samples"]))
            z = stats.norm.ppf(1 - (1 - c["confidence"]) / 2)
            d = sum(m["samples"]) / len(m["samples"]) - sum(r["samples"]) / len(r["samples"])
            lo, hi = d - z * se, d + z * se
        for a, e in ((c["ci_low"], lo), (c["ci_high"], hi)):
            worst = max(worst, abs(a - e) / max(abs(e), 1e-300))
        print(f"{m['id']:10} {c['ci_low']:14.6g} {lo:14.6g} {c['ci_high']:14.6g} {hi:14.6g} {c['p_value']:10.3g} {res.pvalue:10.3g}")
print(f"largest relative difference of the interval bounds: {worst:.2e}")
