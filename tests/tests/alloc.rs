//! The allocation agent against valgrind DHAT (the oracle), and its robustness: threads,
//! fork, exec, `_exit`, concurrent stress, fork in a multithreaded process, and the CLI.

mod util;

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use sbs_agent_abi::{Origin, SlotValues};
use sbs_profile::alloc_reports::Reports;
use sbs_skip::{build, skip, Need};
use sbs_tests::run_with_agent;
use util::{metric, samples, sbs};

const TIMEOUT: Duration = Duration::from_secs(120);

/// One process's summary from DHAT's stderr.
#[derive(Debug, Default, Clone, PartialEq)]
struct Dhat {
    main: bool,
    command: String,
    bytes: u64,
    blocks: u64,
    gmax: u64,
    end: u64,
}

fn number(text: &str) -> u64 {
    text.replace(',', "")
        .parse()
        .unwrap_or_else(|_| panic!("not a number: {text:?}"))
}

/// `n` in "X bytes in N blocks" or the X.
fn bytes_and_blocks(rest: &str) -> (u64, u64) {
    let words: Vec<&str> = rest.split_whitespace().collect();
    (number(words[0]), number(words[3]))
}

/// Run under `valgrind --tool=dhat --trace-children=yes`; per-pid summaries, or `None`
/// (with the reason printed) when valgrind is not installed.
fn dhat(program: &Path, args: &[&str]) -> Option<HashMap<u64, Dhat>> {
    if which("valgrind").is_none() {
        skip!(
            Need::Valgrind,
            "valgrind is not installed (apt-get install valgrind)"
        );
        return None;
    }
    let child = Command::new("valgrind")
        .args([
            "--tool=dhat",
            "--trace-children=yes",
            // t-end as the program left it: valgrind would otherwise free libc's buffers.
            "--run-libc-freeres=no",
            "--dhat-out-file=/dev/null",
        ])
        .arg(program)
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run valgrind");
    // Valgrind runs the program in its own process: that pid is the main process.
    let main_pid = u64::from(child.id());
    let out = child.wait_with_output().expect("wait for valgrind");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "valgrind run failed:\n{stderr}");
    let mut procs: HashMap<u64, Dhat> = HashMap::new();
    for line in stderr.lines() {
        let Some(rest) = line.strip_prefix("==") else {
            continue;
        };
        let Some((pid, text)) = rest.split_once("==") else {
            continue;
        };
        let Ok(pid) = pid.parse::<u64>() else {
            continue;
        };
        let text = text.trim();
        let p = procs.entry(pid).or_default();
        p.main = pid == main_pid;
        if let Some(v) = text.strip_prefix("Command:") {
            p.command = v.trim().to_string();
        } else if let Some(v) = text.strip_prefix("Total:") {
            (p.bytes, p.blocks) = bytes_and_blocks(v);
        } else if let Some(v) = text.strip_prefix("At t-gmax:") {
            p.gmax = bytes_and_blocks(v).0;
        } else if let Some(v) = text.strip_prefix("At t-end:") {
            p.end = bytes_and_blocks(v).0;
        }
    }
    Some(procs)
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

fn agent(program: &Path, args: &[&str]) -> Reports {
    let mut cmd = Command::new(program);
    cmd.args(args);
    let (status, reports) = run_with_agent(cmd, TIMEOUT).expect("run with the agent");
    assert!(status.success(), "{program:?} {args:?} failed: {status}");
    reports
}

/// The DHAT process that is the main program.
fn dhat_main(procs: &HashMap<u64, Dhat>) -> &Dhat {
    let mains: Vec<&Dhat> = procs.values().filter(|p| p.main).collect();
    assert_eq!(mains.len(), 1, "one main process expected: {procs:#?}");
    mains[0]
}

fn dhat_children(procs: &HashMap<u64, Dhat>) -> Vec<&Dhat> {
    procs.values().filter(|p| !p.main).collect()
}

fn main_image(r: &Reports) -> SlotValues {
    *r.images
        .iter()
        .find(|s| s.origin() == Some(Origin::Load) && !r.images.iter().any(|p| p.pid == s.ppid))
        .unwrap_or_else(|| panic!("no main image in {r:#?}"))
}

/// `alloc ARGS` under the agent, its main image, and DHAT's main process for the same
/// command (`None` when valgrind is missing: the caller checks what it can without it).
fn main_and_dhat(args: &[&str]) -> (SlotValues, Option<Dhat>) {
    let main = main_image(&agent(&fixture("alloc"), args));
    let oracle = dhat(&fixture("alloc"), args).map(|procs| dhat_main(&procs).clone());
    (main, oracle)
}

/// An image loaded at start (main or exec'd) against DHAT's process.
fn assert_same(ours: &SlotValues, oracle: &Dhat, what: &str) {
    assert_eq!(
        (ours.allocs, ours.bytes, ours.peak, ours.live),
        (oracle.blocks, oracle.bytes, oracle.gmax, oracle.end),
        "{what}: agent (blocks, bytes, peak, live at exit) vs DHAT\nagent: {ours:#?}\nDHAT: {oracle:#?}"
    );
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(match name {
        "alloc" => fixture!("alloc"),
        _ => unreachable!(),
    })
}

#[test]
fn rust_threads_match_dhat() {
    let args = ["threads", "4", "1000", "24"];
    let ours = agent(&fixture("alloc"), &args);
    assert_eq!(ours.images.len(), 1);
    let main = main_image(&ours);
    // 4000 blocks of 24 bytes and the 1 MiB peak block, plus the runtime's own.
    assert!(main.allocs > 4000 && main.bytes > 4000 * 24 + (1 << 20));
    let Some(oracle) = dhat(&fixture("alloc"), &args) else {
        return;
    };
    assert_same(&main, dhat_main(&oracle), "threads");
}

#[test]
fn forked_child_matches_dhat() {
    let args = ["fork", "5", "40"];
    let ours = agent(&fixture("alloc"), &args);
    assert_eq!(ours.images.len(), 2, "{ours:#?}");
    let parent = main_image(&ours);
    let child = *ours
        .images
        .iter()
        .find(|s| s.origin() == Some(Origin::Fork))
        .expect("the fork child reported");
    assert_eq!(child.ppid, parent.pid);
    // Its own work: 5 blocks of 40 bytes, and it freed one block it inherited.
    assert_eq!((child.allocs, child.bytes), (5, 200));
    assert!(child.frees > child.allocs, "{child:#?}");
    assert!(child.live + 100 <= child.inherited_live, "{child:#?}");
    let Some(oracle) = dhat(&fixture("alloc"), &args) else {
        return;
    };
    assert_same(&parent, dhat_main(&oracle), "fork parent");
    let kids = dhat_children(&oracle);
    assert_eq!(kids.len(), 1, "{oracle:#?}");
    // DHAT's child carries its parent's history: totals and peak include the pre-fork part.
    assert_eq!(
        (
            child.inherited_allocs + child.allocs,
            child.inherited_bytes + child.bytes,
            child.peak.max(child.inherited_peak),
            child.live
        ),
        (kids[0].blocks, kids[0].bytes, kids[0].gmax, kids[0].end),
        "fork child vs DHAT\nagent: {child:#?}\nDHAT: {:#?}",
        kids[0]
    );
}

