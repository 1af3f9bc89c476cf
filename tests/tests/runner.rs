//! The foundation end to end: timing runs of real child processes, failures, controls.

mod util;

use std::time::{Duration, Instant};

use util::{metric, samples, sbs};

#[test]
fn five_runs_give_five_wall_samples_and_a_ci_around_the_mean() {
    let run = sbs([
        "--runs",
        "5",
        "--format",
        "json",
        "--",
        fixture!("exit_with"),
        "0",
    ])
    .success();
    let report = run.json();
    assert_eq!(report["schema_version"], 1);
    let wall = metric(&report, "time.wall");
    let values = samples(wall);
    assert_eq!(values.len(), 5);
    assert!(values.iter().all(|&v| v > 0.0 && v < 5.0), "{values:?}");
    let s = &wall["summary"];
    let mean = s["mean"].as_f64().unwrap();
    let expected_mean = values.iter().sum::<f64>() / 5.0;
    assert!((mean - expected_mean).abs() < 1e-12);
    assert!(s["ci_low"].as_f64().unwrap() <= mean && mean <= s["ci_high"].as_f64().unwrap());
    assert_eq!(s["n"], 5);
    assert_eq!(s["confidence"], 0.95);
    for id in ["time.user", "time.sys", "rss.peak"] {
        assert_eq!(samples(metric(&report, id)).len(), 5, "{id}");
    }
    assert_eq!(wall["unit"], "seconds");
    assert_eq!(wall["source"], "clock");
    assert_eq!(wall["group"], "timing");
}

#[test]
fn cpu_time_of_threads_is_counted() {
    // Two threads spinning: user time adds up over both.
    let run = sbs([
        "--runs",
        "2",
        "--warmup",
        "0",
        "-f",
        "json",
        "--",
        fixture!("spin_threads"),
        "2",
        "30000000",
    ])
    .success();
    let report = run.json();
    let user = metric(&report, "time.user")["summary"]["mean"]
        .as_f64()
        .unwrap();
    let rss = metric(&report, "rss.peak")["summary"]["min"]
        .as_f64()
        .unwrap();
    run.check(
        user > 0.01,
        "user time of spinning threads should be visible",
    );
    run.check(rss > 100_000.0, "peak RSS should be at least 100 kB");
}

#[test]
fn nonzero_exit_fails_with_a_clear_message() {
    sbs(["--runs", "2", "--", fixture!("exit_with"), "3"])
        .fails_with(2, "exited with code 3 in a timing run; use --show-output to see its output, or --ignore-failure");
}

#[test]
fn ignore_failure_keeps_samples() {
    let run = sbs([
        "--runs",
        "3",
        "-i",
        "-f",
        "json",
        "--",
        fixture!("exit_with"),
        "3",
    ])
    .success();
    assert_eq!(samples(metric(&run.json(), "time.wall")).len(), 3);
}

#[test]
fn crash_names_the_signal() {
    sbs(["--runs", "1", "--", fixture!("crash"), "segv"]).fails_with(2, "was killed by SIGSEGV");
    sbs(["--runs", "1", "--", fixture!("crash"), "abort"]).fails_with(2, "was killed by SIGABRT");
}

#[test]
fn timeout_kills_the_whole_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let start = Instant::now();
    sbs([
        "--runs",
        "1",
        "--warmup",
        "0",
        "--timeout",
        "300ms",
        "--",
        fixture!("forever"),
        pidfile.to_str().unwrap(),
    ])
    .fails_with(2, "timed out after 0.300 s");
    assert!(start.elapsed() < Duration::from_secs(10));
    let grandchild: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // The forked grandchild was in the same process group and must be gone (or a zombie
    // about to be reaped by init).
    std::thread::sleep(Duration::from_millis(100));
    let state = std::fs::read_to_string(format!("/proc/{grandchild}/stat")).unwrap_or_default();
    let alive = state
        .split(") ")
        .nth(1)
        .is_some_and(|rest| !rest.starts_with('Z'));
    assert!(
        !alive,
        "grandchild {grandchild} survived the timeout: {state}"
    );
}

#[test]
fn forked_child_is_waited_for() {
    sbs(["--runs", "2", "--", fixture!("fork_child"), "0"]).success();
    sbs(["--runs", "1", "--", fixture!("fork_child"), "4"]).fails_with(2, "exited with code 4");
}

#[test]
fn output_is_discarded_unless_asked() {
    let quiet = sbs(["--runs", "1", "--", fixture!("chatty")]).success();
    assert!(!quiet.stdout().contains("chatty says"));
    assert!(!quiet.stderr().contains("chatty says"));
    let shown = sbs([
        "--runs",
        "1",
        "--warmup",
        "0",
        "--show-output",
        "--",
        fixture!("chatty"),
    ])
    .success();
    assert!(shown.stdout().contains("chatty says hello on stdout"));
    assert!(shown.stderr().contains("chatty says hello on stderr"));
}

fn probe_records(file: &std::path::Path) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(file).unwrap();
    text.split("end\n")
        .filter(|r| !r.trim().is_empty())
        .map(|r| r.lines().map(String::from).collect())
        .collect()
}

fn field<'a>(record: &'a [String], key: &str) -> &'a str {
    record
        .iter()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key} in {record:?}"))
}

#[test]
fn aslr_is_off_by_default_and_can_be_kept() {
    let dir = tempfile::tempdir().unwrap();
    let off = dir.path().join("off");
    sbs([
        "--runs",
        "3",
        "--warmup",
        "0",
        "--",
        fixture!("probe_env"),
        off.to_str().unwrap(),
    ])
    .success();
    let records = probe_records(&off);
    assert_eq!(records.len(), 3);
    let stacks: Vec<&str> = records.iter().map(|r| field(r, "stack")).collect();
    assert!(
        stacks.windows(2).all(|w| w[0] == w[1]),
        "ASLR off: {stacks:?}"
    );
    assert_eq!(field(&records[0], "stdin"), "/dev/null");

    let on = dir.path().join("on");
    sbs([
        "--runs",
        "3",
        "--warmup",
        "0",
        "--aslr",
        "--",
        fixture!("probe_env"),
        on.to_str().unwrap(),
    ])
    .success();
    let records = probe_records(&on);
    let stacks: Vec<&str> = records.iter().map(|r| field(r, "stack")).collect();
    assert!(
        stacks.windows(2).any(|w| w[0] != w[1]),
        "ASLR on: {stacks:?}"
    );
}

#[test]
fn environment_is_controlled() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("env");
    sbs([
        "--runs",
        "1",
        "--warmup",
        "0",
        "--clean-env",
        "--env",
        "SBS_X=1=2",
        "--",
        fixture!("probe_env"),
        f.to_str().unwrap(),
    ])
    .success();
    let rec = &probe_records(&f)[0];
    let env: Vec<&String> = rec.iter().filter(|l| l.starts_with("env.")).collect();
    assert_eq!(env.len(), 2, "clean env has PATH and SBS_X only: {env:?}");
    assert_eq!(field(rec, "env.SBS_X"), "1=2");
    assert!(field(rec, "env.PATH").contains("/usr/bin"));

    let f2 = dir.path().join("env2");
    let run = std::process::Command::new(util::sbs_profile())
        .args([
            "--runs",
            "1",
            "--warmup",
            "0",
            "-e",
            "SBS_Y=y",
            "--",
            fixture!("probe_env"),
            f2.to_str().unwrap(),
        ])
        .env("SBS_INHERITED", "yes")
        .output()
        .unwrap();
    assert!(run.status.success());
    let rec = &probe_records(&f2)[0];
    assert_eq!(field(rec, "env.SBS_INHERITED"), "yes");
    assert_eq!(field(rec, "env.SBS_Y"), "y");
}

