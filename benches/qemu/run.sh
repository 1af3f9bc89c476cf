#!/bin/sh
# Instruction counting without a PMU, side by side in one run: CPU time (user + system,
# the whole process tree, from GNU time) of RUNS runs of each program natively, under
# `sbs-profile --instructions qemu` (QEMU user mode + the plugin), under
# `sbs-profile --instructions valgrind` (cachegrind, simulations off) and under callgrind
# (what the harness's per-op counts and pinpoint use); then the two whole-program counts.
# Usage: benches/qemu/run.sh [SBS_PROFILE] [RUNS]   (needs qemu-user, valgrind, xz-utils,
# sqlite3, python3.11 and a release build of examples/wordfreq-bench)
set -eu
sbs=${1:-target/release/sbs-profile}
runs=${2:-3}
wordfreq=${WORDFREQ:-target/release/wordfreq-bench}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A fixed 3 MB input for xz: the first 3 MB of libc followed by python's executable.
cat /usr/lib/x86_64-linux-gnu/libc.so.6 /usr/bin/python3.11 | head -c 3000000 >"$work/in"

cpu() { # CPU seconds of a command (stdout discarded)
    /usr/bin/time -f '%U %S' "$@" 2>&1 >/dev/null | tail -n 1 | awk '{printf "%.2f", $1 + $2}'
}
mean() { # mean of counter.instructions in a JSON report
    python3 -c 'import json,sys
r=json.load(open(sys.argv[1]))
m=[m for m in r["benchmarks"][0]["metrics"] if m["id"]=="counter.instructions"][0]
print(int(m["summary"]["mean"]))' "$1"
}

printf '| program | native | qemu | cachegrind | callgrind | qemu / cachegrind | qemu count | cachegrind count | difference |\n'
printf '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n'
bench() {
    name=$1
    shift
    n=$(cpu sh -c 'for _ in $(seq "$0"); do "$@" >/dev/null; done' "$runs" "$@")
    q=$(cpu "$sbs" --instructions qemu -r "$runs" -w 0 -f json -o "$work/q.json" -- "$@")
    v=$(cpu "$sbs" --instructions valgrind -r "$runs" -w 0 -f json -o "$work/v.json" -- "$@")
    c=$(cpu sh -c 'for _ in $(seq "$0"); do valgrind --tool=callgrind --callgrind-out-file=/dev/null --vgdb=no -q "$@" >/dev/null 2>&1; done' "$runs" "$@")
    qc=$(mean "$work/q.json")
    vc=$(mean "$work/v.json")
    printf '| %s | %s s | %s s | %s s | %s s | %s | %s | %s | %s%% |\n' "$name" "$n" "$q" "$v" "$c" \
        "$(echo "$q $v" | awk '{printf "%.2f", $1 / $2}')" "$qc" "$vc" \
        "$(echo "$qc $vc" | awk '{printf "%+.3f", 100 * ($1 - $2) / $2}')"
}
bench 'xz -9 (3 MB)' /usr/bin/xz -9 -T1 -c "$work/in"
bench 'sqlite3 (300k-row CTE)' /usr/bin/sqlite3 :memory: \
    'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x<300000) SELECT sum(x*x%7) FROM c;'
bench 'python3.11 -c (100k squares)' /usr/bin/python3.11 -c 'print(sum(i*i for i in range(100000)))'
bench 'wordfreq-bench 200000 count' "$wordfreq" 200000 count