#[test]
fn execd_program_matches_dhat() {
    let args = ["exec", "2", "100", "24"];
    let ours = agent(&fixture("alloc"), &args);
    assert_eq!(ours.images.len(), 2, "{ours:#?}");
    let parent = main_image(&ours);
    let child = *ours
        .images
        .iter()
        .find(|s| s.pid != parent.pid)
        .expect("the exec'd program reported");
    assert_eq!(child.origin(), Some(Origin::Load));
    assert!(child.allocs >= 200);
    let Some(oracle) = dhat(&fixture("alloc"), &args) else {
        return;
    };
    assert_same(&parent, dhat_main(&oracle), "exec parent");
    let kids = dhat_children(&oracle);
    assert_eq!(kids.len(), 1, "{oracle:#?}");
    assert_same(&child, kids[0], "exec'd program");
}

#[test]
fn underscore_exit_still_reports_live_blocks() {
    let args = ["exit-now", "10", "64"];
    let ours = agent(&fixture("alloc"), &args);
    let main = main_image(&ours);
    assert!(main.live >= 10 * 64, "{main:#?}");
    let Some(oracle) = dhat(&fixture("alloc"), &args) else {
        return;
    };
    assert_same(&main, dhat_main(&oracle), "_exit");
}

/// Compile the C fixture with gcc at -O0 (so that gcc keeps malloc/free pairs).
fn every_alloc() -> Option<(tempfile::TempDir, PathBuf)> {
    c_fixture("every_alloc")
}

/// Compile `fixtures/c/NAME.c` with gcc at -O0, or `None` (with the reason printed).
fn c_fixture(name: &str) -> Option<(tempfile::TempDir, PathBuf)> {
    c_fixture_with(name, &[])
}

/// [`c_fixture`] with more gcc flags. With `-static`, a link that fails skips (no static
/// C library here) instead of failing.
fn c_fixture_with(name: &str, flags: &[&str]) -> Option<(tempfile::TempDir, PathBuf)> {
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = dir.path().join(name);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("fixtures/c/{name}.c"));
    let mut gcc = Command::new("gcc");
    gcc.args(["-O0", "-Wall"])
        .args(flags)
        .arg("-o")
        .arg(&exe)
        .arg(&src);
    if !flags.contains(&"-static") {
        build!(Need::Gcc, &mut gcc)?;
        return Some((dir, exe));
    }
    let Ok(out) = gcc.output() else {
        skip!(Need::Gcc, "gcc is not installed");
        return None;
    };
    if !out.status.success() {
        skip!(
            Need::StaticLibc,
            "gcc cannot link statically here (libc.a missing: apt-get install libc6-dev): {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        return None;
    }
    Some((dir, exe))
}

#[test]
fn c_every_allocation_function_matches_dhat_and_the_known_totals() {
    let Some((_dir, exe)) = every_alloc() else {
        return;
    };
    let ours = agent(&exe, &[]);
    assert_eq!(ours.images.len(), 1);
    let main = main_image(&ours);
    // The numbers written in the fixture's header comment.
    assert_eq!(
        (
            main.allocs,
            main.bytes,
            main.reallocs,
            main.frees,
            main.peak,
            main.live
        ),
        (13, 6148, 3, 12, 5100, 100),
        "{main:#?}"
    );
    let with_pvalloc = main_image(&agent(&exe, &["pvalloc"]));
    assert_eq!(
        (with_pvalloc.allocs, with_pvalloc.bytes, with_pvalloc.live),
        (14, 6158, 100)
    );
    let Some(oracle) = dhat(&exe, &[]) else {
        return;
    };
    assert_same(&main, dhat_main(&oracle), "every_alloc.c");
}

/// The trailer sits at the end of each block: large alignments, `malloc_usable_size`
/// bytes all written, in-place shrink and grow, failing calls, and the agent's reading of
/// glibc's chunk layout checked against glibc's own `malloc_usable_size`.
#[test]
fn block_trailers_survive_alignment_usable_size_and_in_place_resizes() {
    let Some((_dir, exe)) = c_fixture("trailer_cases") else {
        return;
    };
    let counts = |v: SlotValues| (v.allocs, v.bytes, v.reallocs, v.frees, v.peak, v.live);
    // The numbers written in the fixture's header comment.
    let main = main_image(&agent(&exe, &[]));
    assert_eq!(counts(main), (206, 35296, 2, 205, 9096, 4096), "{main:#?}");
    let strict = main_image(&agent(&exe, &["strict"]));
    assert_eq!(
        counts(strict),
        (207, 35396, 2, 206, 9096, 4096),
        "{strict:#?}"
    );
    // Exits non-zero if glibc's own malloc_usable_size is not the agent's answer plus the
    // trailer (3 bytes, or 8 for a block with more than 24 bytes of slack).
    agent(&exe, &["layout"]);
    // Exits non-zero if a resize loses one of the program's bytes or calloc's are not
    // zero; every block is counted and freed.
    let bytes = main_image(&agent(&exe, &["bytes"]));
    assert_eq!(
        (bytes.allocs, bytes.reallocs, bytes.frees, bytes.live),
        (200 + 200 * 19 * 2, 200 * 19, 200 + 200 * 19 * 2, 0),
        "{bytes:#?}"
    );
    let Some(oracle) = dhat(&exe, &[]) else {
        return;
    };
    assert_same(&main, dhat_main(&oracle), "trailer_cases.c");
}

#[test]
fn many_threads_allocating_concurrently_neither_crash_nor_lose_counts() {
    let (threads, per_thread) = (8u64, 20_000u64);
    let ours = agent(
        &fixture("alloc"),
        &["stress", &threads.to_string(), &per_thread.to_string()],
    );
    let main = main_image(&ours);
    // Each iteration: one malloc and one realloc (reserve_exact), both counted as blocks.
    assert!(main.allocs >= threads * per_thread * 2, "{main:#?}");
    assert!(main.reallocs >= threads * per_thread, "{main:#?}");
    assert!(main.frees <= main.allocs);
    // Everything the threads made was freed: what is left is the runtime's.
    assert!((main.live as i64) < 64 * 1024, "{main:#?}");
}

#[test]
fn fork_in_a_multithreaded_process_neither_deadlocks_nor_crashes() {
    let ours = agent(&fixture("alloc"), &["fork-threads", "4", "20000"]);
    let forks: Vec<_> = ours
        .images
        .iter()
        .filter(|s| s.origin() == Some(Origin::Fork))
        .collect();
    assert_eq!(forks.len(), 20, "{ours:#?}");
    for child in forks {
        // Each child: 100 blocks of 64 bytes (and nothing of its parent's threads).
        assert_eq!((child.allocs, child.bytes), (100, 6400), "{child:#?}");
    }
}

#[test]
fn cli_alloc_sums_processes_and_reports_every_metric() {
    let run = sbs([
        "--alloc",
        "--runs",
        "2",
        "--warmup",
        "0",
        "-f",
        "json",
        "--",
        fixture!("alloc"),
        "fork",
        "5",
        "40",
    ])
    .success();
    let report = run.json();
    let reference = agent(&fixture("alloc"), &["fork", "5", "40"]).totals();
    let expect = [
        ("alloc.count", reference.allocs),
        ("alloc.bytes", reference.bytes),
        ("alloc.frees", reference.frees),
        ("alloc.reallocs", reference.reallocs),
        ("heap.peak", reference.peak),
        ("heap.live_at_exit", reference.live_at_exit),
        ("alloc.processes", 2),
    ];
    for (id, value) in expect {
        let m = metric(&report, id);
        assert_eq!(m["source"], "agent", "{id}");
        assert_eq!(m["exact"], true, "{id}");
        assert_eq!(m["group"], "alloc", "{id}");
        assert_eq!(samples(m), vec![value as f64; 2], "{id}");
    }
    let details = metric(&report, "alloc.count")["details"].to_string();
    run.check(details.contains("forked children"), "per-role details");
}

