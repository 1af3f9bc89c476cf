#!/bin/sh
# Cost per counted call with 1, 2 and 4 threads calling the same function (issue 32):
# `thread_calls N T` starts T threads that each call the `#[inline(never)]`
# `thread_calls::work` N times, all at once. Each tool is run at two N; the slope of the
# CPU time, less the bare program's slope, divided by the calls added (T * (HI - LO)),
# is the CPU time added per call, without any fixed cost.
#
# CPU time rather than wall time: the machine has 2 cores and other builds run on it, and
# contention between threads shows as CPU time too. It is `perf stat -e task-clock`
# around the whole command, which counts every task forked under it (hyperfine's user
# and system times miss the benchmark: sbs-profile's child is not among the processes
# whose times reach hyperfine). Each figure is the median of RUNS runs, the two N and
# the tools interleaved.
# Needs root (uprobes, perf probe), perf, nm and awk.
#
# Usage: benches/inproc/threads.sh [BIN_DIR] [fast|slow|all] [RUNS]
#   BIN_DIR holds sbs-profile and thread_calls (default target/release; build first:
#   cargo build --release -p sbs-profile -p sbs-tests). `fast`: the bare program and the
#   in-process engine; `slow`: the bare program, the uprobe engine and perf probe +
#   perf stat.
set -eu
B=${1:-target/release}
WHICH=${2:-all}
RUNS=${3:-7}
SBS=$B/sbs-profile
TC=$B/thread_calls
SYM=$(nm "$TC" | grep -o '_ZN12thread_calls4work17h[0-9a-f]*E' | head -n 1)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# CPU milliseconds of one run of the command.
cpu_ms() {
    perf stat -x, -e task-clock -o "$TMP/stat" -- "$@" >/dev/null 2>&1
    awk -F, '$3 == "task-clock" { print $1 }' "$TMP/stat"
}
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# tool N T: the command line of `tool` (bare, inproc, uprobe, perf) at N calls per thread.
cmd() {
    case $1 in
    bare) echo "$TC $2 $3" ;;
    inproc | uprobe) echo "$SBS -r 1 -w 0 --invocations-engine $1 --invocations thread_calls::work -- $TC $2 $3" ;;
    perf) echo "perf stat -x, -o /dev/null -e sbsbench:work -- $TC $2 $3" ;;
    esac
}

# LO HI T tools...: prints "tool ms_lo ms_hi" per tool, medians of RUNS interleaved runs.
measure() {
    lo=$1 hi=$2 t=$3
    shift 3
    for tool in "$@"; do : >"$TMP/$tool.lo"; : >"$TMP/$tool.hi"; done
    i=0
    while [ $i -lt "$RUNS" ]; do
        for tool in "$@"; do
            # shellcheck disable=SC2046
            cpu_ms $(cmd "$tool" "$lo" "$t") >>"$TMP/$tool.lo"
            # shellcheck disable=SC2046
            cpu_ms $(cmd "$tool" "$hi" "$t") >>"$TMP/$tool.hi"
        done
        i=$((i + 1))
    done
    for tool in "$@"; do
        echo "$tool $(median <"$TMP/$tool.lo") $(median <"$TMP/$tool.hi")"
    done
}

# Per call, ns: from measure's output, the tool's slope less the bare one's.
report() {
    lo=$1 hi=$2 t=$3
    awk -v lo="$lo" -v hi="$hi" -v t="$t" '
        { a[$1] = $2; b[$1] = $3; order[NR] = $1 }
        END {
            bare = (b["bare"] - a["bare"]) * 1e6 / (t * (hi - lo))
            printf "threads=%d: bare call %.2f ns", t, bare
            for (i = 1; i <= NR; i++) if (order[i] != "bare")
                printf ", %s adds %.2f ns", order[i], (b[order[i]] - a[order[i]]) * 1e6 / (t * (hi - lo)) - bare
            printf " (CPU per call; medians of '"$RUNS"' runs at N=%d and %d per thread)\n", lo, hi
        }'
}

if [ "$WHICH" != slow ]; then
    for T in 1 2 4; do
        measure 2000000 22000000 $T bare inproc | report 2000000 22000000 $T
    done
fi

if [ "$WHICH" != fast ]; then
    perf probe -q -d 'sbsbench:*' 2>/dev/null || true
    perf probe -q -x "$TC" --add "sbsbench:work=$SYM"
    for T in 1 2 4; do
        measure 5000 25000 $T bare uprobe perf | report 5000 25000 $T
    done
    perf probe -q -d 'sbsbench:*'
fi
