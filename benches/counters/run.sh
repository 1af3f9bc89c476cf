#!/usr/bin/env bash
# Spread and detectable effect of valgrind instruction counts vs wall time, with the other
# core kept busy. Writes raw JSON to $OUT (default: ./results) and prints a summary.
#
#   benches/counters/run.sh            # N=50000000 iterations of the `work` fixture
#   N=20000000 benches/counters/run.sh
#
# Needs: valgrind, hyperfine (the peer tool for timing), python3 with scipy.
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${N:-50000000}
N1=$(( N + N / 100 ))           # 1% more work
OUT=${OUT:-benches/counters/results}
TARGET=${CARGO_TARGET_DIR:-target}
mkdir -p "$OUT"
cargo build --release -q -p sbs-profile -p sbs-tests
SBS="$TARGET/release/sbs-profile"
WORK="$TARGET/release/work"

{
  echo "machine: $(nproc) CPUs, $(uname -r), $(valgrind --version), $(hyperfine --version)"
  echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$OUT/machine.txt"

# Keep the other core busy for the whole measurement.
sh -c 'while :; do :; done' &
LOAD=$!
trap 'kill "$LOAD" 2>/dev/null || true' EXIT
echo "background load: pid $LOAD (busy loop)"

# 1. Spread over 10 runs of the same command.
"$SBS" -r 10 -w 1 --clean-env --instructions valgrind -f json -o "$OUT/sbs-valgrind-10.json" -- "$WORK" "$N"
"$SBS" -r 10 -w 1 --clean-env --time -f json -o "$OUT/sbs-time-10.json" -- "$WORK" "$N"
hyperfine -N -r 10 -w 1 --export-json "$OUT/hyperfine-10.json" "$WORK $N" >/dev/null
"$SBS" -r 10 -w 1 --clean-env --counters task-clock,page-faults,context-switches -f json -o "$OUT/sbs-sw-10.json" -- "$WORK" "$N"
# valgrind itself, the peer for the count (its own out-file summary, 10 runs).
: > "$OUT/valgrind-own-10.txt"
for _ in $(seq 10); do
  env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin setarch -R \
    valgrind --tool=cachegrind --cache-sim=no --branch-sim=no -q \
    --cachegrind-out-file="$OUT/cg.out" "$WORK" "$N" 2>/dev/null
  grep '^summary:' "$OUT/cg.out" | awk '{print $2}' >> "$OUT/valgrind-own-10.txt"
done
rm -f "$OUT/cg.out"

# 2. A 1% work change, 3 runs each: by instruction count and by time (A B alternated).
for n in "$N" "$N1"; do
  "$SBS" -r 3 -w 0 --clean-env --instructions valgrind -f json -o "$OUT/sbs-valgrind-3-$n.json" -- "$WORK" "$n"
  "$SBS" -r 3 -w 1 --clean-env --time -f json -o "$OUT/sbs-time-3-$n.json" -- "$WORK" "$n"
  "$SBS" -r 3 -w 1 --clean-env --counters task-clock -f json -o "$OUT/sbs-sw-3-$n.json" -- "$WORK" "$n"
  "$SBS" -r 10 -w 1 --clean-env --counters task-clock -f json -o "$OUT/sbs-sw-10-$n.json" -- "$WORK" "$n"
done
hyperfine -N -r 3 -w 1 --export-json "$OUT/hyperfine-3.json" "$WORK $N" "$WORK $N1" >/dev/null
# 3. What timing needs: 30 runs each.
for n in "$N" "$N1"; do
  "$SBS" -r 30 -w 1 --clean-env --time -f json -o "$OUT/sbs-time-30-$n.json" -- "$WORK" "$n"
done
hyperfine -N -r 30 -w 1 --export-json "$OUT/hyperfine-30.json" "$WORK $N" "$WORK $N1" >/dev/null

# 4. The tool's own verdict: `compare` runs A and B interleaved, threshold 0.5%.
"$SBS" compare -r 3 -w 0 --clean-env --threshold 0.5 --instructions valgrind \
  "$WORK $N" "$WORK $N1" > "$OUT/compare-valgrind-3.txt" || true
"$SBS" compare -r 3 -w 1 --clean-env --threshold 0.5 --time \
  "$WORK $N" "$WORK $N1" > "$OUT/compare-time-3.txt" || true
"$SBS" compare -r 30 -w 1 --clean-env --threshold 0.5 --time \
  "$WORK $N" "$WORK $N1" > "$OUT/compare-time-30.txt" || true

echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/machine.txt"
kill "$LOAD"
python3 benches/counters/summarize.py "$OUT" "$N" "$N1" | tee "$OUT/summary.md"
for f in compare-valgrind-3 compare-time-3 compare-time-30; do
  echo; echo "### $f"; grep -A3 'Comparison' "$OUT/$f.txt" | tee -a "$OUT/summary.md"
done
