#!/usr/bin/env bash
# Decisions on a noisy machine (issue 33): `compare` of `work 60000000` with `work 61800000`
# (3% more work) and of `work 60000000` with itself (A/A), TRIALS trials of RUNS
# interleaved runs each, while the load_phases fixture keeps every core busy and idle in
# turns of 20-400 ms. For each sbs-profile binary, per trial: the change in time.wall,
# time.user and time.cpu with its interval, p-value and method; whether the one-line speed
# summary calls the 3% significant; and which time metrics the A/A comparison calls
# significant (none is the right answer).
#
#   benches/paired-stats.sh [TRIALS=3] [RUNS=30]
#
# SBS_BINS=old:new compares several binaries (e.g. main before the change, given as a
# copy of its release build, and this checkout's), each trial running every binary in
# turn under the same load; the default is this checkout's release build.
set -euo pipefail
cd "$(dirname "$0")/.."
trials=${1:-3}
runs=${2:-30}
cargo build --release -q -p sbs-profile
cargo build -q -p sbs-tests --bin work --bin load_phases
python3 - "$trials" "$runs" "${SBS_BINS:-./target/release/sbs-profile}" <<'PY'
import json, subprocess, sys
trials, runs, bins = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3].split(":")
work = "./target/debug/work"
A, B = f"{work} 60000000", f"{work} 61800000"
out = "/tmp/sbs-paired-stats.json"
SIG = ("regressed", "improved", "below_threshold")

def supports_judge_busy(binary):
    help = subprocess.run([binary, "compare", "--help"], capture_output=True, text=True)
    return "--judge-busy" in help.stdout

def compare(binary, a, b):
    # --judge-busy: load_phases makes the machine busy on purpose, and what is measured
    # here is the statistics' power under it, not the gate's refusal to judge it.
    extra = ["--judge-busy"] if supports_judge_busy(binary) else []
    subprocess.run([binary, "compare", "--runs", str(runs), "-n", "a", "-n", "b",
                    "-f", "json", "-o", out] + extra + [a, b],
                   check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return json.load(open(out))

def comparisons(report):
    return {m["id"]: m["comparison"] for m in report["benchmarks"][1]["metrics"]
            if "comparison" in m}

def change(c):
    if c is None:
        return "-"
    rel, lo, hi = c.get("relative"), c.get("relative_ci_low"), c.get("relative_ci_high")
    if rel is None or lo is None or hi is None:
        return f"{c['verdict']} ({c['method']})"
    p = c.get("p_value")
    p = "-" if p is None else f"{p:.2g}"
    return f"{rel*100:+.1f}% ±{(hi-lo)*50:.1f}% p={p} {c['method']}"

def summary_significant(report):
    s = report.get("speed") or []
    if not s:
        return "-"
    s = s[0]
    if s["verdict"] in SIG:
        return "yes (wall)"
    cpu = s.get("cpu")
    if cpu and cpu["verdict"] in SIG:
        return "yes (cpu)"
    return "no"

rows = {b: [] for b in bins}
for t in range(trials):
    load = subprocess.Popen(["./target/debug/load_phases", "3600", str(t + 1)])
    try:
        for b in bins:
            r = compare(b, A, B)
            c = comparisons(r)
            aa = comparisons(compare(b, A, A))
            aa_sig = [k for k, v in aa.items() if k.startswith("time.") and v["verdict"] in SIG]
            rows[b].append((t + 1, change(c.get("time.wall")), change(c.get("time.user")),
                            change(c.get("time.cpu")), summary_significant(r),
                            ", ".join(aa_sig) or "none"))
    finally:
        load.kill()
        load.wait()
print(f"work 60000000 vs work 61800000 (+3%), {runs} interleaved runs each, under load_phases")
print("| binary | trial | time.wall | time.user | time.cpu | summary significant | A/A significant |")
print("|---|---|---|---|---|---|---|")
for b in bins:
    for row in rows[b]:
        print(f"| {b} | " + " | ".join(str(x) for x in row) + " |")
PY
