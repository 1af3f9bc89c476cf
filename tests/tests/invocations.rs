//! `--invocations`: exact call counts through uprobes on fixture programs, the perf-probe
//! oracle, bad input, and clean-up of probe definitions. Needs root (uprobes); skipped
//! with a printed reason otherwise.

mod util;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sbs_skip::{build, skip, Need};
use util::{metric, samples, sbs, skip_without_uprobes};

const UPROBE_EVENTS: &str = "/sys/kernel/tracing/uprobe_events";

/// Both engines, where every site of the test's patterns can be patched: each counting
/// test runs with both and requires the same counts.
const ENGINES: [&str; 2] = ["uprobe", "inproc"];
/// Both engines, where some sites (inlined copies in ld.so, functions with indirect
/// calls among their first bytes) are left to uprobes by the in-process engine.
const ENGINES_AUTO: [&str; 2] = ["uprobe", "auto"];

/// Details (label -> samples) of a metric.
fn details(m: &serde_json::Value) -> Vec<(String, Vec<f64>)> {
    m["details"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|d| (d["label"].as_str().unwrap().to_string(), samples(d)))
                .collect()
        })
        .unwrap_or_default()
}

fn detail(m: &serde_json::Value, label: &str) -> Vec<f64> {
    details(m)
        .into_iter()
        .find(|(l, _)| l == label)
        .unwrap_or_else(|| panic!("no detail {label:?} in {m:#}"))
        .1
}

/// Our definitions owned by process `pid` still in the kernel.
fn definitions_of(pid: u32) -> Vec<String> {
    let prefix = format!("sbs_profile_{pid}_");
    std::fs::read_to_string(UPROBE_EVENTS)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(&prefix))
        .map(str::to_string)
        .collect()
}

/// Run sbs-profile as a child we know the pid of; returns (pid, output).
fn sbs_with_pid(args: &[&str]) -> (u32, std::process::Output) {
    let child = Command::new(util::sbs_profile())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    (pid, child.wait_with_output().unwrap())
}

