#!/bin/sh
# The collector's own fixed cost per metric group: user + system CPU seconds of
# `sbs-profile GROUP -r 1 -w 0` on PROGRAM (run with `--version`, so the child costs
# next to nothing), against the same on /bin/true, median of 5.
# Usage: benches/fixed-cost.sh [SBS_PROFILE] [PROGRAM]
set -eu
sbs=${1:-target/release/sbs-profile}
program=${2:-/bin/true}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
cost() {
    for _ in 1 2 3 4 5; do
        /usr/bin/time -f '%U %S' "$sbs" "$@" -r 1 -w 0 -f json -- "$target" --version \
            2>&1 >/dev/null | tail -n 1 | awk '{printf "%.3f\n", $1 + $2}'
    done | median
}
printf '| group | %s | /bin/true |\n| --- | ---: | ---: |\n' "$(basename "$program")"
for group in --time --alloc --memory "--counters page-faults" "--invocations main"; do
    target=$program
    # shellcheck disable=SC2086
    a=$(cost $group)
    target=/bin/true
    # shellcheck disable=SC2086
    b=$(cost $group 2>/dev/null || echo '-')
    printf '| `%s` | %s s | %s s |\n' "$group" "$a" "$b"
done
