//! End to end: confirmation runs before the gate fails (`--confirm N`), against real
//! child processes.
//!
//! The noise is made, not hoped for: a wrapper counts its own runs in a file and keeps
//! 10% more memory resident in its first runs than in the later ones (`allocate 220`
//! blocks, then `allocate 200`, the baseline's), so the first look sees a regression that
//! the runs after it do not have. A real regression is twice the memory, or twice the
//! work for the CPU time. Peak RSS is repeatable to the page; wall times are not gated
//! here (`time.wall=1000`): these tests are about the gate, not this machine's noise.

mod util;

use std::path::Path;

use util::{metric, sbs};

const SIZE: &str = "262144";

fn allocate() -> &'static str {
    fixture!("allocate")
}

/// `--runs 5 --warmup 0`, JSON, a baseline `main` in `history`, and `extra`.
fn run(history: &Path, extra: &[&str], command: &[&str]) -> util::Finished {
    let mut args: Vec<String> = [
        "--runs",
        "5",
        "--warmup",
        "0",
        "--name",
        "fixture",
        "--format",
        "json",
        "--threshold",
        "time.*=1000",
        "--threshold",
        "rss.peak=5",
        "--history",
    ]
    .map(String::from)
    .to_vec();
    args.push(history.display().to_string());
    args.extend(extra.iter().map(|s| s.to_string()));
    args.push("--".into());
    args.extend(command.iter().map(|s| s.to_string()));
    sbs(args)
}

/// Save baseline `main` of `allocate 200 SIZE`.
fn baseline(history: &Path) {
    run(
        history,
        &["--save-baseline", "main"],
        &[allocate(), "200", SIZE],
    )
    .success();
}

/// A shell command that runs `allocate 220` for its first `slow` runs and `allocate 200`
/// after them, counting its runs in `counter`.
fn slow_first_runs(counter: &Path, slow: usize) -> String {
    let c = counter.display();
    format!(
        "n=$(cat {c} 2>/dev/null || echo 0); echo $((n + 1)) > {c}; \
         if [ $n -lt {slow} ]; then exec {a} 220 {SIZE}; else exec {a} 200 {SIZE}; fi",
        a = allocate()
    )
}

fn runs_made(counter: &Path) -> usize {
    std::fs::read_to_string(counter)
        .expect("the wrapper counted its runs")
        .trim()
        .parse()
        .expect("a number")
}

#[test]
fn a_noisy_first_look_is_cleared_by_confirmation_and_fails_without_it() {
    let dir = tempfile::tempdir().unwrap();
    let h = dir.path().join("hist");
    baseline(&h);
    let counter = dir.path().join("runs");
    let script = slow_first_runs(&counter, 5);
    let cleared = run(
        &h,
        &["--baseline", "main", "--confirm", "40"],
        &["sh", "-c", &script],
    );
    let cleared = cleared.success();
    let report = cleared.json();
    let rss = metric(&report, "rss.peak");
    let c = &rss["comparison"];
    let k = &c["confirmation"];
    cleared.check(
        k["first_verdict"] == "regressed",
        "the first look regressed (+10%)",
    );
    cleared.check(
        k["first_runs"] == 5 && k["added_runs"] == 40,
        "40 confirmation runs after 5",
    );
    cleared.check(
        c["verdict"] != "regressed" && c["relative"].as_f64().unwrap() < 0.05,
        "over all 45 runs the change is within the threshold",
    );
    cleared.check(rss["samples"].as_array().unwrap().len() == 45, "45 samples");
    cleared.check(runs_made(&counter) == 45, "45 runs were made");
    cleared.check(
        report["conditions"]["runs"] == 45,
        "the conditions count them",
    );
    cleared.check(
        rss["notes"].as_array().unwrap().iter().any(|n| {
            n.as_str()
                .unwrap()
                .starts_with("confirmation runs: the first look, after 5 runs, said REGRESSED +")
        }),
        "a note says what the first look said",
    );
    // --confirm 0: today's gate, which the first look fails.
    std::fs::remove_file(&counter).unwrap();
    let failed = run(
        &h,
        &["--baseline", "main", "--confirm", "0"],
        &["sh", "-c", &script],
    );
    failed.check(failed.code() == Some(1), "the first look fails the gate");
    let report = failed.json();
    let rss = metric(&report, "rss.peak");
    failed.check(rss["comparison"]["verdict"] == "regressed", "regressed");
    failed.check(
        rss["comparison"]["confirmation"].is_null(),
        "no confirmation with --confirm 0",
    );
    failed.check(runs_made(&counter) == 5, "only the 5 runs asked for");
    failed.check(
        !failed.stderr().contains("confirmed"),
        "the regression line mentions no confirmation",
    );
}

