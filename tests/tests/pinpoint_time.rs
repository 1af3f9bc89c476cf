//! `sbs-profile pinpoint --metric time` end to end on `fixtures/c/timepin.c`, built two
//! ways: in the current build `walk` (main -> outer -> middle -> walk) runs the same
//! instructions with a cache-hostile stride, so its time grows by a factor while its
//! instruction count does not move. Needs perf events and gcc (valgrind for the
//! instruction half, perf for the agreement with `perf stat`); skipped with a printed
//! reason without them.

mod util;

use std::path::Path;
use std::process::Command;

use sbs_skip::{skip, Need};
use util::{chain, sbs, Variants};

/// The builds of `fixtures/c/timepin.c`, or `None` (a recorded skip).
fn builds() -> Option<Variants> {
    if let Err(e) = sbs_probes::execs::check() {
        skip!(Need::PerfEvents, "perf events unavailable: {e}");
        return None;
    }
    util::gcc_variants("timepin", 2)
}

/// The mean task-clock of `exe` in ms over 5 runs, as `perf stat` measures it.
fn perf_stat_task_clock_ms(exe: &Path) -> Option<f64> {
    let out = Command::new("perf")
        .args(["stat", "-x,", "-e", "task-clock", "-r", "5", "--"])
        .arg(exe)
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stderr);
    let line = text.lines().find(|l| l.contains("task-clock"))?;
    line.split(',').next()?.trim().parse().ok()
}

#[test]
fn time_names_the_function_whose_memory_access_got_slow_and_instructions_do_not() {
    let Some(b) = builds() else { return };
    let run = b.pinpoint(0, 1, &["--metric", "time", "--threshold", "10"], &[]);
    assert_eq!(run.code(), Some(1), "a regression exits 1{}", run.stderr());
    let v = run.json();
    let p = &v["pinpoint"];
    assert_eq!(chain(&run), ["main", "outer", "middle", "walk"], "{p}");
    assert_eq!(p["bottleneck"], "walk");
    assert_eq!(p["stop"], "own_code");
    assert_eq!(p["metric"], "time");
    assert_eq!(p["runs"], 10, "time runs 10 times per build by default");
    for link in p["chain"].as_array().unwrap() {
        // The builds ran alternately: run i of each is a pair.
        let method = link["method"].as_str().unwrap_or_default();
        assert!(method == "paired_t" || method == "paired_trimmed", "{link}");
        assert_eq!(link["comparison"]["method"], method, "{link}");
        assert_eq!(link["comparison"]["verdict"], "regressed", "{link}");
        let [lo, hi] = [0, 1].map(|i| link["previous_interval"][i].as_f64().unwrap());
        let previous = link["previous"].as_f64().unwrap();
        assert!(lo <= previous && previous <= hi, "{link}");
        assert!(link["samples"][1].as_u64() > link["samples"][0].as_u64());
    }
    // walk's time grows by a factor (a read per page instead of a read per element).
    let walk = &p["chain"][3];
    assert!(
        walk["current"].as_f64().unwrap() > 3.0 * walk["previous"].as_f64().unwrap(),
        "{walk}"
    );
    // Inside walk, the samples land on its loop (the sampled instruction is the load's or
    // the one after it, lines 44-45 of timepin.c), where all the change is.
    let inside = p["inside"].as_array().expect("places inside walk");
    let lines: Vec<&str> = inside.iter().filter_map(|x| x["what"].as_str()).collect();
    let on_loop = |what: &str| what.ends_with("timepin.c:44") || what.ends_with("timepin.c:45");
    let place = inside
        .iter()
        .find(|x| x["what"].as_str().is_some_and(on_loop))
        .unwrap_or_else(|| panic!("no place on walk's loop: {lines:?}"));
    assert!(
        place["current"].as_f64() > place["previous"].as_f64()
            && place["share_percent"].as_f64() > Some(50.0),
        "{place}"
    );
    let note = &p["sampling"];
    let samples = note["samples"].as_u64().unwrap();
    assert!(samples > 1000, "{note}");
    assert!(
        note["not_unwound"].as_u64().unwrap() * 20 < samples,
        "more than 5% of the stacks not unwound: {note}"
    );
    // Agreement with perf stat: main's inclusive time is the process's CPU time (the
    // kernel's time on its behalf included, when it was sampled). Compared on the
    // previous build, whose walk is bound by the CPU rather than by memory. The two are
    // different runs on a shared VM, and the sampled runs pay for the sampling (a stack
    // copy per sample): seen from 0.9x to 1.5x. The bounds catch a wrong scale (a
    // period, a unit, samples counted twice), not load.
    if note["user_only"] == false {
        match perf_stat_task_clock_ms(&b.exe(0)) {
            Some(task_clock) => {
                let main = p["chain"][0]["previous"].as_f64().unwrap();
                assert!(
                    (0.5..=1.8).contains(&(main / task_clock)),
                    "main {main} ms against perf stat's task-clock {task_clock} ms"
                );
            }
            None => skip!(
                Need::Perf,
                "perf is not installed (apt-get install linux-perf)"
            ),
        }
    }

    // The same pair counted in instructions: walk runs the same instructions, nothing
    // past the threshold.
    if Command::new("valgrind").arg("--version").output().is_err() {
        skip!(
            Need::Valgrind,
            "valgrind is not installed (apt-get install valgrind)"
        );
        return;
    }
    let counted = b.pinpoint(0, 1, &["--metric", "instructions", "--runs", "1"], &[]);
    assert_eq!(counted.code(), Some(0), "{}", counted.stderr());
    let v = counted.json();
    assert!(v["pinpoint"]["bottleneck"].is_null(), "{v}");
    assert_eq!(v["pinpoint"]["stop"], "no_regression");
}

