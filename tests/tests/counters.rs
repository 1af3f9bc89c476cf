//! Perf counters and valgrind instruction counts end to end, on fixtures with known
//! behaviour. Hardware-event tests run where a PMU exists and skip with a reason where
//! it does not.

mod util;

use std::process::Command;

use sbs_skip::{skip, Need};
use util::{metric, samples, sbs};

/// Whether this machine has a CPU PMU that can count `instructions` (asked of the tool).
fn pmu_reason() -> Option<String> {
    let out = sbs(["--list-counters"]).success().stdout();
    let line = out
        .lines()
        .find(|l| l.starts_with("instructions ") && l.contains("perf-hw"))
        .expect("instructions row")
        .to_string();
    if line.contains(" yes ") {
        None
    } else {
        Some(line)
    }
}

/// Why software counters cannot be opened here (unprivileged with a strict
/// `perf_event_paranoid`), or `None` when they can.
fn software_unavailable() -> Option<String> {
    let out = sbs(["--list-counters"]).success().stdout();
    out.lines()
        .filter(|l| l.starts_with("page-faults ") || l.starts_with("context-switches "))
        .find(|l| !l.contains(" yes "))
        .map(str::to_string)
}

/// Skip (with the reason) when software counters are not available.
macro_rules! need_software_counters {
    () => {
        if let Some(reason) = software_unavailable() {
            skip!(Need::PerfEvents, "software counters unavailable: {reason}");
            return;
        }
    };
}