#[test]
fn a_real_regression_still_fails_after_confirmation() {
    let dir = tempfile::tempdir().unwrap();
    let h = dir.path().join("hist");
    baseline(&h);
    // Twice the memory; the default --confirm is as many runs as --runs.
    let twice = run(&h, &["--baseline", "main"], &[allocate(), "400", SIZE]);
    twice.check(twice.code() == Some(1), "twice the memory fails the gate");
    let report = twice.json();
    let c = &metric(&report, "rss.peak")["comparison"];
    twice.check(c["verdict"] == "regressed", "regressed over all runs");
    twice.check(
        c["confirmation"]["first_verdict"] == "regressed" && c["confirmation"]["added_runs"] == 5,
        "5 confirmation runs by default (--runs 5)",
    );
    twice.check(
        twice
            .stderr()
            .contains("regression: rss.peak of `fixture` regressed +")
            && twice
                .stderr()
                .contains("confirmed by 5 more runs, 10 in all"),
        "stderr names the confirmation",
    );
}

#[test]
fn twice_the_cpu_time_fails_after_confirmation() {
    let dir = tempfile::tempdir().unwrap();
    let h = dir.path().join("hist");
    let work = fixture!("work");
    let timed = |extra: &[&str], n: &str| {
        let mut args: Vec<&str> = vec![
            "--runs",
            "5",
            "--warmup",
            "1",
            "--name",
            "work",
            "--format",
            "json",
            "--threshold",
            "time.wall=1000",
            "--threshold",
            "time.sys=1000",
            "--threshold",
            "rss.*=1000",
            // Twice the work must fail also while other tests keep the machine busy.
            "--judge-busy",
            "--history",
        ];
        let history = h.display().to_string();
        args.push(&history);
        args.extend(extra);
        args.extend(["--", work, n]);
        sbs(args)
    };
    timed(&["--save-baseline", "main"], "20000000").success();
    let slower = timed(&["--baseline", "main", "--confirm", "5"], "40000000");
    slower.check(slower.code() == Some(1), "twice the work fails");
    let report = slower.json();
    let c = &metric(&report, "time.cpu")["comparison"];
    slower.check(
        c["verdict"] == "regressed" && c["confirmation"]["first_verdict"] == "regressed",
        "time.cpu regressed at both looks",
    );
    slower.check(
        metric(&report, "time.cpu")["samples"]
            .as_array()
            .unwrap()
            .len()
            == 10,
        "5 runs and 5 confirmation runs",
    );
}

#[test]
fn exact_counts_never_ask_for_confirmation() {
    let dir = tempfile::tempdir().unwrap();
    let h = dir.path().join("hist");
    let history = h.display().to_string();
    // --alloc alone: counts, and heap.peak, which is not gated here.
    let counted = |extra: &[&str], blocks: &str| {
        let mut args = vec![
            "--alloc",
            "--runs",
            "5",
            "--warmup",
            "0",
            "--name",
            "fixture",
            "--format",
            "json",
            "--threshold",
            "heap.*=1000",
            "--history",
            &history,
        ];
        args.extend(extra);
        args.extend(["--", allocate(), blocks, SIZE]);
        sbs(args)
    };
    counted(&["--save-baseline", "main"], "200").success();
    let more = counted(&["--baseline", "main", "--confirm", "20"], "300");
    more.check(more.code() == Some(1), "more allocations fail the gate");
    let report = more.json();
    let count = metric(&report, "alloc.count");
    more.check(count["exact"] == true, "alloc.count is exact");
    more.check(
        count["comparison"]["verdict"] == "regressed",
        "and regressed",
    );
    for m in report["benchmarks"][0]["metrics"].as_array().unwrap() {
        more.check(
            m["comparison"]["confirmation"].is_null(),
            "no metric was confirmed",
        );
        more.check(
            m["samples"].as_array().unwrap().len() == 5,
            "no run was added",
        );
    }
    more.check(report["conditions"]["runs"] == 5, "5 runs per group");
}

#[test]
fn compare_refuses_confirm() {
    let a = allocate();
    sbs(["compare", "--confirm", "3", a, a]).fails_with(2, "--confirm");
}
