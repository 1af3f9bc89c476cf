#!/usr/bin/env python3
"""What a block trailer costs through memory alone: `alloc churn N` bare, and under small
preloaded C libraries that forward the malloc family to glibc with every request grown by
K bytes and nothing else (no counting, no trailer written). K = 0 is the price of
forwarding; K = 3 is the agent's trailer, K = 8 the 8-byte trailer before it. A larger
request moves some sizes to the next glibc chunk size (16 bytes more), which costs page
faults and cache misses.

CPU time (user + system, getrusage(RUSAGE_CHILDREN)) and minor page faults, REPS
interleaved repetitions, median; the ratio is taken per repetition against the bare run
next to it.

Usage: benches/alloc/grown.py [N] [REPS] [K...]   defaults: N=300000 REPS=31 K=0 3 8
  BIN_DIR=dir: use the `alloc` already in dir instead of building it. Needs a C compiler.
"""
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")

FORWARDER = r"""
#include <stddef.h>
void *__libc_malloc(size_t);
void __libc_free(void *);
void *__libc_realloc(void *, size_t);
void *__libc_calloc(size_t, size_t);
void *__libc_memalign(size_t, size_t);
void *malloc(size_t n) { return __libc_malloc(n + GROW); }
void free(void *p) { __libc_free(p); }
void *realloc(void *p, size_t n) { return __libc_realloc(p, n + GROW); }
void *calloc(size_t c, size_t n) {
    size_t total;
    if (__builtin_mul_overflow(c, n, &total)) return NULL;
    return __libc_calloc(1, total + GROW);
}
void *memalign(size_t a, size_t n) { return __libc_memalign(a, n + GROW); }
"""


def run(cmd, env):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        done = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    except FileNotFoundError:
        sys.exit(f"grown.py: {cmd[0]} not found: build it (cargo build --release -p sbs-tests --bin alloc) or fix BIN_DIR")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"{cmd[0]} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, after.ru_minflt - before.ru_minflt


def main():
    args = sys.argv[1:]
    try:
        n = int(args[0]) if len(args) > 0 else 300_000
        reps = int(args[1]) if len(args) > 1 else 31
        grows = [int(k) for k in args[2:]] or [0, 3, 8]
    except ValueError:
        sys.exit("grown.py: N, REPS and K must be whole numbers; usage: grown.py [N] [REPS] [K...]")
    bins = os.environ.get("BIN_DIR")
    if not bins:
        subprocess.run(
            ["cargo", "build", "--release", "-q", "-p", "sbs-tests", "--bin", "alloc"],
            cwd=ROOT,
            check=True,
        )
        target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
        bins = os.path.join(target, "release")
    cmd = [os.path.join(bins, "alloc"), "churn", str(n)]
    out = tempfile.mkdtemp()
    source = os.path.join(out, "forward.c")
    with open(source, "w") as f:
        f.write(FORWARDER)
    if not shutil.which("cc"):
        sys.exit("grown.py: no C compiler (`cc`) found: install gcc or clang to build the forwarders")
    libs = {}
    for k in grows:
        lib = os.path.join(out, f"grow{k}.so")
        built = subprocess.run(
            ["cc", "-O2", "-shared", "-fPIC", f"-DGROW={k}", "-o", lib, source],
            capture_output=True,
            text=True,
        )
        if built.returncode != 0:
            sys.exit(f"grown.py: cc could not build the forwarder: {built.stderr.strip()[-300:]}")
        libs[k] = lib
    print(f"# load average before: {os.getloadavg()}", file=sys.stderr)
    bare, rows = [], {k: [] for k in grows}
    for _ in range(reps):
        b = run(cmd, dict(os.environ))
        bare.append(b)
        for k, lib in libs.items():
            rows[k].append(run(cmd, dict(os.environ, LD_PRELOAD=lib)))
    print(f"# load average after: {os.getloadavg()}", file=sys.stderr)
    bare_cpu = statistics.median(c for c, _ in bare)
    bare_flt = statistics.median(f for _, f in bare)
    print(f"`alloc churn {n}`, {reps} interleaved repetitions, median CPU time (user + system):")
    print()
    print("| requests grown by | CPU | / bare (min-max) | minor faults | faults - bare |")
    print("|---|---:|---:|---:|---:|")
    print(f"| bare | {bare_cpu * 1000:.1f} ms | 1 | {bare_flt:.0f} | 0 |")
    for k in grows:
        ratios = [c / b[0] for (c, _), b in zip(rows[k], bare)]
        cpu = statistics.median(c for c, _ in rows[k])
        flt = statistics.median(f for _, f in rows[k])
        print(
            f"| {k} bytes | {cpu * 1000:.1f} ms | {statistics.median(ratios):.3f}x "
            f"({min(ratios):.3f}-{max(ratios):.3f}) | {flt:.0f} | {flt - bare_flt:+.0f} |"
        )


if __name__ == "__main__":
    main()
