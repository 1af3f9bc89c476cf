#!/usr/bin/env python3
"""The allocation hook's worst case, side by side in one run: `alloc ring T N` (each of T
threads frees and mallocs blocks of 16-79 bytes over a 64-slot ring, N rounds, glibc's
per-thread cache always hot) bare, under our agent (`with_agent`: the library and report
file `--alloc` uses), under heaptrack and under valgrind DHAT.

CPU time (user + system of the whole process tree, from getrusage(RUSAGE_CHILDREN)) is
the measure: on a loaded 2-core machine wall time with 4 threads says more about the
scheduler than about the hook. The agent's tree includes the `with_agent` launcher (its
exec, the report file, the wait): about 1 ms, which matters for short programs such as
churn. `with_agent` also reports the program's own CPU time, and the "program" ratio
(program CPU under the agent over bare CPU) leaves the launcher out: under `sbs-profile`
the collector is running anyway, and it launches the bare runs too. Bare and agent runs are interleaved, REPS each; the
ratio is taken per repetition (agent / the bare run next to it) and the median is
reported. heaptrack and DHAT are slow, so they run once each, with N / SLOW_DIV rounds
per thread, and are compared with a bare run of the same size. Per-call cost:
(tool CPU - bare CPU) / (2 x T x N), a round being one malloc and one free.

Usage: benches/alloc/ring.py [N] [REPS] [SLOW_DIV] [THREADS...]
  defaults: N=5000000 REPS=7 SLOW_DIV=20 THREADS=1 2 4
  BIN_DIR=dir: use the `alloc` and `with_agent` already in dir instead of building them.
  BEFORE_DIR=dir: also time the agent of an older build (its `alloc` and `with_agent`
  copied to dir), interleaved with the others: before and after in the same run.
  CHURN=n: also time the realistic single-threaded `alloc churn n` (bare, agent, before).
  FORK_ONCE=1: also time `alloc fork-then-ring N` (one child that ends at once, then the
  ring in the parent, which is alone in the process tree again).
  THREAD_ONCE=1: also time `alloc thread-then-ring N` (one helper thread that ends, then
  the ring in the main thread, which is the only thread again).
  ONE_WORKER=1: also time `alloc worker-ring N` (the ring in one spawned thread while the
  main thread waits in `join`).
  PROCS="1 2": also time `alloc ring-procs P N` (P forked children, each one thread of
  the ring, at once): the agent's process-tree mode, where every call takes the general
  path. Compare with the 1-thread row, which runs the same calls in one process.
"""
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def cpu_of(cmd):
    """CPU seconds (user + system) of `cmd` and everything it waited for."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"{cmd[0]} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, done.stderr


def agent_line(err):
    return next((l for l in err.splitlines() if l.startswith("with_agent:")), "")


def program_cpu(line):
    """The program's own CPU seconds from a `with_agent` line, or None (an older build)."""
    field = next((f for f in line.split() if f.startswith("program_cpu_us=")), None)
    return int(field.split("=")[1]) / 1e6 if field else None


def side_by_side(cmd, with_agent, before, reps, calls, what):
    """Bare, agent and (with `before`) the older agent, interleaved `reps` times."""
    bare, agent, ratios, old, old_ratios, program_ratios, old_program_ratios = [], [], [], [], [], [], []
    counts = old_counts = ""
    for _ in range(reps):
        b, _ = cpu_of(cmd)
        a, err = cpu_of([with_agent] + cmd)
        bare.append(b)
        agent.append(a)
        ratios.append(a / b)
        counts = agent_line(err)
        program = program_cpu(counts)
        if program is not None:
            program_ratios.append(program / b)
        if before:
            old_cmd = [os.path.join(before, "with_agent"), os.path.join(before, "alloc")] + cmd[1:]
            o, err = cpu_of(old_cmd)
            old.append(o)
            old_ratios.append(o / b)
            old_counts = agent_line(err)
            program = program_cpu(old_counts)
            if program is not None:
                old_program_ratios.append(program / b)
    row = {
        "what": what,
        "bare": statistics.median(bare),
        "agent": statistics.median(agent),
        "ratio": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "counts": counts,
    }
    if program_ratios:
        row["program_ratio"] = statistics.median(program_ratios)
    if calls:
        row["agent_ns"] = (row["agent"] - row["bare"]) / calls * 1e9
    if before:
        row["before_ratio"] = statistics.median(old_ratios)
        row["before_counts"] = old_counts
        if old_program_ratios:
            row["before_program_ratio"] = statistics.median(old_program_ratios)
        if calls:
            row["before_ns"] = (statistics.median(old) - row["bare"]) / calls * 1e9
    return row


