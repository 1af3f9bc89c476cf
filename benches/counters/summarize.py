#!/usr/bin/env python3
"""Summarise benches/counters/run.sh results: CoV over 10 runs, 1% change with 3 runs."""
import json
import math
import sys

from scipy import stats

out, n0, n1 = sys.argv[1], sys.argv[2], sys.argv[3]


def sbs(path, metric):
    with open(f"{out}/{path}") as f:
        r = json.load(f)
    m = next(m for m in r["benchmarks"][0]["metrics"] if m["id"] == metric)
    return m["samples"]


def hyper(path, i=0):
    with open(f"{out}/{path}") as f:
        return json.load(f)["results"][i]["times"]


def fmt(x):
    """Counts with every digit, times in seconds with 4 decimals."""
    if float(x).is_integer():
        return f"{x:,.0f}"
    return f"{x:,.1f}" if x >= 1000 else f"{x:.4g}"


def cov(xs):
    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
    return m, sd, sd / m


def welch(a, b):
    """Welch's p; None when both sides have zero spread (exact counts: compare values)."""
    if len(set(a)) == 1 and len(set(b)) == 1:
        return None
    return stats.ttest_ind(a, b, equal_var=False).pvalue


def runs_needed(cv, effect=0.01, alpha=0.05, power=0.8):
    z = stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)
    return math.ceil(2 * (z * cv / effect) ** 2)


print(open(f"{out}/machine.txt").read())
print("## Spread over 10 runs of `work %s` (other core busy)\n" % n0)
print("| what | tool | mean | sd | CoV |")
print("|---|---|---|---|---|")
rows = [
    ("instructions", "sbs-profile --instructions valgrind", sbs("sbs-valgrind-10.json", "counter.instructions")),
    ("instructions", "valgrind (own summary)", [float(x) for x in open(f"{out}/valgrind-own-10.txt").read().split()]),
    ("wall time (s)", "sbs-profile --time", sbs("sbs-time-10.json", "time.wall")),
    ("wall time (s)", "hyperfine", hyper("hyperfine-10.json")),
    ("task-clock (s)", "sbs-profile --counters (perf-sw)", sbs("sbs-sw-10.json", "counter.task-clock")),
    ("page-faults", "sbs-profile --counters (perf-sw)", sbs("sbs-sw-10.json", "counter.page-faults")),
    ("context-switches", "sbs-profile --counters (perf-sw)", sbs("sbs-sw-10.json", "counter.context-switches")),
]
covs = {}
for what, tool, xs in rows:
    m, sd, c = cov(xs)
    covs.setdefault(tool, c)
    print(f"| {what} | {tool} | {fmt(m)} | {sd:.3g} | {c * 100:.2g}% |")

print("\n## A 1%% work change (`work %s` vs `work %s`)\n" % (n0, n1))
print("| metric | tool | runs each | mean A | mean B | change | Welch p | told apart (p<0.05) |")
print("|---|---|---|---|---|---|---|---|")
cases = [
    ("instructions", "sbs-profile valgrind", 3, sbs(f"sbs-valgrind-3-{n0}.json", "counter.instructions"), sbs(f"sbs-valgrind-3-{n1}.json", "counter.instructions")),
    ("wall time", "sbs-profile --time", 3, sbs(f"sbs-time-3-{n0}.json", "time.wall"), sbs(f"sbs-time-3-{n1}.json", "time.wall")),
    ("wall time", "hyperfine", 3, hyper("hyperfine-3.json", 0), hyper("hyperfine-3.json", 1)),
    ("task-clock (CPU time)", "sbs-profile --counters", 3, sbs(f"sbs-sw-3-{n0}.json", "counter.task-clock"), sbs(f"sbs-sw-3-{n1}.json", "counter.task-clock")),
    ("task-clock (CPU time)", "sbs-profile --counters", 10, sbs(f"sbs-sw-10-{n0}.json", "counter.task-clock"), sbs(f"sbs-sw-10-{n1}.json", "counter.task-clock")),
    ("wall time", "sbs-profile --time", 30, sbs(f"sbs-time-30-{n0}.json", "time.wall"), sbs(f"sbs-time-30-{n1}.json", "time.wall")),
    ("wall time", "hyperfine", 30, hyper("hyperfine-30.json", 0), hyper("hyperfine-30.json", 1)),
]
for metric, tool, k, a, b in cases:
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    p = welch(a, b)
    if p is None:
        shown, apart = "n/a (sd 0 both sides)", max(a) < min(b)
    else:
        shown, apart = f"{p:.3g}", p < 0.05 and mb > ma
    verdict = "yes" if apart else ("no (wrong direction)" if p is not None and p < 0.05 else "no")
    print(f"| {metric} | {tool} | {k} | {fmt(ma)} | {fmt(mb)} | {(mb - ma) / ma * 100:+.3f}% | {shown} | {verdict} |")

print("\n## Runs per side a two-sample test needs for a 1% change (95% confidence, 80% power)\n")
for tool in ("sbs-profile --time", "hyperfine", "sbs-profile --counters (perf-sw)", "sbs-profile --instructions valgrind"):
    c = covs[tool]
    need = runs_needed(c) if c > 0 else 1
    label = "task-clock, " + tool if "perf-sw" in tool else tool
    print(f"- {label}: CoV {c * 100:.2g}% -> {need} runs per side")