/// What the program sees of the allocation agent and of the in-process counting engine:
/// the environment, descriptors and limit on open files of a bare run, plus one variable,
/// `LD_PRELOAD`, naming the run's copy of the library; and the in-memory file mapped
/// (docs/alloc.md and docs/invocations.md, "What the program sees").
#[test]
fn preloaded_libraries_add_only_ld_preload_to_what_the_program_sees() {
    let dir = tempfile::tempdir().unwrap();
    let run = |name: &str, extra: &[&str]| -> Vec<String> {
        let f = dir.path().join(name);
        let mut args = vec!["--runs", "1", "--warmup", "0"];
        args.extend_from_slice(extra);
        args.extend(["--", fixture!("probe_env"), f.to_str().unwrap()]);
        sbs(args).success();
        probe_records(&f).remove(0)
    };
    let bare = run("bare", &[]);
    let alloc = run("alloc", &["--alloc"]);
    let inproc = run(
        "inproc",
        &[
            "--invocations-engine",
            "inproc",
            "--invocations",
            "probe_env::main",
        ],
    );
    // Everything but LD_PRELOAD and the addresses.
    let seen = |rec: &[String]| -> Vec<String> {
        rec.iter()
            .filter(|l| {
                ["env.", "fd.", "nofile=", "memfd="]
                    .iter()
                    .any(|p| l.starts_with(p))
            })
            .filter(|l| !l.starts_with("env.LD_PRELOAD="))
            .cloned()
            .collect()
    };
    let theirs = bare
        .iter()
        .find_map(|l| l.strip_prefix("env.LD_PRELOAD="))
        .map(str::to_string);
    for (rec, what, memfds, library) in [
        (
            &alloc,
            "--alloc",
            ["sbs-alloc-agent", "sbs-alloc-report"],
            "alloc-agent.so",
        ),
        (
            &inproc,
            "inproc",
            ["sbs-inproc", "sbs-inproc-table"],
            "inproc.so",
        ),
    ] {
        // Ours first, then the caller's own, if any.
        let preload = field(rec, "env.LD_PRELOAD");
        let (ours, rest) = preload.split_once(' ').unwrap_or((preload, ""));
        assert_eq!(Some(rest).filter(|r| !r.is_empty()), theirs.as_deref());
        let mut expected = seen(&bare);
        let parts: Vec<&str> = ours.split('/').collect();
        if let ["", "proc", pid, "fd", n] = parts.as_slice() {
            // No directory every user can load from: sbs-profile's descriptor of a memfd.
            assert!(
                pid.parse::<u32>().is_ok() && n.parse::<u32>().is_ok(),
                "{preload}"
            );
            expected.extend(memfds.map(|m| format!("memfd={m} (deleted)")));
        } else {
            // A file every user can load, in a directory of its own, removed after the run.
            let ours = std::path::Path::new(ours);
            assert_eq!(
                ours.file_name().unwrap(),
                library,
                "{what}: LD_PRELOAD={preload}"
            );
            let dir = ours.parent().unwrap();
            assert!(
                dir.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("sbs-profile."),
                "{what}: LD_PRELOAD={preload}"
            );
            assert!(
                !dir.exists(),
                "{what}: {} left after the run",
                dir.display()
            );
            expected.push(format!("memfd={} (deleted)", memfds[1]));
        }
        assert_eq!(seen(rec), expected, "{what}: what the program sees");
    }
}

#[test]
fn a_descendant_run_as_another_user_gets_no_loader_message() {
    if !util::is_root() {
        sbs_skip::skip!(
            sbs_skip::Need::Root,
            "switching a child to `nobody` needs root"
        );
        return;
    }
    if let Err(e) = sbs_probes::execs::check() {
        sbs_skip::skip!(
            sbs_skip::Need::PerfEvents,
            "execs cannot be counted: {e}; {}",
            e.fix()
        );
        return;
    }
    if std::process::Command::new("setpriv")
        .arg("--version")
        .output()
        .is_err()
    {
        sbs_skip::skip!(
            sbs_skip::Need::UtilLinux,
            "`setpriv` (util-linux) is not installed"
        );
        return;
    }
    if !util::shared_dir_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.json");
    let program = [
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "/bin/echo",
        "hi",
    ];
    let bare = std::process::Command::new(program[0])
        .args(&program[1..])
        .output()
        .unwrap();
    assert_eq!(
        (&bare.stdout[..], &bare.stderr[..]),
        (&b"hi\n"[..], &b""[..])
    );
    for mode in [&["--alloc"][..], &["--invocations", "malloc"]] {
        let out = std::process::Command::new(util::sbs_profile())
            .args([
                "--runs",
                "1",
                "--warmup",
                "0",
                "--show-output",
                "-f",
                "json",
                "-o",
            ])
            .arg(&report)
            .args(mode)
            .arg("--")
            .args(program)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{mode:?}: {err}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "hi\n", "{mode:?}");
        assert_eq!(err, "", "{mode:?}: the program's stderr and sbs-profile's");
        let report: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
        let warnings = report["benchmarks"][0]["warnings"].to_string();
        if mode[0] == "--alloc" {
            // setpriv reported; the echo it exec'd as nobody could not, and says so.
            assert_eq!(samples(metric(&report, "alloc.processes")), vec![1.0]);
            assert_eq!(
                samples(metric(&report, "alloc.unmeasured_images")),
                vec![1.0],
                "{warnings}"
            );
            assert_eq!(metric(&report, "alloc.count")["exact"], false);
            assert!(
                warnings.contains("1 exec'd program per run was not measured"),
                "{warnings}"
            );
        } else {
            assert_eq!(metric(&report, "invocations.malloc")["exact"], false);
            assert!(
                warnings.contains("1 of the 2 process images of a run did not load"),
                "{warnings}"
            );
        }
    }
}

/// The run's copy of the preload library (a file every user can read, in a directory of
/// its own) is gone once the run ends, when the run fails, and when sbs-profile is
/// stopped by SIGTERM or Ctrl-C in the middle of a run.
#[test]
fn the_preload_library_s_copy_is_removed_after_the_run_an_error_and_a_signal() {
    if !util::shared_dir_available() {
        return;
    }
    let path = util::preload_path();
    assert!(!path.starts_with("/proc"), "LD_PRELOAD={}", path.display());
    let gone = |p: &std::path::Path| !p.parent().unwrap().exists();
    assert!(gone(&path), "{} left after the run", path.display());
    // A failing run: the program prints its LD_PRELOAD, then fails.
    let failed = std::process::Command::new(util::sbs_profile())
        .args([
            "--runs",
            "1",
            "--warmup",
            "0",
            "--show-output",
            "--alloc",
            "--",
        ])
        .args(["sh", "-c", "echo $LD_PRELOAD; exit 3"])
        .output()
        .unwrap();
    assert_eq!(failed.status.code(), Some(2));
    let stdout = String::from_utf8_lossy(&failed.stdout);
    let copy = std::path::PathBuf::from(stdout.split_whitespace().next().unwrap());
    assert!(
        copy.starts_with(path.parent().unwrap().parent().unwrap()),
        "{stdout}"
    );
    assert!(gone(&copy), "{} left after a failed run", copy.display());
    for (options, signal) in [
        (&["--alloc"][..], libc::SIGTERM),
        (
            &["--invocations-engine", "inproc", "--invocations", "malloc"],
            libc::SIGINT,
        ),
    ] {
        let (collector, child) = collector_running_forever(options);
        let environ = std::fs::read(format!("/proc/{child}/environ")).unwrap();
        let preload = environ
            .split(|&b| b == 0)
            .find_map(|v| v.strip_prefix(b"LD_PRELOAD="))
            .map(|v| std::path::PathBuf::from(String::from_utf8_lossy(v).into_owned()))
            .expect("LD_PRELOAD in the child's environment");
        let meta = std::fs::metadata(&preload).unwrap();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o7777,
            0o444
        );
        // SAFETY: plain kill(2) on the pid of our own child, not yet reaped.
        let sent = unsafe { libc::kill(collector.id() as libc::pid_t, signal) };
        assert_eq!(sent, 0);
        let out = collector.wait_with_output().unwrap();
        let child_gone = gone_within(child, Duration::from_secs(1));
        assert_eq!(out.status.code(), Some(130), "{options:?}");
        assert!(child_gone, "{options:?}");
        assert!(
            gone(&preload),
            "{options:?}: {} left after signal {signal}",
            preload.display()
        );
    }
}

#[test]
fn pinning_restricts_cpus() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("cpus");
    sbs([
        "--runs",
        "1",
        "--warmup",
        "0",
        "--pin",
        "0",
        "--",
        fixture!("probe_env"),
        f.to_str().unwrap(),
    ])
    .success();
    assert_eq!(field(&probe_records(&f)[0], "cpus"), "0");
    sbs(["--pin", "4096", "--", fixture!("exit_with")]).fails_with(2, "--pin 4096: no such CPU");
}

#[test]
fn bad_commands_get_one_line_errors() {
    sbs(["--", "/nonexistent/program"]).fails_with(2, "'/nonexistent/program' does not exist");
    sbs(["--", "no-such-command-anywhere"]).fails_with(2, "not an executable in PATH");
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script.sh");
    std::fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
    sbs(["--", script.to_str().unwrap()])
        .fails_with(2, "is not executable (mode 644); run `chmod +x");
    sbs(["--", dir.path().to_str().unwrap()]).fails_with(2, "is a directory");
    // A file with the x bit that is neither ELF nor a script: execve itself fails.
    let junk = dir.path().join("junk");
    std::fs::write(&junk, [0u8, 1, 2, 3]).unwrap();
    std::fs::set_permissions(&junk, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let junk_run =
        sbs(["--runs", "1", "--", junk.to_str().unwrap()]).fails_with(2, "cannot execute");
    assert_eq!(
        junk_run.stderr().matches("Exec format error").count(),
        1,
        "the cause is printed once: {}",
        junk_run.stderr()
    );
    sbs(["--runs", "1"]).fails_with(2, "no command given");
}

#[test]
fn shebang_scripts_run() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("ok.sh");
    std::fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    sbs(["--runs", "2", "--", script.to_str().unwrap()]).success();
}

