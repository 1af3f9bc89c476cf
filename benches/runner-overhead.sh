#!/usr/bin/env bash
# Per-run overhead of sbs-profile's timing runs against hyperfine on the same trivial
# command, measured side by side in one hyperfine session (alternating, same machine state).
#
#   benches/runner-overhead.sh [RUNS_PER_INVOCATION]
#
# Needs hyperfine (apt-get install hyperfine) and a release build (cargo build --release).
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-300}
command -v hyperfine >/dev/null || { echo "hyperfine is missing: apt-get install hyperfine" >&2; exit 2; }
cargo build --release -q -p sbs-profile
sbs=./target/release/sbs-profile
cmd=/bin/true

echo "== total time of $n runs of $cmd, each tool timing it (outer hyperfine, 10 rounds)"
hyperfine -N --warmup 2 --runs 10 --export-json /tmp/sbs-overhead.json \
  "$sbs --runs $n --warmup 0 -- $cmd" \
  "hyperfine -N --style none --runs $n --warmup 0 $cmd"
python3 - "$n" <<'PY'
import json, sys
n = int(sys.argv[1])
r = json.load(open('/tmp/sbs-overhead.json'))['results']
for x in r:
    print(f"{x['command'][:60]:60s} per run: {x['mean']/n*1e6:8.1f} us")
print(f"ratio sbs-profile / hyperfine: {r[0]['mean']/r[1]['mean']:.3f}")
PY

echo "== what each tool reports as the mean wall time of $cmd"
$sbs --runs $n --warmup 3 -f json -o /tmp/sbs-own.json -- $cmd
hyperfine -N --style none --runs $n --warmup 3 --export-json /tmp/sbs-hf.json $cmd >/dev/null
python3 - <<'PY'
import json
m = [m for m in json.load(open('/tmp/sbs-own.json'))['benchmarks'][0]['metrics'] if m['id'] == 'time.wall'][0]['summary']
print(f"sbs-profile reports: {m['mean']*1e6:7.1f} us (sd {m['sd']*1e6:.1f} us)")
h = json.load(open('/tmp/sbs-hf.json'))['results'][0]
print(f"hyperfine reports:   {h['mean']*1e6:7.1f} us (sd {h['stddev']*1e6:.1f} us)")
PY
