#!/usr/bin/env bash
# The cost and the power of sampled time (issue 15), on tests/fixtures/c/timepin.c:
#
# 1. Overhead of stack sampling on the current build (walk reads with a cache-hostile
#    stride), side by side in alternating rounds: the bare program; `sbs-profile --time`
#    (one timing run, the tool's own cost without sampling); `sbs-profile --profile-time`
#    (one sampled run: sampling, unwinding, reading the ELF); `perf record -g` at the same
#    rate (frame-pointer call chains, written to a file); `perf record --call-graph
#    dwarf` at the same rate and stack size (stack copies, as sbs-profile takes them).
#    Wall time of the whole command, medians with min and max.
# 2. How many runs per build `pinpoint --metric time` needs to name walk on a loaded
#    machine: LOADERS busy loops run during the whole part; for each --runs value, REPS
#    searches; how many named walk (and how many A/A runs claimed a bottleneck).
#
#   benches/pinpoint/time.sh [ROUNDS=9] [REPS=5] [LOADERS=2]
#
# Needs gcc, perf (apt-get install linux-perf) and python3; root or perf_event_paranoid
# <= 1 for kernel samples.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-9}
reps=${2:-5}
loaders=${3:-2}
for tool in gcc perf python3; do
    command -v "$tool" >/dev/null || { echo "$tool is missing (apt-get install gcc linux-perf python3)" >&2; exit 2; }
done
cargo build --release -q -p sbs-profile
dir=$(mktemp -d)
trap 'rm -rf "$dir"; kill $(jobs -p) 2>/dev/null || true' EXIT
for v in 0 1; do
    gcc -O2 -g -Wall -DVARIANT=$v -o "$dir/v$v" tests/fixtures/c/timepin.c
done
python3 - "$rounds" "$reps" "$loaders" "$dir" <<'PY'
import json, statistics, subprocess, sys, time
rounds, reps, loaders, d = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
sbs = "./target/release/sbs-profile"
exe = f"{d}/v1"
def timed(cmd):
    t = time.perf_counter()
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert r.returncode == 0, (cmd, r.returncode)
    return time.perf_counter() - t
cases = {
    "bare program": [exe],
    "sbs-profile --time -r 1 -w 0 (no sampling)": [sbs, "--time", "-r", "1", "-w", "0", "--", exe],
    "sbs-profile --profile-time -r 1 -w 0": [sbs, "--profile-time", "-r", "1", "-w", "0", "--", exe],
    "perf record -g -F 4000": ["perf", "record", "-q", "-g", "-F", "4000", "-o", f"{d}/fp.data", "--", exe],
    "perf record --call-graph dwarf,16384 -F 4000": ["perf", "record", "-q", "--call-graph", "dwarf,16384", "-F", "4000", "-o", f"{d}/dwarf.data", "--", exe],
}
times = {k: [] for k in cases}
for _ in range(rounds):
    for k, cmd in cases.items():
        times[k].append(timed(cmd))
base = statistics.median(times["bare program"])
print(f"wall time of the whole command, median of {rounds} alternating rounds")
print("| what | median | min | max | / bare |")
print("|---|---:|---:|---:|---:|")
for k, ts in times.items():
    m = statistics.median(ts)
    print(f"| {k} | {m*1000:.0f} ms | {min(ts)*1000:.0f} ms | {max(ts)*1000:.0f} ms | {m/base:.2f} |")

busy = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(loaders)]
try:
    print()
    print(f"pinpoint --metric time under {loaders} busy loops, {reps} searches per --runs value")
    print("| --runs | named walk | chain | undecided | A/A claimed a bottleneck | median wall |")
    print("|---:|---:|---|---:|---:|---:|")
    for runs in (2, 3, 5, 10):
        named, undecided, aa, walls, chains = 0, 0, 0, [], set()
        for _ in range(reps):
            t = time.perf_counter()
            out = subprocess.run([sbs, "pinpoint", "--metric", "time", "--runs", str(runs),
                                  "-f", "json", "--previous", f"{d}/v0", "--", exe],
                                 capture_output=True, text=True)
            walls.append(time.perf_counter() - t)
            p = json.loads(out.stdout)["pinpoint"]
            named += p["bottleneck"] == "walk"
            undecided += p["stop"] == "undecided"
            chains.add(" > ".join(l["function"] for l in p["chain"]))
            out = subprocess.run([sbs, "pinpoint", "--metric", "time", "--runs", str(runs),
                                  "-f", "json", "--previous", f"{d}/v0", "--", f"{d}/v0"],
                                 capture_output=True, text=True)
            aa += json.loads(out.stdout)["pinpoint"]["bottleneck"] is not None
        print(f"| {runs} | {named}/{reps} | {'; '.join(sorted(chains))} | {undecided} | {aa}/{reps} | {statistics.median(walls):.1f} s |")
finally:
    for b in busy:
        b.kill()
PY