#[test]
fn output_file_is_written_atomically() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("report.csv");
    sbs([
        "--runs",
        "2",
        "-f",
        "csv",
        "-o",
        out.to_str().unwrap(),
        "--",
        fixture!("exit_with"),
    ])
    .success();
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.starts_with("benchmark,metric,unit,source,group,n,mean,sd,cov,median,min,max,ci_low,ci_high,confidence,reference,change,change_low,change_high,p_value,method,threshold,verdict,notes,bound,range_low,range_high,range_sites,range_unbounded_sites\n"));
    assert!(text.contains(",time.wall,s,clock,timing,2,"));
    // A failing run leaves neither the report nor a temporary file.
    let failed = dir.path().join("failed.json");
    sbs([
        "--runs",
        "1",
        "-f",
        "json",
        "-o",
        failed.to_str().unwrap(),
        "--",
        fixture!("exit_with"),
        "1",
    ])
    .fails_with(2, "exited with code 1");
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("report.csv")]);
}

/// A report written over an existing file keeps that file's mode and owner, as `>`
/// would: the replacement used to be a fresh 0644 file of the collector's user, which
/// opened a private report to everyone and took a shared one from its owner.
#[test]
fn a_replaced_report_keeps_the_mode_and_owner_of_the_file_it_replaces() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("private.json");
    std::fs::write(&out, "old").unwrap();
    std::fs::set_permissions(&out, PermissionsExt::from_mode(0o600)).unwrap();
    // As root, also a file of another user (nobody, 65534).
    let me = std::fs::metadata("/proc/self").unwrap().uid();
    let owner = if me == 0 { 65534 } else { me };
    std::os::unix::fs::chown(&out, Some(owner), Some(owner)).unwrap();
    let out_arg = out.to_str().unwrap();
    sbs([
        "--runs",
        "1",
        "-f",
        "json",
        "-o",
        out_arg,
        "--",
        fixture!("exit_with"),
    ])
    .success();
    let meta = std::fs::metadata(&out).unwrap();
    assert!(
        std::fs::read_to_string(&out).unwrap().starts_with('{'),
        "the report was written"
    );
    assert_eq!(meta.mode() & 0o7777, 0o600);
    assert_eq!((meta.uid(), meta.gid()), (owner, owner));
}

#[test]
fn output_and_html_on_the_same_file_are_refused_before_any_run() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    let plain = dir.path().join("report.html");
    let other_spelling = dir.path().join("sub/../report.html");
    for (output, html) in [(&plain, &plain), (&plain, &other_spelling)] {
        // `exit_with 1` would fail its run with another message: the check comes first.
        sbs([
            "--runs",
            "1",
            "-o",
            output.to_str().unwrap(),
            "--html",
            html.to_str().unwrap(),
            "--",
            fixture!("exit_with"),
            "1",
        ])
        .fails_with(2, "are the same file; give each report its own path");
    }
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, vec![std::ffi::OsString::from("sub")]);
}

/// Start `sbs-profile ARGS -- forever` and return it with the pid of its running child.
fn collector_running_forever(args: &[&str]) -> (std::process::Child, u32) {
    let collector = std::process::Command::new(util::sbs_profile())
        .args(["--warmup", "0", "--runs", "1"])
        .args(args)
        .args(["--", fixture!("forever")])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn sbs-profile");
    let child = util::wait_for_child_running(collector.id(), fixture!("forever"));
    (collector, child)
}

