#!/usr/bin/env bash
# Benchmarks of the regression machinery (docs/bench-stats.md).
# Usage: benches/stats/run.sh [ROUNDS]   (needs python3 with scipy, and hyperfine)
# Builds sbs-profile and the allocate fixture (debug), then:
#  1. oracle: Welch intervals of a real `compare` recomputed with scipy;
#  2. A/A: the same command compared with itself ROUNDS times: how often the gate fires;
#  3. A/B: 200 vs 210 blocks (5% more memory) ROUNDS times: how often it is caught;
#  4. side by side with hyperfine on the same two commands;
#  5. the cost of reading a history of 100 entries.
set -euo pipefail
ROUNDS=${1:-20}
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}
cargo build -q -p sbs-profile -p sbs-tests --bin sbs-profile --bin allocate
S=$CARGO_TARGET_DIR/debug/sbs-profile
A=$CARGO_TARGET_DIR/debug/allocate
SIZE=262144
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

echo "== 1. oracle (scipy) on compare --runs 10 '$A 200 $SIZE' '$A 210 $SIZE'"
"$S" compare --runs 10 --format json "$A 200 $SIZE" "$A 210 $SIZE" >"$TMP/ab.json" || true
python3 benches/stats/oracle.py "$TMP/ab.json"

tally() { # $1 = label, rest = compare args; prints verdict counts per metric
  local label=$1; shift
  : >"$TMP/verdicts"
  for _ in $(seq "$ROUNDS"); do
    "$S" compare --runs 10 --warmup 1 --format json "$@" >"$TMP/r.json" || true
    python3 - "$TMP/r.json" >>"$TMP/verdicts" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for m in r["benchmarks"][1]["metrics"]:
    c = m.get("comparison")
    if c:
        print(m["id"], c["verdict"])
PY
  done
  echo "-- $label: verdicts over $ROUNDS rounds (metric verdict count)"
  sort "$TMP/verdicts" | uniq -c | awk '{printf "   %-10s %-16s %s\n", $2, $3, $1}'
}

echo "== 2. A/A: the same command twice, --runs 10, threshold 2%"
tally "A/A" "$A 200 $SIZE" "$A 200 $SIZE"
echo "== 3. A/B: 200 vs 210 blocks (+5% memory), --runs 10, threshold 2%"
tally "A/B" "$A 200 $SIZE" "$A 210 $SIZE"

echo "== 4. hyperfine on the same commands (--runs 10 --warmup 1)"
hyperfine -N --runs 10 --warmup 1 "$A 200 $SIZE" "$A 210 $SIZE" 2>&1 | sed 's/^/   /'
echo "-- sbs-profile compare on the same commands"
"$S" compare --runs 10 --warmup 1 "$A 200 $SIZE" "$A 210 $SIZE" 2>&1 | sed 's/^/   /' || true

echo "== 5. history of 100 sessions of 'true': false alarms while saving, and the cost of reading it"
: >"$TMP/errs"
fired=0
for _ in $(seq 100); do
  "$S" --runs 2 --warmup 0 --history "$TMP/h" --save --name t -- true >/dev/null 2>"$TMP/err" || fired=$((fired + 1))
  cat "$TMP/err" >>"$TMP/errs"
done
echo "-- saving 100 sessions of 'true' (2 runs each): the gate fired in $fired of them:"
sort "$TMP/errs" | sed 's/ against .*(/ (/' | cut -c1-80 | sort | uniq -c | sed 's/^/   /' || true
hyperfine -N --runs 20 --warmup 2 \
  -n "no history" "$S --runs 1 --warmup 0 --history $TMP/none --name t -- true" \
  -n "100 entries (depth 5)" "$S --runs 1 --warmup 0 --history $TMP/h --name t --threshold 1000 -- true" \
  -n "100 entries, depth 100" "$S --runs 1 --warmup 0 --history $TMP/h --name t --threshold 1000 --history-depth 100 -- true" \
  2>&1 | sed 's/^/   /'
