#!/usr/bin/env bash
# The harness against whole-process timing of the same work (docs/bench-harness.md).
#
# The work: count the words of a 200000-word text (`wordfreq_bench::count`), and pick the
# top 3 of the counts (`wordfreq_bench::top`). Generating the text is set-up.
#
# 1. Whole process, the only way to time an operation without a harness: time a program
#    that does set-up + operation and one that does the set-up alone, and take the
#    difference. `sbs-profile compare` runs them interleaved and gives the difference with
#    its interval (Welch); hyperfine (the peer tool) runs the same commands in the same
#    script, and the difference of its means gets the same Welch interval here.
#      examples/wordfreq-bench/src/main.rs: `wordfreq-bench 200000 gen|count|top`
# 2. Harnessed: examples/wordfreq-bench/benches/wordfreq.rs, `sbs-profile --bench
#    wordfreq`: RUNS processes per benchmark, each warming up to steady state and keeping
#    10 measurements; time.op, interval over the per-process means.
#
# 3. The peer in-process harness: divan (benches/harness/divan-peer, its own workspace),
#    the same operations and set-up, run as RUNS fresh processes; each process's divan
#    mean (100 samples), interval over the per-process means as for the harness.
#
# Usage: benches/harness/run.sh [RUNS]   (from the repository root)
set -euo pipefail
RUNS=${1:-10}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
cargo build --release -p sbs-profile -p wordfreq-bench >/dev/null 2>&1
SBS=$CARGO_TARGET_DIR/release/sbs-profile
WF=$CARGO_TARGET_DIR/release/wordfreq-bench
OUT=${OUT:-/tmp/sbs-bench-harness}
mkdir -p "$OUT"
uptime >"$OUT/uptime.txt"

echo "== whole process: sbs-profile compare (interleaved), $RUNS runs per command"
"$SBS" compare --runs "$RUNS" --warmup 1 -f json -o "$OUT/compare-count.json" \
    "$WF 200000 gen" "$WF 200000 count" 2>/dev/null || [ $? -eq 1 ] # 1: "regressed"
"$SBS" compare --runs "$RUNS" --warmup 1 -f json -o "$OUT/compare-top.json" \
    "$WF 200000 count" "$WF 200000 top" 2>/dev/null || [ $? -eq 1 ]
if command -v hyperfine >/dev/null; then
    echo "== whole process: hyperfine, $RUNS runs per command"
    hyperfine --runs "$RUNS" --warmup 1 -N --export-json "$OUT/hyperfine.json" \
        "$WF 200000 gen" "$WF 200000 count" "$WF 200000 top" >/dev/null
fi

echo "== peer in-process harness: divan, $RUNS processes"
DIVAN_DIR=benches/harness/divan-peer
(cd "$DIVAN_DIR" && CARGO_TARGET_DIR=$CARGO_TARGET_DIR/divan-peer cargo bench --no-run >/dev/null 2>&1)
DIVAN=$(ls -t "$CARGO_TARGET_DIR"/divan-peer/release/deps/wordfreq-* | grep -v '\.d$' | head -1)
: >"$OUT/divan.txt"
for _ in $(seq "$RUNS"); do "$DIVAN" --bench >>"$OUT/divan.txt" 2>/dev/null; done

echo "== harnessed: sbs-profile --bench wordfreq, $RUNS processes per benchmark"
(cd examples/wordfreq-bench &&
    "$SBS" --bench wordfreq --runs "$RUNS" --warmup 1 -f json -o "$OUT/harness.json" \
        2>/dev/null)
uptime >>"$OUT/uptime.txt"

python3 - "$OUT" <<'PY'
import json, math, sys
from statistics import mean, stdev
out = sys.argv[1]
T = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
     9: 2.262, 10: 2.228, 12: 2.179, 14: 2.145, 16: 2.120, 18: 2.101, 19: 2.093,
     20: 2.086, 25: 2.060, 29: 2.045, 30: 2.042, 38: 2.024, 40: 2.021}
def t(df):
    df = max(1, int(df))
    return T.get(df) or T[min(T, key=lambda k: abs(k - df))]
def ci(xs):
    n = len(xs); m = mean(xs); return m, t(n - 1) * stdev(xs) / math.sqrt(n)
def welch(a, b):
    va, vb = stdev(a) ** 2 / len(a), stdev(b) ** 2 / len(b)
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    return mean(b) - mean(a), t(df) * math.sqrt(va + vb)
def samples(path, bench, id_):
    r = json.load(open(path))
    for b in r["benchmarks"]:
        if bench in b["name"]:
            for m in b["metrics"]:
                if m["id"] == id_:
                    return m["samples"]
    raise SystemExit(f"{id_} of {bench} not in {path}")
ms = lambda x: f"{x * 1e3:.3f} ms"
rows = []
for op, base, full in (("count", "gen", "count"), ("top", "count", "top")):
    f = f"{out}/compare-{op}.json"
    a = samples(f, f"200000 {base}", "time.wall"); b = samples(f, f"200000 {full}", "time.wall")
    d, h = welch(a, b)
    rows.append((op, "sbs-profile compare, whole process (difference of time.wall)", len(a), d, h))
    try:
        hr = {r["command"].split()[-1]: r["times"] for r in json.load(open(f"{out}/hyperfine.json"))["results"]}
        d, h = welch(hr[base], hr[full])
        rows.append((op, "hyperfine, whole process (difference of means)", len(hr[base]), d, h))
    except FileNotFoundError:
        pass
    import re
    unit = {"ns": 1e-9, "µs": 1e-6, "us": 1e-6, "ms": 1e-3, "s": 1.0}
    dm = []
    for line in open(f"{out}/divan.txt"):
        if f"wordfreq_{op} " in line:
            cols = [c.strip() for c in line.split("│")]
            v, u = cols[3].split()
            dm.append(float(v) * unit[u])
    if dm:
        m, h = ci(dm)
        rows.append((op, "divan, in-process (mean of 100 samples per process)", len(dm), m, h))
    x = samples(f"{out}/harness.json", f"wordfreq/{op}", "time.op")
    m, h = ci(x)
    rows.append((op, "sbs-profile --bench, harnessed (time.op)", len(x), m, h))
print("| operation | measurement | processes per command | estimate | 95% CI half-width | relative |")
print("|---|---|---|---|---|---|")
for op, how, n, est, h in rows:
    rel = f"± {h / abs(est) * 100:.1f}%" if est else "n/a"
    print(f"| `{op}` | {how} | {n} | {ms(est)} | ± {ms(h)} | {rel} |")
print()
print("load average before and after:", open(f"{out}/uptime.txt").read().replace("\n", " / "))
PY