#[test]
fn page_faults_cover_every_fresh_page_touched() {
    need_software_counters!();
    let n = 2000;
    let run = sbs([
        "--runs",
        "3",
        "--format",
        "json",
        "--counters",
        "page-faults,minor-faults,major-faults",
        "--",
        fixture!("pages"),
        &n.to_string(),
    ])
    .success();
    let r = run.json();
    let pf = metric(&r, "counter.page-faults");
    assert_eq!(pf["source"], "perf-sw");
    assert_eq!(pf["group"], "counters");
    let values = samples(pf);
    assert_eq!(values.len(), 3);
    run.check(
        values.iter().all(|&v| v >= n as f64),
        "a fixture touching N fresh pages takes at least N page faults",
    );
    // And not wildly more: start-up of a small Rust program takes ~100.
    run.check(
        values.iter().all(|&v| v < n as f64 + 1000.0),
        "page faults within N + 1000",
    );
    let minor = samples(metric(&r, "counter.minor-faults"));
    let major = samples(metric(&r, "counter.major-faults"));
    for i in 0..3 {
        assert_eq!(values[i], minor[i] + major[i]);
    }
    // No timing group was asked for: counters alone.
    run.check(
        r["benchmarks"][0]["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["group"] == "counters"),
        "only the counters group ran",
    );
}

#[test]
fn more_pages_more_faults() {
    need_software_counters!();
    let faults = |n: &str| {
        let r = sbs([
            "-r",
            "2",
            "-f",
            "json",
            "--counters",
            "page-faults",
            "--",
            fixture!("pages"),
            n,
        ])
        .success()
        .json();
        metric(&r, "counter.page-faults")["summary"]["mean"]
            .as_f64()
            .unwrap()
    };
    let (small, big) = (faults("100"), faults("3100"));
    assert!(
        big - small >= 3000.0,
        "3000 more pages, {small} -> {big} faults"
    );
}

#[test]
fn a_sleeper_is_switched_out_and_uses_little_cpu() {
    need_software_counters!();
    let run = sbs([
        "--runs",
        "3",
        "--format",
        "json",
        "--counters",
        "context-switches,task-clock,cpu-migrations",
        "--",
        fixture!("sleepy"),
        "5",
        "20",
    ])
    .success();
    let r = run.json();
    let cs = samples(metric(&r, "counter.context-switches"));
    run.check(
        cs.iter().all(|&v| v >= 5.0),
        "five sleeps are at least five context switches",
    );
    let clock = metric(&r, "counter.task-clock");
    assert_eq!(clock["unit"], "seconds");
    let clock = samples(clock);
    run.check(
        // Half the time asleep: start-up on a loaded machine costs a few ms, and the
        // bound must fail only for a clock that counts sleeping time.
        clock.iter().all(|&v| v > 0.0 && v < 0.050),
        "sleeping 100 ms costs well under 100 ms of CPU",
    );
}

#[test]
fn counters_include_threads_and_children() {
    need_software_counters!();
    // All the work happens in spawned threads: the main thread only waits in `join`. The
    // task clock must therefore match the CPU time `wait4` reports for the whole process
    // (all threads), measured in the separate timing group of the same invocation; a
    // counter that saw only the main thread would read about 0. Comparing two thread
    // counts with each other is not a test of this: on a loaded 2-core machine two
    // spinning threads cost more CPU per iteration than one (seen in CI: 1.56x, not 2x).
    let r = sbs([
        "-r",
        "3",
        "-f",
        "json",
        "--time",
        "--counters",
        "task-clock",
        "--",
        fixture!("spin_threads"),
        "2",
        "20000000",
    ])
    .success()
    .json();
    let mean = |name: &str| metric(&r, name)["summary"]["mean"].as_f64().unwrap();
    let clock = mean("counter.task-clock");
    let cpu = mean("time.user") + mean("time.sys");
    assert!(
        cpu > 0.010,
        "the fixture did too little work to compare: {cpu} s"
    );
    assert!(
        (0.6..1.6).contains(&(clock / cpu)),
        "task clock {clock} s is not the process's CPU time {cpu} s: threads not counted"
    );

    // Children: a shell runs two processes that each touch 2000 fresh pages. The shell
    // alone takes a few hundred faults, so a count that missed the children is far below.
    let pages = fixture!("pages");
    let r = sbs([
        "-r",
        "2",
        "-f",
        "json",
        "--counters",
        "page-faults",
        "--",
        "/bin/sh",
        "-c",
        &format!("{pages} 2000 && {pages} 2000"),
    ])
    .success()
    .json();
    let faults = samples(metric(&r, "counter.page-faults"));
    assert!(
        faults.iter().all(|&v| v >= 4000.0),
        "children's page faults not counted: {faults:?}"
    );
}

#[test]
fn hardware_events_are_unsupported_without_pmu_with_reason() {
    need_software_counters!();
    if let Some(reason) = pmu_reason() {
        // No PMU: the list says why, and asking for a hardware event is an error naming it.
        assert!(reason.contains(" no "), "{reason}");
        sbs([
            "--counters",
            "page-faults,cycles",
            "--",
            fixture!("exit_with"),
            "0",
        ])
        .fails_with(2, "counter event `cycles` is not supported on this machine");
        // Best effort: measured what can be, and said what was skipped.
        let run = sbs([
            "-r",
            "2",
            "-f",
            "json",
            "--counters",
            "page-faults,cycles",
            "--counters-best-effort",
            "--",
            fixture!("exit_with"),
            "0",
        ])
        .success();
        let r = run.json();
        assert_eq!(samples(metric(&r, "counter.page-faults")).len(), 2);
        let warnings = r["benchmarks"][0]["warnings"].to_string();
        run.check(
            warnings.contains("`cycles` skipped"),
            "the skipped event is named in the report",
        );
    } else {
        skip!(
            Need::NoPmu,
            "this machine has a PMU; the no-PMU path is covered by unit tests here"
        );
    }
}

#[test]
fn hardware_counters_where_a_pmu_exists() {
    if let Some(reason) = pmu_reason() {
        skip!(Need::Pmu, "no hardware counters here: {reason}");
        return;
    }
    let run = sbs([
        "-r",
        "3",
        "-f",
        "json",
        "--counters",
        "instructions,cycles,branches",
        "--",
        fixture!("work"),
        "1000000",
    ])
    .success();
    let r = run.json();
    let ins = metric(&r, "counter.instructions");
    assert_eq!(ins["source"], "perf-hw");
    run.check(
        samples(ins).iter().all(|&v| v > 1_000_000.0),
        "a million iterations retire more than a million instructions",
    );
    let frac = samples(
        ins["details"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["label"] == "running fraction")
            .expect("running fraction line"),
    );
    run.check(
        frac.iter().all(|&f| f > 0.0 && f <= 1.0),
        "running fraction in (0, 1]",
    );
}

#[test]
fn unknown_event_is_a_clear_error() {
    sbs([
        "--counters",
        "instructons",
        "--",
        fixture!("exit_with"),
        "0",
    ])
    .fails_with(2, "unknown counter event `instructons`");
}

/// `PATH` of the tool's `--clean-env`.
const CLEAN_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Valgrind's own figure for a command: cachegrind's out-file `summary:` line. Run with
/// ASLR off and the environment of `--clean-env` (only PATH): the size of the environment
/// changes the start-up's instruction count. And with `--vgdb=no`, as sbs-profile runs
/// every valgrind: valgrind's default (`--vgdb=yes`) counts about 2,250 instructions more
/// in a Rust program (18,702,565 against 18,700,312 for `work 200000`).
fn valgrind_own_count(args: &[&str]) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("cg.out");
    let run = Command::new("/usr/bin/setarch")
        .env_clear()
        .env("PATH", CLEAN_PATH)
        .args([
            "-R",
            "valgrind",
            "--tool=cachegrind",
            "--cache-sim=no",
            "--branch-sim=no",
            "--vgdb=no",
            "-q",
        ])
        .arg(format!("--cachegrind-out-file={}", out.display()))
        .args(args)
        .output()
        .expect("run valgrind");
    // Its stderr (cache warnings) is shown only when the run failed.
    assert!(
        run.status.success(),
        "valgrind {args:?}: {}\n{}",
        run.status,
        String::from_utf8_lossy(&run.stderr)
    );
    let text = std::fs::read_to_string(&out).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("summary:"))
        .expect("summary line")
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn valgrind_count_equals_valgrinds_own_figure() {
    if !util::valgrind_installed() {
        skip!(
            Need::Valgrind,
            "valgrind is not installed (sudo apt-get install -y valgrind)"
        );
        return;
    }
    let work = fixture!("work");
    let run = sbs([
        "-r",
        "3",
        "-f",
        "json",
        "--instructions",
        "valgrind",
        "--clean-env",
        "--",
        work,
        "200000",
    ])
    .success();
    let r = run.json();
    let m = metric(&r, "counter.instructions");
    assert_eq!(m["source"], "valgrind");
    assert_eq!(m["group"], "valgrind");
    let ours = samples(m);
    run.check(
        ours.iter().all(|&v| v == ours[0]),
        "a deterministic program has the same count every run",
    );
    // The same command under valgrind directly, ASLR off and the same environment.
    let theirs = valgrind_own_count(&[work, "200000"]);
    assert_eq!(
        ours[0], theirs as f64,
        "ours {} vs valgrind's {theirs}",
        ours[0]
    );
}

