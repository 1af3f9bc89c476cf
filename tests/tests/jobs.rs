//! `--jobs`: the runs of a counting group overlap, timing runs never do, and the counts
//! are the same as one run at a time.

mod util;

use std::time::{Duration, Instant};

use sbs_skip::{skip, Need};
use util::{metric, samples, sbs};

/// A shell command whose run succeeds only if another run of it is in flight at the same
/// time: each run leaves a file in `dir` and waits, up to `tries` times 50 ms, until it
/// sees two; then it exits 0, else 1.
fn rendezvous(dir: &std::path::Path, tries: u32) -> String {
    let dir = dir.display();
    format!(
        "touch {dir}/$$; i=0; while [ \"$(ls {dir} | wc -l)\" -lt 2 ]; do \
         i=$((i+1)); [ $i -gt {tries} ] && exit 1; sleep 0.05; done; exit 0"
    )
}

/// Two `--alloc` runs with `-j 2` meet (each sees the other's file); with `-j 1` the first
/// waits alone and fails, so the meeting is the overlap and not the test's luck. Timing
/// runs never overlap, whatever `--jobs` says.
#[test]
fn counting_runs_overlap_and_timing_runs_run_alone() {
    let run = |group: &str, jobs: &str, tries: u32| {
        let dir = tempfile::tempdir().unwrap();
        let script = rendezvous(dir.path(), tries);
        let args = [group, "-r", "2", "-w", "0", "-j", jobs, "--", "sh", "-c"];
        let mut args: Vec<&str> = args.to_vec();
        args.push(&script);
        sbs(&args)
    };
    let both = run("--alloc", "2", 400).success();
    let report = {
        let mut args = both.args.clone();
        args.insert(0, "--format".into());
        args.insert(1, "json".into());
        // The same again for its numbers, in a fresh directory.
        let dir = tempfile::tempdir().unwrap();
        let last = args.len() - 1;
        args[last] = rendezvous(dir.path(), 400);
        sbs(&args).success().json()
    };
    // `sh` and the `ls`, `wc`, `sleep` it starts: every process of both runs reported.
    let images = samples(metric(&report, "alloc.processes"));
    assert_eq!(images.len(), 2, "{images:?}");
    assert!(images.iter().all(|&n| n >= 3.0), "{images:?}");
    run("--alloc", "1", 20).fails_with(2, "exited with code 1 in an alloc run");
    run("--time", "2", 20).fails_with(2, "exited with code 1 in a timing run");
}

/// The counts of runs made two at a time equal those made one at a time: valgrind's
/// instructions and the agent's allocations of the same program, run by run.
#[test]
fn overlapping_runs_count_what_runs_one_at_a_time_count() {
    if !util::valgrind_installed() {
        skip!(
            Need::Valgrind,
            "valgrind is not installed (sudo apt-get install -y valgrind)"
        );
        return;
    }
    let counts = |jobs: &str| {
        let report = sbs([
            "--instructions",
            "valgrind",
            "--alloc",
            "-r",
            "4",
            "-w",
            "0",
            "-j",
            jobs,
            "--format",
            "json",
            "--",
            fixture!("allocate"),
            "300",
        ])
        .success()
        .json();
        let ids = [
            "counter.instructions",
            "alloc.count",
            "alloc.bytes",
            "heap.peak",
        ];
        ids.map(|id| samples(metric(&report, id)))
    };
    let alone = counts("1");
    let together = counts("2");
    for (a, t) in alone.iter().zip(&together) {
        assert_eq!(a.len(), 4, "{a:?}");
        assert!(a.iter().all(|v| *v == a[0]), "{a:?}");
        assert_eq!(a, t, "-j 1 {alone:?}, -j 2 {together:?}");
    }
}

/// Ctrl-C with two runs in flight: both are killed, nothing is left behind, and the
/// collector exits 130 as it does with one run.
#[test]
fn ctrl_c_ends_every_run_in_flight() {
    let child = std::process::Command::new(util::sbs_profile())
        .args(["--alloc", "-r", "4", "-w", "0", "-j", "2", "--"])
        .arg(fixture!("forever"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn sbs-profile");
    let running = |pid| {
        util::descendants(pid)
            .into_iter()
            .filter(|p| {
                std::fs::read_link(format!("/proc/{p}/exe"))
                    .is_ok_and(|exe| exe == std::path::Path::new(fixture!("forever")))
            })
            .count()
    };
    let begun = Instant::now();
    while running(child.id()) < 2 {
        assert!(
            begun.elapsed() < Duration::from_secs(20),
            "two runs never ran at once"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let pids = util::descendants(child.id());
    // SAFETY: plain kill(2) on the pid of our own child, not yet reaped.
    let sent = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    assert_eq!(sent, 0);
    let out = child.wait_with_output().expect("wait for sbs-profile");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    let gone = Instant::now();
    while !pids.iter().all(|&p| util::is_gone(p)) {
        assert!(
            gone.elapsed() < Duration::from_secs(10),
            "processes of the runs outlived the collector: {pids:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}
