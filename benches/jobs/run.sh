#!/bin/sh
# `--jobs`: the wall time of counting groups with their runs overlapping, against the
# same runs one at a time (`-j 1`), interleaved in one run of this script so that both
# see the same machine; and the counts, which must be the same.
# Usage: benches/jobs/run.sh [SBS_PROFILE]
# (default target/release/sbs-profile; build it first). The program is Debian's xz
# compressing the first 256 KiB of libc, one thread: a program nobody here wrote, and one
# whose counts repeat run after run (a Rust program with a randomly seeded HashMap, like
# the bundled example, varies in instructions from run to run, with or without --jobs).
set -eu
sbs=${1:-target/release/sbs-profile}
rounds=${ROUNDS:-3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
head -c 262144 "$(ldd /bin/sh | awk '/libc.so/ {print $3}')" >"$out/input"
set -- xz -T1 -6 -c "$out/input"
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
# wall seconds of one sbs-profile run; its JSON report in $out/$tag.json
wall() {
    tag=$1
    shift
    /usr/bin/time -f '%e' -o "$out/time" "$sbs" -q -w 0 -f json "$@" >"$out/$tag.json"
    cat "$out/time"
}
counts() {
    python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
print(sorted((m["id"], m["samples"]) for b in r["benchmarks"] for m in b["metrics"]
             if m.get("exact")))' "$1"
}
cores=$(nproc)
printf '%s cores, load average %s\n\n' "$cores" "$(cut -d' ' -f1-3 /proc/loadavg)"
printf '| group | `-j 1` | `-j %s` | ratio | counts equal |\n|---|---:|---:|---:|---|\n' "$cores"
for group in "--instructions valgrind -r 4" "--alloc -r 10" "--invocations lzma_code -r 10" \
    "--invocations-engine uprobe --invocations lzma_code -r 10"; do
    : >"$out/one"
    : >"$out/all"
    for _ in $(seq "$rounds"); do
        # shellcheck disable=SC2086
        wall one $group -j 1 -- "$@" >>"$out/one"
        # shellcheck disable=SC2086
        wall all $group -j "$cores" -- "$@" >>"$out/all"
    done
    a=$(median <"$out/one")
    b=$(median <"$out/all")
    same=no
    [ "$(counts "$out/one.json")" = "$(counts "$out/all.json")" ] && same=yes
    printf '| `%s` | %s s | %s s | %.2f | %s |\n' "$group" "$a" "$b" \
        "$(echo "$b / $a" | bc -l)" "$same"
done
