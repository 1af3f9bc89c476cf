#!/bin/sh
# In-process invocation counting (issue 16) against the uprobe engine and against
# `perf probe` + `perf stat` on the same function and command, in one run:
#   1. the bundled example, `--invocations Vec::push -r 5 -w 0`, both engines (and the
#      counts each reports);
#   2. the cost added per counted call: a loop calling the `#[inline(never)]`
#      `calls::work` (`calls N 0`: 2N calls, main process and a forked child), timed at
#      two N; the slope between them, less the bare program's slope, is the cost per
#      call without any fixed cost;
#   3. the fixed cost of a pattern with many sites: `many_step` (1000 functions, each
#      called once) and `Vec::push` on the example (59 sites), against the bare program.
# Needs root (uprobes, perf probe), hyperfine, perf, nm and jq.
#
# Usage: benches/inproc/run.sh [TARGET_DIR] [OUT_DIR]
#   Build first: cargo build --release -p sbs-profile -p sbs-tests
set -eu
T=${1:-target}
OUT=${2:-.}
R=$T/release
SBS=$R/sbs-profile
CALLS=$R/calls
WF=$R/wordfreq
MANY=$R/many_functions
SYM=$(nm "$CALLS" | grep -o '_ZN5calls4work17h[0-9a-f]*E' | head -n 1)
perf probe -q -d 'sbsbench:*' 2>/dev/null || true

mean() { jq ".results[$2].mean" "$1"; }

echo "== 1. bundled example: --invocations Vec::push -r 5 -w 0"
for e in auto uprobe; do
    printf '%s: ' "$e"
    "$SBS" -r 5 -w 0 -f json --invocations-engine "$e" --invocations Vec::push -- "$WF" |
        jq -c '.benchmarks[0].metrics[0] | [.source, .samples]'
done
hyperfine --warmup 1 --runs 3 --export-json "$OUT/inproc-example.json" \
    --export-markdown "$OUT/inproc-example.md" \
    -n 'wordfreq, bare' "$WF" \
    -n 'auto: in-process + uprobes' "$SBS -r 5 -w 0 --invocations Vec::push -- $WF" \
    -n 'uprobe engine' "$SBS -r 5 -w 0 --invocations-engine uprobe --invocations Vec::push -- $WF"

echo "== 2. cost per counted call (calls N 0: 2N calls of calls::work)"
LO=1000000
HI=11000000
hyperfine --warmup 1 --runs 5 --export-json "$OUT/inproc-fast.json" \
    -n "bare N=$LO" "$CALLS $LO 0" \
    -n "bare N=$HI" "$CALLS $HI 0" \
    -n "inproc N=$LO" "$SBS -r 1 -w 0 --invocations-engine inproc --invocations calls::work -- $CALLS $LO 0" \
    -n "inproc N=$HI" "$SBS -r 1 -w 0 --invocations-engine inproc --invocations calls::work -- $CALLS $HI 0"
ULO=10000
UHI=110000
perf probe -q -x "$CALLS" --add "sbsbench:work=$SYM"
hyperfine --warmup 1 --runs 5 --export-json "$OUT/inproc-slow.json" \
    -n "bare N=$ULO" "$CALLS $ULO 0" \
    -n "bare N=$UHI" "$CALLS $UHI 0" \
    -n "uprobe N=$ULO" "$SBS -r 1 -w 0 --invocations-engine uprobe --invocations calls::work -- $CALLS $ULO 0" \
    -n "uprobe N=$UHI" "$SBS -r 1 -w 0 --invocations-engine uprobe --invocations calls::work -- $CALLS $UHI 0" \
    -n "perf stat N=$ULO" "perf stat -x, -o /dev/null -e sbsbench:work -- $CALLS $ULO 0" \
    -n "perf stat N=$UHI" "perf stat -x, -o /dev/null -e sbsbench:work -- $CALLS $UHI 0"
perf probe -q -d 'sbsbench:*'
per_call() { # file index_lo index_hi n_lo n_hi bare_lo bare_hi
    jq -n --argjson lo "$(mean "$1" "$2")" --argjson hi "$(mean "$1" "$3")" \
        --argjson blo "$(mean "$1" "$6")" --argjson bhi "$(mean "$1" "$7")" \
        "(((\$hi - \$lo) - (\$bhi - \$blo)) / (2 * ($5 - $4))) * 1e9 | . * 100 | round / 100"
}
echo "added per call, ns: inproc $(per_call "$OUT/inproc-fast.json" 2 3 $LO $HI 0 1)," \
    "uprobe $(per_call "$OUT/inproc-slow.json" 2 3 $ULO $UHI 0 1)," \
    "perf probe + perf stat $(per_call "$OUT/inproc-slow.json" 4 5 $ULO $UHI 0 1)"
echo "bare per call, ns: $(jq -n --argjson lo "$(mean "$OUT/inproc-fast.json" 0)" --argjson hi "$(mean "$OUT/inproc-fast.json" 1)" "(\$hi - \$lo) / (2 * ($HI - $LO)) * 1e9 | . * 100 | round / 100")"

echo "== 3. fixed cost of a pattern with many sites"
hyperfine --warmup 1 --runs 5 --export-json "$OUT/inproc-fixed.json" \
    -n 'many_functions, bare' "$MANY" \
    -n 'many_step (1000 sites), inproc' "$SBS -r 1 -w 0 --max-probes 5000 --invocations-engine inproc --invocations many_step -- $MANY" \
    -n 'many_step (1000 sites), uprobe' "$SBS -r 1 -w 0 --max-probes 5000 --invocations-engine uprobe --invocations many_step -- $MANY" \
    -n 'wordfreq, bare' "$WF" \
    -n 'Vec::push (59 sites), auto, -r 1' "$SBS -r 1 -w 0 --invocations Vec::push -- $WF" \
    -n 'Vec::push (59 sites), uprobe, -r 1' "$SBS -r 1 -w 0 --invocations-engine uprobe --invocations Vec::push -- $WF" \
    -n 'Vec::push, resolution only (--max-probes 1 stops after it)' -i "$SBS --max-probes 1 --invocations Vec::push -- $WF"
jq -r '.results[] | "\(.command)\t\(.mean * 1000 | round) ms ± \(.stddev * 1000 | round)"' "$OUT/inproc-fixed.json"