/// Wait up to `limit` for `pid` to go; kill it if it did not, so that no test leaves a
/// `forever` running, and say whether it went by itself.
fn gone_within(pid: u32, limit: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if util::is_gone(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    // SAFETY: plain kill(2) on a pid this test saw as a child of its sbs-profile.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    false
}

#[test]
fn a_killed_collector_takes_its_child_along() {
    // A timing run (the vfork start) and a pinned one (the fork start).
    for args in [&[][..], &["--pin", "0"][..]] {
        let (mut collector, child) = collector_running_forever(args);
        collector.kill().expect("SIGKILL sbs-profile");
        collector.wait().unwrap();
        assert!(
            gone_within(child, Duration::from_secs(1)),
            "the child {child} of a SIGKILLed sbs-profile {args:?} still runs after 1 s"
        );
    }
}

/// After a SIGKILL of the collector, what the benchmark started in its process group dies
/// too, not only the benchmark: the launcher sees the collector's socket close and kills
/// the group (a death signal reaches one process only).
#[test]
fn a_killed_collector_takes_the_benchmark_s_process_group_along() {
    let script = "sleep 30101 & exec sleep 30102";
    let mut collector = std::process::Command::new(util::sbs_profile())
        .args([
            "--warmup", "0", "--runs", "1", "--", "/bin/sh", "-c", script,
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn sbs-profile");
    let started = Instant::now();
    while processes_running(&["sleep", "30101"]).is_empty()
        || processes_running(&["sleep", "30102"]).is_empty()
    {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the script never started"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    collector.kill().expect("SIGKILL sbs-profile");
    collector.wait().unwrap();
    let killed = Instant::now();
    loop {
        let left: Vec<_> = ["30101", "30102"]
            .into_iter()
            .filter(|n| !processes_running(&["sleep", n]).is_empty())
            .collect();
        if left.is_empty() {
            break;
        }
        if killed.elapsed() > Duration::from_secs(2) {
            for n in ["30101", "30102"] {
                for pid in processes_running(&["sleep", n]) {
                    let _ = std::process::Command::new("kill")
                        .args(["-9", &pid.to_string()])
                        .status();
                }
            }
            panic!("sleep {left:?} of a SIGKILLed sbs-profile still ran 2 s later");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn hangup_and_quit_stop_a_run_like_ctrl_c() {
    for signal in [libc::SIGHUP, libc::SIGQUIT] {
        let (collector, child) = collector_running_forever(&[]);
        // SAFETY: plain kill(2) on the pid of our own child, not yet reaped.
        let sent = unsafe { libc::kill(collector.id() as libc::pid_t, signal) };
        assert_eq!(sent, 0);
        let out = collector.wait_with_output().unwrap();
        // First, so that a failure leaves no `forever` behind.
        let child_gone = gone_within(child, Duration::from_secs(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(130), "signal {signal}: {err}");
        assert!(err.contains("interrupted"), "signal {signal}: {err}");
        assert!(
            child_gone,
            "signal {signal}: the child {child} outlived sbs-profile"
        );
    }
}

/// Pids of live processes whose command line is exactly `argv`.
fn processes_running(argv: &[&str]) -> Vec<i32> {
    let wanted: Vec<u8> = argv
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let zombie = state
                .rsplit(") ")
                .next()
                .is_some_and(|s| s.starts_with('Z'));
            !zombie && std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == wanted)
        })
        .collect()
}

#[test]
fn a_daemon_that_leaves_the_process_group_is_killed_and_reported() {
    // `setsid` puts the sleeper in a session of its own, out of reach of the kill of the
    // benchmark's process group: it used to outlive the run silently.
    let daemon = ["sleep", "4242.25"];
    let script = format!("setsid {} {} & exit 0", daemon[0], daemon[1]);
    let run = sbs([
        "--runs", "2", "--warmup", "0", "--format", "json", "--", "/bin/sh", "-c", &script,
    ])
    .success();
    let warnings = run.json()["benchmarks"][0]["warnings"].to_string();
    run.check(
        warnings.contains("2 process(es) started by the timing runs outlived the benchmark"),
        "the report says a daemon was left behind, and killed",
    );
    let left = processes_running(&daemon);
    assert!(left.is_empty(), "the daemon still runs: {left:?}");
}

#[test]
fn one_run_writes_every_export_from_the_same_measurements() {
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let run = sbs([
        "--runs",
        "3",
        "--warmup",
        "0",
        "--time",
        "--alloc",
        "-f",
        "json",
        "--export-json",
        &file("r.json"),
        "--export-csv",
        &file("r.csv"),
        "--export-markdown",
        &file("r.md"),
        "--export-bmf",
        &file("r.bmf.json"),
        "--html",
        &file("r.html"),
        "--",
        fixture!("allocate"),
        "100",
        "1024",
    ])
    .success();
    // stdout and the JSON export are one rendering of one report.
    let exported = std::fs::read_to_string(file("r.json")).unwrap();
    assert_eq!(run.stdout(), exported);
    let report = run.json();
    let wall = util::metric(&report, "time.wall")["summary"]["mean"]
        .as_f64()
        .unwrap();
    let count = util::metric(&report, "alloc.count")["summary"]["mean"]
        .as_f64()
        .unwrap();

    // time.wall varies from run to run: equal means show the files share the measurements.
    let mut csv = csv::Reader::from_path(file("r.csv")).unwrap();
    let headers = csv.headers().unwrap().clone();
    let col = |name: &str| headers.iter().position(|h| h == name).unwrap();
    let mut csv_wall = None;
    for row in csv.records() {
        let row = row.unwrap();
        if &row[col("metric")] == "time.wall" {
            csv_wall = Some(row[col("mean")].parse::<f64>().unwrap());
        }
    }
    assert_eq!(csv_wall, Some(wall));

    let bmf: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(file("r.bmf.json")).unwrap()).unwrap();
    let bench = bmf.as_object().unwrap().values().next().unwrap();
    assert_eq!(bench["alloc.count"]["value"].as_f64(), Some(count));
    // BMF carries wall time as `latency`, in nanoseconds.
    let bmf_wall = bench["latency"]["value"].as_f64().unwrap();
    assert!((bmf_wall - wall * 1e9).abs() < 1.0, "{bmf_wall} vs {wall}");

    let md = std::fs::read_to_string(file("r.md")).unwrap();
    assert!(md.contains("alloc.count"), "{md}");
    let html = std::fs::read_to_string(file("r.html")).unwrap();
    assert!(html.contains("alloc.count"));
}

#[test]
fn two_exports_on_the_same_file_are_refused_before_any_run() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.out");
    let path = path.to_str().unwrap();
    let run = sbs([
        "--runs",
        "1",
        "--export-csv",
        path,
        "--export-json",
        path,
        "--",
        fixture!("exit_with"),
        "1",
    ])
    .fails_with(2, "are the same file; give each report its own path");
    assert!(run.stderr().contains("--export-json") && run.stderr().contains("--export-csv"));
    assert!(!dir.path().join("r.out").exists());
}

/// `path` as a C string for a system call.
fn c_path(path: &std::path::Path) -> std::ffi::CString {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(path.as_os_str().as_bytes()).expect("no NUL in a temporary path")
}

#[test]
fn reports_write_through_devices_fifos_and_symlinks_and_leave_each_what_it_was() {
    use std::os::unix::fs::FileTypeExt;
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str| dir.path().join(name);
    // As root, a null device of our own (1,3 is the number of /dev/null): were it replaced
    // by a regular file, nothing else on the machine would notice.
    let device = if util::is_root() {
        let device = file("null");
        // SAFETY: mknod(2) with a NUL-terminated path that outlives the call.
        let made = unsafe {
            libc::mknod(
                c_path(&device).as_ptr(),
                libc::S_IFCHR | 0o666,
                libc::makedev(1, 3),
            )
        };
        assert_eq!(made, 0, "mknod: {}", std::io::Error::last_os_error());
        device
    } else {
        std::path::PathBuf::from("/dev/null")
    };
    let fifo = file("fifo");
    // SAFETY: mkfifo(3) with a NUL-terminated path that outlives the call.
    let made = unsafe { libc::mkfifo(c_path(&fifo).as_ptr(), 0o644) };
    assert_eq!(made, 0, "mkfifo: {}", std::io::Error::last_os_error());
    // The FIFO's reader waits in open(2) for a writer and sends back all it read. A report
    // renamed over the FIFO would leave it waiting forever: the test gives up after 60 s.
    let (sent, received) = std::sync::mpsc::channel();
    let reader_path = fifo.clone();
    std::thread::spawn(move || {
        let _ = sent.send(std::fs::read(&reader_path).map_err(|e| e.to_string()));
    });
    // A relative link to an existing file, an absolute one to a name not taken yet.
    std::fs::write(file("old.csv"), "old").unwrap();
    std::os::unix::fs::symlink("old.csv", file("link.csv")).unwrap();
    std::os::unix::fs::symlink(file("new.html"), file("dangling.html")).unwrap();
    let path = |p: &std::path::Path| p.to_str().unwrap().to_string();
    sbs([
        "--runs".to_string(),
        "1".into(),
        "--warmup".into(),
        "0".into(),
        "-f".into(),
        "json".into(),
        "-o".into(),
        path(&device),
        "--export-json".into(),
        path(&fifo),
        "--export-csv".into(),
        path(&file("link.csv")),
        "--html".into(),
        path(&file("dangling.html")),
        "--".into(),
        fixture!("exit_with").into(),
    ])
    .success();

    let kind = |p: &std::path::Path| std::fs::symlink_metadata(p).unwrap().file_type();
    assert!(
        kind(&device).is_char_device(),
        "{} is no longer a character device",
        device.display()
    );
    assert!(
        kind(&file("link.csv")).is_symlink(),
        "the link was replaced"
    );
    assert_eq!(
        std::fs::read_link(file("link.csv")).unwrap(),
        std::path::Path::new("old.csv")
    );
    let csv = std::fs::read_to_string(file("old.csv")).unwrap();
    assert!(csv.starts_with("benchmark,metric,"), "{csv}");
    assert!(kind(&file("dangling.html")).is_symlink());
    let html = std::fs::read_to_string(file("new.html")).unwrap();
    assert!(html.contains("<html"), "{html}");
    let read = received
        .recv_timeout(Duration::from_secs(60))
        .expect("the FIFO's reader got no writer within 60 s")
        .expect("read the FIFO");
    let json: serde_json::Value = serde_json::from_slice(&read).expect("the FIFO got the JSON");
    assert!(json["benchmarks"][0]["metrics"].is_array(), "{json}");
    assert!(kind(&fifo).is_fifo(), "the FIFO was replaced");
    // Nothing else was left behind (no temporary file).
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut expected = vec!["dangling.html", "fifo", "link.csv", "new.html", "old.csv"];
    if util::is_root() {
        expected.insert(1, "null");
    }
    expected.sort();
    assert_eq!(names, expected);
}

#[test]
fn setup_prepare_and_cleanup_run_around_the_runs_of_every_group() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let log = log.to_str().unwrap();
    let append = |what: &str| format!("printf {what} >> {log}");
    sbs([
        "--runs",
        "2",
        "--warmup",
        "1",
        "--time",
        "--alloc",
        "--setup",
        &append("S"),
        "--prepare",
        &append("P"),
        "--cleanup",
        &append("C"),
        "--shell",
        "sh",
        &append("R"),
    ])
    .success();
    // Two groups (timing, allocations) of 1 warm-up + 2 measured runs each.
    assert_eq!(std::fs::read_to_string(log).unwrap(), "SPRPRPRPRPRPRC");

    // A failing run still gets its cleanup; a failing prepare stops before its run.
    std::fs::remove_file(log).unwrap();
    sbs([
        "--runs",
        "2",
        "--cleanup",
        &append("C"),
        "--shell",
        "sh",
        &format!("{}; exit 3", append("R")),
    ])
    .fails_with(2, "exited with code 3");
    assert_eq!(std::fs::read_to_string(log).unwrap(), "RC");
    std::fs::remove_file(log).unwrap();
    sbs([
        "--runs",
        "2",
        "--prepare",
        "echo cannot reset >&2; exit 4",
        "--cleanup",
        &append("C"),
        "--",
        fixture!("exit_with"),
        "0",
    ])
    .fails_with(
        2,
        "--prepare command `echo cannot reset >&2; exit 4` exited with code 4 (its last words: cannot reset)",
    );
    assert_eq!(std::fs::read_to_string(log).unwrap(), "C");
}

#[test]
fn input_feeds_every_run_from_the_start_of_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.txt");
    std::fs::write(&input, "hello\n").unwrap();
    // `read` fails at the end of the file: every run must see the file from its start.
    sbs([
        "--runs",
        "3",
        "--warmup",
        "1",
        "--input",
        input.to_str().unwrap(),
        "--shell",
        "sh",
        "read x && test \"$x\" = hello",
    ])
    .success();
    // Without --input, stdin is /dev/null and the same command fails.
    sbs([
        "--runs",
        "1",
        "--shell",
        "sh",
        "read x && test \"$x\" = hello",
    ])
    .fails_with(2, "exited with code 1");
    sbs([
        "--runs",
        "1",
        "--input",
        dir.path().join("missing").to_str().unwrap(),
        "--",
        fixture!("exit_with"),
        "0",
    ])
    .fails_with(2, "--input");
}

#[test]
fn a_failed_setup_still_gets_its_cleanup() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let log = log.to_str().unwrap();
    // The setup began (and may have made what the cleanup removes) before it failed.
    sbs([
        "--runs",
        "1",
        "--setup",
        &format!("printf S >> {log}; exit 5"),
        "--cleanup",
        &format!("printf C >> {log}"),
        "--",
        fixture!("exit_with"),
        "0",
    ])
    .fails_with(2, "--setup command `printf S");
    assert_eq!(std::fs::read_to_string(log).unwrap(), "SC");
}

/// Wait up to `limit` for `child` to end; kill it and panic if it does not.
fn ends_within(
    mut child: std::process::Child,
    limit: Duration,
    what: &str,
) -> std::process::Output {
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: sbs-profile still ran after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().unwrap()
}

