#!/bin/sh
# Benchmark of `sbs-profile --invocations` against `perf probe` + `perf stat` (Debian's
# linux-perf) on the same function and command, and of pattern resolution in a large
# debug binary. Needs root, hyperfine, perf and nm.
#
# Usage: benches/invocations/run.sh [TARGET_DIR] [OUT_DIR]
#   TARGET_DIR: cargo target dir holding release/{sbs-profile,calls} and
#               debug/sbs-profile (default: target)
#   Build first: cargo build --release -p sbs-profile -p sbs-tests && cargo build -p sbs-profile
set -eu
T=${1:-target}
OUT=${2:-.}
R=$T/release
BIN=$R/calls
DBG=$T/debug/sbs-profile
N=10000
THREADS=2
SYM=$(nm "$BIN" | grep -o '_ZN5calls4work17h[0-9a-f]*E' | head -n 1)
PUSH=$(nm "$DBG" | grep -o '_ZN5alloc3vec16Vec$LT$T$C$A$GT$4push17h[0-9a-f]*E' | head -n 1)
perf probe -q -d 'sbsbench:*' 2>/dev/null || true

echo "== one count of calls::work ($N calls x $((THREADS + 2)) = $((N * (THREADS + 2))) hits)"
hyperfine --warmup 2 --runs 10 --export-markdown "$OUT/count-once.md" \
    -n 'calls (no probe)' "$BIN $N $THREADS" \
    -n 'sbs-profile --runs 1' "$R/sbs-profile --runs 1 --warmup 0 --invocations calls::work -- $BIN $N $THREADS" \
    -n 'perf probe + perf stat' "perf probe -q -x $BIN --add sbsbench:work=$SYM && perf stat -x, -e sbsbench:work -- $BIN $N $THREADS; perf probe -q -d 'sbsbench:*'"

echo "== fixed cost: one count of calls::work with 200 hits"
hyperfine --warmup 2 --runs 10 --export-markdown "$OUT/count-small.md" \
    -n 'sbs-profile --runs 1' "$R/sbs-profile --runs 1 --warmup 0 --invocations calls::work -- $BIN 100 0" \
    -n 'perf probe + perf stat' "perf probe -q -x $BIN --add sbsbench:work=$SYM && perf stat -x, -e sbsbench:work -- $BIN 100 0; perf probe -q -d 'sbsbench:*'"

echo "== ten counts in one invocation"
hyperfine --warmup 1 --runs 5 --export-markdown "$OUT/count-ten.md" \
    -n 'sbs-profile --runs 10' "$R/sbs-profile --runs 10 --warmup 0 --invocations calls::work -- $BIN $N $THREADS" \
    -n 'perf probe + perf stat -r 10' "perf probe -q -x $BIN --add sbsbench:work=$SYM && perf stat -r 10 -x, -e sbsbench:work -- $BIN $N $THREADS; perf probe -q -d 'sbsbench:*'"

echo "== resolving a pattern in $DBG ($(du -m "$DBG" | cut -f1) MB, debug build)"
# --max-probes 1 stops right after matching (symbols, demangling, DWARF inlined index).
hyperfine --warmup 1 --runs 10 -i --export-markdown "$OUT/resolve.md" \
    -n 'sbs-profile: Vec::push (all monomorphizations + DWARF)' "$R/sbs-profile --max-probes 1 --invocations Vec::push -- $DBG" \
    -n 'perf probe -n: one mangled Vec::push symbol' "perf probe -n -q -x $DBG --add sbsbench:push=$PUSH"
