#!/usr/bin/env bash
# rss.peak of real programs against /usr/bin/time -v's "Maximum resident set size":
# each program is measured by GNU time (3 runs) and by every sbs-profile binary given
# (3 runs each, the timing group's rss.peak), and the medians are printed side by side.
#
#   benches/rss-peak.sh [SBS_BINARY...]     (default: this checkout's release build)
#
# Needs GNU time (apt-get install time) and python3; xz, gzip, git and sqlite3 are used
# where installed.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x /usr/bin/time ] || { echo "GNU time is missing: apt-get install time" >&2; exit 2; }
if [ $# -eq 0 ]; then
  cargo build --release -q -p sbs-profile
  set -- ./target/release/sbs-profile
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
head -c 20000000 /dev/urandom | base64 > "$work/data"
python3 - "$work" "$@" <<'PY'
import json, shutil, statistics, subprocess, sys
work, bins = sys.argv[1], sys.argv[2:]
py = "/usr/bin/python3" if shutil.os.path.exists("/usr/bin/python3") else sys.executable
programs = [["/bin/true"], [py, "-c", "pass"],
            [py, "-c", "b = bytearray(40 << 20); b[::4096] = b'x' * len(b[::4096])"]]
if shutil.which("xz"):
    programs.append(["xz", "-T2", "-6", "-c", f"{work}/data"])
if shutil.which("gzip"):
    programs.append(["gzip", "-c", f"{work}/data"])
if shutil.which("git"):
    programs.append(["git", "--version"])
if shutil.which("sqlite3"):
    programs.append(["sqlite3", ":memory:", "select count(*) from generate_series(1, 200000);"])
def gnu_time(argv):
    out = subprocess.run(["/usr/bin/time", "-v", *argv], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    line = [l for l in out.stderr.splitlines() if "Maximum resident set size" in l][0]
    return int(line.split(":")[1]) / 1024
def sbs(binary, argv):
    out = subprocess.run([binary, "--runs", "3", "--warmup", "0", "-f", "json", "--aslr",
                          "--", *argv], capture_output=True, text=True, check=True)
    m = [m for m in json.loads(out.stdout)["benchmarks"][0]["metrics"] if m["id"] == "rss.peak"][0]
    return statistics.median(m["samples"]) / (1 << 20)
head = "| program | /usr/bin/time -v | " + " | ".join(bins) + " |"
print(head)
print("|" + "---|" * (2 + len(bins)))
for argv in programs:
    oracle = statistics.median(gnu_time(argv) for _ in range(3))
    cells = [f"{sbs(b, argv):.2f} MiB" for b in bins]
    name = " ".join(a if "/" not in a else a.rsplit("/", 1)[1] for a in argv)
    print(f"| `{name[:60]}` | {oracle:.2f} MiB | " + " | ".join(cells) + " |")
PY
