//! Benchmarks from an application's own calls: `sbs-profile capture` on the
//! `capture_app` fixture (functions marked `#[sbs_harness::capture]`), then
//! `sbs-profile --replay`, with the fixture's known per-call costs.

mod util;

use std::path::Path;

use sbs_skip::{skip, Need};
use util::{samples, sbs, skip_without_uprobes, valgrind_installed};

const APP: &str = fixture!("capture_app");

/// Capture the fixture's 40 rounds (10 calls kept per function) into `dir`.
fn capture(dir: &Path) {
    let out = sbs([
        "capture".as_ref(),
        "--calls".as_ref(),
        "10".as_ref(),
        "--out".as_ref(),
        dir.as_os_str(),
        "--".as_ref(),
        APP.as_ref(),
        "3".as_ref(),
    ]);
    // The application's output and exit code pass through.
    out.check(out.code() == Some(3), "the application's exit code 3");
    out.check(
        out.stdout().contains("capture_app: 160 words"),
        "the application's output",
    );
    for f in [
        "capture_app::words",
        "capture_app::sort_in_place",
        "capture_app::checksum",
        "capture_app::Stats::mean",
    ] {
        out.check(
            out.stderr()
                .lines()
                .any(|l| l.trim_start().starts_with(f) && l.contains("40 calls seen, 10 kept")),
            "a summary line per function",
        );
    }
}

/// The kept calls of one capture: (call number, in-situ allocations).
fn kept(dir: &Path, name: &str) -> Vec<(u64, u64)> {
    let text = std::fs::read_to_string(dir.join(name).join("calls.jsonl")).unwrap();
    text.lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                v["call"].as_u64().unwrap(),
                v["alloc_count"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// `sbs-profile --replay PATTERN OPTIONS --captures DIR -f json -- APP`, which must succeed.
fn replay(dir: &Path, pattern: &str, options: &[&str]) -> serde_json::Value {
    let mut args: Vec<&std::ffi::OsStr> = vec!["--replay".as_ref(), pattern.as_ref()];
    args.extend(options.iter().map(std::ffi::OsStr::new));
    args.extend([
        "--captures".as_ref(),
        dir.as_os_str(),
        "--runs".as_ref(),
        "2".as_ref(),
        "--samples".as_ref(),
        "3".as_ref(),
        "-f".as_ref(),
        "json".as_ref(),
        "--".as_ref(),
        APP.as_ref(),
    ]);
    sbs(args).success().json()
}

fn only_bench<'a>(report: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    let benches = report["benchmarks"].as_array().unwrap();
    assert_eq!(benches.len(), 1, "one benchmark: {report:#}");
    assert_eq!(benches[0]["name"], name, "named by its path");
    &benches[0]
}

fn metric_of<'a>(bench: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    bench["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == id)
        .unwrap_or_else(|| panic!("no metric {id} in {bench:#}"))
}

