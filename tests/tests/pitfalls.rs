//! Benchmarks that measure the wrong thing: the calibration against the empty operation,
//! and the warnings for a discarded result, a constant input and state sorted in place
//! (`examples/pitfalls-bench`, built in release mode by `sbs-profile --bench`), each given
//! once and only for its benchmark, while the bundled example runs clean.

mod util;

use std::path::{Path, PathBuf};
use std::process::Command;

use sbs_skip::{skip, Need};
use util::{samples, sbs};

const FIXTURE: &str = fixture!("harness_fixture");

/// The pitfall warnings (not the harness's other warnings, such as an unsteady process).
const PITFALLS: [&str; 5] = [
    "costs what an empty one does",
    "after the first operation",
    "changes its own input",
    "over the kept measurements",
    "may be folded as a constant",
];

fn valgrind_installed() -> bool {
    Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Run `sbs-profile ARGS` in example `dir`, building with cargo into a target directory of
/// the tests' own (shared with the harness tests, so the release build of the harness's
/// dependencies is made once).
fn in_example(dir: &str, args: &[&str]) -> util::Finished {
    let example = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(dir);
    let target: PathBuf = PathBuf::from(FIXTURE)
        .parent()
        .and_then(|d| d.parent())
        .expect("target dir")
        .join("sbs-bench-test");
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
}

fn bench<'a>(report: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
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

/// The pitfall warnings of benchmark `name`.
fn pitfall_warnings(report: &serde_json::Value, name: &str) -> Vec<String> {
    bench(report, name)["warnings"]
        .as_array()
        .map(|w| {
            w.iter()
                .filter_map(|w| w.as_str())
                .filter(|w| PITFALLS.iter().any(|p| w.contains(p)))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The warnings of benchmark `name` that are neither one of `allowed` nor the spread of its
/// time per operation between processes (which a loaded machine may cause, and which names
/// its CoV). A healthy benchmark has none: no warning about the process's wall time (which
/// the harness varies by design), and no "no steady state" whose times agree anyway.
fn other_warnings(report: &serde_json::Value, name: &str, allowed: &[&str]) -> Vec<String> {
    bench(report, name)["warnings"]
        .as_array()
        .map(|w| {
            w.iter()
                .filter_map(|w| w.as_str())
                .filter(|w| !allowed.iter().any(|a| w.contains(a)))
                .filter(|w| {
                    !(w.starts_with("time.op")
                        && (w.contains("varies by") || w.contains("vary by")))
                })
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn each_pitfall_is_warned_about_once_and_only_for_its_benchmark() {
    if !valgrind_installed() {
        skip!(
            Need::Valgrind,
            "valgrind is not installed (sudo apt-get install -y valgrind)"
        );
        return;
    }
    let html = tempfile::NamedTempFile::new().unwrap();
    let html_path = html.path().to_str().unwrap().to_string();
    let out = in_example(
        "pitfalls-bench",
        &[
            "--bench",
            "pitfalls",
            "--instructions",
            "valgrind",
            "--runs",
            "3",
            "--ops",
            "3",
            "-f",
            "json",
            "--html",
            &html_path,
        ],
    )
    .success();
    let report = out.json();
    // The calibration: the empty operation's instructions, the same for every benchmark
    // (same loop, same region markers), exact, and small.
    let empty = samples(metric_of(
        bench(&report, "vec/sum"),
        "counter.instructions/op.empty",
    ));
    out.check(
        empty.len() == 3 && empty.iter().all(|&e| e == empty[0] && e > 0.0 && e < 100.0),
        &format!("the empty operation's count: {empty:?}"),
    );
    for name in ["vec/sum", "vec/sum-unused", "vec/sum-constant", "list/sort"] {
        let b = bench(&report, name);
        let raw = samples(metric_of(b, "counter.instructions/op"));
        let e = samples(metric_of(b, "counter.instructions/op.empty"));
        let calibrated = metric_of(b, "counter.instructions/op.calibrated");
        out.check(
            e == empty,
            &format!("{name}: the same empty operation: {e:?}"),
        );
        let expected: Vec<f64> = raw.iter().zip(&e).map(|(r, e)| r - e).collect();
        out.check(
            samples(calibrated) == expected,
            &format!("{name}: calibrated = raw - empty, run by run"),
        );
        out.check(
            calibrated["distinguishable"] == (name != "vec/sum-unused"),
            &format!("{name}: {calibrated:#}"),
        );
        let t = samples(metric_of(b, "time.op.empty"));
        out.check(
            t.len() == 3 && t.iter().all(|&t| t > 0.0 && t < 1e-6),
            &format!("{name}: the empty operation's time: {t:?}"),
        );
    }
    // vec/sum adds 10,000 values: far more than the empty operation.
    let calibrated = samples(metric_of(
        bench(&report, "vec/sum"),
        "counter.instructions/op.calibrated",
    ));
    out.check(
        calibrated[0] > 10_000.0,
        &format!("vec/sum: {calibrated:?}"),
    );
    // The discarded result: dead work, said once, with the count.
    let dead = pitfall_warnings(&report, "vec/sum-unused");
    out.check(
        dead.len() == 1
            && dead[0].starts_with(&format!(
                "`vec/sum-unused`: the operation costs what an empty one does ({} \
                 instructions/op); its result is probably unused",
                empty[0]
            )),
        &format!("the dead-work warning: {dead:?}"),
    );
    // The vector sorted in place: its first operation sorts, the later ones do not; the
    // instructions of the first operations, counted one by one, say so.
    let sort = pitfall_warnings(&report, "list/sort");
    out.check(
        sort.len() == 1
            && sort[0].starts_with(
                "`list/sort`: the operation changes its own input: its first operations, each \
                 counted alone under callgrind, run ",
            )
            && sort[0].ends_with("add `.reset(...)`"),
        &format!("the drift warning: {sort:?}"),
    );
    // The constant input: the same count at n = 10,000 and at twice that.
    let constant = pitfall_warnings(&report, "vec/sum-constant");
    out.check(
        constant.len() == 1
            && constant[0].starts_with(
                "`vec/sum-constant`: per-op instructions do not change when size parameter `n` \
                 doubles",
            ),
        &format!("the constant-input warning: {constant:?}"),
    );
    let at_double = |name: &str, probe: &str| {
        samples(metric_of(
            bench(&report, name),
            &format!("counter.instructions/op@{probe}"),
        ))
    };
    let sum = samples(metric_of(
        bench(&report, "vec/sum"),
        "counter.instructions/op",
    ));
    let sum2 = at_double("vec/sum", "n=20000");
    out.check(
        sum2.iter()
            .zip(&sum)
            .all(|(b, a)| b / a > 1.9 && b / a < 2.1),
        &format!("vec/sum counts twice the work at n=20000: {sum2:?} vs {sum:?}"),
    );
    out.check(
        pitfall_warnings(&report, "vec/sum").is_empty(),
        "vec/sum does it right: no pitfall warning",
    );
    // Nothing else: each benchmark gets its pitfall's warning and no other.
    for name in ["vec/sum", "vec/sum-unused", "vec/sum-constant", "list/sort"] {
        let other = other_warnings(&report, name, &PITFALLS);
        out.check(
            other.is_empty(),
            &format!("{name}: other warnings: {other:?}"),
        );
    }
    // Every format gets the warnings: the HTML page too.
    let page = std::fs::read_to_string(html.path()).unwrap();
    out.check(
        page.contains("warning: `vec/sum-unused`: the operation costs what an empty one does")
            && page.contains("indistinguishable from 0"),
        "the HTML page carries the warning and the calibration",
    );
}

/// The two benchmarks (`examples/pitfalls-bench/benches/drift.rs`): a sum that
/// mutates nothing, whose first operation meets cold memory (30-40 us against 3 us here,
/// which the timing rule alone reported as "falls by 91% ... changes its own input"), and a
/// small sort in place without a reset, under the timing rule's 20 us floor (which it did
/// not report). The counts of the first operations decide, not the machine's timings.
#[test]
fn cold_caches_are_not_a_drift_and_a_small_sort_in_place_is() {
    if !valgrind_installed() {
        skip!(
            Need::Valgrind,
            "valgrind is not installed (sudo apt-get install -y valgrind)"
        );
        return;
    }
    let out = in_example(
        "pitfalls-bench",
        &["--bench", "drift", "--runs", "5", "-f", "json"],
    )
    .success();
    let report = out.json();
    let sum = pitfall_warnings(&report, "drift/sum");
    out.check(
        sum.is_empty(),
        &format!("drift/sum mutates nothing: no drift warning: {sum:?}"),
    );
    // When its first operation was dearer (it is, by tenfold, on this machine), the note
    // says why it is not a drift, with the counts.
    let time_op = metric_of(bench(&report, "drift/sum"), "time.op");
    let notes: Vec<&str> = time_op["notes"]
        .as_array()
        .map(|n| n.iter().filter_map(|n| n.as_str()).collect())
        .unwrap_or_default();
    out.check(
        notes.iter().all(|n| {
            !n.contains("after the first operation")
                || n.contains("run the same instructions") && n.contains("cold caches")
        }),
        &format!("drift/sum: the note of a dearer first operation: {notes:?}"),
    );
    let sort = pitfall_warnings(&report, "drift/sort");
    out.check(
        sort.len() == 1
            && sort[0].starts_with(
                "`drift/sort`: the operation changes its own input: its first operations, \
                 each counted alone under callgrind, run ",
            )
            && sort[0].contains("and on a second set-up ")
            && sort[0].ends_with("add `.reset(...)`"),
        &format!("drift/sort: one drift warning, by its counts: {sort:?}"),
    );
    // Its operation is microseconds, under the floor the timing rule needs.
    let t = samples(metric_of(bench(&report, "drift/sort"), "time.op"));
    out.check(
        t.iter().all(|&t| t < 20e-6),
        &format!("drift/sort is under 20 us per operation: {t:?}"),
    );
}

#[test]
fn the_bundled_example_runs_clean() {
    let mut args = vec![
        "--bench",
        "wordfreq",
        "--runs",
        "3",
        "--ops",
        "2",
        "--param",
        "words=20000",
        "-f",
        "json",
    ];
    let valgrind = valgrind_installed();
    if valgrind {
        args.extend(["--instructions", "valgrind"]);
    }
    let out = in_example("wordfreq-bench", &args).success();
    let report = out.json();
    for name in ["wordfreq/count", "wordfreq/top"] {
        let w = pitfall_warnings(&report, name);
        out.check(w.is_empty(), &format!("{name}: no pitfall warning: {w:?}"));
        let other = other_warnings(&report, name, &[]);
        out.check(other.is_empty(), &format!("{name}: no warning: {other:?}"));
        let b = bench(&report, name);
        out.check(
            metric_of(b, "time.op.calibrated")["distinguishable"] == true,
            &format!("{name}: its time is told from the empty operation's"),
        );
        if valgrind {
            out.check(
                metric_of(b, "counter.instructions/op.calibrated")["distinguishable"] == true,
                &format!("{name}: its instructions are told from the empty operation's"),
            );
        }
    }
    if !valgrind {
        skip!(
            Need::Valgrind,
            "valgrind is not installed: the example's instructions were not checked"
        );
    }
}

/// The text report shows the calibration rows, and a calibrated time that cannot be told
/// from zero as such (the fixture's debug build keeps its operations, so this checks the
/// rows, not the verdict).
#[test]
fn the_text_report_shows_the_calibration() {
    let out = sbs(["--harness", "--runs", "2", "--", FIXTURE, "spin"]).success();
    let text = out.stdout();
    for row in ["time.op ", "time.op.empty ", "time.op.calibrated "] {
        out.check(
            text.lines().any(|l| l.trim_start().starts_with(row)),
            &format!("a `{}` row", row.trim()),
        );
    }
}

/// Arguments that make the fixture's `spin` warn in every run: an interval of ±0.01% that
/// two runs cannot reach (Student's t for one degree of freedom is 12.7), so `--target-ci`
/// says the maximum came first. (A process with no steady state is no longer a warning by
/// itself: only when the processes' times disagree.)
fn unsteady_spin(extra: &[&'static str]) -> Vec<&'static str> {
    let mut args = vec![
        "--harness",
        "--runs",
        "2",
        "--target-ci",
        "0.01",
        "--max-runs",
        "2",
    ];
    args.extend(extra);
    args.extend(["--", FIXTURE, "spin"]);
    args
}

/// The summary line counts the warnings in every format, and `--strict` turns them into
/// exit code 2 once the report is written.
#[test]
fn warnings_are_counted_and_strict_fails_on_them() {
    let out = sbs(unsteady_spin(&[])).success();
    let text = out.stdout();
    let last = text.lines().last().unwrap_or_default().to_string();
    out.check(
        last.ends_with(" in 1 benchmark") && last.contains(" warning"),
        &format!("the summary line: {last:?}"),
    );
    out.check(
        text.contains("warning: --target-ci 0.01% not reached"),
        "the warning itself",
    );
    let out = sbs(unsteady_spin(&["-f", "markdown"])).success();
    out.check(
        out.stdout()
            .contains(" in 1 benchmark; smaller is better.</sub>"),
        "the Markdown footer counts them",
    );
    let out = sbs(unsteady_spin(&["-f", "csv"])).success();
    out.check(
        out.stderr()
            .contains("sbs-profile: warning (spin): --target-ci"),
        "CSV has no place for them: stderr",
    );
    let out = sbs(unsteady_spin(&["--strict", "-f", "json"])).fails_with(2, "and --strict");
    // The report was written all the same.
    let report = out.json();
    out.check(
        !report["benchmarks"][0]["warnings"]
            .as_array()
            .unwrap()
            .is_empty(),
        "the JSON report is on stdout with its warnings",
    );
    // Without warnings (a fixed warm-up cannot fail to reach steady state), --strict passes.
    sbs([
        "--harness",
        "--runs",
        "2",
        "--strict",
        "--harness-arg=--warmup=3",
        "--",
        FIXTURE,
        "spin",
    ])
    .success();
}

/// `--instructions qemu` counts the harness's measured region from the same marker points
/// where it toggles callgrind: `list/sort`'s instructions per operation equal, within
/// 0.1%, callgrind's count of single operations in the same run (the drift check counts
/// the first operations one at a time under callgrind and quotes them in its warning).
#[test]
fn qemu_per_op_count_equals_callgrind_s_on_list_sort() {
    let qemu = Command::new("qemu-x86_64")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !qemu {
        skip!(
            Need::Qemu,
            "qemu-x86_64 is not installed (sudo apt-get install -y qemu-user)"
        );
        return;
    }
    if !valgrind_installed() {
        skip!(
            Need::Valgrind,
            "no callgrind to compare the per-op count with"
        );
        return;
    }
    let out = in_example(
        "pitfalls-bench",
        &[
            "--bench",
            "pitfalls",
            "--instructions",
            "qemu",
            "--runs",
            "3",
            "--ops",
            "3",
            "-f",
            "json",
            "--",
            "--exact",
            "list/sort",
        ],
    )
    .success();
    let report = out.json();
    let b = bench(&report, "list/sort");
    let per_op = metric_of(b, "counter.instructions/op");
    assert!(per_op["source"].as_str().unwrap().starts_with("qemu:"));
    let ours = samples(per_op);
    assert!(ours.windows(2).all(|w| w[0] == w[1]), "{ours:?}");
    // "... run 15,087,935, 700,033, 700,033 and 700,033 instructions ...": the steady
    // operations' count.
    let warning = pitfall_warnings(&report, "list/sort")
        .into_iter()
        .find(|w| w.contains("counted alone under callgrind"))
        .unwrap_or_else(|| panic!("no drift warning in {b:#}"));
    let numbers: Vec<f64> = warning
        .split(|c: char| !(c.is_ascii_digit() || c == ','))
        .map(|t| t.replace(',', ""))
        .filter(|t| t.len() >= 5)
        .filter_map(|t| t.parse().ok())
        .collect();
    let callgrind = numbers[1];
    out.check(
        (ours[0] - callgrind).abs() <= 0.001 * callgrind,
        &format!(
            "qemu {} per op within 0.1% of callgrind's {callgrind}",
            ours[0]
        ),
    );
}