def main():
    args = sys.argv[1:]
    n = int(args[0]) if len(args) > 0 else 5_000_000
    reps = int(args[1]) if len(args) > 1 else 7
    slow_div = int(args[2]) if len(args) > 2 else 20
    threads = [int(t) for t in args[3:]] or [1, 2, 4]
    bins = os.environ.get("BIN_DIR")
    if not bins:
        target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
        subprocess.run(
            ["cargo", "build", "--release", "-q", "-p", "sbs-tests", "--bin", "alloc", "--bin", "with_agent"],
            cwd=ROOT,
            check=True,
        )
        bins = os.path.join(target, "release")
    alloc = os.path.join(bins, "alloc")
    with_agent = os.path.join(bins, "with_agent")
    slow_tools = [t for t in ("heaptrack", "valgrind") if shutil.which(t)]
    for missing in {"heaptrack", "valgrind"} - set(slow_tools):
        print(f"# {missing} not found: its column is left out", file=sys.stderr)
    print(f"# load average before: {os.getloadavg()}", file=sys.stderr)
    out = tempfile.mkdtemp()
    before = os.environ.get("BEFORE_DIR")
    rows = []
    for t in threads:
        ring = [alloc, "ring", str(t), str(n)]
        calls = 2 * t * n
        row = side_by_side(ring, with_agent, before, reps, calls, "ring")
        row["threads"] = t
        small = [alloc, "ring", str(t), str(n // slow_div)]
        small_calls = 2 * t * (n // slow_div)
        if slow_tools:
            small_bare, _ = cpu_of(small)
            row["small_bare"] = small_bare
        if "heaptrack" in slow_tools:
            h, _ = cpu_of(["heaptrack", "-o", os.path.join(out, f"ht{t}")] + small)
            row["heaptrack"] = h / small_bare
            row["heaptrack_ns"] = (h - small_bare) / small_calls * 1e9
        if "valgrind" in slow_tools:
            d, _ = cpu_of(["valgrind", "--tool=dhat", "--dhat-out-file=/dev/null"] + small)
            row["dhat"] = d / small_bare
            row["dhat_ns"] = (d - small_bare) / small_calls * 1e9
        rows.append(row)
        print(f"# {row}", file=sys.stderr)
    procs = []
    for p in (int(x) for x in os.environ.get("PROCS", "").split()):
        cmd = [alloc, "ring-procs", str(p), str(n)]
        row = side_by_side(cmd, with_agent, before, reps, 2 * p * n, "ring-procs")
        row["procs"] = p
        procs.append(row)
        print(f"# procs: {row}", file=sys.stderr)
    # One helper (a process, a thread) that ends before the ring in the main thread.
    once = []
    for env, mode in (
        ("FORK_ONCE", "fork-then-ring"),
        ("THREAD_ONCE", "thread-then-ring"),
        ("ONE_WORKER", "worker-ring"),
    ):
        if os.environ.get(env):
            row = side_by_side([alloc, mode, str(n)], with_agent, before, reps, 2 * n, mode)
            row["mode"] = mode
            once.append(row)
            print(f"# {mode}: {row}", file=sys.stderr)
    churn = None
    if os.environ.get("CHURN"):
        churn_cmd = [alloc, "churn", os.environ["CHURN"]]
        churn = side_by_side(churn_cmd, with_agent, before, reps, 0, "churn")
        print(f"# churn: {churn}", file=sys.stderr)
    print(f"# load average after: {os.getloadavg()}", file=sys.stderr)
    print(f"`alloc ring T {n}`, {reps} interleaved repetitions, median CPU time (user + system);")
    print(f"heaptrack and DHAT: one run of `alloc ring T {n // slow_div}` against a bare run of that size.")
    print()
    print("| threads | bare CPU | agent CPU | agent / bare (min-max) | agent ns/call | before / bare | before ns/call | heaptrack / bare | heaptrack ns/call | DHAT / bare | DHAT ns/call |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        ht = f"{r['heaptrack']:.1f}x | {r['heaptrack_ns']:.0f}" if "heaptrack" in r else "- | -"
        dh = f"{r['dhat']:.0f}x | {r['dhat_ns']:.0f}" if "dhat" in r else "- | -"
        bf = f"{r['before_ratio']:.2f}x | {r['before_ns']:.1f}" if "before_ratio" in r else "- | -"
        print(
            f"| {r['threads']} | {r['bare'] * 1000:.0f} ms | {r['agent'] * 1000:.0f} ms | "
            f"{r['ratio']:.2f}x ({r['ratio_min']:.2f}-{r['ratio_max']:.2f}) | {r['agent_ns']:.1f} | {bf} | {ht} | {dh} |"
        )
    if procs:
        print()
        print(f"`alloc ring-procs P {n}` (P forked children, one ring thread each, at once):")
        print()
        print("| processes | bare CPU | agent CPU | agent / bare (min-max) | agent ns/call | before / bare | before ns/call |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        for r in procs:
            bf = f"{r['before_ratio']:.2f}x | {r['before_ns']:.1f}" if "before_ratio" in r else "- | -"
            print(
                f"| {r['procs']} | {r['bare'] * 1000:.0f} ms | {r['agent'] * 1000:.0f} ms | "
                f"{r['ratio']:.2f}x ({r['ratio_min']:.2f}-{r['ratio_max']:.2f}) | {r['agent_ns']:.1f} | {bf} |"
            )
    for r in once:
        bf = f", before {r['before_ratio']:.2f}x ({r['before_ns']:.1f} ns/call)" if "before_ratio" in r else ""
        print()
        print(
            f"`alloc {r['mode']} {n}`: bare {r['bare'] * 1000:.0f} ms, agent {r['agent'] * 1000:.0f} ms: "
            f"{r['ratio']:.2f}x ({r['ratio_min']:.2f}-{r['ratio_max']:.2f}), {r['agent_ns']:.1f} ns/call{bf}"
        )
    if churn:
        bf = f", before {churn['before_ratio']:.3f}x" if "before_ratio" in churn else ""
        if "before_program_ratio" in churn:
            bf += f" (the program alone {churn['before_program_ratio']:.3f}x)"
        pr = f"; the program alone {churn['program_ratio']:.3f}x" if "program_ratio" in churn else ""
        print()
        print(
            f"`alloc churn {os.environ['CHURN']}`: bare {churn['bare'] * 1000:.0f} ms, agent "
            f"{churn['agent'] * 1000:.0f} ms: {churn['ratio']:.3f}x "
            f"({churn['ratio_min']:.3f}-{churn['ratio_max']:.3f}){pr}{bf}"
        )
    print()
    for r in rows:
        print(f"T={r['threads']}: {r['counts']}")
        if r.get("before_counts"):
            print(f"T={r['threads']} before: {r['before_counts']}")


if __name__ == "__main__":
    main()
