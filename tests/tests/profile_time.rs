//! `sbs-profile --profile-time` on `fixtures/c/timepin.c` (current build: `walk`, three
//! calls below main, reads memory with a cache-hostile stride): the sampled CPU time and
//! the inclusive time of the program's top functions, in runs of their own. Needs perf
//! events and gcc; skipped with a printed reason without them.

mod util;

use std::path::{Path, PathBuf};
use std::process::Command;

use sbs_skip::{skip, Need};
use util::sbs;

fn fixture(dir: &Path, extra: &[&str]) -> Option<PathBuf> {
    if let Err(e) = sbs_probes::execs::check() {
        skip!(Need::PerfEvents, "perf events unavailable: {e}");
        return None;
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/c/timepin.c");
    let exe = dir.join("timepin");
    sbs_skip::build!(
        Need::Gcc,
        Command::new("gcc")
            .args(["-O2", "-g", "-DVARIANT=1"])
            .args(extra)
            .arg("-o")
            .arg(&exe)
            .arg(&src)
    )?;
    Some(exe)
}

#[test]
fn profile_time_reports_inclusive_time_per_function_in_runs_of_its_own() {
    let dir = tempfile::tempdir().expect("temp dir");
    let Some(exe) = fixture(dir.path(), &[]) else {
        return;
    };
    let exe = exe.to_str().unwrap();
    let run = sbs([
        "--time",
        "--profile-time",
        "-r",
        "3",
        "--format",
        "json",
        "--",
        exe,
    ])
    .success();
    let v = run.json();
    let metrics = v["benchmarks"][0]["metrics"].as_array().unwrap();
    let metric = |id: &str| {
        metrics
            .iter()
            .find(|m| m["id"] == id)
            .unwrap_or_else(|| panic!("no {id} in {v}"))
    };
    // Sampling is an instrument: never in the timing runs.
    assert_eq!(metric("time.wall")["group"], "timing");
    assert_eq!(metric("profile.time")["group"], "profile-time");
    let mean = |id: &str| metric(id)["summary"]["mean"].as_f64().unwrap();
    let samples = |id: &str| -> Vec<f64> {
        metric(id)["samples"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect()
    };
    // Inclusive: in every run, each function's time is within its caller's.
    let chain =
        ["walk", "middle", "outer", "main"].map(|f| samples(&format!("profile.inclusive.{f}")));
    for pair in chain.windows(2) {
        for (inner, outer) in pair[0].iter().zip(&pair[1]) {
            assert!(inner <= outer, "{chain:?}");
        }
    }
    assert!(samples("profile.inclusive.main")
        .iter()
        .zip(samples("profile.time"))
        .all(|(main, total)| *main <= total));
    // The strided reads dominate; steady's loop is a few ms.
    assert!(
        mean("profile.inclusive.walk") > 3.0 * mean("profile.inclusive.steady"),
        "{v}"
    );
    // A measurement with an interval over the runs, never called exact (three runs of a
    // deterministic loop on a quiet machine may well get the same number of samples, so
    // the interval may be a point).
    let walk = metric("profile.inclusive.walk");
    assert_eq!(walk["exact"], false, "{walk}");
    let s = &walk["summary"];
    let (low, high) = (s["ci_low"].as_f64(), s["ci_high"].as_f64());
    assert!(
        low.is_some_and(|low| low <= mean("profile.inclusive.walk"))
            && high.is_some_and(|high| high >= mean("profile.inclusive.walk")),
        "an interval over runs: {s}"
    );
    let notes = metric("profile.time")["notes"].to_string();
    assert!(notes.contains("not unwound to their root"), "{notes}");

    // Every format shows the functions.
    for format in ["text", "csv", "markdown", "bmf"] {
        let out = sbs(["--profile-time", "-r", "2", "--format", format, "--", exe]).success();
        assert!(
            out.stdout().contains("profile.inclusive.walk"),
            "{format}: {}",
            out.stdout()
        );
    }
}

#[test]
fn a_stripped_program_is_refused_with_what_to_do() {
    let dir = tempfile::tempdir().expect("temp dir");
    let Some(exe) = fixture(dir.path(), &["-s"]) else {
        return;
    };
    let run = sbs(["--profile-time", "-r", "1", "--", exe.to_str().unwrap()]);
    assert_eq!(run.code(), Some(2), "{}", run.stderr());
    assert!(run.stderr().contains("stripped"), "{}", run.stderr());
    assert!(
        run.stderr().contains("rebuild without stripping"),
        "{}",
        run.stderr()
    );
}

/// A `#!` script is refused as a script, not as something that is neither ELF "nor a
/// script starting with `#!`" (issue 43).
#[test]
fn a_script_is_refused_as_a_script() {
    if let Err(e) = sbs_probes::execs::check() {
        skip!(Need::PerfEvents, "perf events unavailable: {e}");
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let script = dir.path().join("script.sh");
    std::fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    sbs(["--profile-time", "-r", "1", "--", script.to_str().unwrap()]).fails_with(
        2,
        "is a script (`#!/bin/sh`), not a compiled program, so it has no functions to read",
    );
}

/// The rows of `--profile-time` are ordered by mean, largest first, whatever the run that
/// chose the functions said; and no interval of a time reaches below 0. On
/// `fixtures/c/by_run.c`, `burst` leads the warm-up (80 ms) but takes 0, 30 and 0 ms in the
/// measured runs: it came before `steady` (20 ms a run), and its interval reached -33 ms.
#[test]
fn profile_time_rows_are_ordered_by_mean_and_their_intervals_stop_at_zero() {
    if let Err(e) = sbs_probes::execs::check() {
        skip!(Need::PerfEvents, "perf events unavailable: {e}");
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let Some(exe) = util::gcc_fixture(dir.path(), "by_run", &[]) else {
        return;
    };
    let count = dir.path().join("runs");
    let args = |format: &str| {
        let _ = std::fs::remove_file(&count);
        sbs([
            "--profile-time",
            "--warmup",
            "1",
            "--runs",
            "3",
            "--format",
            format,
            "--",
            exe.to_str().unwrap(),
            count.to_str().unwrap(),
        ])
        .success()
    };
    let run = args("json");
    let v = run.json();
    let metrics = v["benchmarks"][0]["metrics"].as_array().unwrap();
    let ids: Vec<&str> = metrics.iter().map(|m| m["id"].as_str().unwrap()).collect();
    let mean = |m: &serde_json::Value| m["summary"]["mean"].as_f64().unwrap();
    let rows: Vec<&serde_json::Value> = metrics
        .iter()
        .filter(|m| m["id"].as_str().unwrap().starts_with("profile.inclusive."))
        .collect();
    // The fixture did what the test is about: burst ran in the warm-up and run 2 only.
    let burst = rows
        .iter()
        .find(|m| m["id"] == "profile.inclusive.burst")
        .unwrap_or_else(|| panic!("no burst in {ids:?}"));
    let burst_samples: Vec<f64> = burst["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    assert!(
        burst_samples[0] == 0.0 && burst_samples[1] > 0.0 && burst_samples[2] == 0.0,
        "{burst_samples:?}"
    );
    assert_eq!(ids[0], "profile.time", "{ids:?}");
    for pair in rows.windows(2) {
        assert!(
            mean(pair[0]) >= mean(pair[1]),
            "rows out of order: {} ({}) before {} ({}) in {ids:?}",
            pair[0]["id"],
            mean(pair[0]),
            pair[1]["id"],
            mean(pair[1])
        );
    }
    let at = |id: &str| ids.iter().position(|i| *i == id).unwrap();
    assert!(
        at("profile.inclusive.steady") < at("profile.inclusive.burst"),
        "{ids:?}"
    );
    for m in metrics {
        let low = m["summary"]["ci_low"].as_f64().unwrap();
        assert!(low >= 0.0, "{} has an interval from {low}", m["id"]);
    }
    assert_eq!(burst["summary"]["ci_low"], 0.0, "{burst}");
    // The text report shows the same order and no negative bound.
    let text = args("text").stdout();
    assert!(!text.contains("[-"), "{text}");
    let line_of = |f: &str| {
        text.lines()
            .position(|l| {
                l.trim_start()
                    .starts_with(&format!("profile.inclusive.{f} "))
            })
            .unwrap_or_else(|| panic!("no {f} in {text}"))
    };
    assert!(line_of("steady") < line_of("burst"), "{text}");
}
