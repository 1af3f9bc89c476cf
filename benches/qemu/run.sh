#!/bin/sh
# Instruction counting without a PMU, side by side in one run: CPU time (user + system,
# from GNU time) of RUNS runs of each program natively, under QEMU with the plugin
# (the command `--instructions qemu` runs: `qemu-x86_64 -cpu MODEL -plugin LIB,area=FILE`),
# under cachegrind with its simulations off (the command `--instructions valgrind` runs)
# and under callgrind (what the harness's per-op counts and pinpoint use); then the
# whole-program counts of `sbs-profile --instructions qemu` and `--instructions valgrind`.
# The engines are timed directly, not through sbs-profile, whose own rusage does not
# include the benchmark's (the launcher reaps it).
# Usage: benches/qemu/run.sh [SBS_PROFILE] [RUNS]   (needs qemu-user, valgrind, xz-utils,
# sqlite3, python3.11 and a release build of examples/wordfreq-bench; the plugin is the
# newest libsbs_qemu_plugin.so under target/)
set -eu
sbs=${1:-target/release/sbs-profile}
runs=${2:-3}
wordfreq=${WORDFREQ:-target/release/wordfreq-bench}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A fixed 3 MB input for xz: the first 3 MB of libc followed by python's executable.
cat /usr/lib/x86_64-linux-gnu/libc.so.6 /usr/bin/python3.11 | head -c 3000000 >"$work/in"

plugin=$(ls -t target/*/build/sbs-profile-*/out/libsbs_qemu_plugin.so | head -n 1)
model=Haswell-v2,-pcid,-x2apic,-tsc-deadline,-invpcid
# The count area the plugin writes (sbs_agent_abi::qemu): its size, the magic word first.
python3 -c 'import struct,sys
f=open(sys.argv[1],"wb"); f.write(struct.pack("<Q",0x53425351454d5531)); f.truncate((16+256*(8+3*128))*8)' "$work/area"
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
    q=$(cpu sh -c 'n=$0 m=$1 p=$2 a=$3; shift 3
        for _ in $(seq "$n"); do qemu-x86_64 -cpu "$m" -plugin "$p,area=$a" "$@" >/dev/null; done' \
        "$runs" "$model" "$plugin" "$work/area" "$@")
    v=$(cpu sh -c 'for _ in $(seq "$0"); do valgrind --tool=cachegrind --cache-sim=no --branch-sim=no --cachegrind-out-file=/dev/null --vgdb=no -q "$@" >/dev/null 2>&1; done' "$runs" "$@")
    "$sbs" --instructions qemu -r "$runs" -w 0 -f json -o "$work/q.json" -- "$@" >/dev/null 2>&1
    "$sbs" --instructions valgrind -r "$runs" -w 0 -f json -o "$work/v.json" -- "$@" >/dev/null 2>&1
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
