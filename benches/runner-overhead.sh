#!/usr/bin/env bash
# Per-run overhead of sbs-profile's timing runs against hyperfine on the same trivial
# command. Both tools run N timing runs of /bin/true; the two invocations alternate
# (A B A B ...) for ROUNDS rounds so machine load drifts hit both alike, and the median
# of the per-round ratios is reported with the per-run cost of each tool.
#
#   benches/runner-overhead.sh [N=300] [ROUNDS=15]
#
# SBS_BINS=a:b:c compares several sbs-profile binaries (e.g. before and after a change)
# in the same alternating rounds, each against hyperfine; the default is this checkout's
# release build.
#
# Needs hyperfine (apt-get install hyperfine) and python3.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-300}
rounds=${2:-15}
command -v hyperfine >/dev/null || { echo "hyperfine is missing: apt-get install hyperfine" >&2; exit 2; }
cargo build --release -q -p sbs-profile
python3 - "$n" "$rounds" "${SBS_BINS:-./target/release/sbs-profile}" <<'PY'
import json, statistics, subprocess, sys, time
n, rounds, bins = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3].split(":")
sbs_of = lambda b: [b, "--runs", str(n), "--warmup", "0", "-f", "json",
                    "-o", "/tmp/sbs-overhead-own.json", "--", "/bin/true"]
hf = ["hyperfine", "-N", "--style", "none", "--runs", str(n), "--warmup", "0",
      "--export-json", "/tmp/sbs-overhead-hf.json", "/bin/true"]
def timed(cmd):
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t
A = {b: [] for b in bins}
own = {b: [] for b in bins}
B, theirs = [], []
for _ in range(rounds):
    for b in bins:
        A[b].append(timed(sbs_of(b)))
        own[b].append([m for m in json.load(open("/tmp/sbs-overhead-own.json"))["benchmarks"][0]["metrics"]
                       if m["id"] == "time.wall"][0]["summary"]["mean"])
    B.append(timed(hf))
    theirs.append(json.load(open("/tmp/sbs-overhead-hf.json"))["results"][0]["mean"])
us = lambda s: f"{s * 1e6:7.1f} us"
print(f"{n} runs of /bin/true per invocation, {rounds} alternating rounds")
print(f"hyperfine: total per run (start-up included) {us(statistics.median(B) / n)}, "
      f"mean wall time of /bin/true as reported {us(statistics.median(theirs))}")
for b in bins:
    ratios = [a / h for a, h in zip(A[b], B)]
    print(f"{b}: total per run {us(statistics.median(A[b]) / n)}, "
          f"median ratio to hyperfine {statistics.median(ratios):.3f} "
          f"(min {min(ratios):.3f}, max {max(ratios):.3f}), "
          f"mean wall time of /bin/true as reported {us(statistics.median(own[b]))}")
PY