#[test]
fn cli_memory_reports_rss_and_heap_peak() {
    let run = sbs([
        "--memory",
        "--runs",
        "2",
        "--warmup",
        "0",
        "-f",
        "json",
        "--",
        fixture!("alloc"),
        "threads",
        "1",
        "10",
        "16",
    ])
    .success();
    let report = run.json();
    let heap = samples(metric(&report, "heap.peak"));
    assert!(heap.iter().all(|&v| v >= (1 << 20) as f64), "{heap:?}");
    let rss = samples(metric(&report, "rss.peak"));
    let tree = samples(metric(&report, "rss.tree_peak"));
    assert!(rss.iter().all(|&v| v > (1 << 20) as f64), "{rss:?}");
    assert!(
        tree.iter().zip(&rss).all(|(t, r)| t >= r),
        "{tree:?} {rss:?}"
    );
    assert_eq!(metric(&report, "rss.tree_peak")["source"], "procfs");
    // heap.peak comes from agent runs of its own; the memory runs stay agent-free.
    assert_eq!(metric(&report, "heap.peak")["group"], "heap");
    assert_eq!(metric(&report, "rss.peak")["group"], "memory");
}

#[test]
fn memory_sampling_is_a_note_so_strict_passes_and_still_fails_on_warnings() {
    // `--memory --strict` always exited 2: the 5 ms sampling interval, true of every run,
    // was a warning. Runs of 100 ms, long enough for procfs samples (a run that ends
    // before the first one is a warning of its own).
    let run = sbs([
        "--memory",
        "--strict",
        "--runs",
        "2",
        "--warmup",
        "0",
        "-f",
        "json",
        "--",
        fixture!("sleepy"),
        "10",
        "10",
    ])
    .success();
    let report = run.json();
    let notes = metric(&report, "rss.tree_peak")["notes"].to_string();
    run.check(
        notes.contains("sampled from procfs every 5 ms"),
        "the interval is a note on the metric",
    );
    run.check(
        report["benchmarks"][0]["warnings"]
            .as_array()
            .is_none_or(|w| w.is_empty()),
        "and no warning",
    );
    let text = sbs([
        "--memory",
        "--runs",
        "1",
        "--warmup",
        "0",
        "--",
        fixture!("sleepy"),
        "10",
        "10",
    ])
    .success()
    .stdout();
    assert!(
        text.contains("note (rss.tree_peak): sampled from procfs every 5 ms"),
        "{text}"
    );
    // A run shorter than one sample is a note too (its tree peak is rusage's: that was a
    // warning, so `--memory --strict` failed on any short program).
    let short = sbs([
        "--memory",
        "--strict",
        "--runs",
        "2",
        "-f",
        "json",
        "--",
        fixture!("exit_with"),
        "0",
    ])
    .success()
    .json();
    // Whether a run of a few milliseconds gets a sample depends on the machine; a note
    // that says so counts every run.
    let notes = metric(&short, "rss.tree_peak")["notes"].to_string();
    assert!(
        !notes.contains("ended before the first sample")
            || notes.contains(" of 3 runs (warm-ups included) ended before the first sample"),
        "{notes}"
    );
    // A warning about the run (a failed run kept by --ignore-failure) still fails it.
    sbs([
        "--memory",
        "--strict",
        "--ignore-failure",
        "--runs",
        "1",
        "--warmup",
        "0",
        "--",
        fixture!("exit_with"),
        "1",
    ])
    .fails_with(2, "and --strict");
}

#[test]
fn memory_runs_measure_the_rss_of_the_program_without_the_agent() {
    // An allocation-heavy program with ~640k small blocks live at its peak: any per-block
    // bookkeeping of the agent would show in its RSS. The footprint --memory reports must
    // be the program's own, as timing runs (no instrument at all) see it.
    let args = ["--", fixture!("alloc"), "churn", "150000"];
    let rss_of = |group: &str| {
        let mut all = vec!["--runs", "3", "--warmup", "0", "-f", "json", group];
        all.extend(args);
        let report = sbs(all).success().json();
        metric(&report, "rss.peak")["summary"]["mean"]
            .as_f64()
            .unwrap()
    };
    let (bare, memory) = (rss_of("--time"), rss_of("--memory"));
    assert!(
        (memory / bare - 1.0).abs() < 0.02,
        "rss.peak under --memory {memory} B differs from the bare program's {bare} B"
    );
}