#[test]
fn valgrind_tells_apart_a_one_percent_work_change_in_three_runs() {
    if !util::valgrind_installed() {
        skip!(
            Need::Valgrind,
            "valgrind is not installed (sudo apt-get install -y valgrind)"
        );
        return;
    }
    let count = |n: &str| {
        let r = sbs([
            "-r",
            "3",
            "-w",
            "0",
            "-f",
            "json",
            "--instructions",
            "valgrind",
            "--",
            fixture!("work"),
            n,
        ])
        .success()
        .json();
        samples(metric(&r, "counter.instructions"))
    };
    let (a, b) = (count("300000"), count("303000"));
    let (a_max, b_min) = (
        a.iter().cloned().fold(f64::MIN, f64::max),
        b.iter().cloned().fold(f64::MAX, f64::min),
    );
    assert!(a_max < b_min, "ranges overlap: {a:?} vs {b:?}");
    let rel = (b_min - a_max) / a_max;
    assert!(rel > 0.009, "1% more iterations, {rel} more instructions");
}

#[test]
fn valgrind_counts_children_and_keeps_the_benchmarks_stderr() {
    if !util::valgrind_installed() {
        skip!(
            Need::Valgrind,
            "valgrind is not installed (sudo apt-get install -y valgrind)"
        );
        return;
    }
    // A shell that runs two children and writes to stderr itself: all three processes
    // are counted, and the benchmark's stderr does not confuse the count.
    let script = "echo '==1== I   refs: 5' >&2; /bin/true; /bin/true";
    let run = sbs([
        "-r",
        "2",
        "-w",
        "0",
        "-f",
        "json",
        "--instructions",
        "valgrind",
        "--show-output",
        "--clean-env",
        "--",
        "/bin/sh",
        "-c",
        script,
    ])
    .success();
    let ours = samples(metric(&run.json(), "counter.instructions"));
    let one_true = valgrind_own_count(&["/bin/true"]) as f64;
    run.check(
        ours.iter().all(|&v| v > 2.0 * one_true),
        "the two children's instructions are included",
    );
    // The fake summary went to the benchmark's own stderr (shown with --show-output),
    // not to the parser, which reads valgrind's log from a private descriptor: had it
    // been parsed, the count would be 5, below the two children's.
    run.check(
        run.stderr().contains("==1== I   refs: 5"),
        "the benchmark's stderr is left to the benchmark",
    );
}