#[test]
fn counts_are_exact_from_main_thread_threads_and_forked_child() {
    if skip_without_uprobes("uprobes") {
        return;
    }
    for (engine, (n, threads)) in ENGINES
        .into_iter()
        .flat_map(|e| [(1000u64, 3u64), (250, 0), (4000, 1)].map(|c| (e, c)))
    {
        let run = sbs([
            "--invocations-engine",
            engine,
            "--runs",
            "3",
            "--format",
            "json",
            "--invocations",
            "calls::work",
            "--invocations",
            "work_more",
            "--",
            fixture!("calls"),
            &n.to_string(),
            &threads.to_string(),
        ])
        .success();
        let report = run.json();
        let work = metric(&report, "invocations.calls::work");
        let expected = (n * (threads + 2)) as f64;
        assert_eq!(
            samples(work),
            vec![expected; 3],
            "{engine}: n={n} threads={threads}"
        );
        assert_eq!(work["source"], engine);
        assert_eq!(work["exact"], true);
        assert_eq!(work["group"], "invocations");
        assert_eq!(detail(work, "calls::work"), vec![expected; 3]);
        let more = metric(&report, "invocations.work_more");
        assert_eq!(samples(more), vec![1.0; 3]);
        // Invocation runs carry no timing.
        let ids: Vec<&str> = report["benchmarks"][0]["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["id"].as_str().unwrap())
            .collect();
        run.check(
            ids.iter().all(|id| id.starts_with("invocations.")),
            "only invocation metrics",
        );
    }
}

/// The in-process engine's per-thread counters (issue 32): four threads and the main
/// thread calling at once, a child forked by libc and one by the raw system call while
/// they run (each must count in blocks of its own, not in its parent's), and a thread
/// started in the forked child; then more threads than there are blocks, whose calls
/// beyond the blocks are counted in the shared counters. Uprobes are not compared here:
/// on this fork scenario both the uprobe engine and `perf stat` on a `perf probe` event
/// sometimes count fewer calls than were made (kernel 6.18, 2026-11-27: the uprobe
/// engine 8N of 9N, 4834 of 6000; `perf stat` 4420 of 6000 with the raw fork left out),
/// in a child forked while other threads run.
#[test]
fn per_thread_counts_are_exact_across_threads_forks_and_used_up_blocks() {
    if skip_without_uprobes("uprobes") {
        return;
    }
    for (engine, n, threads, fork, runs) in [
        ("inproc", 2_000_000u64, 4u64, true, 3usize),
        ("inproc", 2000, 300, false, 1),
    ] {
        let mut args = vec![
            "--invocations-engine".to_string(),
            engine.into(),
            "--runs".into(),
            runs.to_string(),
            "--format".into(),
            "json".into(),
            "--invocations".into(),
            "thread_calls::work".into(),
            "--".into(),
            fixture!("thread_calls").into(),
            n.to_string(),
            threads.to_string(),
        ];
        if fork {
            args.push("fork".into());
        }
        let report = sbs(&args).success().json();
        let work = metric(&report, "invocations.thread_calls::work");
        let expected = (n * (threads + if fork { 5 } else { 0 })) as f64;
        assert_eq!(
            samples(work),
            vec![expected; runs],
            "{engine}: n={n} threads={threads} fork={fork}"
        );
        assert_eq!(work["source"], engine);
        assert_eq!(work["exact"], true);
    }
}

/// The kernel's uprobes miss some calls made around a fork while another thread of the
/// forking process runs (`perf probe` as well, on Linux 6.x): the uprobe engine says its
/// counts are lower bounds then, with a warning naming the cause, and never more than
/// were made; a process that starts threads but forks with none beside it stays exact.
#[test]
fn uprobe_counts_across_a_fork_beside_running_threads_are_lower_bounds() {
    if skip_without_uprobes("uprobes") {
        return;
    }
    let run = |fork: bool| {
        let mut args = vec![
            "--invocations-engine",
            "uprobe",
            "--runs",
            "3",
            "--format",
            "json",
            "--invocations",
            "thread_calls::work",
            "--",
            fixture!("thread_calls"),
            "1000",
            "4",
        ];
        if fork {
            args.push("fork");
        }
        sbs(&args).success().json()
    };
    let forked = run(true);
    let work = metric(&forked, "invocations.thread_calls::work");
    assert_eq!(work["exact"], false, "{work}");
    assert!(samples(work).iter().all(|&v| v <= 9000.0), "{work}");
    let warnings = forked["benchmarks"][0]["warnings"].to_string();
    assert!(
        warnings.contains("forked while another of its threads ran"),
        "{warnings}"
    );
    let threads_only = run(false);
    let work = metric(&threads_only, "invocations.thread_calls::work");
    assert_eq!(work["exact"], true, "{work}");
    assert_eq!(samples(work), vec![4000.0; 3]);
}

/// A threaded program that starts no process, counted in-process at 1000 sites and with a
/// uprobe at one (issue 44): the patching must not fill the rings of the check for setuid
/// descendants (every `mprotect` of code writes a mapping record into them) and make it
/// report an overflow that switches the check off; every count stays exact.
#[test]
fn patching_many_sites_of_a_threaded_program_overflows_no_exec_records() {
    if skip_without_uprobes("uprobe counts beside in-process ones") {
        return;
    }
    let report = sbs([
        "--runs",
        "3",
        "--invocations",
        "patched_step",
        "--invocations",
        "patched_tiny",
        "-f",
        "json",
        "--",
        fixture!("patched_threads"),
        "2",
    ])
    .success()
    .json();
    let warnings = report["benchmarks"][0]["warnings"].to_string();
    assert!(!warnings.contains("overflowed"), "{warnings}");
    for (id, source, calls) in [
        ("invocations.patched_step", "inproc", 2000.0),
        ("invocations.patched_tiny", "uprobe", 20.0),
    ] {
        let m = metric(&report, id);
        assert_eq!(m["source"], source, "{m:#}");
        assert_eq!(samples(m), vec![calls; 3], "{m:#}");
        assert_eq!(m["exact"], true, "{m:#}");
        assert!(!m["notes"].to_string().contains("overflowed"), "{m:#}");
    }
}

#[test]
fn trait_methods_generics_and_malloc_of_glibc() {
    if skip_without_uprobes("uprobes") {
        return;
    }
    let n = 500.0;
    let mut mallocs = Vec::new();
    for engine in ENGINES_AUTO {
        let run = sbs([
            "--invocations-engine",
            engine,
            "--runs",
            "2",
            "--format",
            "json",
            "--invocations",
            "Widget::fmt",
            "--invocations",
            "Display::fmt",
            "--invocations",
            "generic_step",
            "--invocations",
            "malloc",
            "--",
            fixture!("calls"),
            "500",
            "1",
        ])
        .success();
        let report = run.json();
        let widget = metric(&report, "invocations.Widget::fmt");
        assert_eq!(samples(widget), vec![n; 2]);
        assert_eq!(
            detail(widget, "<calls::Widget as core::fmt::Display>::fmt"),
            vec![n; 2]
        );
        // Through the trait: the same function, among every other Display::fmt.
        let display = metric(&report, "invocations.Display::fmt");
        assert_eq!(
            detail(display, "<calls::Widget as core::fmt::Display>::fmt"),
            vec![n; 2]
        );
        // Two monomorphizations, each on its own row: N and 2N calls.
        let generic = metric(&report, "invocations.generic_step");
        assert_eq!(samples(generic), vec![3.0 * n; 2]);
        // Labelled with their generic arguments, from DWARF.
        assert_eq!(detail(generic, "calls::generic_step<u32>"), vec![n; 2]);
        assert_eq!(
            detail(generic, "calls::generic_step<u64>"),
            vec![2.0 * n; 2]
        );
        // glibc's malloc, found through DT_NEEDED, deterministic run after run.
        let malloc = metric(&report, "invocations.malloc");
        let m = samples(malloc);
        assert!(m[0] >= 1.0 && m[0] == m[1], "{m:?}");
        assert_eq!(detail(malloc, "malloc [libc.so.6]"), m);
        mallocs.push(m);
    }
    assert_eq!(mallocs[0], mallocs[1], "malloc counts of both engines");
}

#[test]
fn text_report_has_one_row_per_symbol_and_the_inlined_warning() {
    if skip_without_uprobes("uprobes") {
        return;
    }
    let run = sbs([
        "--runs",
        "1",
        "--invocations",
        "generic_step",
        "--invocations",
        "Display::fmt",
        "--",
        fixture!("calls"),
        "10",
        "1",
    ])
    .success();
    let out = run.stdout();
    run.check(
        out.contains("calls::generic_step<u32>") && out.contains("calls::generic_step<u64>"),
        "two generic_step rows told apart by their generic arguments",
    );
    // std's Display impls exist also as inlined copies: those with code of their own are
    // probed at their entries (a `[inlined, N sites]` row; the ones never called here are
    // folded into one line of the table and listed in the JSON), the others are named in
    // a warning.
    run.check(
        out.contains("more, 0 in every run (listed in the JSON report)"),
        "rows that are 0 in every run are folded",
    );
    run.check(
        out.contains("inlined instance(s) are not counted"),
        "inlined warning",
    );
    let json = sbs([
        "--runs",
        "1",
        "--warmup",
        "0",
        "-f",
        "json",
        "--invocations",
        "Display::fmt",
        "--",
        fixture!("calls"),
        "10",
        "1",
    ])
    .success()
    .json();
    let labels: Vec<String> = json["benchmarks"][0]["metrics"][0]["details"]
        .as_array()
        .expect("details")
        .iter()
        .map(|d| d["label"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(
        labels.iter().any(|l| l.contains("[inlined, ")),
        "an inlined row in the JSON details: {labels:?}"
    );
}

fn build_cpp(dir: &Path) -> Option<PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/cpp/overloads.cpp");
    let exe = dir.join("overloads");
    build!(
        Need::Gxx,
        Command::new("g++")
            .args(["-O1", "-g", "-o"])
            .arg(&exe)
            .arg(&src)
    )?;
    Some(exe)
}

#[test]
fn cpp_overloads_templates_and_operators() {
    if skip_without_uprobes("uprobes") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = build_cpp(dir.path()) else {
        return;
    };
    for engine in ENGINES_AUTO {
        let run = sbs([
            "--invocations-engine".as_ref(),
            engine.as_ref(),
            "--runs".as_ref(),
            "2".as_ref(),
            "--format".as_ref(),
            "json".as_ref(),
            "--invocations".as_ref(),
            "Widget::draw".as_ref(),
            "--invocations".as_ref(),
            "Widget::operator<<".as_ref(),
            "--invocations".as_ref(),
            "Box::get".as_ref(),
            "--invocations".as_ref(),
            "shapes::scale".as_ref(),
            "--".as_ref(),
            exe.as_os_str(),
            "300".as_ref(),
        ])
        .success();
        let report = run.json();
        let draw = metric(&report, "invocations.Widget::draw");
        assert_eq!(samples(draw), vec![900.0; 2]);
        assert_eq!(detail(draw, "shapes::Widget::draw(int)"), vec![300.0; 2]);
        assert_eq!(detail(draw, "shapes::Widget::draw(double)"), vec![600.0; 2]);
        let op = metric(&report, "invocations.Widget::operator<<");
        assert_eq!(
            detail(op, "shapes::Widget::operator<<(int)"),
            vec![900.0; 2]
        );
        let get = metric(&report, "invocations.Box::get");
        assert_eq!(detail(get, "shapes::Box<int>::get() const"), vec![300.0; 2]);
        assert_eq!(
            detail(get, "shapes::Box<double>::get() const"),
            vec![300.0; 2]
        );
        let scale = metric(&report, "invocations.shapes::scale");
        assert_eq!(
            detail(scale, "shapes::scale(long)"),
            vec![300.0; 2],
            "{engine}"
        );
    }
}

/// Debian's `perf probe` + `perf stat` on the same function and command: equal counts.
#[test]
fn equals_perf_probe_and_perf_stat() {
    if skip_without_uprobes("uprobes") {
        return;
    }
    if Command::new("perf").arg("--version").output().is_err() {
        skip!(Need::Perf, "`perf` (linux-perf) is not installed");
        return;
    }
    let exe = fixture!("calls");
    let nm = Command::new("nm").arg(exe).output();
    let Ok(nm) = nm else {
        skip!(Need::Binutils, "`nm` (binutils) is not installed");
        return;
    };
    let symbols = String::from_utf8_lossy(&nm.stdout).into_owned();
    let mangled = symbols
        .split_whitespace()
        .find(|s| s.starts_with("_ZN5calls4work17h"))
        .expect("calls::work in nm output")
        .to_string();
    let group = format!("sbsoracle{}", std::process::id());
    let add = Command::new("perf")
        .args(["probe", "-q", "-x", exe, "--add"])
        .arg(format!("{group}:work={mangled}"))
        .output()
        .unwrap();
    assert!(
        add.status.success(),
        "perf probe: {}",
        String::from_utf8_lossy(&add.stderr)
    );
    let stat = Command::new("perf")
        .args(["stat", "-x,", "-e"])
        .arg(format!("{group}:work"))
        .args(["--", exe, "1234", "2"])
        .stdout(Stdio::null())
        .output()
        .unwrap();
    let _ = Command::new("perf")
        .args(["probe", "-q", "-d"])
        .arg(format!("{group}:*"))
        .output();
    let text = String::from_utf8_lossy(&stat.stderr).into_owned();
    let perf_count: f64 = text
        .lines()
        .find(|l| l.contains(&format!("{group}:work")))
        .and_then(|l| l.split(',').next())
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no count in perf stat output: {text}"));
    assert_eq!(perf_count, 1234.0 * 4.0);
    for engine in ENGINES {
        let run = sbs([
            "--invocations-engine",
            engine,
            "--runs",
            "2",
            "--format",
            "json",
            "--invocations",
            "calls::work",
            "--",
            exe,
            "1234",
            "2",
        ])
        .success();
        let ours = samples(metric(&run.json(), "invocations.calls::work"));
        assert_eq!(ours, vec![perf_count; 2], "{engine}");
    }
}

#[test]
fn bad_input_is_a_one_line_error_with_exit_2() {
    if skip_without_uprobes("uprobes") {
        return;
    }
    let calls = fixture!("calls");
    sbs(["--invocations", "wrok", "--", calls]).fails_with(2, "closest names: calls::work");
    sbs(["--invocations", "Vec<T::push", "--", calls]).fails_with(2, "not balanced");
    sbs(["--max-probes", "3", "--invocations", "fmt", "--", calls])
        .fails_with(2, "raise the limit with --max-probes");

    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("not-elf");
    std::fs::write(&text, "plain text\n").unwrap();
    make_executable(&text);
    sbs([
        "--invocations".as_ref(),
        "main".as_ref(),
        "--".as_ref(),
        text.as_os_str(),
    ])
    .fails_with(2, "is not an ELF executable");

    let script = dir.path().join("bad-interp.sh");
    std::fs::write(&script, "#!/nonexistent/interpreter\n").unwrap();
    make_executable(&script);
    sbs([
        "--invocations".as_ref(),
        "malloc".as_ref(),
        "--".as_ref(),
        script.as_os_str(),
    ])
    .fails_with(2, "interpreter `/nonexistent/interpreter` was not found");

    if Command::new("strip").arg("--version").output().is_ok() {
        let stripped = dir.path().join("calls-stripped");
        std::fs::copy(calls, &stripped).unwrap();
        let out = Command::new("strip").arg(&stripped).output().unwrap();
        assert!(
            out.status.success(),
            "strip: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        sbs([
            "--invocations".as_ref(),
            "work".as_ref(),
            "--".as_ref(),
            stripped.as_os_str(),
        ])
        .fails_with(2, "is stripped (no .symtab)");
    } else {
        skip!(
            Need::Binutils,
            "the stripped binary case: `strip` (binutils) is not installed"
        );
    }
}

fn make_executable(p: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn scripts_and_static_binaries_are_probed() {
    if skip_without_uprobes("uprobes") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("s.sh");
    std::fs::write(&script, "#!/bin/sh\nls / > /dev/null\n").unwrap();
    make_executable(&script);
    let run = sbs([
        "--runs".as_ref(),
        "2".as_ref(),
        "--format".as_ref(),
        "json".as_ref(),
        "--invocations".as_ref(),
        "malloc".as_ref(),
        "--".as_ref(),
        script.as_os_str(),
    ])
    .success();
    let report = run.json();
    let m = samples(metric(&report, "invocations.malloc"));
    run.check(m[0] > 0.0, "the shell and ls call malloc");
    run.check(
        report["benchmarks"][0]["warnings"]
            .to_string()
            .contains("is a script"),
        "script warning",
    );

    let src = dir.path().join("stat.c");
    std::fs::write(
        &src,
        "__attribute__((noinline)) void counted(void) { __asm__ volatile(\"\"); }\n\
         int main(void) { for (int i = 0; i < 77; i++) counted(); return 0; }\n",
    )
    .unwrap();
    let exe = dir.path().join("stat");
    let built = Command::new("cc")
        .args(["-static", "-O1", "-o"])
        .arg(&exe)
        .arg(&src)
        .output();
    // The compiler's complaint is part of the skip's reason, not loose test output.
    if let Some(why) = match &built {
        Ok(out) if out.status.success() => None,
        Ok(out) => Some(String::from_utf8_lossy(&out.stderr).into_owned()),
        Err(e) => Some(e.to_string()),
    } {
        skip!(
            Need::StaticLibc,
            "the static case: `cc -static` does not work here: {why}"
        );
        return;
    }
    let run = sbs([
        "--runs".as_ref(),
        "2".as_ref(),
        "--format".as_ref(),
        "json".as_ref(),
        "--invocations".as_ref(),
        "counted".as_ref(),
        "--".as_ref(),
        exe.as_os_str(),
    ])
    .success();
    assert_eq!(
        samples(metric(&run.json(), "invocations.counted")),
        vec![77.0; 2]
    );
    sbs([
        "--invocations".as_ref(),
        "nope_nothing".as_ref(),
        "--".as_ref(),
        exe.as_os_str(),
    ])
    .fails_with(2, "is statically linked");
}

#[test]
fn probes_are_removed_after_success_crash_and_ctrl_c() {
    if skip_without_uprobes("uprobes") {
        return;
    }
    let (pid, out) = sbs_with_pid(&[
        "--invocations-engine",
        "uprobe",
        "--runs",
        "1",
        "--invocations",
        "work",
        "--",
        fixture!("calls"),
        "10",
        "1",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(definitions_of(pid), Vec::<String>::new());

    // A crashing child: the run fails, the probes go.
    let (pid, out) = sbs_with_pid(&[
        "--invocations-engine",
        "uprobe",
        "--runs",
        "1",
        "--invocations",
        "main",
        "--",
        fixture!("crash"),
    ]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(definitions_of(pid), Vec::<String>::new());

    // Ctrl-C while the child runs.
    let child = Command::new(util::sbs_profile())
        .args([
            "--invocations-engine",
            "uprobe",
            "--runs",
            "1",
            "--invocations",
            "main",
            "--",
            fixture!("forever"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let start = Instant::now();
    while definitions_of(pid).is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "probes never appeared"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(100));
    // SAFETY: signalling the sbs-profile process this test started.
    unsafe { libc::kill(pid as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(definitions_of(pid), Vec::<String>::new());
}

#[test]
fn stale_definitions_of_a_dead_sbs_profile_are_removed() {
    if skip_without_uprobes("uprobes") {
        return;
    }
    // An sbs-profile killed with SIGKILL in the middle of its runs leaves its definitions
    // behind, and its lock file, which nobody holds any more.
    let mut killed = Command::new(util::sbs_profile())
        .args([
            "--invocations-engine",
            "uprobe",
            "--runs",
            "1",
            "--invocations",
            "main",
            "--",
            fixture!("forever"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = killed.id();
    let children = format!("/proc/{pid}/task/{pid}/children");
    let start = Instant::now();
    let (benchmark, left) = loop {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the benchmark never started"
        );
        let child = std::fs::read_to_string(&children).unwrap_or_default();
        let left = definitions_of(pid);
        if let Some(child) = child.split_whitespace().next() {
            if !left.is_empty() {
                break (child.to_string(), left);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let group = left[0]
        .split_whitespace()
        .next()
        .and_then(|d| d.split_once(':'))
        .and_then(|(_, e)| e.split_once('/'))
        .map(|(g, _)| g.to_string())
        .unwrap();
    let lock = Path::new("/run/sbs-profile").join(format!("{group}.lock"));
    killed.kill().unwrap();
    killed.wait().unwrap();
    // The benchmark dies with it (parent-death signal); its counters go with it.
    let gone = Instant::now();
    while Path::new(&format!("/proc/{benchmark}")).exists() {
        assert!(
            gone.elapsed() < Duration::from_secs(10),
            "the benchmark lives on"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // (Another test's run may clean them up first: any run does.)
    // The next run removes them, and the lock file.
    sbs([
        "--invocations-engine",
        "uprobe",
        "--runs",
        "1",
        "--invocations",
        "work_more",
        "--",
        fixture!("calls"),
        "1",
        "0",
    ])
    .success();
    assert_eq!(definitions_of(pid), Vec::<String>::new());
    assert!(!lock.exists(), "{} is left", lock.display());
}

#[test]
fn without_root_the_error_says_what_is_needed() {
    if skip_without_uprobes("uprobes") {
        return;
    }
    // Drop to `nobody` for one sbs-profile run (needs util-linux's setpriv). The binaries
    // run from copies in a directory open to everyone: the build directory may not be
    // (a checkout under /root).
    let dir = tempfile::tempdir().unwrap();
    make_executable(dir.path());
    let (sbs_copy, calls_copy) = (dir.path().join("sbs-profile"), dir.path().join("calls"));
    std::fs::copy(util::sbs_profile(), &sbs_copy).unwrap();
    std::fs::copy(fixture!("calls"), &calls_copy).unwrap();
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&sbs_copy)
        .args([
            "--invocations-engine".as_ref(),
            "uprobe".as_ref(),
            "--invocations".as_ref(),
            "work".as_ref(),
            "--".as_ref(),
            calls_copy.as_os_str(),
        ])
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
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("uprobes need root or CAP_SYS_ADMIN"), "{err}");
    assert!(err.contains("perf_event_paranoid is"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    // The in-process engine needs no privilege: the same count as root gets.
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&sbs_copy)
        .args([
            "--invocations-engine".as_ref(),
            "inproc".as_ref(),
            "--runs".as_ref(),
            "2".as_ref(),
            "-f".as_ref(),
            "json".as_ref(),
            "--invocations".as_ref(),
            "calls::work".as_ref(),
            "--".as_ref(),
            calls_copy.as_os_str(),
            "100".as_ref(),
            "1".as_ref(),
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let work = metric(&report, "invocations.calls::work");
    assert_eq!(samples(work), vec![300.0; 2]);
    assert_eq!(work["source"], "inproc");
}

/// util-linux's `unshare`, or `None` with the reason printed.
fn unshare() -> Option<&'static str> {
    let found = ["/usr/bin/unshare", "/bin/unshare"]
        .into_iter()
        .find(|p| Path::new(p).exists());
    if found.is_none() {
        skip!(
            Need::UtilLinux,
            "no `unshare` (util-linux) to make private namespaces"
        );
    }
    found
}

/// Run sbs-profile in a private mount namespace after `setup` (shell commands) has run
/// there, so unmounting tracefs cannot disturb probes of tests running concurrently.
fn sbs_in_mount_namespace(setup: &str, args: &[&str]) -> Option<util::Finished> {
    let unshare = unshare()?;
    let output = Command::new(unshare)
        .args(["--mount", "--propagation", "private", "/bin/sh", "-c"])
        .arg(format!("{setup} && exec \"$0\" \"$@\""))
        .arg(util::sbs_profile())
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    Some(util::Finished {
        args: args.iter().map(|a| a.to_string()).collect(),
        output,
    })
}

#[test]
fn missing_tracefs_is_mounted_or_a_clear_error() {
    if skip_without_uprobes("uprobes and mount namespaces") {
        return;
    }
    let args = [
        "--invocations-engine",
        "uprobe",
        "--runs",
        "2",
        "--format",
        "json",
        "--invocations",
        "calls::work",
        "--",
        fixture!("calls"),
        "100",
        "0",
    ];
    // No tracefs mounted anywhere: sbs-profile mounts it (as root) and counts exactly.
    let unmount = "umount -l /sys/kernel/tracing 2>/dev/null; \
                   umount -l /sys/kernel/debug 2>/dev/null; \
                   ! grep -q ' tracefs ' /proc/self/mounts";
    let Some(run) = sbs_in_mount_namespace(unmount, &args) else {
        return;
    };
    let run = run.success();
    assert_eq!(
        samples(metric(&run.json(), "invocations.calls::work")),
        vec![200.0; 2]
    );
    // The mount outlives the run, so it is said, once, on stderr.
    let note = "note: tracefs was not mounted; mounted it at /sys/kernel/tracing";
    run.check(
        run.stderr().matches(note).count() == 1,
        "the mount is announced once",
    );
    // Not when it was mounted already.
    let mounted = sbs(args).success();
    mounted.check(
        !mounted.stderr().contains("mounted it"),
        "no note without a mount",
    );
    // Nowhere to mount it (a read-only /sys/kernel without the mount point): one line that
    // says what failed and the command that fixes it.
    let no_mount_point = format!("{unmount} && mount -t tmpfs -o ro none /sys/kernel");
    let Some(run) = sbs_in_mount_namespace(&no_mount_point, &args) else {
        return;
    };
    let run = run.fails_with(
        2,
        "tracefs is not mounted and mounting it at /sys/kernel/tracing failed",
    );
    run.check(
        run.stderr()
            .contains("run `mount -t tracefs nodev /sys/kernel/tracing` as root"),
        "the error names the command that fixes it",
    );
}

#[test]
fn ctrl_c_while_probes_are_defined_stops_at_once() {
    if skip_without_uprobes("uprobes") {
        return;
    }
    // 1000 probes: the definitions and their anchor events take about a second, and
    // closing the anchors of an interrupted set would take about 90 s (a kernel grace
    // period each), which is what an interruption used to wait for.
    let child = Command::new(util::sbs_profile())
        .args([
            "--invocations-engine",
            "uprobe",
            "--runs",
            "1",
            "--max-probes",
            "5000",
            "--invocations",
            "many_step",
            "--",
            fixture!("many_functions"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let start = Instant::now();
    let mut defined = 0;
    while defined == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "probes never appeared"
        );
        std::thread::sleep(Duration::from_millis(2));
        defined = definitions_of(pid).len();
    }
    // SAFETY: signalling the sbs-profile process this test started.
    unsafe { libc::kill(pid as i32, libc::SIGINT) };
    let signalled = Instant::now();
    let out = child.wait_with_output().unwrap();
    let took = signalled.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    eprintln!("SIGINT with {defined} of 1000 probes defined: exit 130 after {took:?}");
    assert!(
        took < Duration::from_secs(3),
        "took {took:?} from SIGINT to exit ({defined} probes defined at SIGINT): {err}"
    );
    assert_eq!(definitions_of(pid), Vec::<String>::new());
}

#[test]
fn clean_up_in_another_pid_namespace_leaves_a_live_run_alone() {
    if skip_without_uprobes("uprobes and pid namespaces") {
        return;
    }
    let Some(unshare) = unshare() else {
        return;
    };
    // A live run: this process holds a probe set, as sbs-profile does during its runs.
    let tracefs = sbs_probes::tracefs::Tracefs::open_or_mount().unwrap();
    let image = sbs_probes::elf::Image::load(Path::new(fixture!("calls"))).unwrap();
    let main = image.functions.iter().find(|f| f.name == "main").unwrap();
    let target = sbs_probes::tracefs::ProbeTarget {
        path: image.path.clone(),
        offset: main.offset,
        what: "`main`".into(),
    };
    let set = sbs_probes::tracefs::ProbeSet::define(&tracefs, &[target], &|| false).unwrap();
    let mine = |group: &str| -> Vec<String> {
        std::fs::read_to_string(UPROBE_EVENTS)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(&format!("{group}/")))
            .map(str::to_string)
            .collect()
    };
    let group = set.group().to_string();
    assert_eq!(mine(&group).len(), 1);
    let lock = Path::new("/run/sbs-profile").join(format!("{group}.lock"));
    if Path::new("/run").is_dir() {
        assert!(lock.is_file(), "{} while the set lives", lock.display());
    }
    // A second sbs-profile in its own pid namespace (a container), where this process's
    // pid is nobody: it cleans stale definitions before making its own.
    let out = Command::new(unshare)
        .args(["--pid", "--fork", "--mount-proc"])
        .arg(util::sbs_profile())
        .args([
            "--invocations-engine",
            "uprobe",
            "--runs",
            "1",
            "--invocations",
            "work_more",
            "--",
            fixture!("calls"),
            "1",
            "0",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        mine(&group).len(),
        1,
        "the live run's definitions were removed from another pid namespace"
    );
    drop(set);
    assert_eq!(mine(&group), Vec::<String>::new());
    assert!(!lock.exists(), "{} is removed with the set", lock.display());
}

#[test]
fn locked_first_instructions_are_counted_exactly_or_refused_loudly() {
    if skip_without_uprobes("uprobes") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = util::gcc_fixture(dir.path(), "lock_first", &[]) else {
        return;
    };
    // The fixture means something only if gcc made `lock add` the first instruction.
    let image = sbs_probes::elf::Image::load(&exe).unwrap();
    let first_byte = |name: &str| {
        let f = image.functions.iter().find(|f| f.name == name).unwrap();
        image.data()[f.offset as usize]
    };
    assert_eq!(
        first_byte("bump_ool"),
        0xf0,
        "bump_ool starts with a LOCK prefix"
    );
    assert_eq!(
        first_byte("bump_two"),
        0xf0,
        "bump_two starts with a LOCK prefix"
    );
    // A uprobe on the LOCK instruction never fires (it counted 0 here, reported as
    // exact): the count comes from the instruction after it, which runs once per call.
    // The in-process engine moves the LOCK instruction into its trampoline.
    for engine in ENGINES {
        let run = sbs([
            "--invocations-engine".as_ref(),
            engine.as_ref(),
            "--runs".as_ref(),
            "2".as_ref(),
            "--format".as_ref(),
            "json".as_ref(),
            "--invocations".as_ref(),
            "bump_ool".as_ref(),
            "--invocations".as_ref(),
            "bump_inl".as_ref(),
            "--".as_ref(),
            exe.as_os_str(),
            "100".as_ref(),
        ])
        .success();
        let report = run.json();
        assert_eq!(
            samples(metric(&report, "invocations.bump_ool")),
            vec![100.0; 2]
        );
        // Inlined: the LOCK instruction is the whole copy, at the head of the loop.
        assert_eq!(
            samples(metric(&report, "invocations.bump_inl")),
            vec![100.0; 2],
            "{engine}"
        );
    }
    // Another LOCK instruction right after the first: no exact place, a one-line error
    // naming the function and the site.
    let site = format!("{}:0x", exe.display());
    let run = sbs([
        "--invocations".as_ref(),
        "bump_two".as_ref(),
        "--".as_ref(),
        exe.as_os_str(),
    ])
    .fails_with(2, "cannot count calls of `bump_two`");
    run.check(run.stderr().contains(&site), "the error names the site");
    run.check(
        run.stderr().contains("-fcf-protection=branch"),
        "the error says what to do",
    );
    // What the kernel alone refuses (a VEX-encoded first instruction here) is found when
    // the probes are set up, before any run, and named the same way: not "Unknown error
    // 524", not a silent 0.
    let run = sbs([
        "--invocations-engine".as_ref(),
        "uprobe".as_ref(),
        "--invocations".as_ref(),
        "vex_first".as_ref(),
        "--".as_ref(),
        exe.as_os_str(),
    ])
    .fails_with(2, "the kernel refused the uprobe on `vex_first`");
    run.check(run.stderr().contains(&site), "the error names the site");
    run.check(
        !run.stderr().contains("Unknown error"),
        "the errno is explained",
    );
    // Shorter than the in-process engine's jump (`vpxor; ret`): not patched, and with
    // `inproc` alone that is an error naming the site and why.
    let run = sbs([
        "--invocations-engine".as_ref(),
        "inproc".as_ref(),
        "--invocations".as_ref(),
        "vex_first".as_ref(),
        "--".as_ref(),
        exe.as_os_str(),
    ])
    .fails_with(2, "cannot be patched safely");
    run.check(run.stderr().contains(&site), "the error names the site");
}

/// The in-process engine patches a site only when that is provably safe; the others are
/// counted by uprobes. Both engines give the same counts, the program's results are
/// unchanged (it checks them and exits 1 otherwise), and the counts survive an `exec` of
/// the program by itself (the new image patches again).
#[test]
fn unsafe_sites_are_left_to_uprobes_and_safe_ones_patched() {
    if skip_without_uprobes("uprobes") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(_) = gcc_shared(dir.path(), "libpatchlib.so", "patch_lib.c") else {
        return;
    };
    let mut args = vec!["-DPATCH_LIB".to_string(), "-lpatchlib".to_string()];
    args.extend(linking_from(dir.path()));
    let Some(exe) = gcc_program(dir.path(), "patch_cases", "patch_cases.c", &args) else {
        return;
    };
    let cases = [
        ("loop_into", "uprobe"),
        ("tiny", "uprobe"),
        ("rip_first", "inproc"),
        ("table_fn", "inproc"),
        ("table_into", "uprobe"),
        ("call_first", "inproc"),
        ("icall_first", "inproc"),
        ("jmp_first", "inproc"),
        ("padded", "uprobe"),
        ("lib_work", "inproc"),
    ];
    let n = 300.0;
    for engine in ENGINES_AUTO {
        let mut args = vec!["--invocations-engine", engine, "--runs", "2", "-f", "json"];
        for (name, _) in cases {
            args.extend(["--invocations", name]);
        }
        let exe_arg = exe.to_string_lossy().into_owned();
        args.extend(["--", &exe_arg, "300", "exec"]);
        let report = sbs(&args).success().json();
        for (name, patched_by) in cases {
            let m = metric(&report, &format!("invocations.{name}"));
            assert_eq!(samples(m), vec![2.0 * n; 2], "{engine}: {name}: {m:#}");
            let expected = if engine == "uprobe" {
                "uprobe"
            } else {
                patched_by
            };
            assert_eq!(m["source"], expected, "{engine}: {name}");
        }
        if engine == "auto" {
            // `padded` is left to uprobes because its exception table was read, not
            // because it could not be.
            let padded = metric(&report, "invocations.padded");
            assert!(
                padded["notes"].to_string().contains("a landing pad is at"),
                "{padded:#}"
            );
        }
    }
    // With the in-process engine alone, a site it cannot patch is an error saying why.
    let exe_arg = exe.to_string_lossy().into_owned();
    let run = sbs([
        "--invocations-engine",
        "inproc",
        "--invocations",
        "loop_into",
        "--",
        &exe_arg,
        "1",
    ])
    .fails_with(2, "cannot be patched safely");
    run.check(
        run.stderr()
            .contains("inside the 6 bytes the patch would replace"),
        "the error says why",
    );
}

/// Sites closer together than the in-process engine's 5-byte jump
/// (`tests/fixtures/c/close_sites.c`): two inlined copies 4 bytes apart whose patches would
/// overwrite each other (the program crashed with SIGSEGV), a copy that only a uprobe could
/// count lying inside its neighbour's patch (the run stopped: "the code in memory differs
/// from the file"), and a function starting 4 bytes into another one, which calls reach.
/// Every engine counts every site exactly and the program's results are unchanged (it
/// checks them and exits 1 otherwise); `inproc` either counts exactly or refuses before
/// running, in one line naming the sites.
#[test]
fn sites_closer_than_a_patch_are_counted_exactly_by_every_engine() {
    if skip_without_uprobes("uprobes") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = util::gcc_fixture(dir.path(), "close_sites", &[]) else {
        return;
    };
    // The fixture means something only with this layout: in `pair` and `last` the
    // inlined copies are one 4-byte `add` each, side by side; `inner` starts 4 bytes into
    // `outer`.
    let image = sbs_probes::elf::Image::load(&exe).unwrap();
    let function = |name: &str| image.functions.iter().find(|f| f.name == name).unwrap();
    let code = |name: &str| image.code_of(function(name)).unwrap().to_vec();
    let (add_rdi, add_rsi) = ([0x48, 0x83, 0x07, 0x01], [0x48, 0x83, 0x06, 0x01]);
    assert_eq!(code("pair")[..8], [add_rdi, add_rsi].concat(), "pair");
    assert_eq!(
        code("last"),
        [&add_rdi[..], &add_rsi, &[0xc3]].concat(),
        "last"
    );
    assert_eq!(function("inner").address, function("outer").address + 4);

    let n = 1000.0;
    let expected = [
        ("bump", 4.0 * n),
        ("tick", 2.0 * n),
        ("outer", 3.0 * n),
        ("inner", 3.0 * n + 7.0),
    ];
    let exe_arg = exe.to_string_lossy().into_owned();
    let run = |engine: &str, names: &[&str]| {
        let mut args = vec!["--invocations-engine", engine, "--runs", "2", "-f", "json"];
        for name in names {
            args.extend(["--invocations", name]);
        }
        args.extend(["--", &exe_arg, "1000"]);
        sbs(&args)
    };
    for engine in ["uprobe", "auto", "inproc"] {
        // `inproc` cannot count `outer` (below).
        let names: Vec<&str> = expected
            .iter()
            .map(|(name, _)| *name)
            .filter(|&name| engine != "inproc" || name != "outer")
            .collect();
        let report = run(engine, &names).success().json();
        for name in names {
            let count = expected.iter().find(|(n, _)| *n == name).unwrap().1;
            let m = metric(&report, &format!("invocations.{name}"));
            assert_eq!(samples(m), vec![count; 2], "{engine}: {name}: {m:#}");
        }
        if engine == "auto" {
            // One patch counts the two copies side by side, and the copy no patch of its
            // own could count; `outer` is left to a uprobe, whose breakpoint lies before
            // `inner`'s patch.
            for (name, source) in [
                ("bump", "inproc"),
                ("tick", "inproc"),
                ("outer", "uprobe"),
                ("inner", "inproc"),
            ] {
                let m = metric(&report, &format!("invocations.{name}"));
                assert_eq!(m["source"], source, "{name}: {m:#}");
            }
            let notes =
                |name: &str| metric(&report, &format!("invocations.{name}"))["notes"].to_string();
            assert!(
                notes("tick").contains("1 through the patch of a site a few bytes before"),
                "{}",
                notes("tick")
            );
            assert!(
                notes("outer").contains("the function `inner` starts at"),
                "{}",
                notes("outer")
            );
        }
    }
    // `outer`'s patch would displace the first bytes of `inner`, which calls reach: with
    // the in-process engine alone, one line naming both and why, before any run.
    let run = run("inproc", &["outer"]).fails_with(2, "cannot be patched safely");
    run.check(
        run.stderr().contains(&format!("`outer` at {exe_arg}:0x"))
            && run.stderr().contains("the function `inner` starts at 0x"),
        "the error names both functions",
    );
    // The program's output is the same under each engine as alone.
    let alone = Command::new(&exe).arg("1000").output().unwrap();
    assert_eq!(String::from_utf8_lossy(&alone.stdout), "6000 6007 5\n");
    for engine in ["uprobe", "auto"] {
        let shown = sbs([
            "--invocations-engine",
            engine,
            "--runs",
            "1",
            "--warmup",
            "0",
            "--show-output",
            "--invocations",
            "bump",
            "--invocations",
            "inner",
            "--",
            &exe_arg,
            "1000",
        ])
        .success();
        assert!(
            shown.stdout().starts_with("6000 6007 5\n"),
            "{engine}: {}",
            shown.stdout()
        );
    }
}

/// A program under a seccomp filter it inherits (from a sandbox, a container runtime,
/// systemd's `MemoryDenyWriteExecute=`: `tests/fixtures/c/sandboxed.c`) was killed by
/// SIGSYS in the invocations runs, and the error blamed the program. The counting
/// library now tries what patching asks in a forked child first and declines when the
/// child is killed or refused; a filter that kills the fork itself is caught by the
/// SIGSYS. `auto` then counts with uprobes, exactly, and says why; `inproc` stops in one
/// line naming the engine and the filter, never blaming the program.
#[test]
fn a_sandboxed_program_is_counted_with_uprobes_and_never_killed() {
    if skip_without_uprobes("uprobes") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = util::gcc_fixture(dir.path(), "sandboxed", &[]) else {
        return;
    };
    let exe = exe.to_string_lossy().into_owned();
    for (mode, cause) in [
        (
            "kill",
            "a seccomp filter forbids making code writable or executable",
        ),
        (
            "errno",
            "a seccomp filter forbids making code writable or executable",
        ),
        (
            "fork",
            "the program was killed by SIGSYS in a run counted in-process",
        ),
    ] {
        // The filter lets the program itself run.
        sbs(["--runs", "1", "--", &exe, mode, "1000"]).success();
        let report = sbs([
            "--runs",
            "2",
            "--invocations",
            "bump",
            "-f",
            "json",
            "--",
            &exe,
            mode,
            "1000",
        ])
        .success()
        .json();
        let m = metric(&report, "invocations.bump");
        assert_eq!(samples(m), vec![1000.0; 2], "{mode}: {m:#}");
        assert_eq!(m["source"], "uprobe", "{mode}: {m:#}");
        let notes = m["notes"].to_string();
        assert!(
            notes.contains("0 of 1 site(s) counted in-process, 1 by uprobe")
                && notes.contains(cause),
            "{mode}: {notes}"
        );
        let refused = sbs([
            "--invocations-engine",
            "inproc",
            "--runs",
            "1",
            "--invocations",
            "bump",
            "--",
            &exe,
            mode,
            "1000",
        ])
        .fails_with(2, cause);
        refused.check(
            refused.stderr().contains("--invocations-engine uprobe")
                && !refused.stderr().contains("use --show-output"),
            "the error names the engine and what to do, not the program's failure",
        );
    }
}

/// On a real -O3 library, pyenv's python 3.11.7 (when installed): some inlined copies of
/// `Py_DECREF` (7,587 sites) lie 2 bytes apart (in `PyFile_WriteObject`, a `je`, then
/// `subq $1,(%rbx)`, each the entry of a copy), and their patches overwrote each other:
/// python died with SIGSEGV. With `Py_INCREF` (2,762 sites) a uprobe lay inside a patch,
/// and the run stopped: "the code in memory differs from the file". Both now run, such
/// sites counted through their neighbour's patch. That those counts are exact is checked
/// against the uprobe engine on `PyUnicode_GET_LENGTH` (260 sites, 10 of them counted
/// through a neighbour's patch, all reached by the workload): the uprobe engine on every
/// site of `Py_DECREF` takes about 10 minutes here (closing 7,587 uprobes), too long for
/// a test.
#[test]
fn python_sites_closer_than_a_patch_run_and_count_as_uprobes_do() {
    if skip_without_uprobes("uprobes") {
        return;
    }
    let Some(python) = util::python_o3() else {
        return;
    };
    let python = python.to_string_lossy().into_owned();
    // print() reaches PyFile_WriteObject; operators on a weakref proxy the proxy_* pairs.
    let work = "import weakref, operator\n\
                class N:\n    def __add__(s, o): return 1\n    __mul__ = __sub__ = __add__\n\
                n = N()\np = weakref.proxy(n)\n\
                print(sum(operator.add(p, i) + operator.mul(p, i) - operator.sub(p, i) for i in range(100)))";
    let run = sbs([
        "--runs",
        "1",
        "-f",
        "json",
        "--max-probes",
        "100000",
        "--invocations",
        "Py_DECREF",
        "--invocations",
        "Py_INCREF",
        "--",
        &python,
        "-c",
        work,
    ])
    .success();
    let report = run.json();
    for name in ["Py_DECREF", "Py_INCREF"] {
        let m = metric(&report, &format!("invocations.{name}"));
        assert!(samples(m)[0] > 10_000.0, "{m:#}");
        run.check(
            m["notes"]
                .to_string()
                .contains("through the patch of a site a few bytes before"),
            name,
        );
    }

    // Strings: unicode_compare, PyUnicode_Concat, PyUnicode_Contains, unicode_count,
    // PyUnicode_Append, _PyUnicode_XStrip, unicode_removeprefix and unicode_removesuffix
    // each hold two copies 4 bytes apart.
    let work = "w = [str(i) * 3 for i in range(300)]\ns = ''\nn = 0\n\
                for x in sorted(w, reverse=True):\n    s += x\n\
                \x20   t = (x + '\\u0101').strip('1').removeprefix('2').removesuffix('3')\n\
                \x20   n += s.count('12') + ('99' in t) + sorted([t, x, '\\u0101' + x]).index(x)\n\
                print(len(s), n)";
    let rows = |engine: &str| {
        let run = sbs([
            "--invocations-engine",
            engine,
            "--runs",
            "1",
            "-f",
            "json",
            "--invocations-detail",
            "--invocations",
            "PyUnicode_GET_LENGTH",
            "-e",
            "PYTHONHASHSEED=0",
            "--",
            &python,
            "-c",
            work,
        ])
        .success();
        let report = run.json();
        let m = metric(&report, "invocations.PyUnicode_GET_LENGTH");
        let rows: Vec<(String, f64)> = details(m)
            .into_iter()
            .map(|(label, v)| {
                let engine = [" [inproc]", " [uprobe]", " [inproc+uprobe]"]
                    .into_iter()
                    .find(|e| label.ends_with(e))
                    .unwrap_or_default();
                (label[..label.len() - engine.len()].to_string(), v[0])
            })
            .collect();
        (m["notes"].to_string(), rows)
    };
    let (notes, inproc) = rows("auto");
    assert!(
        notes.contains("(10 through the patch of a site a few bytes before)"),
        "{notes}"
    );
    let (_, uprobe) = rows("uprobe");
    let shared = [
        "unicode_compare at",
        "PyUnicode_Concat at",
        "PyUnicode_Contains at",
        "unicode_count at",
        "_PyUnicode_XStrip at",
        "unicode_removeprefix at",
        "unicode_removesuffix at",
    ];
    for caller in shared {
        let of = |rows: &[(String, f64)]| -> Vec<(String, f64)> {
            rows.iter()
                .filter(|(l, _)| l.contains(&format!("inlined in {caller}")))
                .cloned()
                .collect()
        };
        assert_eq!(of(&inproc).len(), 2, "{caller}: {inproc:?}");
        assert!(
            of(&inproc).iter().all(|(_, v)| *v > 0.0),
            "{caller}: {inproc:?}"
        );
        assert_eq!(of(&inproc), of(&uprobe), "{caller}");
    }
    // Every other row too, but for the string comparisons of dict lookups, of which
    // python makes a few more or fewer when its environment or memory layout differs:
    // 10,970 in-process here, 10,963 to 10,965 with uprobes depending on the environment
    // given, and 10,970 by `perf stat` on the two sites from a shell.
    let others = |rows: &[(String, f64)]| -> Vec<(String, f64)> {
        rows.iter()
            .filter(|(l, _)| !l.contains("inlined in unicodekeys_lookup_unicode at"))
            .cloned()
            .collect()
    };
    assert_eq!(others(&inproc), others(&uprobe));
}

/// A process image that runs without the counting library (here the program execs itself
/// with an empty environment) is not counted in-process: the run says so instead of
/// reporting the smaller count silently; uprobes count both images (root).
#[test]
fn an_image_without_the_counting_library_is_warned_about() {
    if skip_without_uprobes("uprobes") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = util::gcc_fixture(dir.path(), "patch_cases", &[]) else {
        return;
    };
    let exe = exe.to_string_lossy().into_owned();
    let warning = "1 of the 2 process images of a run did not load the in-process counting library";
    for (engine, mode, count, warned) in [
        ("inproc", "exec-clean", 300.0, true),
        ("inproc", "exec", 600.0, false),
        ("uprobe", "exec-clean", 600.0, false),
    ] {
        let run = sbs([
            "--invocations-engine",
            engine,
            "--invocations",
            "rip_first",
            "-r",
            "2",
            "-w",
            "0",
            "-f",
            "json",
            "--",
            &exe,
            "300",
            mode,
        ])
        .success();
        let report = run.json();
        let m = metric(&report, "invocations.rip_first");
        assert_eq!(samples(m), vec![count; 2], "{engine} {mode}: {m:#}");
        let warnings = report["benchmarks"][0]["warnings"].to_string();
        run.check(
            warnings.contains(warning) == warned,
            &format!("{engine} {mode}: warned: {warned}"),
        );
    }
}

/// A python child started by `subprocess` with its default `close_fds=True` (every
/// descriptor from 3 up closed before the exec) loads the counting library all the same:
/// no loader error in its stderr, and its calls are counted in-process. Needs no root.
#[test]
fn a_python_child_started_with_close_fds_loads_the_counting_library_and_is_counted() {
    let Some(python) = util::python3() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let stderrs = dir.path().join("stderrs");
    let script = util::python_fixture("close_fds.py");
    let count = |child: &str| {
        let run = sbs([
            "--invocations-engine".as_ref(),
            "inproc".as_ref(),
            "--invocations".as_ref(),
            "PyDict_SetDefault".as_ref(),
            "-r".as_ref(),
            "2".as_ref(),
            "-w".as_ref(),
            "0".as_ref(),
            "-f".as_ref(),
            "json".as_ref(),
            "--".as_ref(),
            python.as_os_str(),
            script.as_os_str(),
            stderrs.as_os_str(),
            child.as_ref(),
        ] as [&std::ffi::OsStr; 15])
        .success();
        let report = run.json();
        let warnings = report["benchmarks"][0]["warnings"].to_string();
        run.check(
            !warnings.contains("did not load the in-process counting library"),
            "every process image loaded the counting library",
        );
        samples(metric(&report, "invocations.PyDict_SetDefault"))
    };
    let without_child = count("none");
    let with_child = count("100000");
    assert_eq!(
        util::child_stderrs(&stderrs),
        vec!["b''"; 2],
        "the child's stderr in each run"
    );
    // The child's 100,000 calls of dict.setdefault (and its own start-up's calls).
    for (with, without) in with_child.iter().zip(&without_child) {
        assert!(
            with - without >= 100_000.0,
            "with the child {with_child:?}, without {without_child:?}"
        );
    }
}

/// A second run of the same patterns on the same program takes its sites from the cache
/// (shown here by a label edited in the cache file), and a changed program is resolved
/// again. The in-process engine needs no root, so this runs everywhere.
#[test]
fn resolved_sites_are_cached_per_program_until_it_changes() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let exe = dir.path().join("calls");
    std::fs::copy(fixture!("calls"), &exe).unwrap();
    let run = || {
        let out = Command::new(util::sbs_profile())
            .env("XDG_CACHE_HOME", &cache)
            .args(["--invocations-engine", "inproc", "--runs", "1", "-w", "0"])
            .args(["-f", "json", "--invocations", "calls::work", "--"])
            .arg(&exe)
            .args(["10", "0"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let work = metric(&report, "invocations.calls::work");
        assert_eq!(samples(work), vec![20.0]);
        details(work)[0].0.clone()
    };
    assert_eq!(run(), "calls::work");
    let files: Vec<PathBuf> = std::fs::read_dir(cache.join("sbs-profile/sites"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let text = std::fs::read_to_string(&files[0]).unwrap();
    let edited = text.replace("[\"calls::work\",", "[\"calls::work (cached)\",");
    assert_ne!(text, edited, "the row label is in the cache file");
    std::fs::write(&files[0], edited).unwrap();
    assert_eq!(
        run(),
        "calls::work (cached)",
        "the second run used the cache"
    );
    // The program changes (a new file at the same path): resolved again.
    std::fs::remove_file(&exe).unwrap();
    std::fs::copy(fixture!("calls"), &exe).unwrap();
    assert_eq!(run(), "calls::work");
}

/// One run of `exe ARGS` counting `pattern` with `engine`, with the site cache in
/// `cache`: the count and the first row's label (a label edited in the cache file shows
/// a hit).
fn counted_with_cache(
    cache: &Path,
    engine: &str,
    exe: &Path,
    args: &[&str],
    pattern: &str,
) -> (f64, String) {
    let out = Command::new(util::sbs_profile())
        .env("XDG_CACHE_HOME", cache)
        .args(["--invocations-engine", engine, "--runs", "1", "-w", "0"])
        .args(["-f", "json", "--invocations", pattern, "--"])
        .arg(exe)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let m = metric(&report, &format!("invocations.{pattern}"));
    (samples(m)[0], details(m)[0].0.clone())
}

/// The one cache file under `cache`.
fn cache_file(cache: &Path) -> PathBuf {
    let files: Vec<PathBuf> = std::fs::read_dir(cache.join("sbs-profile/sites"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    files[0].clone()
}

/// A cache may make a run faster, never different: an entry that looks valid but names a
/// site one byte off, at another file offset, in the ELF header, in another file, or rows
/// that name no site, is not used (the label edited alongside shows a miss), and the
/// count stays exact; so is an entry anybody may write. The cache's folders are 0700.
/// (Before: 0 or 21 calls for 7, a hang, or a panic.)
#[test]
fn a_site_cache_entry_that_does_not_match_the_file_is_not_used() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let exe = dir.path().join("calls");
    std::fs::copy(fixture!("calls"), &exe).unwrap();
    let pattern = "calls::work";
    assert_eq!(
        counted_with_cache(&cache, "inproc", &exe, &["10", "0"], pattern),
        (20.0, "calls::work".into())
    );
    let file = cache_file(&cache);
    for d in [cache.join("sbs-profile"), cache.join("sbs-profile/sites")] {
        let mode = std::fs::metadata(&d).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{}", d.display());
    }
    let original: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let labelled = |mut e: serde_json::Value| {
        e["rows"][0]["rows"][0][0] = "calls::work (cached)".into();
        e
    };
    // The edited label alone is a hit: the test can tell hits from misses.
    std::fs::write(&file, labelled(original.clone()).to_string()).unwrap();
    assert_eq!(
        counted_with_cache(&cache, "inproc", &exe, &["10", "0"], pattern).1,
        "calls::work (cached)"
    );
    let site = |e: &mut serde_json::Value, key: &str, f: &dyn Fn(u64) -> serde_json::Value| {
        let v = e["sites"][0][key].as_u64().unwrap();
        e["sites"][0][key] = f(v);
    };
    type Tamper<'a> = Box<dyn Fn(&mut serde_json::Value) + 'a>;
    let tampered: Vec<(&str, Tamper)> = vec![
        (
            "an address a byte on",
            Box::new(|e| site(e, "address", &|a| (a + 1).into())),
        ),
        (
            "another uprobe offset",
            Box::new(|e| site(e, "uprobe_offset", &|o| (o + 16).into())),
        ),
        (
            "a probe in the ELF header",
            Box::new(|e| site(e, "uprobe_offset", &|_| 0.into())),
        ),
        (
            "other bytes",
            Box::new(|e| e["sites"][0]["bytes"][0] = 0x90.into()),
        ),
        (
            "another file",
            Box::new(|e| e["sites"][0]["path"] = "/bin/true".into()),
        ),
        (
            "a row naming no site",
            Box::new(|e| e["rows"][0]["rows"][0][1][0] = 99.into()),
        ),
    ];
    for (what, tamper) in &tampered {
        let mut e = labelled(original.clone());
        tamper(&mut e);
        std::fs::write(&file, e.to_string()).unwrap();
        assert_eq!(
            counted_with_cache(&cache, "inproc", &exe, &["10", "0"], pattern),
            (20.0, "calls::work".into()),
            "with {what} in the cache"
        );
    }
    // Writable by others: not trusted.
    std::fs::write(&file, labelled(original.clone()).to_string()).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
    assert_eq!(
        counted_with_cache(&cache, "inproc", &exe, &["10", "0"], pattern).1,
        "calls::work",
        "a cache file anybody may write was used"
    );
}

/// The uid and gid of the `nobody` account.
fn nobody() -> (u32, u32) {
    let id = |flag: &str| {
        let out = Command::new("id").args([flag, "nobody"]).output().unwrap();
        assert!(out.status.success(), "no `nobody` account: {out:?}");
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse::<u32>()
            .unwrap()
    };
    (id("-u"), id("-g"))
}

/// Every file under `dir`: name, content and modification time.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>, std::time::SystemTime)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let m = std::fs::symlink_metadata(e.path()).unwrap();
            let content = match m.is_file() {
                true => std::fs::read(e.path()).unwrap(),
                false => Vec::new(),
            };
            let name = e.file_name().to_string_lossy().into_owned();
            (name, content, m.modified().unwrap())
        })
        .collect();
    files.sort();
    files
}

/// As root, with the site cache's directory in a directory another user may write, or
/// another user's, or reached through a link another user planted: two runs with the
/// cache there count exactly, say once each that the cache was not used and where, and
/// leave the victim directory as it was (its 210 files named and written as cache
/// entries, 40 days old, are neither trimmed nor joined by a new one), and nothing is
/// written in the other user's directories. (Before: the link was followed, an entry
/// written into the victim directory and 11 of its files deleted; without the link, the
/// entry went into the other user's directory.)
#[test]
fn the_site_cache_follows_no_planted_link_and_writes_in_no_other_users_directory() {
    use std::os::unix::fs::{lchown, symlink, PermissionsExt};
    if !util::is_root() {
        skip!(Need::Root, "making another user's directories needs root");
        return;
    }
    let (uid, gid) = nobody();
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("calls");
    std::fs::copy(fixture!("calls"), &exe).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let victim = dir.path().join("victim");
    std::fs::create_dir(&victim).unwrap();
    let forty_days = std::time::Duration::from_secs(40 * 24 * 3600);
    for i in 0..210u32 {
        let path = victim.join(format!("{i:016x}.json"));
        let content = format!(
            "{{\"format\":\"sbs-profile invocation sites\",\"version\":10,\"precious\":{i}}}"
        );
        std::fs::write(&path, content).unwrap();
        let f = std::fs::File::options().write(true).open(&path).unwrap();
        f.set_modified(std::time::SystemTime::now() - forty_days)
            .unwrap();
    }
    let before = snapshot(&victim);
    assert_eq!(before.len(), 210);
    // A directory of `nobody`'s: made by it, `mode` on it.
    let theirs = |path: &Path, mode: u32| {
        std::fs::create_dir(path).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
        lchown(path, Some(uid), Some(gid)).unwrap();
    };
    let planted = |link: &Path| {
        symlink(&victim, link).unwrap();
        lchown(link, Some(uid), Some(gid)).unwrap();
    };
    // 1. The issue's case: XDG_CACHE_HOME is nobody's, every user may write it, and
    // nobody made `sbs-profile/sites` a link to the victim.
    let shared = dir.path().join("shared");
    theirs(&shared, 0o777);
    theirs(&shared.join("sbs-profile"), 0o777);
    planted(&shared.join("sbs-profile/sites"));
    // 2. XDG_CACHE_HOME is the user's, `sbs-profile/sites` nobody's (no link).
    let mine = dir.path().join("mine");
    std::fs::create_dir(&mine).unwrap();
    theirs(&mine.join("sbs-profile"), 0o777);
    theirs(&mine.join("sbs-profile/sites"), 0o777);
    // 3. The user's `sbs-profile`, in which nobody planted `sites` as a link (made
    // before the user's directory was private).
    let linked = dir.path().join("linked");
    std::fs::create_dir_all(linked.join("sbs-profile")).unwrap();
    planted(&linked.join("sbs-profile/sites"));
    let cases = [
        (&shared, shared.clone(), "belongs to uid"),
        (&mine, mine.join("sbs-profile"), "belongs to uid"),
        (
            &linked,
            linked.join("sbs-profile/sites"),
            "is a symbolic link, which sbs-profile never makes",
        ),
    ];
    for (cache, named, why) in cases {
        for run in 0..2 {
            let out = Command::new(util::sbs_profile())
                .env("XDG_CACHE_HOME", cache)
                .args(["--invocations-engine", "inproc", "--runs", "1", "-w", "0"])
                .args(["-f", "json", "--invocations", "calls::work", "--"])
                .arg(&exe)
                .args(["10", "0"])
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "run {run} in {cache:?}: {stderr}");
            let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            let work = metric(&report, "invocations.calls::work");
            assert_eq!(samples(work), vec![20.0], "{cache:?}");
            let after = snapshot(&victim);
            assert!(
                after == before,
                "run {run} in {cache:?} changed the victim directory: {} files, {} of them \
                 not as they were",
                after.len(),
                after.iter().filter(|f| !before.contains(f)).count()
            );
            let note = format!(
                "sbs-profile: note: the invocation site cache was not used: {} {why}",
                named.display()
            );
            assert_eq!(
                stderr
                    .matches("the invocation site cache was not used")
                    .count(),
                1,
                "said once, run {run} in {cache:?}: {stderr}"
            );
            assert!(stderr.contains(&note), "{note:?} in {stderr}");
        }
    }
    // Nothing was written in nobody's directories.
    let listing = |d: &Path| snapshot(d).into_iter().map(|f| f.0).collect::<Vec<_>>();
    assert_eq!(listing(&shared), ["sbs-profile"]);
    assert_eq!(listing(&shared.join("sbs-profile")), ["sites"]);
    assert_eq!(listing(&mine), ["sbs-profile"]);
    assert_eq!(listing(&mine.join("sbs-profile")), ["sites"]);
    assert!(listing(&mine.join("sbs-profile/sites")).is_empty());
    assert_eq!(listing(&linked.join("sbs-profile")), ["sites"]);
}

/// A program without a build id rewritten in place, keeping its size, inode and
/// modification time, is resolved again: its cache entry is keyed by its content. The
/// two builds differ only in the order of two functions with the same code, so a stale
/// entry counts the other one. (Before: 1 call where there were 9.) Without a build id
/// only uprobes count it.
#[test]
fn a_program_without_a_build_id_rewritten_in_place_is_resolved_again() {
    if skip_without_uprobes("a program without a build id is counted by uprobes") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut builds = Vec::new();
    for swap in [false, true] {
        let sub = dir.path().join(format!("swap-{swap}"));
        std::fs::create_dir(&sub).unwrap();
        let mut flags = vec!["-fno-toplevel-reorder", "-Wl,--build-id=none"];
        if swap {
            flags.push("-DSWAP");
        }
        let Some(exe) = util::gcc_fixture(&sub, "counted", &flags) else {
            return;
        };
        builds.push(std::fs::read(&exe).unwrap());
    }
    assert_eq!(
        builds[0].len(),
        builds[1].len(),
        "the two builds differ in size"
    );
    let cache = dir.path().join("cache");
    let exe = dir.path().join("counted");
    std::fs::write(&exe, &builds[0]).unwrap();
    std::fs::set_permissions(&exe, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    assert_eq!(
        counted_with_cache(&cache, "uprobe", &exe, &[], "counted").0,
        9.0
    );
    let mtime = std::fs::metadata(&exe).unwrap().modified().unwrap();
    {
        use std::io::Write;
        let mut f = std::fs::File::options().write(true).open(&exe).unwrap();
        f.write_all(&builds[1]).unwrap();
        f.set_modified(mtime).unwrap();
    }
    assert_eq!(
        counted_with_cache(&cache, "uprobe", &exe, &[], "counted").0,
        9.0
    );
}

#[test]
fn the_loaders_own_inlined_copies_are_said_only_with_the_detail() {
    if skip_without_uprobes("uprobes") {
        return;
    }
    let run = |detail: bool| {
        let mut args = vec!["--runs", "1", "--warmup", "0", "-f", "json"];
        if detail {
            args.push("--invocations-detail");
        }
        args.extend(["--invocations", "malloc", "--", fixture!("exit_with"), "0"]);
        let report = sbs(args).success().json();
        report["benchmarks"][0]["warnings"].to_string()
    };
    // ld.so inlines its own minimal malloc (libc6-dbg gives its DWARF): not the program's
    // calls, so not a warning on every run; --invocations-detail says it once.
    let plain = run(false);
    assert!(!plain.contains("ld-linux"), "{plain}");
    let detail = run(true);
    assert!(
        detail.contains(
            "inlined copies inside the dynamic loader ld-linux-x86-64.so.2 are not counted"
        ),
        "{detail}"
    );
}

#[test]
fn a_pattern_given_twice_is_counted_once_in_its_first_place() {
    // 300 copies of `--invocations step` with `--runs 1` gave one metric with n = 300.
    // The in-process engine needs no privilege.
    let mut args: Vec<&str> = vec![
        "--invocations-engine",
        "inproc",
        "--runs",
        "1",
        "--warmup",
        "0",
        "-f",
        "json",
    ];
    for i in 0..300 {
        args.extend(["--invocations", "step"]);
        if i == 0 {
            args.extend(["--invocations", "main"]);
        }
    }
    args.extend(["--", fixture!("work"), "1000"]);
    let run = sbs(&args).success();
    let report = run.json();
    let ids: Vec<&str> = report["benchmarks"][0]["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["id"].as_str())
        .filter(|id| id.starts_with("invocations."))
        .collect();
    assert_eq!(
        ids,
        ["invocations.step", "invocations.main"],
        "first-seen order"
    );
    let step = metric(&report, "invocations.step");
    assert_eq!(samples(step), [1000.0], "one run, one sample");
    assert_eq!(step["summary"]["n"], 1);
}

/// Without root, sites that only uprobes can count stop the run before it starts, with a
/// one-line choice naming them and the count of the others; `--invocations-partial`
/// counts the others in-process and reports a metric that misses sites as a lower bound,
/// not exact, with a note. (Before: the run stopped on tracefs alone, saying nothing of
/// the sites that could be counted.)
#[test]
fn without_root_the_sites_that_need_uprobes_are_named_and_the_rest_can_be_counted() {
    let dir = tempfile::tempdir().unwrap();
    make_executable(dir.path());
    let Some(exe) = util::gcc_fixture(dir.path(), "patch_cases", &[]) else {
        return;
    };
    make_executable(&exe);
    let sbs_copy = dir.path().join("sbs-profile");
    std::fs::copy(util::sbs_profile(), &sbs_copy).unwrap();
    let as_nobody = |extra: &[&str]| {
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&sbs_copy)
            .args(["--runs", "1", "--warmup", "0", "-f", "json"])
            .args(["--invocations", "tiny", "--invocations", "rip_first"])
            .args(extra)
            .arg("--")
            .arg(&exe)
            .arg("10")
            .output()
    };
    let Ok(out) = as_nobody(&[]) else {
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
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    for needle in [
        "uprobes need root",
        "1 of 2 counted site(s) need a uprobe",
        "`tiny`",
        "--invocations-partial to count the other 1 in-process",
    ] {
        assert!(err.contains(needle), "{needle:?} missing: {err}");
    }
    let out = as_nobody(&["--invocations-partial"]).unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let counted = metric(&report, "invocations.rip_first");
    assert_eq!(samples(counted), vec![10.0]);
    assert_eq!(counted["exact"], true);
    let partial = metric(&report, "invocations.tiny");
    assert_eq!(samples(partial), vec![0.0]);
    assert_eq!(partial["exact"], false, "{partial}");
    let notes = partial["notes"].to_string();
    assert!(
        notes.contains("partial") && notes.contains("lower bound"),
        "{notes}"
    );
    // The JSON says so too (issue 44): a fewest, no most; an exact count has no range.
    let range = &partial["range"];
    assert_eq!(range["low"], 0.0, "{partial}");
    assert!(range.get("high").is_none(), "{partial}");
    assert_eq!(range["unbounded_sites"], 0, "{partial}");
    assert!(counted.get("range").is_none(), "{counted}");
}

/// `tests/fixtures/c/SOURCE` built with debug info as the program `dir/NAME`, `args`
/// (libraries, defines) after the source.
fn gcc_program(dir: &Path, name: &str, source: &str, args: &[String]) -> Option<PathBuf> {
    let exe = dir.join(name);
    build!(
        Need::Gcc,
        Command::new("gcc")
            .args(["-O2", "-g", "-Wall", "-o"])
            .arg(&exe)
            .arg(
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("fixtures/c")
                    .join(source)
            )
            .args(args)
    )?;
    Some(exe)
}

/// The flags that link a program with the libraries in `dir` and find them at run time.
fn linking_from(dir: &Path) -> [String; 2] {
    [
        format!("-L{}", dir.display()),
        format!("-Wl,-rpath,{}", dir.display()),
    ]
}

/// `tests/fixtures/c/SOURCE` built with debug info as the shared library `dir/NAME`.
fn gcc_shared(dir: &Path, name: &str, source: &str) -> Option<PathBuf> {
    let lib = dir.join(name);
    build!(
        Need::Gcc,
        Command::new("gcc")
            .args(["-O2", "-g", "-shared", "-fPIC", "-o"])
            .arg(&lib)
            .arg(
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("fixtures/c")
                    .join(source)
            )
    )?;
    Some(lib)
}

/// `early_calls` and its library `libearly.so`, whose constructor calls `early_work` 7
/// times before main (`tests/fixtures/c/early_calls.c`), built in `dir`.
fn build_early_calls(dir: &Path) -> Option<PathBuf> {
    gcc_shared(dir, "libearly.so", "early_lib.c")?;
    let mut args = vec!["-learly".to_string()];
    args.extend(linking_from(dir));
    gcc_program(dir, "early_calls", "early_calls.c", &args)
}

/// The counting libraries call nothing the program could count: `__cxa_finalize` runs
/// once for the program and once for `libearly.so`, and the in-process library, linked
/// without the C start files, adds no call of its own (it added one, crtbegin's).
#[test]
fn the_counting_library_adds_no_call_of_cxa_finalize() {
    if skip_without_uprobes("uprobes") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = build_early_calls(dir.path()) else {
        return;
    };
    let exe_arg = exe.to_string_lossy().into_owned();
    for engine in ["uprobe", "inproc", "auto"] {
        let report = sbs([
            "--invocations-engine",
            engine,
            "--runs",
            "2",
            "-f",
            "json",
            "--invocations",
            "__cxa_finalize",
            "--",
            &exe_arg,
            "3",
        ])
        .success()
        .json();
        let m = metric(&report, "invocations.__cxa_finalize");
        assert_eq!(samples(m), vec![2.0; 2], "{engine}: {m:#}");
    }
}

/// Calls made before the in-process counting library starts (`libearly.so`'s constructor
/// calls `early_work` 7 times, before ours runs; libc's `__libc_early_init` runs before
/// any constructor) read 0 in-process, with no word (issue 30 item 7). Uprobes count them
/// from the exec, exactly; in-process, the metric says in a note that they are not
/// counted, and is not called exact (issue 44: jq's `malloc` read 1 short, labelled exact).
#[test]
fn calls_before_the_counting_library_starts_are_said_to_be_uncounted_in_process() {
    if skip_without_uprobes("uprobes") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = build_early_calls(dir.path()) else {
        return;
    };
    let exe_arg = exe.to_string_lossy().into_owned();
    let run = |engine: &str| {
        sbs([
            "--invocations-engine",
            engine,
            "--runs",
            "1",
            "-f",
            "json",
            "--invocations",
            "early_work",
            "--",
            &exe_arg,
            "3",
        ])
        .success()
        .json()
    };
    let said = "before the in-process counting library does";
    let uprobe = run("uprobe");
    let m = metric(&uprobe, "invocations.early_work");
    assert_eq!(samples(m), vec![10.0], "{m:#}");
    assert!(!m["notes"].to_string().contains(said), "{m:#}");
    assert_eq!(m["exact"], true, "{m:#}");
    assert!(
        m.get("range").is_none(),
        "an exact count has no range: {m:#}"
    );
    for engine in ["inproc", "auto"] {
        let report = run(engine);
        let m = metric(&report, "invocations.early_work");
        assert_eq!(samples(m), vec![3.0], "{engine}: {m:#}");
        assert!(m["notes"].to_string().contains(said), "{engine}: {m:#}");
        assert_eq!(m["exact"], false, "{engine}: {m:#}");
        // A lower bound with nothing above it, in the JSON too.
        assert_eq!(m["range"]["low"], 3.0, "{engine}: {m:#}");
        assert!(m["range"].get("high").is_none(), "{engine}: {m:#}");
    }
}

/// Two JSON runs of `exe LIB 100` (a `dlopen_main`) counting `pattern` with `engine`.
fn plugin_args(engine: &str, pattern: &str, exe: &Path, lib: &Path) -> Vec<OsString> {
    let mut args: Vec<OsString> = ["--invocations-engine", engine, "--runs", "2", "-w", "0"]
        .into_iter()
        .chain(["-f", "json", "--invocations", pattern, "--"])
        .map(OsString::from)
        .collect();
    args.extend([exe.as_os_str().into(), lib.as_os_str().into(), "100".into()]);
    args
}

/// `dlopen_main` and the library it loads at run time, `libplugin.so`, whose constructor
/// calls `plugin_step` 7 times inside `dlopen` (`tests/fixtures/c/dlopen_main.c`,
/// `dlopen_lib.c`), built in `dir`.
fn build_dlopen(dir: &Path) -> Option<(PathBuf, PathBuf)> {
    let lib = gcc_shared(dir, "libplugin.so", "dlopen_lib.c")?;
    let libs = ["-ldl".to_string(), "-lpthread".to_string()];
    let exe = gcc_program(dir, "dlopen_main", "dlopen_main.c", &libs)?;
    Some((exe, lib))
}

/// A library the program loads at run time (`LIBRARY:NAME`) is counted in-process
/// (issue 32): the counting library redirects the loader's `_dl_debug_state` and patches
/// the library once `dlopen` has mapped it, before its constructor runs, so the
/// constructor's 7 calls are counted with the program's 100 (107), equal to uprobes;
/// loaded, closed and loaded again, twice that; loaded while three other threads run,
/// which then call it too, 7 + 400; loaded in a forked child, 107; never loaded, 0 with
/// no warning that an image went without the counting library and no note about calls
/// before it started.
#[test]
fn a_library_loaded_at_run_time_is_counted_in_process_with_its_constructor_s_calls() {
    let dir = tempfile::tempdir().unwrap();
    let Some((exe, lib)) = build_dlopen(dir.path()) else {
        return;
    };
    let pattern = format!("{}:plugin_step", lib.display());
    let id = format!("invocations.{pattern}");
    let run = |engine: &str, mode: &str| {
        let mut args = plugin_args(engine, &pattern, &exe, &lib);
        if !mode.is_empty() {
            args.push(mode.into());
        }
        sbs(args).success().json()
    };
    let cases = [
        ("", 107.0),
        ("again", 214.0),
        ("threads", 407.0),
        ("fork", 107.0),
        ("never", 0.0),
    ];
    for (mode, calls) in cases {
        let report = run("inproc", mode);
        let m = metric(&report, &id);
        assert_eq!(samples(m), vec![calls; 2], "{mode}: {m:#}");
        assert_eq!(m["exact"], true, "{mode}: {m:#}");
        assert_eq!(m["source"], "inproc", "{mode}: {m:#}");
        let notes = m["notes"].to_string();
        assert!(
            !notes.contains("before the in-process counting library does"),
            "{mode}: {m:#}"
        );
        let warnings = report["benchmarks"][0]["warnings"].to_string();
        assert!(
            !warnings.contains("did not load the in-process counting library"),
            "{mode}: {warnings}"
        );
    }
    if skip_without_uprobes("uprobe counts of a library loaded at run time") {
        return;
    }
    for (mode, calls) in cases {
        let report = run("uprobe", mode);
        let m = metric(&report, &id);
        assert_eq!(samples(m), vec![calls; 2], "uprobe, {mode}: {m:#}");
    }
}

/// Where the counting library cannot install its hook on the loader (here: a library of
/// the program, `tests/fixtures/c/thread_at_load.c`, starts a thread before the counting
/// library's constructor runs, so patching the loader is not safe), a library loaded at
/// run time is not counted in-process: `inproc` stops and says why, `auto` counts it with
/// uprobes (107) and its note gives the reason.
#[test]
fn without_the_loader_hook_a_library_loaded_at_run_time_is_counted_with_uprobes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let Some((_, lib)) = build_dlopen(d) else {
        return;
    };
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/c");
    let threads = build!(
        Need::Gcc,
        Command::new("gcc")
            .args(["-O2", "-shared", "-fPIC", "-o"])
            .arg(d.join("libthreadatload.so"))
            .arg(fixtures.join("thread_at_load.c"))
            .arg("-lpthread")
    );
    let mut args: Vec<String> = ["-ldl", "-lpthread", "-Wl,--no-as-needed", "-lthreadatload"]
        .map(String::from)
        .into();
    args.extend(linking_from(d));
    let program = || gcc_program(d, "dlopen_threaded", "dlopen_main.c", &args);
    let Some(exe) = threads.and_then(|()| program()) else {
        return;
    };
    let pattern = format!("{}:plugin_step", lib.display());
    let run = |engine: &str| sbs(plugin_args(engine, &pattern, &exe, &lib));
    run("inproc").fails_with(2, "threads were already running");
    if skip_without_uprobes("uprobe counts of a library loaded at run time") {
        return;
    }
    let report = run("auto").success().json();
    let m = metric(&report, &format!("invocations.{pattern}"));
    assert_eq!(samples(m), vec![107.0; 2], "{m:#}");
    assert_eq!(m["source"], "uprobe", "{m:#}");
    assert!(
        m["notes"]
            .to_string()
            .contains("threads were already running"),
        "{m:#}"
    );
}

/// A script that execs the real program (a wrapper; a version manager's shim, as pyenv
/// puts `python3` on `PATH`) is not the program: a pattern that matches nothing in the
/// script's interpreter is an error that says the program is a script run by that
/// interpreter, which runs another program, and how to name the real one; named, it counts.
#[test]
fn a_script_that_runs_the_program_is_named_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let wrapper = dir.path().join("calls");
    std::fs::write(
        &wrapper,
        format!("#!/bin/sh\nexec {} \"$@\"\n", fixture!("calls")),
    )
    .unwrap();
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let wrapper = wrapper.to_str().unwrap();
    let count = |program: &str| {
        sbs([
            "--runs",
            "1",
            "--warmup",
            "0",
            "--format",
            "json",
            "--invocations",
            "calls::work",
            "--",
            program,
            "10",
            "1",
        ])
    };
    let sh = Path::new("/bin/sh").canonicalize().unwrap();
    let failed = count(wrapper).fails_with(
        2,
        &format!(
            "pattern `calls::work` matches no function in {}: {wrapper} is a script run by {} \
             (`#!/bin/sh`), which runs another program; pass the executable the script runs \
             instead of the script",
            sh.display(),
            sh.display()
        ),
    );
    let err = failed.stderr();
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        !err.contains("stripped"),
        "nothing about the shell itself: {err}"
    );
    // The real program, named: 10 calls from main, 10 from the thread, 10 in the fork.
    let report = count(fixture!("calls")).success().json();
    assert_eq!(
        samples(metric(&report, "invocations.calls::work")),
        vec![30.0]
    );

    // pyenv's own shim of a python it built, which execs `pyenv exec`, which execs python.
    let Some(python) = util::python_o3() else {
        return;
    };
    let root = python.ancestors().nth(4).unwrap().to_path_buf();
    let shim = root.join("shims/python3.11");
    if !shim.is_file() {
        skip!(
            Need::Pyenv311,
            "pyenv has no shim {} (run `pyenv rehash`)",
            shim.display()
        );
        return;
    }
    let shim = shim.to_str().unwrap();
    let pattern = ["--invocations", "PyList_Append"];
    let run = |program: &str| {
        let mut args = vec!["--runs", "1", "--warmup", "0", "--format", "json"];
        args.extend(pattern);
        args.extend(["--", program, "-c", "[].append(1)"]);
        sbs(args)
    };
    let failed = run(shim).fails_with(
        2,
        &format!(
            "{shim} is a script run by /usr/bin/bash (`#!/usr/bin/env bash`), which runs another \
             program; it is a pyenv shim: pass the real executable, which `pyenv which \
             python3.11` prints"
        ),
    );
    assert_eq!(failed.stderr().lines().count(), 1, "{}", failed.stderr());
    let report = run(python.to_str().unwrap()).success().json();
    assert!(samples(metric(&report, "invocations.PyList_Append"))[0] >= 1.0);
}
