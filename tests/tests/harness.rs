//! The benchmark harness end to end: per-operation counts that are exact and exclude the
//! set-up, parameters, the harness binary's own modes, and `--bench` with cargo.

mod util;

use std::process::Command;

use sbs_skip::{skip, Need};
use util::{metric, samples, sbs};

const FIXTURE: &str = fixture!("harness_fixture");

fn all_equal(values: &[f64], expected: f64) -> bool {
    !values.is_empty() && values.iter().all(|&v| v == expected)
}

/// Run `sbs-profile --harness OPTIONS -f json -- FIXTURE BENCH`, which must succeed, and
/// return its JSON report.
fn harnessed(options: &[&str], bench: &str) -> serde_json::Value {
    let mut args = vec!["--harness"];
    args.extend(options);
    args.extend(["-f", "json", "--", FIXTURE, bench]);
    sbs(args).success().json()
}

fn bench_named<'a>(report: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    report["benchmarks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == name)
        .unwrap_or_else(|| panic!("no benchmark {name} in {report:#}"))
}

fn metric_of<'a>(bench: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    bench["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == id)
        .unwrap_or_else(|| panic!("no metric {id} in {bench:#}"))
}

#[test]
fn list_shows_benchmarks_and_parameters() {
    let out = sbs(["--list", "--", FIXTURE]).success();
    let text = out.stdout();
    out.check(text.contains("pushes\n"), "pushes listed");
    out.check(
        text.contains("sized  (bytes=1000)"),
        "sized listed with its parameter",
    );
    let out = sbs(["--list", "--", FIXTURE, "siz"]).success();
    out.check(
        out.stdout().trim() == "sized  (bytes=1000)",
        "filter applies",
    );
}

#[test]
fn allocations_per_operation_are_exact_and_exclude_the_set_up() {
    let report = harnessed(&["--alloc", "--runs", "3", "--ops", "7"], "pushes");
    let b = bench_named(&report, "pushes");
    assert!(
        all_equal(&samples(metric_of(b, "alloc.count/op")), 5.0),
        "{b:#}"
    );
    assert!(
        all_equal(&samples(metric_of(b, "alloc.bytes/op")), 496.0),
        "{b:#}"
    );
    // The result (4 inner vectors and the outer one) is held while measured.
    assert!(
        all_equal(&samples(metric_of(b, "heap.retained")), 496.0),
        "{b:#}"
    );
    // The whole process made far more: the set-up's 1000 boxes at least.
    let whole = samples(metric_of(b, "alloc.count"));
    assert!(whole.iter().all(|&n| n > 1000.0 + 7.0 * 5.0), "{whole:?}");
    // The report says which span each total covers.
    let note = metric_of(b, "alloc.count")["notes"].to_string();
    assert!(
        note.contains("the whole process, set-up included"),
        "{note}"
    );
    // Timing per operation, one sample per process.
    let t = samples(metric_of(b, "time.op"));
    assert_eq!(t.len(), 3);
    assert!(t.iter().all(|&s| s > 0.0 && s < 0.01), "{t:?}");
}

#[test]
fn parameters_reach_the_set_up() {
    let report = harnessed(
        &["--alloc", "--runs", "2", "--param", "bytes=3000"],
        "sized",
    );
    let m = metric(&report, "alloc.bytes/op");
    assert!(all_equal(&samples(m), 3000.0), "{m:#}");
    assert!(all_equal(&samples(metric(&report, "alloc.count/op")), 1.0));
    sbs(["--harness", "--param", "nope=1", "--", FIXTURE, "sized"])
        .fails_with(2, "parameter `nope` is not declared by sized; declared parameters (with defaults): bytes=1000");
}

#[test]
fn boxing_per_operation_is_exact_and_excludes_the_set_up() {
    if util::skip_without_uprobes("uprobes") {
        return;
    }
    let report = harnessed(&["--boxing", "--runs", "2", "--ops", "3"], "boxes");
    // 7 boxes per operation; the set-up's 1000 are outside the region.
    let per_op = samples(metric(&report, "boxing.count/op"));
    assert!(all_equal(&per_op, 7.0), "{per_op:?}");
    let total = samples(metric(&report, "boxing.count"));
    assert!(all_equal(&total, 21.0), "{total:?}");
}

