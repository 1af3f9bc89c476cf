#!/usr/bin/env bash
# pinpoint's cost, measured two ways (issue 13):
#
# 1. Wall time of `sbs-profile pinpoint` on tests/fixtures/c/pinpoint.c (previous build
#    against the one where `deep`, 3 calls below main, does 30% more work) against what a
#    person does by hand: callgrind on each build, then callgrind_annotate --inclusive on
#    each; and of `--metric alloc` (against build 2) against DHAT on each build. The
#    default (no --runs: one run per build and a second run of the previous build, whose
#    counts repeat) beside --runs 1 and --runs 3. The same for
#    tests/fixtures/c/recursive.c (a recursive-descent parser, its helper parse_number
#    slower in build 1), a longer run (about 3 million instructions against 1).
#    Invocations alternate for ROUNDS rounds; medians are reported. With JSON_DIR set to
#    the directory of the serde_json drivers tests/tests/pinpoint_crate.rs builds (in the
#    test cache: work/<checkout>/pinpoint-drivers), the same for serde_json's checksum
#    (instructions) and extra block (alloc) against the published build. With BEFORE set
#    to another sbs-profile executable (an earlier commit's release build), its default
#    pinpoint runs beside the current one's, in the same rounds.
# 2. Comparisons (decisions of the statistics) made by BinaryFind and LinearFind on the
#    fixture's 18-site main, and on a call list of 32 sites (benches/pinpoint/wide.c) for
#    the regressed call at several positions.
#
#   benches/pinpoint/run.sh [ROUNDS=7]
#
# Needs valgrind, gcc and python3.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-7}
for tool in valgrind gcc callgrind_annotate python3; do
    command -v "$tool" >/dev/null || { echo "$tool is missing (apt-get install valgrind gcc python3)" >&2; exit 2; }
done
cargo build --release -q -p sbs-profile
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for v in 0 1 2; do
    gcc -O2 -g -Wall -DVARIANT=$v -o "$dir/v$v" tests/fixtures/c/pinpoint.c
    gcc -O2 -g -Wall -DVARIANT=$v -o "$dir/r$v" tests/fixtures/c/recursive.c
done
gcc -O2 -g -Wall -o "$dir/wide" benches/pinpoint/wide.c
for k in 0 7 15 16 23 31; do
    gcc -O2 -g -Wall -DSLOW=$k -o "$dir/wide$k" benches/pinpoint/wide.c