fn warnings(bench: &serde_json::Value) -> Vec<String> {
    bench["warnings"]
        .as_array()
        .map(|w| w.iter().map(|s| s.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

#[test]
fn captured_calls_replay_with_the_applications_allocations() {
    let dir = tempfile::tempdir().unwrap();
    let captures = dir.path().join("caps");
    capture(&captures);

    // In situ: each call of `words` made 5 allocations (its vector, 4 strings); the
    // others none. The 10 kept calls are spread over the 40, not the first 10.
    let words = kept(&captures, "capture_app.words");
    assert_eq!(words.len(), 10);
    assert!(words.iter().all(|&(_, a)| a == 5), "{words:?}");
    assert!(words.iter().any(|&(call, _)| call > 10), "{words:?}");
    for name in [
        "capture_app.sort_in_place",
        "capture_app.checksum",
        "capture_app.Stats.mean",
    ] {
        assert!(kept(&captures, name).iter().all(|&(_, a)| a == 0), "{name}");
    }

    // Replayed: the same allocations per operation, and no fidelity warning.
    let report = replay(&captures, "words", &["--alloc", "--ops", "10"]);
    let b = only_bench(&report, "capture_app::words");
    let per_op = samples(metric_of(b, "alloc.count/op"));
    assert!(
        !per_op.is_empty() && per_op.iter().all(|&n| n == 5.0),
        "{b:#}"
    );
    assert!(
        !warnings(b).iter().any(|w| w.contains("in situ")),
        "{:?}",
        warnings(b)
    );

    // The method replays with its captured `self`.
    let report = replay(&captures, "Stats::mean", &["--alloc"]);
    let b = only_bench(&report, "capture_app::Stats::mean");
    assert!(samples(metric_of(b, "alloc.count/op"))
        .iter()
        .all(|&n| n == 0.0));
    assert!(samples(metric_of(b, "time.op")).iter().all(|&t| t > 0.0));

    if !valgrind_installed() {
        skip!(
            Need::Valgrind,
            "the pitfall checks of the replays need valgrind (sudo apt-get install -y valgrind)"
        );
        return;
    }
    // The in-place sort is reset from a pristine copy before every operation: no
    // "changes its own input"; the checksum's result is kept: not "costs what an empty
    // one does".
    let report = replay(
        &captures,
        "sort_in_place",
        &["--alloc", "--instructions", "valgrind"],
    );
    let b = only_bench(&report, "capture_app::sort_in_place");
    assert!(
        !warnings(b)
            .iter()
            .any(|w| w.contains("changes its own input")),
        "{:?}",
        warnings(b)
    );
    assert!(samples(metric_of(b, "counter.instructions/op.calibrated"))
        .iter()
        .all(|&n| n > 1000.0));
    let report = replay(&captures, "checksum", &["--instructions", "valgrind"]);
    let b = only_bench(&report, "capture_app::checksum");
    assert!(
        !warnings(b).iter().any(|w| w.contains("costs what")),
        "{:?}",
        warnings(b)
    );
    assert!(samples(metric_of(b, "counter.instructions/op.calibrated"))
        .iter()
        .all(|&n| n > 1000.0));
}

#[test]
fn stale_corrupt_and_existing_captures_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let captures = dir.path().join("caps");
    capture(&captures);
    let caps = captures.as_os_str();

    // Nothing overwritten without --force.
    let before = std::fs::read(captures.join("capture_app.words/calls.jsonl")).unwrap();
    sbs([
        "capture".as_ref(),
        "--out".as_ref(),
        caps,
        "--".as_ref(),
        APP.as_ref(),
    ])
    .fails_with(2, "already holds captures");
    assert_eq!(
        std::fs::read(captures.join("capture_app.words/calls.jsonl")).unwrap(),
        before
    );

    // A pattern that matches no capture.
    let list = |pattern: &str| {
        sbs([
            "--list".as_ref(),
            "--replay".as_ref(),
            pattern.as_ref(),
            "--captures".as_ref(),
            caps,
            "--".as_ref(),
            APP.as_ref(),
        ])
    };
    list("words").success();
    list("nothing").fails_with(2, "no capture in");

    // A function the binary does not have.
    let gone = captures.join("capture_app.gone");
    std::fs::create_dir(&gone).unwrap();
    let meta = std::fs::read_to_string(captures.join("capture_app.words/meta.json")).unwrap();
    std::fs::write(
        gone.join("meta.json"),
        meta.replace("capture_app::words", "capture_app::gone"),
    )
    .unwrap();
    std::fs::copy(
        captures.join("capture_app.words/calls.jsonl"),
        gone.join("calls.jsonl"),
    )
    .unwrap();
    list("gone").fails_with(2, "has no function `capture_app::gone`");
    std::fs::remove_dir_all(&gone).unwrap();

    // A changed signature.
    let meta_path = captures.join("capture_app.checksum/meta.json");
    let meta = std::fs::read_to_string(&meta_path).unwrap();
    std::fs::write(&meta_path, meta.replace("& [u8]", "& [u16]")).unwrap();
    list("checksum").fails_with(2, "capture again");
    std::fs::write(&meta_path, meta).unwrap();

    // A corrupt file, named by its path.
    let calls_path = captures.join("capture_app.words/calls.jsonl");
    std::fs::write(&calls_path, "{\"call\": 1, \"args\": [\n").unwrap();
    let out = list("words").fails_with(2, "is corrupt");
    out.check(
        out.stderr().contains(&calls_path.display().to_string()),
        "the corrupt file's path",
    );
    std::fs::write(captures.join("capture_app.words/meta.json"), "not json").unwrap();
    list("words").fails_with(2, "meta.json is corrupt");

    // --force replaces them.
    sbs([
        "capture".as_ref(),
        "--force".as_ref(),
        "--out".as_ref(),
        caps,
        "--".as_ref(),
        APP.as_ref(),
    ])
    .success();
    list("words").success();
}

#[test]
fn replayed_callee_counts_equal_the_in_situ_counts() {
    if skip_without_uprobes("invocation counts") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let captures = dir.path().join("caps");
    capture(&captures);
    // In situ: the application alone, its calls of `words` and of `normalize`.
    let report = sbs([
        "--invocations",
        "capture_app::words",
        "--invocations",
        "capture_app::normalize",
        "--runs",
        "1",
        "-f",
        "json",
        "--",
        APP,
    ])
    .success()
    .json();
    let count = |id: &str| samples(util::metric(&report, id))[0];
    let calls = count("invocations.capture_app::words");
    let callees = count("invocations.capture_app::normalize");
    assert_eq!(calls, 40.0);
    let in_situ = callees / calls;
    assert_eq!(in_situ, 4.0);
    // Replayed: the same per operation.
    let report = replay(
        &captures,
        "words",
        &["--invocations", "capture_app::normalize", "--ops", "10"],
    );
    let b = only_bench(&report, "capture_app::words");
    let per_op = samples(metric_of(b, "invocations.capture_app::normalize/op"));
    assert!(
        !per_op.is_empty() && per_op.iter().all(|&n| n == in_situ),
        "{b:#}"
    );
}