#[test]
fn invocations_per_operation_are_exact_and_exclude_the_set_up() {
    if util::skip_without_uprobes("uprobes") {
        return;
    }
    let report = harnessed(
        &[
            "--invocations",
            "harness_fixture::push_one",
            "--runs",
            "2",
            "--ops",
            "4",
        ],
        "pushes",
    );
    let per_op = samples(metric(&report, "invocations.harness_fixture::push_one/op"));
    assert!(all_equal(&per_op, 1000.0), "{per_op:?}");
    // The run's total counts the 4 operations only, not the set-up's 10000 calls.
    let total = metric(&report, "invocations.harness_fixture::push_one");
    assert!(all_equal(&samples(total), 4000.0), "{total:?}");
    // ... and the report says so, on the total and not on the per-operation metric.
    assert_eq!(
        total["notes"][0],
        "the measured region only: the 4 operations of each run, set-up excluded"
    );
    assert!(
        metric(&report, "invocations.harness_fixture::push_one/op")["notes"].is_null(),
        "no note on the per-operation metric"
    );
    // Threads started inside the operation are counted (inherited, switched with it).
    let report = harnessed(
        &[
            "--invocations",
            "harness_fixture::push_one",
            "--runs",
            "2",
            "--ops",
            "3",
        ],
        "threaded",
    );
    let per_op = samples(metric(&report, "invocations.harness_fixture::push_one/op"));
    assert!(all_equal(&per_op, 1000.0), "{per_op:?}");
}

#[test]
fn a_binary_that_is_not_a_harness_is_refused() {
    sbs(["--harness", "--", fixture!("exit_with"), "0"]).fails_with(2, "lists no benchmark");
}

#[test]
fn the_binary_measures_itself_with_bench_and_smoke_tests_without() {
    let out = Command::new(FIXTURE)
        .args([
            "--bench",
            "spin",
            "--processes",
            "2",
            "--samples",
            "3",
            "--warmup",
            "2",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.starts_with("spin\n    time/op "), "{text}");
    assert!(text.contains("95% CI over 2 processes"), "{text}");
    let out = Command::new(FIXTURE).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    for name in ["pushes", "sized", "spin"] {
        assert!(text.contains(&format!("test {name} ... ok")), "{text}");
    }
    let out = Command::new(FIXTURE)
        .args(["--sbs-run", "nothing"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no benchmark named `nothing`"), "{err}");
}

#[test]
fn perf_counters_count_inside_the_region_only() {
    // page-faults is a software event: it works without a PMU. The operation of `spin`
    // touches no new memory, so its region counts (almost) no fault, while the whole
    // process (loader, set-up, harness) faults dozens of times.
    let whole = sbs([
        "--counters",
        "page-faults",
        "--runs",
        "2",
        "-f",
        "json",
        "--",
        FIXTURE,
        "--sbs-run",
        "spin",
    ]);
    if whole.code() == Some(2) && whole.stderr().contains("perf_event_paranoid") {
        skip!(
            Need::PerfEvents,
            "perf events not permitted here: {}",
            whole.stderr()
        );
        return;
    }
    let whole = whole.success();
    let whole_faults = samples(metric(&whole.json(), "counter.page-faults"));
    let report = harnessed(
        &["--counters", "page-faults", "--runs", "2", "--ops", "5"],
        "spin",
    );
    let region = samples(metric(&report, "counter.page-faults"));
    let per_op = samples(metric(&report, "counter.page-faults/op"));
    assert!(
        whole_faults.iter().all(|&f| f > 50.0),
        "whole process faults: {whole_faults:?}"
    );
    assert!(
        region.iter().all(|&f| f < 10.0),
        "region faults: {region:?} vs whole {whole_faults:?}"
    );
    assert!(
        per_op.iter().zip(&region).all(|(p, r)| *p == r / 5.0),
        "per-op {per_op:?} is the region total {region:?} over 5 operations"
    );
}

/// `sbs-profile --bench NAME` builds the example crate's bench target with cargo (release,
/// symbols and debug info kept) and measures its benchmarks. Uses a target directory of
/// its own under this one, so that it never waits for the lock of the outer build.
#[test]
fn cargo_bench_target_is_built_listed_and_measured() {
    let example =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/wordfreq-bench");
    let target = std::path::PathBuf::from(FIXTURE)
        .parent()
        .and_then(|d| d.parent())
        .expect("target dir")
        .join("sbs-bench-test");
    let run = |args: &[&str]| {
        let output = Command::new(util::sbs_profile())
            .args(args)
            .current_dir(&example)
            .env("CARGO_TARGET_DIR", &target)
            .output()
            .expect("spawn sbs-profile");
        util::Finished {
            args: args.iter().map(|s| s.to_string()).collect(),
            output,
        }
    };
    let out = run(&["--bench", "wordfreq", "--list"]).success();
    out.check(
        out.stdout() == "wordfreq/count  (words=200000)\nwordfreq/top  (words=200000,k=3)\n",
        "both benchmarks listed with their parameters",
    );
    let out = run(&[
        "--bench",
        "wordfreq",
        "--alloc",
        "--runs",
        "2",
        "--ops",
        "3",
        "--param",
        "words=2000",
        "-f",
        "json",
        "--",
        "top",
    ])
    .success();
    let report = out.json();
    out.check(
        report["benchmarks"].as_array().map(Vec::len) == Some(1),
        "the filter selects wordfreq/top only",
    );
    let per_op = samples(metric(&report, "alloc.count/op"));
    out.check(
        per_op.len() == 2 && per_op[0] == per_op[1] && per_op[0] > 100.0,
        &format!("one String per distinct word and the vector's growth: {per_op:?}"),
    );
    let exe = std::fs::read_dir(target.join("release/deps"))
        .expect("cargo built into the test's target dir")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("wordfreq-") && !n.contains('.'))
        })
        .expect("the bench executable");
    let symbols = Command::new("nm").arg(&exe).output();
    if let Ok(symbols) = symbols {
        let text = String::from_utf8_lossy(&symbols.stdout);
        assert!(
            text.contains("wordfreq_bench") && text.contains("count"),
            "symbols kept in {}",
            exe.display()
        );
    }
}