#[test]
fn the_same_build_on_both_sides_has_no_time_bottleneck() {
    let Some(b) = builds() else { return };
    let run = b.pinpoint(0, 0, &["--metric", "time", "--threshold", "10"], &[]);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let v = run.json();
    assert!(v["pinpoint"]["bottleneck"].is_null(), "{v}");
    assert_eq!(v["pinpoint"]["stop"], "no_regression", "{v}");
    assert_eq!(chain(&run), ["main"]);
    assert_ne!(
        v["pinpoint"]["chain"][0]["comparison"]["verdict"],
        "regressed"
    );
}

#[test]
fn text_and_markdown_show_the_means_their_intervals_and_the_samples() {
    let Some(b) = builds() else { return };
    let mut argv = vec![
        "pinpoint".to_string(),
        "--metric".into(),
        "time".into(),
        "--runs".into(),
        "4".into(),
        "--previous".into(),
        b.exe(0).display().to_string(),
        "--".into(),
        b.exe(1).display().to_string(),
    ];
    let text = sbs(&argv);
    let out = text.stdout();
    // Every link of the chain (`main` always; `walk` too when four runs were enough to
    // find it, which a loaded machine does not always give: finding it is the other
    // tests' job) reads `NAME  PREV [LO, HI] -> CUR [LO, HI] ms  +N% [..]  n=4  samples=P/C`.
    let links: Vec<&str> = out.lines().filter(|l| l.contains("  n=")).collect();
    assert!(
        links.first().is_some_and(|l| l.starts_with("main ")),
        "{out}"
    );
    for link in links {
        assert!(link.contains(" ms "), "{link}");
        assert_eq!(link.matches('[').count(), 3, "{link}");
        assert!(link.contains("n=4  samples="), "{link}");
    }
    assert!(out.contains("\nsampling: "), "{out}");
    argv.splice(1..1, ["--format".to_string(), "markdown".to_string()]);
    let md = sbs(&argv);
    assert!(md.stdout().contains("| samples |"), "{}", md.stdout());
}

#[test]
fn one_run_a_build_is_refused_before_any_work() {
    // `--runs 1` printed a change labelled exact, then "main did not get worse", exit 0:
    // one run has no spread for Welch's test. Refused before the builds are even read
    // (a missing build would be another error).
    let missing = Path::new("/nonexistent/previous-build");
    sbs([
        "pinpoint",
        "--metric",
        "time",
        "--runs",
        "1",
        "--previous",
        missing.to_str().unwrap(),
        "--",
        "/nonexistent/current-build",
    ])
    .fails_with(2, "--metric time needs at least 2 runs per build")
    .fails_with(2, "give --runs 2 or more");
}

#[test]
fn an_undecided_search_is_no_all_clear() {
    let Some(_) = builds() else { return };
    // pinpoint.c runs for well under a millisecond: main gets a sample or two a run, too
    // few to say whether it got worse.
    let Some(b) = util::gcc_variants("pinpoint", 2) else {
        return;
    };
    let run = b.pinpoint(0, 1, &["--metric", "time", "--runs", "2"], &[]);
    let run = run.fails_with(2, "undecided, no verdict: main had too few samples");
    let v = run.json();
    assert_eq!(v["pinpoint"]["stop"], "undecided", "{v}");
    assert!(v["pinpoint"]["bottleneck"].is_null(), "{v}");
    let text = sbs([
        "pinpoint".to_string(),
        "--metric".into(),
        "time".into(),
        "--runs".into(),
        "2".into(),
        "--previous".into(),
        b.exe(0).display().to_string(),
        "--".into(),
        b.exe(1).display().to_string(),
    ]);
    assert_eq!(text.code(), Some(2), "{}", text.stderr());
    let out = text.stdout();
    assert!(!out.contains("did not get worse"), "{out}");
    assert!(
        out.contains("no verdict: whether main got worse is undecided"),
        "{out}"
    );
}
