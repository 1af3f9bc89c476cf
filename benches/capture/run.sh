#!/usr/bin/env bash
# What #[sbs_harness::capture] costs (docs/capture.md, BENCHMARKS.md).
#
# agent/harness/benches/capture_cost.rs: the same 16-byte hash marked and plain
# (`call/marked`, `call/plain`), each operation 1,000 calls, measured side by side in one
# sbs-profile run: instructions per operation under callgrind (exact) and time.op.
#   1. not capturing: a normal run, the attribute's one relaxed load and branch;
#   2. capturing: the same with SBS_CAPTURE set in the children (what `sbs-profile
#      capture` sets), 300 calls kept per function: every call also takes the
#      function's lock and draws a random number; the kept ones serialize their arguments.
# Then a whole application: tests/src/bin/capture_app.rs built in release, alone and under
# `sbs-profile capture`, RUNS runs each interleaved, wall time (bash's clock).
#
# Usage: benches/capture/run.sh [RUNS]   (from the repository root)
set -euo pipefail
RUNS=${1:-5}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
SBS=${SBS:-$CARGO_TARGET_DIR/debug/sbs-profile}
OUT=${OUT:-/tmp/sbs-bench-capture}
rm -rf "$OUT"
mkdir -p "$OUT"
uptime

for mode in off on; do
    env=()
    if [ "$mode" = on ]; then env=(--env "SBS_CAPTURE=$OUT/caps" --env SBS_CAPTURE_CALLS=300); fi
    "$SBS" --bench capture_cost -p sbs-harness "${env[@]}" --instructions valgrind \
        --runs "$RUNS" -f json -o "$OUT/$mode.json" >/dev/null 2>"$OUT/$mode.err" ||
        { cat "$OUT/$mode.err"; exit 2; }
done
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
def mean(b, id):
    return next(m["summary"]["mean"] for m in b["metrics"] if m["id"] == id)
print("| run | benchmark | instructions/op (1,000 calls) | per call | time.op (1,000 calls) | per call |")
print("| --- | --- | ---: | ---: | ---: | ---: |")
for mode, label in [("off", "not capturing"), ("on", "capturing")]:
    r = json.load(open(f"{out}/{mode}.json"))
    for b in sorted(r["benchmarks"], key=lambda b: b["name"]):
        i = mean(b, "counter.instructions/op.calibrated")
        t = mean(b, "time.op.calibrated")
        print(f"| {label} | `{b['name']}` | {i:,.0f} | {i/1000:.1f} | {t*1e6:.2f} µs | {t*1e6:.2f} ns |")
PY

cargo build --release -p sbs-tests --bin capture_app >/dev/null 2>&1
APP=$CARGO_TARGET_DIR/release/capture_app
alone=0; captured=0
for _ in $(seq "$RUNS"); do
    s=$(date +%s%N); "$APP" >/dev/null; e=$(date +%s%N); alone=$((alone + e - s))
    rm -rf "$OUT/app-caps"
    s=$(date +%s%N); "$SBS" capture --out "$OUT/app-caps" -- "$APP" >/dev/null 2>&1; e=$(date +%s%N)
    captured=$((captured + e - s))
done
echo "capture_app (160 calls of 4 marked functions): alone $((alone / RUNS / 1000)) µs, under sbs-profile capture $((captured / RUNS / 1000)) µs (mean of $RUNS)"
du -sh "$OUT/app-caps"
