#!/bin/sh
# Allocation agent overhead, side by side in one hyperfine run: bare program, under our
# agent (the library and report region `--alloc` uses, via the `with_agent` helper),
# under heaptrack and under valgrind DHAT. Results: docs/bench-alloc.md.
#
# Usage: benches/alloc/run.sh [N] [RUNS]   (needs hyperfine, heaptrack, valgrind)
set -eu
N=${1:-300000}
RUNS=${2:-5}
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}
cargo build --release -q -p sbs-tests --bin alloc --bin with_agent
BIN=$CARGO_TARGET_DIR/release
OUT=${OUT:-$(mktemp -d)}
for tool in hyperfine heaptrack valgrind; do
    command -v $tool >/dev/null || { echo "missing: $tool" >&2; exit 2; }
done
echo "# single-threaded: alloc churn $N" >&2
hyperfine -N --warmup 1 --runs "$RUNS" --export-markdown "$OUT/churn.md" \
    -n bare "$BIN/alloc churn $N" \
    -n sbs-agent "$BIN/with_agent $BIN/alloc churn $N" \
    -n heaptrack "heaptrack -o $OUT/heaptrack.churn $BIN/alloc churn $N" \
    -n dhat "valgrind --tool=dhat --dhat-out-file=/dev/null $BIN/alloc churn $N"
echo "# bare vs agent, more runs" >&2
hyperfine -N --warmup 2 --runs $((RUNS * 6)) --export-markdown "$OUT/churn-precise.md" \
    -n bare "$BIN/alloc churn $N" \
    -n sbs-agent "$BIN/with_agent $BIN/alloc churn $N"
echo "# two threads: alloc stress 2 $N" >&2
hyperfine -N --warmup 1 --runs $((RUNS * 2)) --export-markdown "$OUT/stress.md" \
    -n bare "$BIN/alloc stress 2 $N" \
    -n sbs-agent "$BIN/with_agent $BIN/alloc stress 2 $N"
echo "# counts" >&2
"$BIN/with_agent" "$BIN/alloc" churn "$N"
valgrind --tool=dhat --dhat-out-file=/dev/null "$BIN/alloc" churn "$N" 2>&1 | grep -E "Total|t-gmax"
cat "$OUT"/churn.md "$OUT"/churn-precise.md "$OUT"/stress.md
