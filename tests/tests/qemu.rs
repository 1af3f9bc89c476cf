//! `--instructions qemu` end to end: the count of a C fixture whose work is known in
//! parts (one loop, threads, a forked child, an exec), exact and repeatable, against
//! cachegrind's where valgrind is installed. Skips through `Need::Qemu` without
//! `qemu-x86_64`.

mod util;

use std::path::{Path, PathBuf};

use sbs_skip::{skip, Need};
use util::{gcc_fixture, metric, samples, sbs, sbs_env};

/// Whether `qemu-x86_64` is installed (a recorded skip when not).
fn qemu_installed() -> bool {
    let found = std::process::Command::new("qemu-x86_64")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        skip!(
            Need::Qemu,
            "qemu-x86_64 is not installed (sudo apt-get install -y qemu-user)"
        );
    }
    found
}

/// The fixture, built into `dir`.
fn work(dir: &Path) -> Option<PathBuf> {
    gcc_fixture(dir, "qemu_work", &["-pthread"])
}

/// `counter.instructions` samples of `engine` for `args` (3 runs, clean environment),
/// with the metric's source.
fn count(engine: &str, args: &[&str]) -> (Vec<f64>, String, serde_json::Value) {
    count_with(engine, &[], args)
}

/// [`count`] with more options.
fn count_with(
    engine: &str,
    options: &[&str],
    args: &[&str],
) -> (Vec<f64>, String, serde_json::Value) {
    let mut argv = vec![
        "-r",
        "3",
        "-w",
        "0",
        "-f",
        "json",
        "--clean-env",
        "--instructions",
        engine,
    ];
    argv.extend(options);
    argv.push("--");
    argv.extend(args);
    let run = sbs(&argv).success();
    let r = run.json();
    let m = metric(&r, "counter.instructions");
    let source = m["source"].as_str().unwrap().to_string();
    (samples(m), source, r)
}

fn all_equal(v: &[f64]) -> bool {
    v.windows(2).all(|w| w[0] == w[1])
}

fn close(a: f64, b: f64, share: f64) -> bool {
    (a - b).abs() <= share * b
}

#[test]
fn qemu_count_is_exact_repeatable_and_agrees_with_cachegrind() {
    if !qemu_installed() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = work(dir.path()) else { return };
    let exe = exe.to_str().unwrap();
    let (ours, source, r) = count("qemu", &[exe, "loop", "10000000"]);
    assert_eq!(
        source, "qemu:Haswell-v2,-pcid,-x2apic,-tsc-deadline,-invpcid",
        "the default model is part of the source"
    );
    assert_eq!(metric(&r, "counter.instructions")["group"], "qemu");
    assert!(all_equal(&ours), "exact and repeatable: {ours:?}");
    // The loop alone is at least 3 instructions an iteration.
    assert!(ours[0] > 30e6, "{ours:?}");
    if util::valgrind_installed() {
        let (cg, _, _) = count("valgrind", &[exe, "loop", "10000000"]);
        assert!(
            close(ours[0], cg[0], 0.001),
            "within 0.1% of cachegrind: qemu {} cachegrind {}",
            ours[0],
            cg[0]
        );
    } else {
        skip!(Need::Valgrind, "no cachegrind to compare the count with");
    }
    // Another model is another series.
    let (_, other, _) = count_with(
        "qemu",
        &["--qemu-cpu", "Nehalem-v1"],
        &[exe, "loop", "1000"],
    );
    assert_eq!(other, "qemu:Nehalem-v1");
}

#[test]
fn qemu_counts_every_thread_exactly() {
    if !qemu_installed() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = work(dir.path()) else { return };
    let exe = exe.to_str().unwrap();
    let (threads, _, _) = count("qemu", &[exe, "threads", "4", "5000000"]);
    let (one, _, _) = count("qemu", &[exe, "loop", "20000000"]);
    // Exact up to the program's own thread timing: whether `pthread_join` finds its
    // thread finished or waits for it takes a different path through glibc (94
    // instructions apart, seen in 1 run of 3); a lost update would lose thousands.
    let spread = threads.iter().cloned().fold(f64::MIN, f64::max)
        - threads.iter().cloned().fold(f64::MAX, f64::min);
    assert!(spread < 1000.0, "4 threads: {threads:?}");
    // The same work on four threads: the loop's count plus thread start-up (about
    // 0.1%); a shared counter losing updates would fall short by far more.
    assert!(
        threads[0] > one[0] && close(threads[0], one[0], 0.002),
        "4 threads x 5M {} against one loop of 20M {}",
        threads[0],
        one[0]
    );
}

#[test]
fn qemu_counts_a_forked_child_and_reports_an_exec() {
    if !qemu_installed() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = work(dir.path()) else { return };
    let exe = exe.to_str().unwrap();
    let (forked, _, _) = count("qemu", &[exe, "fork", "2000000", "8000000"]);
    let (one, _, _) = count("qemu", &[exe, "loop", "10000000"]);
    assert!(all_equal(&forked), "{forked:?}");
    // The child's 8M iterations are counted once (its slot starts at 0, not at the
    // parent's count).
    assert!(
        close(forked[0], one[0], 0.002),
        "fork 2M + 8M {} against one loop of 10M {}",
        forked[0],
        one[0]
    );
    let (_, _, r) = count("qemu", &[exe, "exec", "1000"]);
    let warnings = r["benchmarks"][0]["warnings"].to_string();
    assert!(
        warnings.contains("exec'd 1 image") && warnings.contains("NOT measured"),
        "{warnings}"
    );
    // And nothing that missed the exec'd image is called exact.
    let metric = r["benchmarks"][0]["metrics"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m["id"] == "counter.instructions")
        .cloned()
        .unwrap_or_default();
    assert_eq!(metric["exact"], false, "{metric:#}");
}

#[test]
fn qemu_sigill_and_a_missing_qemu_say_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = work(dir.path()) else { return };
    let exe = exe.to_str().unwrap();
    // No qemu-x86_64 on PATH: the error names the package.
    let empty = tempfile::tempdir().unwrap();
    sbs_env(
        ["--instructions", "qemu", "--", exe, "loop", "1"],
        &[("PATH", empty.path().as_os_str())],
    )
    .fails_with(2, "package qemu-user");
    if !qemu_installed() {
        return;
    }
    sbs(["-r", "1", "--instructions", "qemu", "--", exe, "avx512"])
        .fails_with(2, "died of SIGILL under the qemu engine");
}
