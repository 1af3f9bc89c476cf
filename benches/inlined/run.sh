#!/bin/sh
# Counting inlined functions: `sbs-profile --invocations` against `perf probe` + `perf
# stat` (Debian's linux-perf) on the same release build of tests/fixtures/rust/inlined.rs,
# where `Vec::push` and `inlined::bump` (#[inline(always)]) exist only inlined.
# Needs root, rustc, perf; hyperfine for the timing part (skipped without it).
#
# Usage: benches/inlined/run.sh [SBS_PROFILE] [N]
#   SBS_PROFILE: the sbs-profile binary (default: target/release/sbs-profile)
#   N: the fixture's argument (default: 1000)
set -eu
SBS=${1:-target/release/sbs-profile}
N=${2:-1000}
DIR=$(mktemp -d)
trap 'perf probe -q -d "probe_inlined:*" 2>/dev/null || true; rm -rf "$DIR"' EXIT
BIN=$DIR/inlined
SRC=$(cd "$(dirname "$0")/../../tests/fixtures/rust" && pwd)/inlined.rs
rustc --edition 2021 -C opt-level=3 -C debuginfo=2 -o "$BIN" "$SRC"
THIRD=$(( (N + 2) / 3 ))
echo "== expected: Vec::push $((4 * N + THIRD + 7)) in the fixture's code + 2 in std::env::args (argv); bump $((3 * N + 1))"

for F in bump push; do
    echo "== perf probe -x BIN --add $F"
    perf probe -q -d "probe_inlined:*" 2>/dev/null || true
    perf probe -x "$BIN" --add "$F" 2>&1 | grep -v '^$' | grep -v 'perf record' | grep -v 'You can now' || true
    grep probe_inlined /sys/kernel/tracing/uprobe_events || true
    perf stat -x, -e "probe_inlined:$F" -- "$BIN" "$N" 2>&1 >/dev/null | grep probe_inlined || true
    perf probe -q -d "probe_inlined:*" 2>/dev/null || true
done

CPP=$DIR/push_back
if g++ -O2 -g -o "$CPP" "$(dirname "$SRC")/../cpp/push_back.cpp"; then
    echo "== C++ (g++ -O2 -g): expected vector<int>::push_back $N, vector<long>::push_back $((N + N / 2))"
    perf probe -q -d "probe_push_back:*" 2>/dev/null || true
    perf probe -x "$CPP" --add push_back 2>&1 | grep -v '^$' | grep -v 'perf record' | grep -v 'You can now' || true
    grep probe_push_back /sys/kernel/tracing/uprobe_events || true
    perf stat -x, -e "probe_push_back:push_back" -- "$CPP" "$N" 2>&1 >/dev/null | grep probe_push_back || true
    perf probe -q -d "probe_push_back:*" 2>/dev/null || true
    "$SBS" --runs 1 --format json --invocations 'vector::push_back' -- "$CPP" "$N" |
        python3 -c '
import json, sys
r = json.load(sys.stdin)
for m in r["benchmarks"][0]["metrics"]:
    print(m["id"], m["samples"][0])
    for d in m.get("details", []):
        print("   ", d["label"], d["samples"][0])
'
fi

echo "== sbs-profile --invocations-detail --invocations Vec::push --invocations bump"
"$SBS" --runs 1 --format json --invocations-detail --invocations Vec::push --invocations bump -- "$BIN" "$N" |
    python3 -c '
import json, sys
r = json.load(sys.stdin)
for m in r["benchmarks"][0]["metrics"]:
    print(m["id"], m["samples"][0])
    for d in m.get("details", []):
        if d["samples"][0] or "fixtures" in d["label"]:
            print("   ", d["label"].replace("'"$PWD"'/", ""), d["samples"][0])
'

if command -v hyperfine >/dev/null; then
    echo "== wall time of one count (resolution + DWARF + entry analysis + one run)"
    hyperfine -N --warmup 1 --runs 10 \
        -n "sbs-profile bump" "$SBS --runs 1 --warmup 0 --invocations bump -- $BIN $N" \
        -n "sbs-profile Vec::push" "$SBS --runs 1 --warmup 0 --invocations Vec::push -- $BIN $N" \
        -n "perf probe + perf stat (bump)" "sh -c 'perf probe -q -x $BIN --add bump && perf stat -x, -e probe_inlined:bump -- $BIN $N; perf probe -q -d probe_inlined:bump'"
fi

if command -v hyperfine >/dev/null; then
    echo "== resolution in a larger release binary: $SBS itself ($(du -m "$SBS" | cut -f1) MB, debug = 1)"
    # --max-probes 1 stops right after matching: symbols, the DWARF index, and for
    # Vec::push the DWARF walk for its instances and the entry analysis of each.
    "$SBS" --runs 1 --max-probes 1 --invocations Vec::push -- "$SBS" --version 2>&1 | cut -c1-120 || true
    hyperfine -N -i --warmup 1 --runs 10 \
        -n "resolve Vec::push (inlined sites)" "$SBS --runs 1 --max-probes 1 --invocations Vec::push -- $SBS --version" \
        -n "resolve a name that matches nothing" "$SBS --runs 1 --max-probes 1 --invocations no_such_function_xyz -- $SBS --version"
fi