done
python3 - "$rounds" "$dir" <<'PY'
import json, statistics, subprocess, sys, time
rounds, d = int(sys.argv[1]), sys.argv[2]
sbs = "./target/release/sbs-profile"
def timed(cmds):
    t = time.perf_counter()
    for c in cmds:
        r = subprocess.run(c, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        assert r.returncode in (0, 1), (c, r.returncode)
    return time.perf_counter() - t
def pinpoint(runs, prev, cur, *extra):
    runs = ["--runs", str(runs)] if runs else []
    return [sbs, "pinpoint", *runs, "-f", "json", *extra, "--previous", prev, "--", cur]
def by_hand(tool, out, p, c):
    return [["valgrind", f"--tool={tool}", f"--{tool}-out-file={d}/{out}{v}",
             "--log-file=/dev/null", f"{d}/{v}"] for v in (p, c)]
annotate = [["callgrind_annotate", "--inclusive=yes", f"{d}/hv{v}"] for v in (0, 1)]
cases = {
    "callgrind x2 (by hand, no reading)": by_hand("callgrind", "h", "v0", "v1"),
    "callgrind x2 + callgrind_annotate x2": by_hand("callgrind", "h", "v0", "v1") + annotate,
    "pinpoint --runs 1": [pinpoint(1, f"{d}/v0", f"{d}/v1")],
    "pinpoint (default: 1 run per build + 1 repeat)": [pinpoint(None, f"{d}/v0", f"{d}/v1")],
    "pinpoint --runs 3 (the default before)": [pinpoint(3, f"{d}/v0", f"{d}/v1")],
    "dhat x2 (by hand, no reading)": by_hand("dhat", "d", "v0", "v2"),
    "pinpoint --metric alloc --runs 1": [pinpoint(1, f"{d}/v0", f"{d}/v2", "--metric", "alloc")],
    "pinpoint --metric alloc (default)": [pinpoint(None, f"{d}/v0", f"{d}/v2", "--metric", "alloc")],
    "recursive.c: callgrind x2 (by hand)": by_hand("callgrind", "rh", "r0", "r1"),
    "recursive.c: pinpoint --runs 1": [pinpoint(1, f"{d}/r0", f"{d}/r1")],
    "recursive.c: pinpoint (default)": [pinpoint(None, f"{d}/r0", f"{d}/r1")],
}
import os
j = os.environ.get("JSON_DIR")
if j:
    jb = lambda v: f"{j}/target-{v}/release/jsondriver"
    def json_by_hand(tool, cur):
        return [["valgrind", f"--tool={tool}", f"--{tool}-out-file={d}/j{v}",
                 "--log-file=/dev/null", jb(v)] for v in ("published", cur)]
    cases.update({
        "serde_json: callgrind x2 (by hand)": json_by_hand("callgrind", "checksum"),
        "serde_json: pinpoint --runs 1": [pinpoint(1, jb("published"), jb("checksum"))],
        "serde_json: pinpoint (default)": [pinpoint(None, jb("published"), jb("checksum"))],
        "serde_json: DHAT x2 (by hand)": json_by_hand("dhat", "extra-block"),
        "serde_json: pinpoint --metric alloc --runs 1":
            [pinpoint(1, jb("published"), jb("extra-block"), "--metric", "alloc")],
        "serde_json: pinpoint --metric alloc (default)":
            [pinpoint(None, jb("published"), jb("extra-block"), "--metric", "alloc")],
    })
before = os.environ.get("BEFORE")
if before:
    for k in list(cases):
        if "(default" in k and "pinpoint" in k:
            cases[k.replace("pinpoint", "before: pinpoint", 1)] = [[before] + c[1:] for c in cases[k]]
times = {k: [] for k in cases}
for _ in range(rounds):
    for k, cmds in cases.items():
        times[k].append(timed(cmds))
med = lambda k: statistics.median(times[k])
def base_of(k):
    if k.startswith("recursive.c"):
        return med("recursive.c: callgrind x2 (by hand)")
    if k.startswith("serde_json"):
        alloc = "alloc" in k or "DHAT" in k
        return med("serde_json: DHAT x2 (by hand)" if alloc else "serde_json: callgrind x2 (by hand)")
    if "alloc" in k or k.startswith("dhat"):
        return med("dhat x2 (by hand, no reading)")
    return med("callgrind x2 (by hand, no reading)")
print(f"wall time, median of {rounds} alternating rounds")
print("| what | median | min | max | / by hand (callgrind or DHAT x2) |")
print("|---|---:|---:|---:|---:|")
for k, ts in times.items():
    m = statistics.median(ts)
    print(f"| {k} | {m*1000:.0f} ms | {min(ts)*1000:.0f} ms | {max(ts)*1000:.0f} ms | {m/base_of(k):.2f} |")
out = subprocess.run(pinpoint(None, f"{d}/r0", f"{d}/r1"), capture_output=True, text=True)
p = json.loads(out.stdout)["pinpoint"]
assert [l["function"] for l in p["chain"]] == ["main", "parse_value", "parse_number"], p
assert p["runs"] == 1 and p["repeated"], p

def comparisons(prev, cur, strategy):
    out = subprocess.run(pinpoint(1, prev, cur, "--strategy", strategy),
                         capture_output=True, text=True)
    p = json.loads(out.stdout)["pinpoint"]
    return p["comparisons"], [l["function"] for l in p["chain"]]
print()
print("comparisons (each one decision of the statistics), one run per build")
print("| call list | regressed call | BinaryFind | LinearFind | chain |")
print("|---|---:|---:|---:|---|")
b, chain = comparisons(f"{d}/v0", f"{d}/v1", "binary")
l, chain_l = comparisons(f"{d}/v0", f"{d}/v1", "linear")
assert chain == chain_l, (chain, chain_l)
print(f"| fixture: main 18 sites, 4 layers | outer, call 14 of 18 | {b} | {l} | {' > '.join(chain)} |")
for k in (0, 7, 15, 16, 23, 31):
    b, chain = comparisons(f"{d}/wide", f"{d}/wide{k}", "binary")
    l, chain_l = comparisons(f"{d}/wide", f"{d}/wide{k}", "linear")
    assert chain == chain_l == ["main", f"w{k}"], (chain, chain_l)
    print(f"| wide.c: main 32 sites | w{k}, call {k+1} of 32 | {b} | {l} | {' > '.join(chain)} |")
PY