#[test]
fn cli_refuses_a_static_binary_instead_of_reporting_zeros() {
    if which("gcc").is_none() {
        skip!(Need::Gcc, "gcc is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("s.c");
    std::fs::write(
        &src,
        "#include <stdlib.h>\nint main(void){free(malloc(8));return 0;}\n",
    )
    .unwrap();
    let exe = dir.path().join("static");
    let out = Command::new("gcc")
        .args(["-static", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap();
    if !out.status.success() {
        skip!(
            Need::StaticLibc,
            "gcc cannot link statically here (libc.a missing: apt-get install libc6-dev)"
        );
        return;
    }
    let run = sbs([
        "--alloc".as_ref(),
        "--runs".as_ref(),
        "1".as_ref(),
        "--".as_ref(),
        exe.as_os_str(),
    ]);
    run.fails_with(2, "statically linked");
    // --memory still measures its RSS, and says why heap.peak is missing.
    let memory = sbs([
        "--memory".as_ref(),
        "--runs".as_ref(),
        "1".as_ref(),
        "-f".as_ref(),
        "json".as_ref(),
        "--".as_ref(),
        exe.as_os_str(),
    ])
    .success();
    let report = memory.json();
    assert!(samples(metric(&report, "rss.peak"))[0] > 0.0);
    let metrics = report["benchmarks"][0]["metrics"].to_string();
    memory.check(
        !metrics.contains("heap.peak"),
        "no heap.peak for a static binary",
    );
    let warnings = report["benchmarks"][0]["warnings"].to_string();
    memory.check(
        warnings.contains("heap.peak not measured") && warnings.contains("statically linked"),
        "warning about heap.peak",
    );
}

#[test]
fn boxing_counts_each_box_new() {
    if util::skip_without_uprobes("--boxing uses uprobes, which") {
        return;
    }
    // Both engines: uprobes alone, and the default (in-process where a site can be
    // patched, uprobes for the rest); the same difference.
    for engine in ["uprobe", "auto"] {
        let count = |n: &str| {
            let run = sbs([
                "--invocations-engine",
                engine,
                "--boxing",
                "--runs",
                "2",
                "--warmup",
                "0",
                "-f",
                "json",
                "--",
                fixture!("alloc"),
                "boxes",
                n,
            ])
            .success();
            let report = run.json();
            let m = metric(&report, "boxing.count");
            let source = m["source"].as_str().unwrap_or_default();
            match engine {
                "uprobe" => assert_eq!(source, "uprobe"),
                _ => assert!(source.starts_with("inproc"), "{m:#}"),
            }
            assert_eq!(m["group"], "boxing");
            let values = samples(m);
            assert_eq!(values[0], values[1], "exact counts repeat");
            values[0]
        };
        let (none, some) = (count("0"), count("25"));
        // The fixture is a debug build: every Box::new is an out-of-line call.
        assert_eq!(
            some - none,
            25.0,
            "{engine}: boxes 25 vs boxes 0: {some} vs {none}"
        );
    }
}

#[test]
fn boxing_refuses_a_program_without_box_entry_points() {
    let Some((_dir, exe)) = every_alloc() else {
        return;
    };
    if util::skip_without_uprobes("--boxing uses uprobes, which") {
        return;
    }
    sbs([
        "--boxing".as_ref(),
        "--runs".as_ref(),
        "1".as_ref(),
        "--".as_ref(),
        exe.as_os_str(),
    ])
    .fails_with(2, "no out-of-line Box entry point");
}

#[test]
fn a_run_killed_at_its_timeout_still_reports_what_it_allocated() {
    // The counts live in shared memory, not in a report written at exit.
    let run = sbs([
        "--alloc",
        "--runs",
        "1",
        "--warmup",
        "0",
        "--timeout",
        "300ms",
        "--ignore-failure",
        "-f",
        "json",
        "--",
        fixture!("forever"),
    ])
    .success();
    let report = run.json();
    let count = samples(metric(&report, "alloc.count"));
    assert!(count[0] > 0.0, "{count:?}");
    assert_eq!(samples(metric(&report, "alloc.processes")), vec![1.0]);
}

/// Skip (with the reason) where execs cannot be counted here; `true` when the caller must
/// return.
fn skip_without_exec_watch() -> bool {
    match sbs_probes::execs::check() {
        Ok(()) => false,
        Err(e) => {
            skip!(
                Need::PerfEvents,
                "execs cannot be counted: {e}; {}",
                e.fix()
            );
            true
        }
    }
}

/// `--alloc` over two runs of `args`: the report and its warnings, one string.
fn alloc_report(args: &[&OsStr]) -> (serde_json::Value, String) {
    let mut all: Vec<&OsStr> = [
        "--alloc", "--runs", "2", "--warmup", "0", "-f", "json", "--",
    ]
    .iter()
    .map(OsStr::new)
    .collect();
    all.extend_from_slice(args);
    let report = sbs(all).success().json();
    let warnings = report["benchmarks"][0]["warnings"].to_string();
    (report, warnings)
}

/// The parent `alloc spawn HOW CHILD...` measured, its child not: one unmeasured image
/// per run, and a warning that says so.
fn assert_one_child_unmeasured(how: &str, child: &[&OsStr], reported: f64) {
    let mut args: Vec<&OsStr> = [fixture!("alloc"), "spawn", how]
        .into_iter()
        .map(OsStr::new)
        .collect();
    args.extend_from_slice(child);
    let (report, warnings) = alloc_report(&args);
    assert!(
        warnings.contains("1 exec'd program per run was not measured (in 2 of 2 runs)"),
        "{warnings}"
    );
    for cause in ["LD_PRELOAD", "statically linked or setuid", "another user"] {
        assert!(warnings.contains(cause), "{cause}: {warnings}");
    }
    assert_eq!(
        samples(metric(&report, "alloc.unmeasured_images")),
        vec![1.0; 2],
        "{warnings}"
    );
    assert_eq!(
        samples(metric(&report, "alloc.processes")),
        vec![reported; 2]
    );
    // The child's 1000 blocks are not in the count: only the parent's are.
    assert!(
        samples(metric(&report, "alloc.count"))
            .iter()
            .all(|&c| c < 1000.0),
        "{report:#}"
    );
}

const THOUSAND_BLOCKS: [&str; 5] = ["", "threads", "1", "1000", "24"];

fn alloc_child() -> Vec<&'static OsStr> {
    let mut child: Vec<&OsStr> = THOUSAND_BLOCKS.iter().map(OsStr::new).collect();
    child[0] = OsStr::new(fixture!("alloc"));
    child
}

#[test]
fn a_child_exec_d_without_ld_preload_is_reported_unmeasured() {
    if skip_without_exec_watch() {
        return;
    }
    assert_one_child_unmeasured("no-preload", &alloc_child(), 1.0);
}

/// A child that closes every descriptor from 3 up before its exec still loads the agent
/// (from sbs-profile's descriptor, not one of its own) and reports: nothing is unmeasured.
#[test]
fn a_child_that_closes_its_descriptors_before_exec_is_measured() {
    if skip_without_exec_watch() {
        return;
    }
    let mut args: Vec<&OsStr> = [fixture!("alloc"), "spawn", "closefrom"]
        .into_iter()
        .map(OsStr::new)
        .collect();
    args.extend_from_slice(&alloc_child());
    let (report, warnings) = alloc_report(&args);
    assert!(!warnings.contains("not measured"), "{warnings}");
    assert_eq!(
        samples(metric(&report, "alloc.unmeasured_images")),
        vec![0.0; 2],
        "{warnings}"
    );
    // The parent, its forked child, and the program that child exec'd.
    assert_eq!(samples(metric(&report, "alloc.processes")), vec![3.0; 2]);
    // The exec'd program's 1000 blocks are counted, exactly as on their own.
    let alone = main_image(&agent(&fixture("alloc"), &THOUSAND_BLOCKS[1..])).allocs as f64;
    let count = metric(&report, "alloc.count");
    let execd = count["details"]
        .as_array()
        .and_then(|d| d.iter().find(|d| d["label"] == "exec'd programs"))
        .unwrap_or_else(|| panic!("no exec'd programs row: {count:#}"));
    assert_eq!(samples(execd), vec![alone; 2], "{count:#}");
}

/// Python's `subprocess` closes every descriptor from 3 up in the child before its exec
/// (`close_fds=True`, the default). That child must load the agent all the same, without
/// a word from the loader in its stderr (Python's own `test_json` compares that stderr
/// with `b''`), and its allocations must be counted.
#[test]
fn a_python_child_started_with_close_fds_loads_the_agent_and_is_counted() {
    let Some(python) = util::python3() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let stderrs = dir.path().join("stderrs");
    let script = util::python_fixture("close_fds.py");
    let args = [
        python.as_os_str(),
        script.as_os_str(),
        stderrs.as_os_str(),
        OsStr::new("1000"),
    ];
    let (report, warnings) = alloc_report(&args);
    assert_eq!(
        util::child_stderrs(&stderrs),
        vec!["b''"; 2],
        "the child's stderr in each run"
    );
    // The child's 1000 blocks of 100,000 bytes, in the exec'd programs' row.
    let count = metric(&report, "alloc.count");
    let execd = count["details"]
        .as_array()
        .and_then(|d| d.iter().find(|d| d["label"] == "exec'd programs"))
        .unwrap_or_else(|| panic!("no exec'd programs row: {count:#}"));
    assert!(
        samples(execd).iter().all(|&n| n >= 1000.0),
        "{count:#}\n{warnings}"
    );
    assert!(
        samples(metric(&report, "alloc.bytes"))
            .iter()
            .all(|&b| b >= 1000.0 * 100_000.0),
        "{report:#}"
    );
    // Where execs can be counted: none ran without the agent.
    if !skip_without_exec_watch() {
        assert_eq!(
            samples(metric(&report, "alloc.unmeasured_images")),
            vec![0.0; 2],
            "{warnings}"
        );
    }
}

/// The limit of loading the agent through sbs-profile's descriptor: a descendant that runs
/// as another user may not open it (here `setpriv`, measured itself, execs the program as
/// `nobody`). The run says that program was not measured instead of leaving it out
/// silently.
#[test]
fn a_child_run_as_another_user_is_reported_unmeasured() {
    if !util::is_root() {
        skip!(Need::Root, "switching a child to `nobody` needs root");
        return;
    }
    if skip_without_exec_watch() {
        return;
    }
    let Some(setpriv) = which("setpriv") else {
        skip!(Need::UtilLinux, "`setpriv` (util-linux) is not installed");
        return;
    };
    // A copy in a directory open to everyone: the build directory may not be.
    let dir = tempfile::tempdir().unwrap();
    make_executable(dir.path());
    let alloc_copy = dir.path().join("alloc");
    std::fs::copy(fixture!("alloc"), &alloc_copy).unwrap();
    let as_nobody = [
        setpriv.as_os_str(),
        OsStr::new("--reuid=65534"),
        OsStr::new("--regid=65534"),
        OsStr::new("--clear-groups"),
        alloc_copy.as_os_str(),
    ];
    let runs = Command::new(as_nobody[0])
        .args(&as_nobody[1..])
        .args(["threads", "1", "1", "1"])
        .status();
    if !runs.as_ref().is_ok_and(|s| s.success()) {
        skip!(
            Need::Nobody,
            "`nobody` cannot execute the test binaries ({runs:?})"
        );
        return;
    }
    let mut child = as_nobody.to_vec();
    child.extend(THOUSAND_BLOCKS[1..].iter().map(OsStr::new));
    // The parent and setpriv report; the program setpriv execs as nobody cannot.
    assert_one_child_unmeasured("plain", &child, 2.0);
}

/// Thousands of execs before the one that escapes the agent (issue 44): more exec records
/// than the kernel's rings hold at once. The check still sees them all, so the escaped
/// program is found, and neither the allocation amounts nor the in-process call counts are
/// called exact; a check that could not complete would say not exact too.
#[test]
fn a_child_without_the_agent_after_thousands_of_execs_is_still_found() {
    if skip_without_exec_watch() {
        return;
    }
    let alloc = fixture!("alloc");
    let script = format!(
        "i=0; while [ $i -lt 3000 ]; do /bin/true; i=$((i+1)); done; \
         exec {alloc} spawn no-preload {alloc} threads 1 1000 24"
    );
    let run = sbs([
        "--alloc",
        "--invocations",
        "malloc",
        "--runs",
        "1",
        "--warmup",
        "0",
        "-f",
        "json",
        "--",
        "sh",
        "-c",
        &script,
    ])
    .success();
    let report = run.json();
    let warnings = report["benchmarks"][0]["warnings"].to_string();
    // sh, its 3,000 /bin/true and the parent alloc reported; the child alloc did not.
    assert_eq!(
        samples(metric(&report, "alloc.unmeasured_images")),
        vec![1.0],
        "{warnings}"
    );
    assert!(
        samples(metric(&report, "alloc.processes"))[0] >= 3002.0,
        "{report:#}"
    );
    for id in ["alloc.count", "alloc.bytes", "invocations.malloc"] {
        assert_eq!(metric(&report, id)["exact"], false, "{id}: {report:#}");
    }
    assert!(
        warnings.contains("1 exec'd program per run was not measured"),
        "{warnings}"
    );
    assert!(
        warnings.contains("did not load the in-process counting library"),
        "{warnings}"
    );
    // Read while the run went on, the records did not overflow.
    assert!(!warnings.contains("overflowed"), "{warnings}");
    let notes = metric(&report, "invocations.malloc")["notes"].to_string();
    assert!(!notes.contains("overflowed"), "{notes}");
}

#[test]
fn an_exec_d_static_program_is_reported_unmeasured() {
    let Some((_dir, exe)) = c_fixture_with("thousand_blocks", &["-static"]) else {
        return;
    };
    if skip_without_exec_watch() {
        return;
    }
    assert_one_child_unmeasured("plain", &[exe.as_os_str()], 1.0);
}

#[test]
fn a_shell_script_and_the_programs_it_runs_are_all_counted() {
    if skip_without_exec_watch() {
        return;
    }
    let alloc = fixture!("alloc");
    let script = format!("{alloc} threads 1 10 16; {alloc} threads 1 20 16");
    let args = ["sh", "-c", &script].map(OsStr::new);
    let (report, warnings) = alloc_report(&args);
    // Every exec'd program reported: nothing is missing, nothing said about it.
    assert_eq!(
        samples(metric(&report, "alloc.unmeasured_images")),
        vec![0.0; 2]
    );
    assert!(!warnings.contains("not measured"), "{warnings}");
    assert!(!warnings.contains("could not be detected"), "{warnings}");
    let processes = samples(metric(&report, "alloc.processes"));
    // sh, and the two programs (each exec'd in a forked sh, or by sh itself).
    assert!(
        processes[0] >= 3.0 && processes[0] == processes[1],
        "{processes:?}"
    );
    // The two programs' own counts, exactly.
    let ours =
        |n: &str| main_image(&agent(&fixture("alloc"), &["threads", "1", n, "16"])).allocs as f64;
    let count = metric(&report, "alloc.count");
    let execd = count["details"]
        .as_array()
        .expect("details")
        .iter()
        .find(|d| d["label"] == "exec'd programs")
        .unwrap_or_else(|| panic!("no exec'd programs row: {count:#}"));
    assert_eq!(
        samples(execd),
        vec![ours("10") + ours("20"); 2],
        "{count:#}"
    );
    let total = samples(count);
    assert_eq!(total[0], total[1], "exact counts repeat");
}

#[test]
fn the_exec_check_needs_no_root() {
    if !util::is_root() {
        skip!(Need::Root, "dropping to `nobody` for one run needs root");
        return;
    }
    // Copies in a directory open to everyone: the build directory may not be.
    let dir = tempfile::tempdir().unwrap();
    make_executable(dir.path());
    let (sbs_copy, alloc_copy) = (dir.path().join("sbs-profile"), dir.path().join("alloc"));
    std::fs::copy(util::sbs_profile(), &sbs_copy).unwrap();
    std::fs::copy(fixture!("alloc"), &alloc_copy).unwrap();
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&sbs_copy)
        .args([
            "--alloc", "--runs", "1", "--warmup", "0", "-f", "json", "--",
        ])
        .arg(&alloc_copy)
        .args(["spawn", "no-preload"])
        .arg(&alloc_copy)
        .args(&THOUSAND_BLOCKS[1..])
        .output();
    let Ok(out) = out else {
        skip!(Need::UtilLinux, "`setpriv` (util-linux) is not installed");
        return;
    };
    let err = String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(126) || out.status.code() == Some(127) {
        skip!(
            Need::Nobody,
            "`nobody` cannot execute the test binaries ({err})"
        );
        return;
    }
    assert_eq!(out.status.code(), Some(0), "{err}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    let warnings = report["benchmarks"][0]["warnings"].to_string();
    let paranoid = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()
        .and_then(|p| p.trim().parse::<i32>().ok());
    if paranoid.is_some_and(|p| p <= 2) {
        // The usual setting: an unprivileged user's runs are checked like root's.
        assert!(warnings.contains("1 exec'd program per run"), "{warnings}");
        assert_eq!(
            samples(metric(&report, "alloc.unmeasured_images")),
            vec![1.0]
        );
    } else {
        // Stricter: the report says that the check could not be made, and why.
        assert!(
            warnings.contains("could not be detected") && warnings.contains("perf_event_paranoid"),
            "{warnings}"
        );
    }
}

fn make_executable(p: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// `--alloc --alloc-harness` on the harness fixture: (alloc.count, alloc.bytes, source).
fn harness_counts(extra: &[&str], args: &[&str]) -> (f64, f64, String) {
    let mut all = vec!["--alloc", "--runs", "2", "--warmup", "0", "-f", "json"];
    all.extend_from_slice(extra);
    all.push("--");
    all.push(fixture!("harness_alloc"));
    all.extend_from_slice(args);
    let run = sbs(all).success();
    let report = run.json();
    let count = metric(&report, "alloc.count");
    let c = samples(count);
    assert_eq!(c[0], c[1], "exact counts repeat");
    (
        c[0],
        samples(metric(&report, "alloc.bytes"))[0],
        count["source"].as_str().unwrap_or_default().to_string(),
    )
}

#[test]
fn harness_counts_exactly_what_goes_through_the_global_allocator() {
    // Same-length arguments, so that the runtime's own allocations are identical.
    let (c0, b0, source) = harness_counts(&["--alloc-harness"], &["blocks", "0000", "24"]);
    let (c1, b1, _) = harness_counts(&["--alloc-harness"], &["blocks", "1000", "24"]);
    assert_eq!(source, "harness");
    assert_eq!((c1 - c0, b1 - b0), (1000.0, 24_000.0));
}

#[test]
fn harness_sees_a_private_allocator_that_the_agent_cannot() {
    let (agent, _, agent_source) = harness_counts(&[], &["private", "1000", "24"]);
    let (harness, bytes, source) = harness_counts(&["--alloc-harness"], &["private", "1000", "24"]);
    assert_eq!(
        (agent_source.as_str(), source.as_str()),
        ("agent", "harness")
    );
    // The agent sees only what ran before main switched to the private arena.
    assert!(agent < 100.0, "{agent}");
    assert!(harness >= 1001.0, "{harness}");
    assert!(bytes >= (1000 * 24 + (1 << 20)) as f64, "{bytes}");
}

#[test]
fn harness_path_refuses_a_program_without_the_harness() {
    sbs([
        "--alloc",
        "--alloc-harness",
        "--runs",
        "1",
        "--",
        fixture!("alloc"),
        "threads",
        "1",
        "1",
        "8",
    ])
    .fails_with(2, "sbs_harness::CountingAlloc");
}

#[test]
fn an_exact_count_that_varies_between_runs_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("n");
    std::fs::write(&counter, "10\n").unwrap();
    let c = counter.to_str().unwrap();
    // Each run allocates 10 blocks more than the one before.
    let run = util::sbs([
        "--runs",
        "3",
        "--warmup",
        "0",
        "--alloc",
        "-f",
        "json",
        "--prepare",
        &format!("echo $(( $(cat {c}) + 10 )) > {c}.new && mv {c}.new {c}"),
        "--shell",
        "sh",
        &format!("{} $(cat {c}) 64", fixture!("allocate")),
    ])
    .success();
    let report = run.json();
    let count = util::metric(&report, "alloc.count");
    let samples = util::samples(count);
    assert_eq!(samples[1] - samples[0], 10.0, "{samples:?}");
    let notes = count["notes"].to_string();
    assert!(
        notes.contains("an exact count that varied between runs"),
        "{notes}"
    );
}

/// `phases T N SERIAL` under the agent and under DHAT: counts equal, and the peak equal
/// when it falls in the serial phase, within the stated bound when it falls in the
/// concurrent one.
fn phases_against_dhat(threads: u64, per_thread: u64, serial: bool) {
    let args = [
        "phases".to_string(),
        threads.to_string(),
        per_thread.to_string(),
        u64::from(serial).to_string(),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let ours = agent(&fixture("alloc"), &args);
    let main = main_image(&ours);
    let held = threads * per_thread * 1000;
    assert!(main.allocs > threads * per_thread, "{main:#?}");
    assert!(main.peak >= held, "{main:#?}");
    if threads > 1 {
        // The main thread and the T workers ran at once: the report states a bound.
        assert_eq!(
            main.peak_bound(),
            threads * sbs_agent_abi::GRANULE,
            "{main:#?}"
        );
    }
    let Some(oracle) = dhat(&fixture("alloc"), &args) else {
        return;
    };
    let oracle = dhat_main(&oracle);
    assert_eq!(
        (main.allocs, main.bytes, main.live),
        (oracle.blocks, oracle.bytes, oracle.end),
        "counts vs DHAT\nagent: {main:#?}\nDHAT: {oracle:#?}"
    );
    if serial {
        assert_eq!(main.peak, oracle.gmax, "serial peak vs DHAT: {main:#?}");
    } else {
        let off = main.peak.abs_diff(oracle.gmax);
        assert!(
            off <= main.peak_bound(),
            "concurrent peak {} vs DHAT {}: off by {off}, stated bound {}",
            main.peak,
            oracle.gmax,
            main.peak_bound()
        );
    }
}

#[test]
fn one_thread_counts_and_peak_equal_dhat() {
    phases_against_dhat(1, 2000, true);
    phases_against_dhat(1, 2000, false);
}

#[test]
fn four_threads_count_like_dhat_and_the_serial_peak_is_exact() {
    phases_against_dhat(4, 500, true);
}

#[test]
fn four_threads_concurrent_peak_is_within_the_stated_bound() {
    phases_against_dhat(4, 500, false);
}

#[test]
fn sixteen_threads_count_like_dhat_and_the_serial_peak_is_exact() {
    phases_against_dhat(16, 150, true);
}

#[test]
fn sixteen_threads_concurrent_peak_is_within_the_stated_bound() {
    phases_against_dhat(16, 150, false);
}

#[test]
fn a_fork_from_a_threaded_process_inherits_what_the_threads_kept_to_themselves() {
    let args = ["fork-parked", "4", "50"];
    let ours = agent(&fixture("alloc"), &args);
    let child = *ours
        .images
        .iter()
        .find(|s| s.origin() == Some(Origin::Fork))
        .expect("the fork child reported");
    assert_eq!(
        (child.allocs, child.bytes),
        (51, 50 * 64 + 3000),
        "{child:#?}"
    );
    // The parked threads' 200 blocks of 100 bytes were live at the fork, though each
    // thread kept its change to itself (less than a granule).
    assert!(child.inherited_live >= 4 * 50 * 100, "{child:#?}");
    assert_eq!(child.live, child.inherited_live + 3000, "{child:#?}");
    let Some(oracle) = dhat(&fixture("alloc"), &args) else {
        return;
    };
    let parent = main_image(&ours);
    let dhat_parent = dhat_main(&oracle);
    assert_eq!(
        (parent.allocs, parent.bytes, parent.live),
        (dhat_parent.blocks, dhat_parent.bytes, dhat_parent.end),
        "parent vs DHAT\nagent: {parent:#?}\nDHAT: {dhat_parent:#?}"
    );
    let kids = dhat_children(&oracle);
    assert_eq!(kids.len(), 1, "{oracle:#?}");
    assert_eq!(
        (
            child.inherited_allocs + child.allocs,
            child.inherited_bytes + child.bytes,
            child.live
        ),
        (kids[0].blocks, kids[0].bytes, kids[0].end),
        "fork child vs DHAT\nagent: {child:#?}\nDHAT: {:#?}",
        kids[0]
    );
}

/// `thread-then-ring N`: a helper thread allocates and ends, then the main thread runs
/// the ring alone. It goes solo again (the hot path's shortcut, not an atomic add per
/// call), and counts, peak and live bytes still equal DHAT's: the peak falls in the solo
/// phase, where it is exact.
#[test]
fn a_thread_left_alone_by_the_others_end_goes_solo_again_and_counts_like_dhat() {
    let (main, oracle) = main_and_dhat(&["thread-then-ring", "20000"]);
    assert_eq!(
        main.solo_since, 1,
        "the main thread went solo again: {main:#?}"
    );
    assert_eq!(main.unseen, 0, "{main:#?}");
    assert_eq!(main.peak_bound(), sbs_agent_abi::GRANULE, "{main:#?}");
    if let Some(oracle) = oracle {
        assert_same(&main, &oracle, "thread-then-ring");
    }
}

/// `waves W N`: the main thread goes from batching (two threads with it) to solo again
/// (both ended) and back, W times, with every call on a hot path. Any count lost in a
/// switch (two threads on one shortcut) would show against DHAT, which runs the same
/// calls one thread at a time.
#[test]
fn switching_between_solo_and_batching_loses_no_count() {
    let (main, oracle) = main_and_dhat(&["waves", "40", "3000"]);
    // At least once per wave, after its joins; more when one worker ended before the
    // other had its first call.
    assert!((40..=120).contains(&main.solo_since), "{main:#?}");
    // The main thread and at least one worker at once; both workers too, unless one
    // ended before the other started (a loaded machine).
    assert!((2..=3).contains(&main.max_active), "{main:#?}");
    assert_eq!(
        main.peak_bound(),
        (main.max_active - 1) * sbs_agent_abi::GRANULE + main.unseen
    );
    let Some(oracle) = oracle else {
        return;
    };
    assert_eq!(
        (main.allocs, main.bytes, main.live),
        (oracle.blocks, oracle.bytes, oracle.end),
        "counts vs DHAT\nagent: {main:#?}\nDHAT: {oracle:#?}"
    );
    let off = main.peak.abs_diff(oracle.gmax);
    assert!(
        off <= main.peak_bound(),
        "peak {} vs DHAT {}",
        main.peak,
        oracle.gmax
    );
}

/// Through the collector: a single-threaded program's `heap.peak` is an exact count; a
/// program whose threads allocated at once gets a measurement (interval, Welch's test),
/// with the bound in a warning, rather than "exact".
#[test]
fn the_peak_is_called_exact_only_when_it_is() {
    let run = |args: &[&str]| {
        let mut argv = vec![
            "--alloc",
            "-r",
            "2",
            "-w",
            "0",
            "-f",
            "json",
            "--",
            fixture!("alloc"),
        ];
        argv.extend_from_slice(args);
        sbs(&argv).success().json()
    };
    let single = run(&["churn", "2000"]);
    assert_eq!(metric(&single, "heap.peak")["exact"], true, "{single:#}");
    assert!(metric(&single, "heap.peak").get("bound").is_none());
    let threads = run(&["phases", "4", "500", "0"]);
    let peak = metric(&threads, "heap.peak");
    assert_eq!(peak["exact"], false, "{peak:#}");
    assert_eq!(metric(&threads, "alloc.count")["exact"], true);
    assert!(metric(&threads, "alloc.count").get("bound").is_none());
    // The stated bound as a number: (concurrently active threads - 1) x the granule,
    // with 4 workers and the main thread at most 4 x 8 KiB.
    let bound = peak["bound"].as_f64().expect("a numeric bound");
    assert!(
        bound > 0.0 && bound <= 4.0 * 8192.0 && bound % 8192.0 == 0.0,
        "{peak:#}"
    );
    let warnings = threads["benchmarks"][0]["warnings"].to_string();
    assert!(
        warnings.contains(&format!("heap.peak exact to \u{b1}{bound} bytes")),
        "{warnings}"
    );
}

/// A thread made with a raw `clone` (no `pthread_create`: glibc still believes the
/// process single-threaded) that has its own thread pointer gets a record of its own, and
/// every block of it counts, as DHAT counts them.
#[test]
fn a_raw_clone_thread_counts_in_a_record_of_its_own() {
    let Some((_dir, exe)) = c_fixture("raw_thread") else {
        return;
    };
    let main = main_image(&agent(&exe, &[]));
    // The numbers written in the fixture's header comment.
    assert_eq!(
        (main.allocs, main.bytes, main.frees, main.live),
        (1035, 180_000, 925, 25_000),
        "{main:#?}"
    );
    assert_eq!(main.threads, 2, "the raw thread shared a record: {main:#?}");
    // It never ran glibc's thread exit, so it stays active: the peak is stated with a
    // bound of one granule, and lies within it.
    assert_eq!(main.peak_bound(), sbs_agent_abi::GRANULE, "{main:#?}");
    assert!(
        main.peak.abs_diff(105_000) <= main.peak_bound(),
        "{main:#?}"
    );
    let Some(oracle) = dhat(&exe, &[]) else {
        return;
    };
    let oracle = dhat_main(&oracle);
    assert_eq!(
        (main.allocs, main.bytes, main.live),
        (oracle.blocks, oracle.bytes, oracle.end),
        "agent vs DHAT\nagent: {main:#?}\nDHAT: {oracle:#?}"
    );
    assert_eq!(oracle.gmax, 105_000, "{oracle:#?}");
}

/// `tests/fixtures/c/tree.c` run under the agent, with 100,000 bytes kept by the parent
/// and 300,000 allocated by each child: blocks far above the granule, so every change
/// reaches the tree's total at once and the known peaks are exact.
fn tree_run(mode: &str) -> Option<(Reports, sbs_profile::alloc_reports::Totals)> {
    let (_dir, exe) = c_fixture("tree")?;
    let reports = agent(&exe, &[mode, "100000", "300000"]);
    let totals = reports.totals();
    Some((reports, totals))
}

#[test]
fn the_tree_peak_of_children_run_one_after_the_other_is_the_simultaneous_one() {
    let Some((reports, t)) = tree_run("sequential") else {
        return;
    };
    // The parent, three forked children, and the program the third one exec'd.
    assert_eq!(t.images, 5, "{reports:#?}");
    // Parent 100,000 + a child's inherited copy 100,000 + its own 300,000.
    assert_eq!(t.tree_peak, 500_000, "{reports:#?}");
    // Each image's own peak summed: (100,000 + 150,000) + 2 x 400,000 + 100,000 (the
    // third child, which execs at once) + 300,000 (the exec'd program).
    assert_eq!(t.peak, 250_000 + 800_000 + 100_000 + 300_000);
    // exit, _exit and exec all left the tree: nothing stranded, nothing left counted.
    assert_eq!(t.stranded, 0, "{reports:#?}");
    assert_eq!(reports.tree.live, 0, "{reports:#?}");
    // Two images were alive at once: the stated bound is one granule.
    assert_eq!(reports.tree.max_active, 2);
    assert_eq!(t.tree_bound, sbs_agent_abi::GRANULE);
}

#[test]
fn the_tree_peak_of_concurrent_children_adds_what_they_hold_at_once() {
    let Some((reports, t)) = tree_run("concurrent") else {
        return;
    };
    assert_eq!(t.images, 3, "{reports:#?}");
    assert_eq!(t.tree_peak, 3 * 100_000 + 2 * 300_000, "{reports:#?}");
    assert_eq!((t.stranded, reports.tree.live), (0, 0), "{reports:#?}");
    assert_eq!(t.tree_bound, 2 * sbs_agent_abi::GRANULE);
}

#[test]
fn a_killed_child_stays_counted_and_the_bound_says_by_how_much() {
    let Some((reports, t)) = tree_run("killed") else {
        return;
    };
    assert_eq!(t.images, 2, "{reports:#?}");
    assert_eq!(t.stranded, 1, "{reports:#?}");
    // The true peak is 500,000; the killed child's 400,000 bytes stay in the total, so
    // the parent's later 150,000 lift it to 650,000. The bound covers the difference.
    let truth = 500_000u64;
    assert!(t.tree_peak >= truth, "{reports:#?}");
    assert!(t.tree_bound >= 400_000, "{t:#?}");
    assert!(t.tree_peak - truth <= t.tree_bound, "{t:#?}");
}

/// Through the collector: heap.tree_peak for a tree, with its bound; heap.peak stays the
/// sum of each image's own peak, and the warning says which is which.
#[test]
fn cli_reports_the_tree_peak_with_its_bound() {
    let Some((_dir, exe)) = c_fixture("tree") else {
        return;
    };
    let exe = exe.to_str().expect("a UTF-8 temporary path");
    let report = sbs([
        "--alloc",
        "-r",
        "2",
        "-w",
        "0",
        "-f",
        "json",
        "--",
        exe,
        "sequential",
        "100000",
        "300000",
    ])
    .success()
    .json();
    let tree = metric(&report, "heap.tree_peak");
    assert_eq!(samples(tree), vec![500_000.0, 500_000.0], "{tree:#}");
    assert_eq!(tree["bound"].as_f64(), Some(8192.0), "{tree:#}");
    assert_eq!(tree["exact"], false);
    assert_eq!(samples(metric(&report, "heap.peak"))[0], 1_450_000.0);
    let warnings = report["benchmarks"][0]["warnings"].to_string();
    assert!(
        warnings.contains("heap.tree_peak exact to \u{b1}8192 bytes"),
        "{warnings}"
    );
}

/// An exec chain (a shell that execs the program) never has two images alive at once:
/// the tree's peak is the larger of the two images' own peaks, and exact.
#[test]
fn an_exec_chain_is_one_image_at_a_time_and_its_tree_peak_is_exact() {
    let Some((_dir, exe)) = c_fixture("tree") else {
        return;
    };
    let script = format!("exec '{}' leaf 300000", exe.display());
    let reports = agent(Path::new("/bin/sh"), &["-c", &script]);
    let t = reports.totals();
    assert_eq!(t.images, 2, "{reports:#?}");
    assert_eq!(
        reports.tree.max_active, 0,
        "nobody joined a tree: {reports:#?}"
    );
    let own_peaks: Vec<u64> = reports.images.iter().map(|s| s.peak).collect();
    assert_eq!(t.tree_peak, *own_peaks.iter().max().unwrap_or(&0));
    assert!(t.tree_peak >= 300_000, "{reports:#?}");
    assert_eq!((t.tree_bound, t.stranded), (0, 0), "{t:#?}");
}

/// The in-process harness counts a forked child too, and leaves the tree at `exit`.
#[test]
fn harness_tree_peak_counts_a_forked_child_and_leaves_at_exit() {
    let report = sbs([
        "--alloc",
        "--alloc-harness",
        "--runs",
        "1",
        "--warmup",
        "0",
        "-f",
        "json",
        "--",
        fixture!("harness_alloc"),
        "fork",
        "100000",
        "300000",
    ])
    .success()
    .json();
    let tree = metric(&report, "heap.tree_peak");
    let peak = samples(tree)[0];
    // 2 x 100,000 + 300,000, and the runtime's few blocks twice.
    assert!((500_000.0..510_000.0).contains(&peak), "{tree:#}");
    // Both images left at exit: no stranded bytes in the bound, which is the tree's
    // granule alone (two images alive at once).
    assert_eq!(tree["bound"].as_f64(), Some(8192.0), "{tree:#}");
    let warnings = report["benchmarks"][0]["warnings"].to_string();
    assert!(!warnings.contains("without leaving"), "{warnings}");
}

/// A minimal static 32-bit x86 program (`exit(0)` through `int 0x80`), written byte by
/// byte: no 32-bit compiler or C library needed.
fn write_elf32_exit0(path: &Path) {
    const BASE: u32 = 0x0804_8000;
    let code: [u8; 9] = [0xb8, 1, 0, 0, 0, 0x31, 0xdb, 0xcd, 0x80];
    let total = (52 + 32 + code.len()) as u32;
    let mut elf = Vec::new();
    elf.extend_from_slice(b"\x7fELF");
    elf.extend_from_slice(&[1, 1, 1, 0]); // ELFCLASS32, little-endian, version 1, SysV
    elf.extend_from_slice(&[0; 8]);
    let half = |v: &mut Vec<u8>, x: u16| v.extend_from_slice(&x.to_le_bytes());
    let word = |v: &mut Vec<u8>, x: u32| v.extend_from_slice(&x.to_le_bytes());
    half(&mut elf, 2); // ET_EXEC
    half(&mut elf, 3); // EM_386
    word(&mut elf, 1);
    word(&mut elf, BASE + 52 + 32); // entry: the code after the headers
    word(&mut elf, 52); // program headers right after this header
    word(&mut elf, 0);
    word(&mut elf, 0);
    for x in [52, 32, 1, 0, 0, 0] {
        half(&mut elf, x);
    }
    // One PT_LOAD of the whole file, read and execute.
    for x in [1, 0, BASE, BASE, total, total, 5, 0x1000] {
        word(&mut elf, x);
    }
    elf.extend_from_slice(&code);
    std::fs::write(path, elf).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A 32-bit program is refused before any run with why (the agent is a 64-bit library);
/// it used to run and end in the generic "the agent did not report" (issue 43).
#[test]
fn a_32_bit_program_is_refused_before_its_runs() {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("exit32");
    write_elf32_exit0(&exe);
    let marker = dir.path().join("setup-ran");
    sbs([
        "--alloc",
        "-r",
        "1",
        "--setup",
        &format!("touch {}", marker.display()),
        "--",
        exe.to_str().unwrap(),
    ])
    .fails_with(
        2,
        "it is a 32-bit program, and the allocation agent is a 64-bit library",
    );
    assert!(!marker.exists(), "nothing runs before the refusal");
}

/// `heap.tree_peak` is never below what one process of the tree held alone: two
/// concurrent children of `tree.c` each hold 100 bytes (both at once: 200), far below the
/// granule that each keeps to itself, and the figure read 0 B (issue 43).
#[test]
fn the_tree_peak_is_not_below_the_largest_process_peak() {
    let Some((_dir, exe)) = c_fixture("tree") else {
        return;
    };
    let report = sbs([
        "--alloc",
        "-r",
        "2",
        "-w",
        "0",
        "-f",
        "json",
        "--",
        exe.to_str().unwrap(),
        "concurrent",
        "0",
        "100",
    ])
    .success()
    .json();
    let tree = metric(&report, "heap.tree_peak");
    for v in samples(tree) {
        assert!((100.0..=200.0).contains(&v), "{tree:#}");
    }
    assert_eq!(samples(metric(&report, "heap.peak")), vec![200.0, 200.0]);
}
