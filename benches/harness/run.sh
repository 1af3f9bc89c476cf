#!/usr/bin/env bash
# The harness against whole-process timing of the same work (docs/bench-harness.md).
#
# 1. Whole process: tests/src/bin/wordfreq.rs (generate 200000 words, count, top 3),
#    timed by sbs-profile (time.wall) and, in the same run, by hyperfine (the peer tool
#    for whole-process timing), 10 processes each.
# 2. Harnessed: examples/wordfreq-bench's `wordfreq/count` and `wordfreq/top` (the same
#    count and top over the same 200000 words; generation is the set-up), sbs-profile
#    --bench, RUNS processes each, each warming up to steady state and keeping 10
#    measurements: time.op.
# 3. Per-operation counts of the same benchmark: invocations of malloc and allocations.
#
# Usage: benches/harness/run.sh [RUNS]   (from the repository root; needs root for uprobes)
set -euo pipefail
RUNS=${1:-10}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
cargo build --release -p sbs-profile -p sbs-tests >/dev/null 2>&1
SBS=$CARGO_TARGET_DIR/release/sbs-profile
WORDFREQ=$CARGO_TARGET_DIR/release/wordfreq
OUT=${OUT:-/tmp/sbs-bench-harness}
mkdir -p "$OUT"

echo "== whole process: sbs-profile (time.wall) and hyperfine, $RUNS runs each"
"$SBS" --runs "$RUNS" --warmup 1 -f json -o "$OUT/whole.json" -- "$WORDFREQ" 200000
if command -v hyperfine >/dev/null; then
    hyperfine --runs "$RUNS" --warmup 1 -N --export-json "$OUT/hyperfine.json" \
        "$WORDFREQ 200000" >/dev/null
fi

echo "== harnessed: sbs-profile --bench wordfreq (count and top, interleaved), $RUNS processes each"
(cd examples/wordfreq-bench &&
    "$SBS" --bench wordfreq --runs "$RUNS" --warmup 1 -f json -o "$OUT/harness.json" \
        -- wordfreq/)

python3 - "$OUT" <<'PY'
import json, math, sys
out = sys.argv[1]
from statistics import mean, stdev
# Student's t quantiles (0.975) by degrees of freedom, enough for these run counts.
T = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
     9: 2.262, 10: 2.228, 14: 2.145, 19: 2.093, 29: 2.045}
def ci(xs):
    n = len(xs); m = mean(xs); h = T.get(n - 1, 1.96) * stdev(xs) / math.sqrt(n)
    return m, h
def metric(path, id_, bench=None):
    r = json.load(open(path))
    for b in r["benchmarks"]:
        if bench is not None and b["name"] != bench:
            continue
        for m in b["metrics"]:
            if m["id"] == id_:
                return m["samples"]
rows = []
w = metric(f"{out}/whole.json", "time.wall")
rows.append(("sbs-profile, whole process (time.wall)", w))
try:
    h = json.load(open(f"{out}/hyperfine.json"))["results"][0]["times"]
    rows.append(("hyperfine, whole process", h))
except FileNotFoundError:
    pass
for b in ("wordfreq/count", "wordfreq/top"):
    rows.append((f"sbs-profile --bench, {b} (time.op)", metric(f"{out}/harness.json", "time.op", b)))
print(f"| measurement | n | mean | 95% CI half-width | relative |")
print(f"|---|---|---|---|---|")
for name, xs in rows:
    m, hw = ci(xs)
    print(f"| {name} | {len(xs)} | {m*1e3:.4f} ms | ± {hw*1e3:.4f} ms | ± {hw/m*100:.2f}% |")
PY