/// Every group runs the argv the user gave (issue 44): under valgrind too, the program
/// sees the argv[0] typed (`sh`), not the path it was found at. A shell writes its own
/// command line to a file in every run of each group.
#[test]
fn valgrind_runs_the_argv_the_user_gave() {
    if !util::valgrind_installed() {
        skip!(
            Need::Valgrind,
            "valgrind is not installed (sudo apt-get install -y valgrind)"
        );
        return;
    }
    let dir = tempfile::tempdir().expect("temporary directory");
    let lines = dir.path().join("cmdlines");
    let script = format!(
        "tr '\\0' ' ' </proc/$$/cmdline >>'{}'; echo >>'{}'",
        lines.display(),
        lines.display()
    );
    sbs([
        "-r",
        "1",
        "-w",
        "0",
        "--time",
        "--instructions",
        "valgrind",
        "--",
        "sh",
        "-c",
        &script,
    ])
    .success();
    let text = std::fs::read_to_string(&lines).expect("the runs wrote their command lines");
    let seen: Vec<&str> = text.lines().collect();
    assert_eq!(seen.len(), 2, "one run per group: {text}");
    for line in &seen {
        assert!(line.starts_with("sh -c "), "{text}");
    }
    assert_eq!(seen[0], seen[1], "{text}");
}

/// `--instructions auto` takes the PMU, then QEMU's plugin, then valgrind, and a warning
/// says which it took and why.
#[test]
fn auto_picks_a_mechanism_and_says_which() {
    if pmu_reason().is_some() && !util::valgrind_installed() {
        skip!(Need::Valgrind, "neither a PMU nor valgrind");
        return;
    }
    let run = sbs([
        "-r",
        "2",
        "-f",
        "json",
        "--instructions",
        "auto",
        "--",
        fixture!("exit_with"),
        "0",
    ])
    .success();
    let r = run.json();
    let source = metric(&r, "counter.instructions")["source"]
        .as_str()
        .unwrap()
        .to_string();
    // The PMU where one exists, then QEMU's plugin where qemu-x86_64 runs, then valgrind.
    let qemu = std::process::Command::new("qemu-x86_64")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let expected = match (pmu_reason().is_some(), qemu) {
        (false, _) => "perf-hw",
        (true, true) => "qemu:",
        (true, false) => "valgrind",
    };
    assert!(
        source.starts_with(expected),
        "{source}, expected {expected}"
    );
    let warnings = r["benchmarks"][0]["warnings"].to_string();
    run.check(
        warnings.contains("--instructions auto"),
        "the choice is reported",
    );
}

#[test]
fn counts_from_different_mechanisms_are_never_compared() {
    if !util::valgrind_installed() {
        skip!(
            Need::Valgrind,
            "valgrind is not installed (sudo apt-get install -y valgrind)"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let hist = dir.path().to_str().unwrap().to_string();
    let run = |extra: &[&str]| {
        let mut args = vec![
            "--history",
            &hist,
            "-r",
            "2",
            "-f",
            "json",
            "--instructions",
            "valgrind",
            "--clean-env",
            "--name",
            "w",
        ];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--", fixture!("work"), "100000"]);
        sbs(args)
    };
    run(&["--save-baseline", "main"]).success();
    // Pretend the baseline was counted by the PMU: same metric id, other source.
    let mut files = Vec::new();
    let mut stack = vec![dir.path().to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "csv") {
                files.push(p);
            }
        }
    }
    assert_eq!(files.len(), 1, "{files:?}");
    let text = std::fs::read_to_string(&files[0]).unwrap();
    assert!(text.contains(",valgrind,"), "{text}");
    std::fs::write(&files[0], text.replace(",valgrind,", ",perf-hw,")).unwrap();

    let again = run(&["--baseline", "main"]).success();
    let r = again.json();
    let m = metric(&r, "counter.instructions");
    again.check(
        m.get("comparison").is_none_or(|c| c.is_null()),
        "not compared",
    );
    let notes = m["notes"].to_string();
    again.check(
        notes.contains(
            "cannot compare counter.instructions measured by perf-hw with \
             counter.instructions measured by valgrind",
        ),
        "the refusal names both mechanisms",
    );
}