#[test]
fn allocations_per_operation_from_the_counting_allocator() {
    let out = sbs([
        "--harness",
        "--alloc",
        "--alloc-harness",
        "--runs",
        "2",
        "--ops",
        "4",
        "-f",
        "json",
        "--",
        fixture!("harness_counting"),
    ])
    .success();
    let report = out.json();
    let count = metric(&report, "alloc.count/op");
    out.check(count["source"] == "harness", "source of in-process counts");
    assert!(all_equal(&samples(count), 3.0), "{count:#}");
    assert!(all_equal(
        &samples(metric(&report, "alloc.bytes/op")),
        192.0
    ));
    assert!(all_equal(&samples(metric(&report, "heap.retained")), 192.0));
}

fn valgrind_installed() -> bool {
    Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `counter.instructions/op` of the fixture's `mix` under `--instructions valgrind`
/// (callgrind, collection toggled by the harness), every run's sample, and the run totals.
fn mix_instructions(ops: &str, params: &[&str]) -> (Vec<f64>, Vec<f64>) {
    let mut args = vec![
        "--harness",
        "--instructions",
        "valgrind",
        "--runs",
        "3",
        "--ops",
        ops,
        "-f",
        "json",
    ];
    for p in params {
        args.extend(["--param", p]);
    }
    args.extend(["--", FIXTURE, "mix"]);
    let out = sbs(args).success();
    let report = out.json();
    let total = metric(&report, "counter.instructions");
    assert_eq!(total["source"], "valgrind");
    assert_eq!(
        total["notes"][0],
        format!("the measured region only: the {ops} operations of each run, set-up excluded")
    );
    (
        samples(metric(&report, "counter.instructions/op")),
        samples(total),
    )
}

/// The whole process's count of the same benchmark process (set-up included), from a plain
/// `--instructions valgrind` run of the binary in counting mode.
fn mix_whole_process(params: &[&str]) -> f64 {
    let mut args = vec![
        "--instructions",
        "valgrind",
        "--runs",
        "1",
        "--warmup",
        "0",
        "-e",
        "SBS_HARNESS_MODE=count",
        "-e",
        "SBS_HARNESS_OPS=4",
        "-f",
        "json",
        "--",
        FIXTURE,
        "--sbs-run",
        "mix",
    ];
    for p in params {
        args.extend(["--param", p]);
    }
    samples(metric(&sbs(args).success().json(), "counter.instructions"))[0]
}

#[test]
fn instructions_per_operation_under_valgrind_are_exact_and_exclude_the_set_up() {
    if !valgrind_installed() {
        skip!(
            Need::Valgrind,
            "valgrind is not installed (sudo apt-get install -y valgrind)"
        );
        return;
    }
    let (per_op, total) = mix_instructions("4", &[]);
    let p = per_op[0];
    assert!(
        p > 1000.0 && per_op.iter().all(|&v| v == p),
        "the same count in every run: {per_op:?}"
    );
    assert!(
        total.iter().all(|&t| t == 4.0 * p),
        "the run total is 4 operations of {p}: {total:?}"
    );
    // Ten times the set-up: the same count per operation, while the whole process grows.
    let (big_setup, _) = mix_instructions("4", &["setup=1000000"]);
    assert!(
        big_setup.iter().all(|&v| v == p),
        "per operation {big_setup:?} vs {p} with the default set-up"
    );
    let (whole, whole_big) = (
        mix_whole_process(&[]),
        mix_whole_process(&["setup=1000000"]),
    );
    assert!(
        whole_big - whole > 100.0 * p,
        "the set-up's 900,000 extra rounds show in the whole process: {whole} -> {whole_big} \
         (one operation: {p})"
    );
    // Twice the operation's work: about twice the count.
    let (double, _) = mix_instructions("2", &["work=2000"]);
    let ratio = double[0] / p;
    assert!(
        (1.9..=2.1).contains(&ratio) && double.iter().all(|&v| v == double[0]),
        "work=2000: {double:?}, {ratio} times work=1000's {p}"
    );
}