/// `--input` on a FIFO waits for its writer within the run's `--timeout`, and Ctrl-C
/// stops the wait: opening a FIFO for reading blocks until a writer comes, and the
/// collector opened it so before the run, where neither applied (it hung for good).
#[test]
fn input_from_a_fifo_waits_for_its_writer_within_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    // SAFETY: mkfifo(3) with a NUL-terminated path that outlives the call.
    let made = unsafe { libc::mkfifo(c_path(&fifo).as_ptr(), 0o600) };
    assert_eq!(made, 0, "mkfifo: {}", std::io::Error::last_os_error());
    let fifo = fifo.to_str().unwrap();
    let collector = |extra: &[&str]| {
        std::process::Command::new(util::sbs_profile())
            .args(["--runs", "1", "--warmup", "0", "--input", fifo])
            .args(extra)
            .args(["--", "/bin/cat"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn sbs-profile")
    };

    // No writer: the run ends at its timeout, with the usual error.
    let start = Instant::now();
    let out = ends_within(
        collector(&["--timeout", "1"]),
        Duration::from_secs(20),
        "a FIFO without a writer",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("timed out after 1.000 s (--timeout)"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(start.elapsed() >= Duration::from_secs(1));

    // No writer and no timeout: Ctrl-C ends the wait like a run.
    let child = collector(&[]);
    // The run has begun (signals are caught from then on) once the launcher's run parent
    // has started the benchmark's process, which waits at its latch.
    let begun = Instant::now();
    while util::descendants(child.id()).len() < 3 {
        assert!(
            begun.elapsed() < Duration::from_secs(20),
            "the run never began"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // SAFETY: plain kill(2) on the pid of our own child, not yet reaped.
    let sent = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    assert_eq!(sent, 0);
    let out = ends_within(child, Duration::from_secs(20), "Ctrl-C on a FIFO wait");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");

    // A writer that comes late is waited for, and the run reads what it wrote.
    let writer = {
        let fifo = fifo.to_string();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            std::fs::write(&fifo, "hello\n").expect("write the FIFO");
        })
    };
    sbs([
        "--runs",
        "1",
        "--warmup",
        "0",
        "--timeout",
        "20",
        "--input",
        fifo,
        "--shell",
        "sh",
        "read x && test \"$x\" = hello",
    ])
    .success();
    writer.join().unwrap();
}

#[test]
fn a_whole_command_line_in_one_argument_gets_a_fix_that_works() {
    sbs(["sleep 0.01"]).fails_with(
        2,
        "'sleep 0.01' is one argument; give the command's words after `--` (sbs-profile -- sleep 0.01), or run the line through a shell with --shell sh",
    );
    let run = sbs([
        "--runs",
        "2",
        "-f",
        "json",
        "--shell",
        "sh",
        "sleep 0.01 | cat",
    ])
    .success();
    let wall = util::samples(util::metric(&run.json(), "time.wall"));
    assert!(wall.iter().all(|w| *w >= 0.01), "{wall:?}");
    sbs(["--shell", "sh", "--invocations", "main", "true"])
        .fails_with(2, "would probe the shell, not your program");
}

#[test]
fn target_ci_runs_until_the_timing_interval_is_narrow_or_says_it_is_not() {
    let run = sbs([
        "--target-ci",
        "20",
        "-m",
        "3",
        "-M",
        "40",
        "-f",
        "json",
        "--",
        fixture!("exit_with"),
        "0",
    ])
    .success();
    let report = run.json();
    let wall = util::metric(&report, "time.wall");
    let n = wall["summary"]["n"].as_u64().unwrap();
    assert!((3..=40).contains(&n), "{n} runs");
    let s = &wall["summary"];
    let mean = s["mean"].as_f64().unwrap();
    let half = s["ci_high"].as_f64().unwrap() - mean;
    let warned = report["benchmarks"][0]["warnings"]
        .to_string()
        .contains("--target-ci 20.00% not reached");
    // Either the interval got within ±20% before the maximum, or the report says it did not.
    assert!(
        half / mean <= 0.2 || (n == 40 && warned),
        "n={n} ±{:.3} warned={warned}",
        half / mean
    );
    sbs([
        "--target-ci",
        "5",
        "-m",
        "10",
        "-M",
        "5",
        "--",
        fixture!("exit_with"),
        "0",
    ])
    .fails_with(2, "--max-runs 5 is below --min-runs/--runs 10");
    let without = sbs(["-M", "5", "--", fixture!("exit_with"), "0"]);
    assert_eq!(without.code(), Some(2));
    assert!(
        without.stderr().contains("--target-ci"),
        "{}",
        without.stderr()
    );
}

/// The report's conditions say the runs made: after `--target-ci` added runs to the
/// timing group, its count and the other group's, in every format. They said the runs
/// asked for (`--runs`) whatever --target-ci did.
#[test]
fn target_ci_reports_the_runs_it_made() {
    // A target no run reaches: the timing group goes to --max-runs, the allocation group
    // (no timing metric) stays at --runs.
    let args = |format: &str| {
        sbs([
            "--target-ci",
            "0.0001",
            "--runs",
            "3",
            "--max-runs",
            "12",
            "--warmup",
            "0",
            "--time",
            "--alloc",
            "-f",
            format,
            "--",
            fixture!("exit_with"),
            "0",
        ])
        .success()
    };
    let run = args("json");
    let report = run.json();
    assert_eq!(util::samples(util::metric(&report, "time.wall")).len(), 12);
    assert_eq!(util::samples(util::metric(&report, "alloc.count")).len(), 3);
    let c = &report["conditions"];
    assert_eq!(c["runs"], 12, "{c}");
    assert_eq!(
        c["group_runs"],
        serde_json::json!([{"group": "timing", "runs": 12}, {"group": "alloc", "runs": 3}]),
        "{c}"
    );
    let text = args("text").stdout();
    assert!(
        text.contains("\n12 timing runs, 3 alloc runs + 0 warm-up per group"),
        "{text}"
    );
    let markdown = args("markdown").stdout();
    assert!(
        markdown.contains("12 timing runs, 3 alloc runs,"),
        "{markdown}"
    );
    // Groups that made the same runs: the usual line.
    let same = sbs([
        "--runs",
        "3",
        "--warmup",
        "0",
        "--",
        fixture!("exit_with"),
        "0",
    ])
    .success();
    assert!(
        same.stdout().contains("\n3 runs + 0 warm-up per group"),
        "{}",
        same.stdout()
    );
}

/// `/usr/bin/time -v`'s "Maximum resident set size", in bytes, of one run of `argv`, with
/// address-space randomisation off as sbs-profile runs its children by default: with it
/// on, the same program's peak moves by the file pages fault-around maps next to each
/// mapping's randomised start (`exit_with 0`: 1,740 to 1,900 KiB over five runs of GNU
/// time; 1,820 KiB every time with it off, which is what sbs-profile reads).
fn gnu_time_max_rss(argv: &[&str]) -> Option<f64> {
    let out = std::process::Command::new("/usr/bin/setarch")
        .args(["-R", "/usr/bin/time", "-v"])
        .args(argv)
        .output()
        .ok()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stderr.lines().find_map(|l| {
        l.trim()
            .strip_prefix("Maximum resident set size (kbytes): ")
    })?;
    Some(line.trim().parse::<f64>().ok()? * 1024.0)
}

/// `rss.peak` is the benchmark's own peak resident set, equal to `/usr/bin/time -v`'s to
/// within a few pages, for a small program and a 40 MiB one, in the timing group and in
/// the memory group alike, also when the collector itself holds 100 MiB before the run
/// (`tests/fixtures/c/ballast.c`, preloaded into sbs-profile). (Children used to be
/// started as copies of the collector, whose resident set then became theirs: 5 MiB for
/// `/bin/true`, 105 MiB for `exit_with` beside the ballast.)
#[test]
fn rss_peak_equals_gnu_time_s_maximum_resident_set() {
    if gnu_time_max_rss(&["/bin/true"]).is_none() {
        sbs_skip::skip!(
            sbs_skip::Need::GnuTime,
            "/usr/bin/time -v does not run here (apt-get install time)"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ballast = dir.path().join("ballast.so");
    let source = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/c/ballast.c");
    let built = sbs_skip::build!(
        sbs_skip::Need::Gcc,
        std::process::Command::new("gcc")
            .args(["-O2", "-Wall", "-shared", "-fPIC", "-o"])
            .arg(&ballast)
            .arg(source)
    );
    if built.is_none() {
        return;
    }
    let held: [(&str, &std::ffi::OsStr); 2] = [
        ("LD_PRELOAD", ballast.as_os_str()),
        ("SBS_BALLAST_MB", "100".as_ref()),
    ];
    let pages_40_mib = (40 << 20) / 4096;
    let pages_arg = pages_40_mib.to_string();
    let programs: [Vec<&str>; 2] = [
        vec![fixture!("exit_with"), "0"],
        vec![fixture!("pages"), &pages_arg],
    ];
    for argv in &programs {
        // The oracle's own floor (GNU time's copied pages) is about 0.4 MiB; both
        // programs are above it. The same program's peak varies between runs by the
        // file pages the kernel maps around each fault (fault-around, which follows the
        // page cache): GNU time's own three runs of the 40 MiB one spread 72 KiB on a
        // loaded machine, and with ASLR off both ways one run still read 80 KiB apart
        // while other builds ran. So: 48 pages, or 0.5% of a large peak (a copy of a
        // 5 MiB collector, let alone 100 MB, is far outside either).
        let oracle: Vec<f64> = (0..3).map(|_| gnu_time_max_rss(argv).unwrap()).collect();
        let lo = oracle.iter().cloned().fold(f64::INFINITY, f64::min);
        let hi = oracle.iter().cloned().fold(0.0, f64::max);
        let slack = (48.0 * 4096.0f64).max(hi * 0.005);
        let (lo, hi) = (lo - slack, hi + slack);
        for (group, env) in [
            (&["--time"][..], &[][..]),
            (&["--memory"][..], &[][..]),
            (&["--time"][..], &held[..]),
        ] {
            let mut args = vec!["--runs", "3", "--format", "json"];
            args.extend_from_slice(group);
            args.push("--");
            args.extend_from_slice(argv);
            let report = util::sbs_env(&args, env).success().json();
            let ours = samples(metric(&report, "rss.peak"));
            assert!(
                ours.iter().all(|&v| v >= lo && v <= hi),
                "{argv:?} {group:?} {env:?}: rss.peak {ours:?} bytes, /usr/bin/time -v {oracle:?}"
            );
        }
    }
}

/// Ctrl-C during a run: the benchmark's `--cleanup` still runs, and when it succeeds it is
/// no warning (it used to print "cleaning up after ...: interrupted" for a cleanup that
/// had done its work).
#[test]
fn a_cleanup_that_runs_after_ctrl_c_is_no_warning() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("cleaned");
    let cleanup = format!("touch {}", marker.display());
    let child = std::process::Command::new(util::sbs_profile())
        .args(["--warmup", "0", "--runs", "1", "--cleanup", &cleanup, "--"])
        .arg(fixture!("forever"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn sbs-profile");
    util::wait_for_child_running(child.id(), fixture!("forever"));
    // SAFETY: plain kill(2) on the pid of our own child, not yet reaped.
    let sent = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    assert_eq!(sent, 0);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(marker.exists(), "the cleanup did not run: {err}");
    assert!(!err.contains("cleaning up"), "{err}");
}

/// Under a low limit of open files (`ulimit -n 64`) every run still starts: the launcher's
/// descriptors and the run's report pipe and latch take low numbers, or numbers the
/// benchmark's process allows itself (an earlier launcher put them at 1011-1013, and no
/// run could start).
#[test]
fn runs_start_under_a_low_limit_of_open_files() {
    let sbs = util::sbs_profile();
    for extra in ["", "--pin 0", "--alloc", "--counters task-clock"] {
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "ulimit -n 64 && exec \"$0\" --runs 2 --warmup 0 {extra} -- \"$1\" 0"
            ))
            .arg(&sbs)
            .arg(fixture!("exit_with"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "with {extra:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Every report says what the machine was like while the runs ran (JSON
/// `conditions.machine`): its CPUs, the load average, the share of the CPUs' time other
/// processes took and the busiest of them, a virtual machine; the text footer names a busy
/// one. A neighbour spinning on enough CPUs to take a third of the machine is named with
/// its pid (issue 33 item 4).
#[test]
fn the_report_says_what_else_the_machine_ran() {
    // The machine's CPUs, as the kernel lists them (the test's own affinity or quota may
    // allow fewer).
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpus = cpuinfo
        .lines()
        .filter(|l| l.starts_with("processor"))
        .count()
        .max(1);
    let usable = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = usable.div_ceil(3).to_string();
    let mut neighbour = std::process::Command::new(fixture!("spin_threads"))
        .args([threads.as_str(), "100000000000000"])
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let spun_before = cpu_ticks(neighbour.id());
    let started = std::time::Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let export = dir.path().join("r.json");
    let export_arg = export.to_str().unwrap();
    let text = sbs([
        "--runs",
        "10",
        "--export-json",
        export_arg,
        "--",
        fixture!("work"),
        "2000000",
    ])
    .success()
    .stdout();
    // The neighbour's own share of one CPU over (a little more than) the runs.
    let spun = (cpu_ticks(neighbour.id()) - spun_before) as f64
        / ticks_per_second()
        / started.elapsed().as_secs_f64();
    let _ = neighbour.kill();
    let _ = neighbour.wait();
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&export).unwrap()).unwrap();
    let m = &json["conditions"]["machine"];
    assert_eq!(m["cpus"].as_u64(), Some(cpus as u64), "{m:#}");
    // The neighbour spins on at least one CPU: at least a fifth of one CPU's time, even
    // on a loaded machine, and named with its pid.
    let others = m["others"].as_f64().unwrap_or(-1.0);
    assert!(others * cpus as f64 >= 0.2 && others <= 1.0, "{m:#}");
    // It is named among the three busiest, unless three others each took at least about
    // as much (a machine building in parallel runs several compilers at once).
    let named = format!("spin_threads ({})", neighbour.id());
    let listed: Vec<f64> = m["busy"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|b| {
            b.as_str()?
                .rsplit(' ')
                .next()?
                .strip_suffix('%')?
                .parse()
                .ok()
        })
        .collect();
    assert!(
        m["busy"].to_string().contains(&named)
            || (listed.len() == 3 && listed.iter().all(|&p| p / 100.0 >= spun * 0.5)),
        "the neighbour took {:.0}% of a CPU: {m:#}",
        spun * 100.0
    );
    assert!(m["load_start"].as_f64().is_some_and(|l| l >= 0.0), "{m:#}");
    let flagged = cpuinfo
        .lines()
        .any(|l| l.starts_with("flags") && l.split_whitespace().any(|f| f == "hypervisor"));
    assert_eq!(m["virtual_machine"].is_string(), flagged, "{m:#}");
    // The footer names the machine exactly when it was busy (10% of all CPUs' time).
    let busy = others >= 0.10 || m["steal"].as_f64().unwrap_or(0.0) >= 0.05;
    assert_eq!(
        text.contains("\nmachine: ") && text.contains("% of the CPUs"),
        busy,
        "the footer and the machine disagree: {m:#} {text}"
    );
}

/// Runs whose wall time climbs run after run (each sleeps 15 ms longer than the one
/// before) are named a drift; runs that take one of two times (every third sleeps 150 ms,
/// the others 30 ms) are named two modes, instead of outliers; runs that all sleep alike
/// get neither warning.
#[test]
fn a_drifting_series_and_a_series_with_two_modes_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let count = dir.path().join("count");
    let script = |ms: &str| {
        format!(
            "n=$(cat {c} 2>/dev/null || echo 0); echo $((n + 1)) > {c}; \
             sleep $(awk \"BEGIN {{ print ({ms}) / 1000 }}\")",
            c = count.display()
        )
    };
    let warnings = |ms: &str| {
        let _ = std::fs::remove_file(&count);
        let run = util::sbs([
            "-r",
            "12",
            "-w",
            "0",
            "-f",
            "json",
            "--",
            "sh",
            "-c",
            &script(ms),
        ])
        .success();
        run.json()["benchmarks"][0]["warnings"].to_string()
    };
    let drifting = warnings("20 + 15 * $n");
    assert!(
        drifting.contains("time.wall drifts over the runs"),
        "{drifting}"
    );
    assert!(!drifting.contains("two modes"), "{drifting}");
    let two = warnings("($n % 3 == 0) ? 150 : 30");
    assert!(
        two.contains("time.wall has two modes: 8 runs near"),
        "{two}"
    );
    assert!(
        !two.contains("outliers") && !two.contains("drifts"),
        "{two}"
    );
    let steady = warnings("60");
    assert!(
        !steady.contains("drifts") && !steady.contains("two modes"),
        "{steady}"
    );
}

/// A `--cleanup` that fails after every run succeeded loses no measurement: the report
/// (`-o`) and the `--save` are written, then the cleanup's failure is one line, exit 2.
/// It used to throw them all away and say "nothing was measured after it" (issue 43).
#[test]
fn a_failing_cleanup_keeps_the_report_and_the_save() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.json");
    let history = dir.path().join("h");
    let out = sbs([
        "--runs",
        "2",
        "--warmup",
        "0",
        "--cleanup",
        "echo cannot remove the scratch files >&2; exit 3",
        "--save",
        "--history",
        history.to_str().unwrap(),
        "-f",
        "json",
        "-o",
        report.to_str().unwrap(),
        "--",
        fixture!("exit_with"),
        "0",
    ])
    .fails_with(
        2,
        "--cleanup command `echo cannot remove the scratch files >&2; exit 3` exited with code 3 \
         (its last words: cannot remove the scratch files)",
    );
    out.check(
        !out.stderr().contains("nothing was measured"),
        "a cleanup runs after the runs: their measurements stand",
    );
    let written = std::fs::read(&report).unwrap_or_default();
    out.check(!written.is_empty(), "the -o report was written");
    let json: serde_json::Value = serde_json::from_slice(&written).unwrap();
    assert_eq!(samples(metric(&json, "time.wall")).len(), 2);
    let saved: Vec<_> = std::fs::read_dir(history.join("history"))
        .map(|d| d.flatten().collect())
        .unwrap_or_default();
    out.check(saved.len() == 1, "the --save was made");
}

/// `-o` (or an export) naming the benchmark's own program or its `--input`, whatever the
/// spelling (`./x` for `x`, a symbolic link), is refused before anything runs; it used to
/// replace the program with the report (issue 43).
#[test]
fn a_report_that_would_replace_the_program_or_its_input_is_refused_before_any_run() {
    let dir = tempfile::tempdir().unwrap();
    let prog = dir.path().join("prog");
    std::fs::copy(fixture!("exit_with"), &prog).unwrap();
    let original = std::fs::read(&prog).unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&prog, &link).unwrap();
    let input = dir.path().join("in.txt");
    std::fs::write(&input, "data\n").unwrap();
    let marker = dir.path().join("setup-ran");
    let setup = format!("touch {}", marker.display());
    let dotted = dir.path().join(".").join("prog");
    let dotted_input = dir.path().join(".").join("in.txt");
    let cases: [(&str, &std::path::Path, &str); 4] = [
        ("-o", &dotted, "is the benchmark's program"),
        ("-o", &link, "is the benchmark's program"),
        ("--export-json", &dotted_input, "is the benchmark's --input"),
        ("-o", &input, "is the benchmark's --input"),
    ];
    for (option, path, needle) in cases {
        sbs([
            "--runs",
            "1",
            "--setup",
            &setup,
            "--input",
            input.to_str().unwrap(),
            option,
            path.to_str().unwrap(),
            "--",
            prog.to_str().unwrap(),
            "0",
        ])
        .fails_with(2, needle);
        assert!(
            !marker.exists(),
            "{option} {}: something ran",
            path.display()
        );
        assert_eq!(
            std::fs::read(&prog).unwrap(),
            original,
            "the program changed"
        );
        assert_eq!(std::fs::read_to_string(&input).unwrap(), "data\n");
    }
    // Writing through a device changes no file: /dev/null as output and input is fine.
    sbs([
        "--runs",
        "1",
        "--input",
        "/dev/null",
        "-o",
        "/dev/null",
        "--",
        prog.to_str().unwrap(),
        "0",
    ])
    .success();
}

/// A script whose `#!` interpreter is missing is said to be that, not a missing script
/// (issue 43).
#[test]
fn a_missing_interpreter_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script.sh");
    std::fs::write(&script, "#!/nonexistent/interp -x\necho hi\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    sbs(["--runs", "1", "--", script.to_str().unwrap()]).fails_with(
        2,
        "the interpreter its `#!` line names, `/nonexistent/interp`, does not exist; install it, \
         or fix the script's `#!` line",
    );
}

/// A benchmark that kills its parent process is said to have done so (or something else
/// to have killed the parent), not to be a program that "cannot start" (issue 43).
#[test]
fn a_child_that_kills_its_parent_is_not_a_start_failure() {
    let out = sbs(["--runs", "1", "--shell", "sh", "kill $PPID; sleep 1"]).fails_with(
        2,
        "was killed before the run ended, so how it ended is unknown: a benchmark must not \
         signal its parent",
    );
    out.check(!out.stderr().contains("cannot start"), "it did start");
}

/// Assert exit 2 and a clap error whose first line contains `needle`.
fn refused(args: &[&str], needle: &str) -> util::Finished {
    let out = sbs(args);
    assert_eq!(out.code(), Some(2), "{}", out.stderr());
    let first = out.stderr().lines().next().unwrap_or_default().to_string();
    assert!(first.contains(needle), "{}", out.stderr());
    out
}

/// Numbers out of range say so: a count of runs too large for one gives the maximum, a
/// confidence level finer than a report prints is refused and one it prints is printed in
/// full (`99.99999999% CI`, not `100% CI`; `99.5`, not `100`) (issue 43).
#[test]
fn numbers_out_of_range_say_what_is_wrong() {
    let run = |extra: &[&str]| {
        let mut args = vec!["--warmup", "0"];
        args.extend(extra);
        args.extend(["--", fixture!("exit_with"), "0"]);
        args.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    let args = run(&["--runs", "99999999999999999999"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    refused(&args, "is too large: at most 1000000000 runs per group");
    for (level, shown) in [("99.99999999", "99.99999999% CI"), ("99.5", "99.5% CI")] {
        let args = run(&["--runs", "2", "--confidence", level]);
        let out = sbs(&args).success();
        out.check(out.stdout().contains(shown), shown);
    }
    let args = run(&["--runs", "2", "--confidence", "99.999999999999"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    refused(&args, "at most 10 decimals");
}

/// A blank benchmark name is refused (it saved under a directory named by a hash alone),
/// and an empty command of `compare` is called empty, not a quoting error (issue 43).
#[test]
fn a_blank_name_and_an_empty_compare_command_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("h");
    for name in ["", "  "] {
        refused(
            &[
                "--runs",
                "1",
                "--name",
                name,
                "--save",
                "--history",
                history.to_str().unwrap(),
                "--",
                fixture!("exit_with"),
                "0",
            ],
            "a benchmark's name cannot be empty or blank",
        );
        assert!(!history.exists(), "nothing was saved");
    }
    let exe = fixture!("exit_with");
    for empty in ["", "   "] {
        sbs(["compare", "--runs", "1", &format!("{exe} 0"), empty])
            .fails_with(2, "command 2 of compare is empty");
    }
}

/// Start `sbs-profile ARGS` with its stderr piped.
fn collector(args: &[&str]) -> std::process::Child {
    std::process::Command::new(util::sbs_profile())
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn sbs-profile")
}

/// Wait up to 20 s for a process whose command line is exactly `argv`.
fn wait_for_process(argv: &[&str]) {
    let start = Instant::now();
    while processes_running(argv).is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{argv:?} never started"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Send `signal` to `child`.
fn signal(child: &std::process::Child, signal: libc::c_int) {
    // SAFETY: plain kill(2) on the pid of our own child, not yet reaped.
    let sent = unsafe { libc::kill(child.id() as libc::pid_t, signal) };
    assert_eq!(sent, 0);
}

/// Kill what a failed test leaves running under these command lines, and say whether
/// there was any.
fn left_running(argvs: &[&[&str]]) -> Vec<String> {
    let mut left = Vec::new();
    for argv in argvs {
        for pid in processes_running(argv) {
            // SAFETY: plain kill(2) on a process this test started through sbs-profile.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            left.push(format!("{pid} {argv:?}"));
        }
    }
    left
}

/// `-o` on a FIFO that nobody reads: the report waits for a reader, and Ctrl-C, SIGTERM
/// and SIGHUP end the wait with 130, the FIFO left as it was and no temporary file. It
/// used to block in open(2) for good, deaf to all three, and exit 0 once a reader came.
#[test]
fn a_report_fifo_without_a_reader_gives_way_to_a_stop_signal() {
    use std::os::unix::fs::FileTypeExt;
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("report.fifo");
        // SAFETY: mkfifo(3) with a NUL-terminated path that outlives the call.
        let made = unsafe { libc::mkfifo(c_path(&fifo).as_ptr(), 0o644) };
        assert_eq!(made, 0, "mkfifo: {}", std::io::Error::last_os_error());
        // The cleanup runs after the last run, just before the report is written.
        let marker = dir.path().join("runs-done");
        let cleanup = format!("touch {}", marker.display());
        let child = collector(&[
            "--runs",
            "1",
            "--warmup",
            "0",
            "--cleanup",
            &cleanup,
            "-o",
            fifo.to_str().unwrap(),
            "--",
            fixture!("exit_with"),
        ]);
        let start = Instant::now();
        while !marker.exists() {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "the runs never ended"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(300));
        signal(&child, sig);
        let out = ends_within(
            child,
            Duration::from_secs(5),
            "a stop signal on a FIFO wait",
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(130), "signal {sig}: {err}");
        assert!(
            err.contains("the report was not written there"),
            "signal {sig}: {err}"
        );
        assert!(
            std::fs::symlink_metadata(&fifo)
                .unwrap()
                .file_type()
                .is_fifo(),
            "the FIFO was replaced"
        );
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["report.fifo", "runs-done"], "signal {sig}");
    }
}

/// A `--setup` starts as a run does: Ctrl-C kills it at once (exit 130, no `sleep`
/// left), and a `--cleanup` started after Ctrl-C is killed by the next signal. Both used
/// to be waited for to their end, deaf to the signals sent to sbs-profile.
#[test]
fn a_stop_signal_kills_a_running_hook() {
    let setup = ["sleep", "31.123"];
    let child = collector(&[
        "--runs",
        "1",
        "--warmup",
        "0",
        "--setup",
        "sleep 31.123",
        "--",
        fixture!("exit_with"),
    ]);
    wait_for_process(&setup);
    signal(&child, libc::SIGINT);
    let out = ends_within(child, Duration::from_secs(5), "Ctrl-C during --setup");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    let left = left_running(&[&setup, &["sh", "-c", "sleep 31.123"]]);
    assert!(left.is_empty(), "the setup outlived sbs-profile: {left:?}");

    // Ctrl-C during a run; the cleanup then runs, and SIGTERM ends it.
    let cleanup = ["sleep", "32.123"];
    let child = collector(&[
        "--runs",
        "1",
        "--warmup",
        "0",
        "--cleanup",
        "sleep 32.123",
        "--",
        fixture!("forever"),
    ]);
    util::wait_for_child_running(child.id(), fixture!("forever"));
    signal(&child, libc::SIGINT);
    wait_for_process(&cleanup);
    signal(&child, libc::SIGTERM);
    let out = ends_within(child, Duration::from_secs(5), "SIGTERM during --cleanup");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    let left = left_running(&[&cleanup, &["sh", "-c", "sleep 32.123"]]);
    assert!(
        left.is_empty(),
        "the cleanup outlived sbs-profile: {left:?}"
    );
}

/// After a SIGKILL of sbs-profile, its running hook dies too (the shell and what it
/// started): `sh -c sleep 41` and `sleep 41` used to run on, orphans.
#[test]
fn a_killed_collector_takes_its_hook_along() {
    let hook = ["sleep", "41.123"];
    let shell = ["sh", "-c", "sleep 41.123"];
    let mut child = collector(&[
        "--runs",
        "1",
        "--warmup",
        "0",
        "--setup",
        "sleep 41.123",
        "--",
        fixture!("exit_with"),
    ]);
    wait_for_process(&hook);
    child.kill().expect("SIGKILL sbs-profile");
    child.wait().unwrap();
    let killed = Instant::now();
    while killed.elapsed() < Duration::from_secs(2)
        && !(processes_running(&hook).is_empty() && processes_running(&shell).is_empty())
    {
        std::thread::sleep(Duration::from_millis(10));
    }
    let left = left_running(&[&hook, &shell]);
    assert!(
        left.is_empty(),
        "the hook of a SIGKILLed sbs-profile still ran 2 s later: {left:?}"
    );
}

/// `--timeout` limits each hook as it limits each run: a `--prepare` that never ends is
/// killed with its group after it, with a line that says so. It used to hang for good.
#[test]
fn timeout_limits_a_hook() {
    let hook = ["sleep", "1000.123"];
    let child = collector(&[
        "--runs",
        "1",
        "--warmup",
        "0",
        "--timeout",
        "1",
        "--prepare",
        "sleep 1000.123",
        "--",
        fixture!("exit_with"),
    ]);
    let out = ends_within(child, Duration::from_secs(10), "a --prepare past --timeout");
    let err = String::from_utf8_lossy(&out.stderr);
    let left = left_running(&[&hook, &["sh", "-c", "sleep 1000.123"]]);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(
            "--prepare command `sleep 1000.123` did not end within 1.000 s (--timeout, which \
             limits each hook as it limits each run) and was killed with its process group"
        ),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(left.is_empty(), "the hook outlived its timeout: {left:?}");
}

/// A run that stops (here it stops itself, as the terminal stops a background job that
/// reads it or writes to it under `stty tostop`) is killed, and the error says why and
/// what to do; it used to be waited for forever, without a word.
#[test]
fn a_stopped_run_ends_with_the_reason() {
    for (sig, says) in [
        ("TTOU", "stopped by SIGTTOU: it wrote to the terminal"),
        ("TTIN", "stopped by SIGTTIN: it read from the terminal"),
        ("TSTP", "stopped by SIGTSTP (it stopped itself"),
    ] {
        let script = format!("kill -{sig} $$; exit 0");
        // A run at once, and a latched one (the allocation agent attaches before the exec).
        for extra in [&[][..], &["--alloc"][..]] {
            let mut args = vec!["--runs", "2", "--warmup", "0"];
            args.extend(extra);
            args.extend(["--", "/bin/sh", "-c", &script]);
            let out = ends_within(collector(&args), Duration::from_secs(10), "a stopped run");
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{sig} {extra:?}: {err}");
            assert!(err.contains(says), "{sig} {extra:?}: {err}");
            assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        }
    }
}

/// Run `sbs-profile ARGS` as the foreground job of a pseudo-terminal of its own (stdin,
/// stdout and stderr on it, its controlling terminal), with `stty tostop` if `tostop`;
/// give up after 10 s. Its exit code and all it wrote to the terminal.
fn in_a_terminal(args: &[&str], tostop: bool) -> (Option<i32>, String) {
    use std::os::fd::FromRawFd;
    use std::os::unix::process::CommandExt;
    // SAFETY: posix_openpt returns a new descriptor or -1; grantpt and unlockpt act on it;
    // ptsname_r writes at most `name.len()` bytes into the buffer.
    let (master, slave_name) = unsafe {
        let fd = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
        assert!(fd >= 0, "posix_openpt: {}", std::io::Error::last_os_error());
        assert_eq!(libc::grantpt(fd), 0);
        assert_eq!(libc::unlockpt(fd), 0);
        let mut name = [0 as libc::c_char; 128];
        assert_eq!(libc::ptsname_r(fd, name.as_mut_ptr(), name.len()), 0);
        let name = std::ffi::CStr::from_ptr(name.as_ptr())
            .to_str()
            .unwrap()
            .to_string();
        (std::fs::File::from_raw_fd(fd), name)
    };
    let slave = std::fs::File::options()
        .read(true)
        .write(true)
        .open(&slave_name)
        .expect("open the terminal's slave side");
    if tostop {
        use std::os::fd::AsRawFd;
        // SAFETY: termios is plain data; tcgetattr fills it from an open terminal.
        unsafe {
            let mut t: libc::termios = std::mem::zeroed();
            assert_eq!(libc::tcgetattr(slave.as_raw_fd(), &mut t), 0);
            t.c_lflag |= libc::TOSTOP;
            assert_eq!(libc::tcsetattr(slave.as_raw_fd(), libc::TCSANOW, &t), 0);
        }
    }
    let mut command = std::process::Command::new(util::sbs_profile());
    command
        .args(args)
        .stdin(slave.try_clone().unwrap())
        .stdout(slave.try_clone().unwrap())
        .stderr(slave.try_clone().unwrap());
    // SAFETY: setsid and ioctl are async-signal-safe system calls; the child makes a
    // session of its own and takes the terminal on its stdin as its controlling terminal
    // (its process group is then the terminal's foreground).
    unsafe {
        command.pre_exec(|| {
            if libc::setsid() == -1 || libc::ioctl(0, libc::TIOCSCTTY, 0) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = command.spawn().expect("spawn sbs-profile in a terminal");
    // Our copies of the terminal's slave side: the master reads EIO once the child's close.
    drop((command, slave));
    let (sent, received) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // Until EIO: every slave descriptor closed.
        let mut all = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            match std::io::Read::read(&mut &master, &mut chunk) {
                Ok(0) => break,
                Ok(n) => all.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    if e.raw_os_error() != Some(libc::EIO) {
                        all.extend(format!("(reading the terminal: {e})").bytes());
                    }
                    break;
                }
            }
        }
        let _ = sent.send(all);
    });
    let out = ends_within(child, Duration::from_secs(10), "a run in a terminal");
    let written = received
        .recv_timeout(Duration::from_secs(10))
        .unwrap_or_else(|e| format!("(nothing read from the terminal: {e})").into_bytes());
    (
        out.status.code(),
        String::from_utf8_lossy(&written).into_owned(),
    )
}

/// In a real terminal: under `stty tostop` a run that writes to it (`--show-output`) is
/// stopped by SIGTTOU, and one that reads it (`--input /dev/tty`) by SIGTTIN, since each
/// run has a process group of its own; sbs-profile ends and says why (it used to wait
/// forever). Without tostop, the output shows.
#[test]
fn a_run_stopped_by_its_terminal_ends_with_the_reason() {
    let run = ["--runs", "1", "--warmup", "0"];
    let echo = [&run[..], &["--show-output", "--", "/bin/echo", "sbs-hello"]].concat();
    let (code, text) = in_a_terminal(&echo, false);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("sbs-hello"), "{text}");

    let (code, text) = in_a_terminal(&echo, true);
    assert_eq!(code, Some(2), "{text}");
    assert!(
        text.contains("/bin/echo was stopped by SIGTTOU: it wrote to the terminal")
            && text.contains("`stty -tostop`"),
        "{text}"
    );

    let cat = [&run[..], &["--input", "/dev/tty", "--", "/bin/cat"]].concat();
    let (code, text) = in_a_terminal(&cat, false);
    assert_eq!(code, Some(2), "{text}");
    assert!(
        text.contains("/bin/cat was stopped by SIGTTIN: it read from the terminal")
            && text.contains("--input FILE"),
        "{text}"
    );
}

/// The user and system CPU ticks a process has used so far (`/proc/PID/stat`).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the parenthesised name: state is field 3, utime 14 and stime 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| {
        fields
            .get(n - 3)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    field(14) + field(15)
}

/// The kernel's clock ticks per second, as `/proc` counts CPU time.
fn ticks_per_second() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// A run nothing attaches to costs one process, as hyperfine's does: the launcher starts
/// the benchmark's process itself (its parent is the launcher, whose parent is
/// sbs-profile), with no run parent in between; a latched run (`--counters`) keeps one. The
/// run prints the pid of its parent's parent (issue 48 item 4).
#[test]
fn a_timing_run_is_started_by_the_launcher_itself() {
    let grandparent = |extra: &[&str]| -> (u32, String) {
        let mut args = vec!["--runs", "1", "--warmup", "0", "--show-output"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&[
            "--",
            "/bin/sh",
            "-c",
            "echo \"grandparent=$(cut -d' ' -f4 /proc/$PPID/stat)\"",
        ]);
        let child = std::process::Command::new(util::sbs_profile())
            .args(&args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn sbs-profile");
        let pid = child.id();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        (pid, text)
    };
    let (sbs, text) = grandparent(&[]);
    assert!(
        text.contains(&format!("grandparent={sbs}\n")),
        "the run's parent is not the launcher started by sbs-profile ({sbs}): {text}"
    );
    // The counters group's run is latched (the counter attaches before it execs).
    let (sbs, text) = grandparent(&["--counters", "task-clock"]);
    let others = text
        .lines()
        .filter_map(|l| l.strip_prefix("grandparent="))
        .filter(|p| *p != sbs.to_string())
        .count();
    assert_eq!(
        others, 1,
        "a latched run has a run parent between it and the launcher: {text}"
    );
}