/// A copy of the `calls` fixture in `dir` named `name`, owned by uid 65534 (nobody) with
/// `mode` (0o4755: setuid to nobody); `dir` is made reachable for that user.
fn nobodys_calls(dir: &std::path::Path, name: &str, mode: u32) -> String {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let program = dir.join(name);
    std::fs::copy(fixture!("calls"), &program).unwrap();
    std::os::unix::fs::chown(&program, Some(65534), Some(65534)).unwrap();
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(mode)).unwrap();
    program.display().to_string()
}

/// A program setuid to another user: at its exec the kernel ends every perf event of the
/// process, so uprobe counts and counters would read an exact-looking 0 (they did: 0 calls
/// of a function called once, 0 page faults). The run is refused before it starts,
/// naming the options and what to do; timing alone still runs it.
#[test]
fn a_program_setuid_to_another_user_is_refused_where_perf_events_would_read_0() {
    if !util::is_root() {
        skip!(
            Need::Root,
            "making a program setuid to another user needs root"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let program = nobodys_calls(dir.path(), "calls", 0o4755);
    let path = program.as_str();
    for measure in [
        &["--invocations", "calls::work_more"][..],
        &["--counters", "page-faults"][..],
        &["--boxing"][..],
    ] {
        let mut args = vec!["--runs", "1", "--warmup", "0"];
        args.extend_from_slice(measure);
        args.extend_from_slice(&["--", path, "7", "1"]);
        let run = sbs(&args).fails_with(2, "setuid to uid 65534");
        let err = run.stderr();
        assert!(
            err.contains(measure[0]) && err.contains("would read 0") && err.contains("copy"),
            "{err}"
        );
    }
    sbs(["--runs", "1", "--warmup", "0", "--", path, "7", "1"]).success();
}

/// A descendant that execs a program setuid to another user: the kernel ends the perf
/// events of that process there, so the calls it makes and its page faults are not
/// counted. They read less than with the same program without the setuid bit (an
/// exact-looking undercount before); now the report names the program, and the
/// invocation counts are not called exact.
#[test]
fn a_descendant_that_execs_a_setuid_program_is_named_and_its_counts_not_called_exact() {
    if !util::is_root() {
        skip!(
            Need::Root,
            "making a program setuid to another user needs root"
        );
        return;
    }
    if util::skip_without_uprobes("a descendant's setuid exec") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let plain = nobodys_calls(dir.path(), "plain-calls", 0o755);
    let setuid = nobodys_calls(dir.path(), "setuid-calls", 0o4755);
    let run = |program: &str, engine: &str| {
        let script = format!("{program} 7 1 >/dev/null");
        let run = sbs([
            "-r",
            "2",
            "-w",
            "0",
            "-f",
            "json",
            "--invocations",
            "malloc",
            "--invocations-engine",
            engine,
            "--counters",
            "page-faults",
            "--",
            "/bin/sh",
            "-c",
            &script,
        ])
        .success();
        let r = run.json();
        let malloc = metric(&r, "invocations.malloc").clone();
        let faults = util::samples(metric(&r, "counter.page-faults"))[0];
        let warnings = r["benchmarks"][0]["warnings"].to_string();
        (run, malloc, faults, warnings)
    };
    for engine in ["uprobe", "auto"] {
        let (_, plain_malloc, plain_faults, plain_warnings) = run(&plain, engine);
        let (with, malloc, faults, warnings) = run(&setuid, engine);
        // In-process, glibc's malloc is a lower bound anyway: calls made before the
        // counting library starts are not counted.
        assert_eq!(
            plain_malloc["exact"],
            engine == "uprobe",
            "{engine}: {plain_malloc}"
        );
        assert!(
            !plain_warnings.contains("credentials"),
            "{engine}: {plain_warnings}"
        );
        let calls = |m: &serde_json::Value| util::samples(m)[0];
        with.check(
            calls(&malloc) < calls(&plain_malloc) && faults < plain_faults,
            &format!(
                "{engine}: the setuid process is not counted: malloc {} against {}, page \
                 faults {faults} against {plain_faults}",
                calls(&malloc),
                calls(&plain_malloc)
            ),
        );
        with.check(malloc["exact"] == false, &format!("{engine}: {malloc}"));
        with.check(
            warnings.contains("changed its credentials (`setuid-calls`)")
                && warnings.contains("counter.* values")
                && warnings.contains("2 of 2 runs"),
            &format!("{engine}: the program is named: {warnings}"),
        );
    }
}
