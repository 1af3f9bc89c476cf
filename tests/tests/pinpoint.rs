//! `sbs-profile pinpoint` end to end on `fixtures/c/pinpoint.c`, built three ways: the
//! previous version (0), one where `deep` (main -> outer -> middle -> deep) loops 30%
//! longer (1), one where `grow` (main -> outer -> grow) allocates one more block per call
//! (2). In builds 1 and 2 a decoy's code changes at equal cost. Needs valgrind and gcc;
//! skipped with a printed reason without them.

mod util;

use std::path::{Path, PathBuf};
use std::process::Command;

use sbs_skip::{skip, Need};
use util::{chain, sbs, Finished, Variants};

fn valgrind_installed() -> bool {
    Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The three builds of `fixtures/c/pinpoint.c`, or `None` (a recorded skip).
fn builds() -> Option<Variants> {
    if !valgrind_installed() {
        skip!(
            Need::Valgrind,
            "valgrind is not installed (sudo apt-get install -y valgrind)"
        );
        return None;
    }
    util::gcc_variants("pinpoint", 3)
}

/// Inclusive instructions of `function` as `callgrind_annotate --inclusive=yes` reports
/// them for a plain callgrind run of `exe`.
fn callgrind_annotate_inclusive(exe: &Path, function: &str) -> Option<f64> {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("cg.out");
    let status = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg("--log-file=/dev/null")
        .arg(exe)
        .status()
        .expect("run valgrind");
    assert!(status.success());
    let annotated = Command::new("callgrind_annotate")
        .arg("--inclusive=yes")
        .arg(&out)
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&annotated.stdout);
    let needle = format!(":{function} [");
    let line = text.lines().find(|l| l.contains(&needle))?;
    let number: String = line
        .split_whitespace()
        .next()?
        .chars()
        .filter(|c| c.is_ascii_digit())
        .collect();
    number.parse().ok()
}

#[test]
fn instructions_dig_to_the_function_three_calls_below_main() {
    let Some(b) = builds() else { return };
    let run = b.pinpoint(0, 1, &[], &[]);
    assert_eq!(run.code(), Some(1), "a regression exits 1{}", run.stderr());
    let v = run.json();
    let p = &v["pinpoint"];
    // middle has a second name (an alias, as identical code folding gives): both are said.
    let middle = "middle (also named middle_again)";
    assert_eq!(chain(&run), ["main", "outer", middle, "deep"], "{p}");
    assert_eq!(p["bottleneck"], "deep");
    assert_eq!(p["stop"], "own_code");
    assert_eq!(p["metric"], "instructions");
    for link in p["chain"].as_array().unwrap() {
        assert_eq!(link["method"], "exact", "{link}");
        // Counts that repeat: one run per build.
        assert_eq!(link["runs"], 1, "{link}");
        assert!(
            link["current"].as_f64() > link["previous"].as_f64(),
            "{link}"
        );
    }
    // deep loops 30% longer: its change is close to that (its call to spin is fixed).
    let deep = p["chain"][3]["change_percent"].as_f64().unwrap();
    assert!((25.0..=30.0).contains(&deep), "{deep}");
    // The numbers are callgrind's own: callgrind_annotate agrees on main and deep.
    for (i, function) in [(0, "main"), (3, "deep")] {
        if let Some(expected) = callgrind_annotate_inclusive(&b.exe(0), function) {
            assert_eq!(
                p["chain"][i]["previous"].as_f64(),
                Some(expected),
                "{function}"
            );
        }
        if let Some(expected) = callgrind_annotate_inclusive(&b.exe(1), function) {
            assert_eq!(
                p["chain"][i]["current"].as_f64(),
                Some(expected),
                "{function}"
            );
        }
    }
    // The decoy's code changed at equal cost: it is never on the chain, and inspected
    // directly it did not get worse.
    let decoy = b.pinpoint(0, 1, &["--function", "decoy", "--runs", "1"], &[]);
    assert_eq!(decoy.code(), Some(0), "{}", decoy.stderr());
    assert!(decoy.json()["pinpoint"]["bottleneck"].is_null());
}

#[test]
fn binary_find_makes_fewer_comparisons_than_linear_find_for_the_same_chain() {
    let Some(b) = builds() else { return };
    let binary = b.pinpoint(0, 1, &["--runs", "1"], &[]);
    let linear = b.pinpoint(0, 1, &["--runs", "1", "--strategy", "linear"], &[]);
    assert_eq!(chain(&binary), chain(&linear));
    let count = |r: &Finished| r.json()["pinpoint"]["comparisons"].as_u64().unwrap();
    // main has 18 call sites, outer the 14th: LinearFind compares 14 there alone.
    assert!(
        count(&binary) < count(&linear),
        "{} vs {}",
        count(&binary),
        count(&linear)
    );
    // One decision on main itself, 14 on its calls up to outer.
    assert!(count(&linear) > 14);
}

#[test]
fn depth_function_and_ignore_bound_the_search() {
    let Some(b) = builds() else { return };
    let run = b.pinpoint(0, 1, &["--depth", "1", "--runs", "1"], &[]);
    assert_eq!(run.code(), Some(1));
    assert_eq!(chain(&run), ["main", "outer"]);
    assert_eq!(run.json()["pinpoint"]["stop"], "depth");
    // Depth 0: main's own verdict and no layer below it (it used to act as 1; issue 43).
    let run = b.pinpoint(0, 1, &["--depth", "0", "--runs", "1"], &[]);
    assert_eq!(run.code(), Some(1));
    assert_eq!(chain(&run), ["main"]);
    assert_eq!(run.json()["pinpoint"]["stop"], "depth");

    let run = b.pinpoint(0, 1, &["--function", "middle", "--runs", "1"], &[]);
    assert_eq!(chain(&run), ["middle (also named middle_again)", "deep"]);

    let run = b.pinpoint(0, 1, &["--ignore", "middle", "--runs", "1"], &[]);
    assert_eq!(
        chain(&run),
        ["main", "outer", "middle (also named middle_again)"]
    );
    assert_eq!(run.json()["pinpoint"]["stop"], "ignored");
}

#[test]
fn the_same_build_on_both_sides_has_no_bottleneck() {
    let Some(b) = builds() else { return };
    let run = b.pinpoint(0, 0, &[], &[]).success();
    let v = run.json();
    assert!(v["pinpoint"]["bottleneck"].is_null(), "{v}");
    assert_eq!(v["pinpoint"]["stop"], "no_regression");
    assert_eq!(chain(&run), ["main"]);
    assert_eq!(v["pinpoint"]["chain"][0]["change_percent"], 0.0);
}

#[test]
fn allocations_dig_to_the_function_two_calls_below_main() {
    let Some(b) = builds() else { return };
    let run = b.pinpoint(0, 2, &["--metric", "alloc"], &[]);
    assert_eq!(run.code(), Some(1), "{}", run.stderr());
    let v = run.json();
    let p = &v["pinpoint"];
    assert_eq!(chain(&run), ["main", "outer", "grow", "malloc"], "{p}");
    assert_eq!(p["metric"], "alloc.count");
    assert_eq!(p["chain"][3]["external"], true);
    assert_eq!(p["stop"], "external");
    // outer calls grow 10 times, 4 blocks each, then 5: DHAT's counts.
    for link in p["chain"].as_array().unwrap() {
        assert_eq!(link["previous"], 40.0, "{link}");
        assert_eq!(link["current"], 50.0, "{link}");
    }
    // The instruction change of build 1 allocates nothing more: no allocation bottleneck.
    let run = b.pinpoint(0, 1, &["--metric", "alloc", "--runs", "1"], &[]);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    // With a large enough absolute threshold, 10 blocks more is no regression.
    let run = b.pinpoint(
        0,
        2,
        &["--metric", "alloc", "--runs", "1", "--threshold", "+10"],
        &[],
    );
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
}

#[test]
fn text_and_html_show_the_chain() {
    let Some(b) = builds() else { return };
    let html = b.dir().join("chain.html");
    let run = sbs([
        "pinpoint".to_string(),
        "--runs".into(),
        "1".into(),
        "--html".into(),
        html.display().to_string(),
        "--previous".into(),
        b.exe(0).display().to_string(),
        "--".into(),
        b.exe(1).display().to_string(),
    ]);
    assert_eq!(run.code(), Some(1));
    let text = run.stdout();
    run.check(text.contains("\nmain  "), "main at layer 0");
    run.check(
        text.lines()
            .any(|l| l.starts_with("         └─ deep  ") && l.ends_with("<== bottleneck")),
        "deep indented three layers and marked",
    );
    run.check(
        text.contains("stopped: no call made by deep got worse"),
        "why it stopped",
    );
    let page = std::fs::read_to_string(&html).expect("the --html page");
    assert_eq!(page.matches("class=\"bar prev\"").count(), 4, "{page}");
    assert!(page.contains("bottleneck: deep"));
}

#[test]
fn pinpoint_writes_through_a_device_and_a_symlink_and_leaves_them_what_they_were() {
    use std::os::unix::fs::FileTypeExt;
    let Some(b) = builds() else { return };
    // As root, a null device of our own (1,3 is the number of /dev/null), so that a
    // regression cannot break the machine's.
    let device = if util::is_root() {
        let device = b.dir().join("null");
        let c = std::ffi::CString::new(device.to_str().unwrap()).unwrap();
        // SAFETY: mknod(2) with a NUL-terminated path that outlives the call.
        let made = unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) };
        assert_eq!(made, 0, "mknod: {}", std::io::Error::last_os_error());
        device
    } else {
        PathBuf::from("/dev/null")
    };
    let link = b.dir().join("link.html");
    std::os::unix::fs::symlink("page.html", &link).unwrap();
    b.pinpoint(
        0,
        0,
        &[
            "--metric",
            "alloc",
            "--runs",
            "1",
            "-o",
            device.to_str().unwrap(),
            "--html",
            link.to_str().unwrap(),
        ],
        &[],
    )
    .success();
    let kind = |p: &Path| std::fs::symlink_metadata(p).unwrap().file_type();
    assert!(
        kind(&device).is_char_device(),
        "{} was replaced",
        device.display()
    );
    assert!(kind(&link).is_symlink(), "the link was replaced");
    let page = std::fs::read_to_string(b.dir().join("page.html")).expect("the link's target");
    assert!(page.contains("<html"), "{page}");
}

#[test]
fn pinpoint_refuses_one_file_for_two_reports_and_prints_a_report_it_cannot_write() {
    // Its reports go where a run's do, with the same checks: two options naming one file
    // fail before any run, and a report file that cannot be written is replaced by the
    // text report on stdout (it used to be lost with the error).
    let Some(b) = builds() else { return };
    let same = b.dir().join("same.out");
    let link = b.dir().join("same.html");
    std::os::unix::fs::symlink("same.out", &link).unwrap();
    let both = [
        "--runs",
        "1",
        "-o",
        same.to_str().unwrap(),
        "--html",
        link.to_str().unwrap(),
    ];
    b.pinpoint(0, 1, &both, &[])
        .fails_with(2, "are the same file");
    assert!(!same.exists(), "nothing was written");
    if !Path::new("/dev/full").exists() {
        return;
    }
    let full = ["--metric", "alloc", "--runs", "1", "-o", "/dev/full"];
    let run = b
        .pinpoint(0, 1, &full, &[])
        .fails_with(2, "cannot write the report to /dev/full")
        .fails_with(2, "the report is on stdout instead");
    run.check(
        run.stdout().starts_with("pinpoint: "),
        "the text report is on stdout",
    );
}

#[test]
fn bad_input_gets_one_line_and_exit_2() {
    let Some(b) = builds() else { return };
    let missing = b.dir().join("nope");
    sbs([
        "pinpoint",
        "--previous",
        missing.to_str().unwrap(),
        "--",
        b.exe(1).to_str().unwrap(),
    ])
    .fails_with(2, "previous build");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/c/pinpoint.c");
    sbs([
        "pinpoint",
        "--previous",
        b.exe(0).to_str().unwrap(),
        "--",
        source.to_str().unwrap(),
    ])
    .fails_with(2, "is not an executable file");
    // A script is a script, not "not ... a script starting with `#!`" (issue 43).
    let script = b.dir().join("script.sh");
    std::fs::write(&script, "#!/bin/sh\nexec true\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    sbs([
        "pinpoint",
        "--previous",
        b.exe(0).to_str().unwrap(),
        "--",
        script.to_str().unwrap(),
    ])
    .fails_with(2, "is a script (`#!/bin/sh`), not a compiled program");
    let stripped = b.dir().join("stripped");
    std::fs::copy(b.exe(1), &stripped).unwrap();
    if Command::new("strip")
        .arg(&stripped)
        .status()
        .is_ok_and(|s| s.success())
    {
        sbs([
            "pinpoint",
            "--previous",
            b.exe(0).to_str().unwrap(),
            "--",
            stripped.to_str().unwrap(),
        ])
        .fails_with(2, "current build")
        .fails_with(2, "stripped");
    } else {
        skip!(
            Need::Binutils,
            "strip is not installed (apt-get install binutils)"
        );
    }
    b.pinpoint(0, 1, &["--function", "nosuch"], &[])
        .fails_with(2, "function `nosuch` not found in the previous build");
    b.pinpoint(0, 1, &["--runs", "1"], &["crash"])
        .fails_with(2, "killed by signal 6 under valgrind");
    // valgrind missing: a PATH without it.
    let out = Command::new(util::sbs_profile())
        .args(["pinpoint", "--previous"])
        .arg(b.exe(0))
        .arg("--")
        .arg(b.exe(1))
        .env("PATH", b.dir())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("valgrind is not installed") && err.contains("apt-get install"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

#[test]
fn builds_that_print_different_output_are_warned_about() {
    let Some(b) = builds() else { return };
    let run = b.pinpoint(0, 1, &["--runs", "1"], &["print"]);
    assert_eq!(run.code(), Some(1), "{}", run.stderr());
    let v = run.json();
    assert!(
        v["pinpoint"]["warnings"][0]
            .as_str()
            .is_some_and(|w| w.contains("printed different output")),
        "{v}"
    );
    run.check(
        run.stderr()
            .contains("warning: the two builds printed different output"),
        "warning on stderr",
    );
    // The same output: no warning.
    let run = b.pinpoint(0, 0, &["--runs", "1"], &["print"]).success();
    assert!(run.json()["pinpoint"]["warnings"].is_null());
}

/// The Rust fixture (`fixtures/rust/pinpoint`) built by cargo in release mode with debug
/// info, with `features` ("" for the previous build), into `dir`.
fn cargo_fixture(dir: &Path, features: &str) -> Option<PathBuf> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/rust/pinpoint/Cargo.toml");
    let target = dir.join(format!("target-{features}"));
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    sbs_skip::build!(
        Need::Rustc,
        Command::new(cargo)
            .args([
                "build",
                "--release",
                "--quiet",
                "--offline",
                "--manifest-path"
            ])
            .arg(&manifest)
            .arg("--target-dir")
            .arg(&target)
            .args(["--features", features])
    )?;
    Some(target.join("release/pinpoint-fixture"))
}

#[test]
fn a_rust_pair_from_one_source_matches_across_mangled_hashes() {
    if !valgrind_installed() {
        skip!(
            Need::Valgrind,
            "valgrind is not installed (sudo apt-get install -y valgrind)"
        );
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let Some(previous) = cargo_fixture(dir.path(), "") else {
        return;
    };
    let Some(slow) = cargo_fixture(dir.path(), "slow") else {
        return;
    };
    let Some(more_blocks) = cargo_fixture(dir.path(), "more-blocks") else {
        return;
    };
    // The builds' mangled names differ (another hash), their demangled names do not.
    let deep_symbol = |exe: &Path| -> String {
        let data = std::fs::read(exe).unwrap();
        let file = object::File::parse(&*data).unwrap();
        use object::{Object, ObjectSymbol};
        file.symbols()
            .filter_map(|s| s.name().ok().map(str::to_string))
            .find(|n| n.starts_with("_ZN16pinpoint_fixture4deep"))
            .expect("deep's symbol")
    };
    assert_ne!(deep_symbol(&previous), deep_symbol(&slow));

    let run = |current: &Path, extra: &[&str]| {
        let mut argv = vec![
            "pinpoint",
            "--format",
            "json",
            "--previous",
            previous.to_str().unwrap(),
        ];
        argv.extend_from_slice(extra);
        argv.push("--");
        argv.push(current.to_str().unwrap());
        sbs(&argv)
    };
    let r = run(&slow, &[]);
    assert_eq!(r.code(), Some(1), "{}", r.stderr());
    assert_eq!(
        chain(&r),
        [
            "pinpoint_fixture::main",
            "pinpoint_fixture::outer",
            "pinpoint_fixture::middle",
            "pinpoint_fixture::deep"
        ]
    );
    assert_eq!(r.json()["pinpoint"]["stop"], "own_code");

    let r = run(&more_blocks, &["--metric", "alloc"]);
    assert_eq!(r.code(), Some(1), "{}", r.stderr());
    let c = chain(&r);
    assert_eq!(
        c[..3],
        [
            "pinpoint_fixture::main",
            "pinpoint_fixture::outer",
            "pinpoint_fixture::grow"
        ],
        "{c:?}"
    );
    // grow calls the allocator through a GOT slot that a R_X86_64_RELATIVE relocation
    // fills: it is named, not an indirect call.
    assert!(c[3].ends_with("__rust_alloc"), "{c:?}");
    // 10 calls of grow, 4 blocks each, then 5 (std's own allocations are outside main).
    let v = r.json();
    assert_eq!(v["pinpoint"]["chain"][0]["previous"], 40.0, "{v}");
    assert_eq!(v["pinpoint"]["chain"][0]["current"], 50.0, "{v}");

    // Two monomorphizations of `widen` share a demangled name: the chain tells which one
    // (DWARF's generic arguments).
    if let Some(slow_widen) = cargo_fixture(dir.path(), "slow-widen") {
        let r = run(&slow_widen, &[]);
        assert_eq!(r.code(), Some(1), "{}", r.stderr());
        assert_eq!(
            chain(&r),
            [
                "pinpoint_fixture::main",
                "pinpoint_fixture::outer",
                "pinpoint_fixture::middle",
                "pinpoint_fixture::side",
                "pinpoint_fixture::widen<u32>"
            ]
        );
    }

    let r = run(&slow, &["--depth", "2", "--runs", "1"]);
    assert_eq!(chain(&r).len(), 3);
    assert_eq!(r.json()["pinpoint"]["stop"], "depth");

    let r = run(&previous, &[]).success();
    assert!(r.json()["pinpoint"]["bottleneck"].is_null());
}

/// The `valgrind` that `PATH` finds, or `None`.
fn real_valgrind() -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join("valgrind"))
        .find(|p| p.is_file())
}

/// A `valgrind` in `dir` that appends its arguments to `dir/args` and the mode of the
/// directory of its profile (`--callgrind-out-file`, `--dhat-out-file`) to `dir/modes`,
/// then runs the real one.
fn recording_valgrind(dir: &Path, real: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let script = format!(
        "#!/bin/sh\n\
         printf '%s\\n' \"$*\" >> '{dir}/args'\n\
         for a in \"$@\"; do\n\
         case \"$a\" in\n\
         --callgrind-out-file=*|--dhat-out-file=*) stat -c %a \"$(dirname \"${{a#*=}}\")\" >> '{dir}/modes';;\n\
         esac\n\
         done\n\
         exec '{real}' \"$@\"\n",
        dir = dir.display(),
        real = real.display()
    );
    let path = dir.join("valgrind");
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Under `umask 0`, the directory of valgrind's profiles is still private (0700: other
/// users cannot plant a symlink at the names valgrind writes), it is gone after the run,
/// and no valgrind the tool starts (pinpoint's, `--instructions valgrind`'s) opens vgdb's
/// pipes in /tmp.
#[test]
fn valgrind_s_profiles_are_private_under_umask_0_and_no_valgrind_opens_vgdb_pipes() {
    let Some(b) = builds() else { return };
    let real = real_valgrind().expect("valgrind runs, so PATH finds it");
    let fake = tempfile::tempdir().unwrap();
    recording_valgrind(fake.path(), &real);
    let tmp = tempfile::tempdir().unwrap();
    let path = std::env::join_paths(
        std::iter::once(fake.path().to_path_buf())
            .chain(std::env::split_paths(&std::env::var_os("PATH").unwrap())),
    )
    .unwrap();
    let sbs_under_umask_0 = |args: &[&str]| {
        let out = Command::new("/bin/sh")
            .arg("-c")
            .arg("umask 0; exec \"$0\" \"$@\"")
            .arg(util::sbs_profile())
            .args(args)
            .env("PATH", &path)
            .env("TMPDIR", tmp.path())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.code(), err)
    };
    for metric in ["instructions", "alloc"] {
        let (code, err) = sbs_under_umask_0(&[
            "pinpoint",
            "--runs",
            "1",
            "--metric",
            metric,
            "--format",
            "json",
            "--previous",
            b.exe(0).to_str().unwrap(),
            "--",
            b.exe(0).to_str().unwrap(),
        ]);
        assert_eq!(code, Some(0), "{metric}: {err}");
    }
    let modes = std::fs::read_to_string(fake.path().join("modes")).unwrap_or_default();
    assert_eq!(
        modes.lines().collect::<Vec<_>>(),
        ["700"; 4],
        "the mode of the directory of each of the 4 runs' profiles"
    );
    let (code, err) = sbs_under_umask_0(&[
        "--instructions",
        "valgrind",
        "--runs",
        "1",
        "--warmup",
        "0",
        "--",
        fixture!("exit_with"),
        "0",
    ]);
    assert_eq!(code, Some(0), "{err}");
    let args = std::fs::read_to_string(fake.path().join("args")).unwrap();
    assert_eq!(args.lines().count(), 5, "{args}");
    for line in args.lines() {
        assert!(
            line.split(' ').any(|a| a == "--vgdb=no"),
            "valgrind ran without --vgdb=no: {line}"
        );
    }
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "left in TMPDIR: {left:?}");
}

/// The pid of the valgrind tool (`callgrind-*`, `dhat-*`: valgrind has exec'd its tool,
/// which runs the build) among the descendants of `pid`, once there is one.
fn valgrind_tool_under(pid: u32, tool: &str) -> u32 {
    let start = std::time::Instant::now();
    loop {
        let mut descendants = util::children_of(pid);
        let mut i = 0;
        while i < descendants.len() {
            let more = util::children_of(descendants[i]);
            descendants.extend(more);
            i += 1;
        }
        for d in descendants {
            let exe = std::fs::read_link(format!("/proc/{d}/exe")).unwrap_or_default();
            if exe
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(&format!("{tool}-")))
            {
                return d;
            }
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(30),
            "sbs-profile pinpoint (pid {pid}) never started valgrind's {tool}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Whether `pid` goes within `limit`; killed if it did not, so that no test leaves a
/// valgrind running.
fn gone_within(pid: u32, limit: std::time::Duration) -> bool {
    let start = std::time::Instant::now();
    while start.elapsed() < limit {
        if util::is_gone(pid) {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // SAFETY: plain kill(2) on a pid this test saw as a descendant of its sbs-profile.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    false
}

/// Ctrl-C, SIGTERM and SIGHUP end pinpoint as they end a run: exit 130 with the one-line
/// message, the valgrind under way killed, its temporary directory removed, nothing left
/// in TMPDIR (no vgdb pipe either). They used to kill pinpoint outright and leave valgrind
/// running, orphaned, and `sbs-pinpoint-*` behind.
#[test]
fn sigint_sigterm_and_sighup_end_pinpoint_like_a_run() {
    if !valgrind_installed() {
        skip!(
            Need::Valgrind,
            "valgrind is not installed (sudo apt-get install -y valgrind)"
        );
        return;
    }
    let forever = fixture!("forever");
    for (signal, metric, tool) in [
        (libc::SIGINT, "instructions", "callgrind"),
        (libc::SIGTERM, "alloc", "dhat"),
        (libc::SIGHUP, "instructions", "callgrind"),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let mut pinpoint = Command::new(util::sbs_profile())
            .args(["pinpoint", "--metric", metric, "--previous", forever, "--"])
            .arg(forever)
            .env("TMPDIR", tmp.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn sbs-profile");
        let valgrind = valgrind_tool_under(pinpoint.id(), tool);
        // SAFETY: plain kill(2) on the pid of our own child, not yet reaped.
        let sent = unsafe { libc::kill(pinpoint.id() as libc::pid_t, signal) };
        assert_eq!(sent, 0);
        let start = std::time::Instant::now();
        while pinpoint.try_wait().unwrap().is_none() {
            if start.elapsed() > std::time::Duration::from_secs(20) {
                let _ = pinpoint.kill();
                let _ = gone_within(valgrind, std::time::Duration::ZERO);
                panic!("signal {signal}: sbs-profile pinpoint still ran 20 s later");
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let out = pinpoint.wait_with_output().unwrap();
        // First, so that a failure leaves no valgrind behind.
        let valgrind_gone = gone_within(valgrind, std::time::Duration::from_secs(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(130), "signal {signal}: {err}");
        assert!(err.contains("interrupted"), "signal {signal}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "signal {signal}: {err}");
        assert!(
            valgrind_gone,
            "signal {signal}: valgrind ({valgrind}) outlived sbs-profile pinpoint"
        );
        let left: Vec<_> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(left.is_empty(), "signal {signal}: left in TMPDIR: {left:?}");
    }
}

/// The three builds of `fixtures/c/recursive.c` (a recursive-descent parser; 1: its
/// helper `parse_number` does more work, 2: its helper `parse_string` allocates one more
/// block; `banner` changes a lot relatively and explains little in both), or `None`.
fn recursive_builds() -> Option<Variants> {
    if !valgrind_installed() {
        skip!(
            Need::Valgrind,
            "valgrind is not installed (sudo apt-get install -y valgrind)"
        );
        return None;
    }
    util::gcc_variants("recursive", 3)
}

/// The recursion (parse_value -> parse_array -> parse_value, parse_value -> parse_object
/// -> parse_value) is one node whose cost is counted once, and the search goes on into
/// the helper it calls. It used to stop at `parse_array` -> `parse_value`, "already on the
/// chain (recursion)", or (before the share rule) at `banner`.
#[test]
fn a_recursive_parser_is_pinpointed_to_the_helper_the_recursion_calls() {
    let Some(b) = recursive_builds() else { return };
    for strategy in ["binary", "linear"] {
        let run = b.pinpoint(0, 1, &["--strategy", strategy], &[]);
        assert_eq!(run.code(), Some(1), "{strategy}: {}", run.stderr());
        let v = run.json();
        let p = &v["pinpoint"];
        assert_eq!(chain(&run), ["main", "parse_value", "parse_number"], "{p}");
        assert_eq!(p["stop"], "own_code", "{p}");
        let cycle = &p["chain"][1]["cycle"];
        assert_eq!(
            *cycle,
            serde_json::json!(["parse_value", "parse_array", "parse_object"]),
            "{p}"
        );
        // Counted once: the cycle costs less than main, which calls it (callgrind's
        // per-edge inclusive costs, summed over the recursion levels, cost more).
        for side in ["previous", "current"] {
            let main = p["chain"][0][side].as_f64().unwrap();
            let cycle = p["chain"][1][side].as_f64().unwrap();
            assert!(cycle < main, "{side}: {cycle} >= {main}");
        }
        // parse_number explains all of main's change but banner's few instructions.
        let share = p["bottleneck_share_percent"].as_f64().unwrap();
        assert!((99.0..=100.0).contains(&share), "{share}");
        // Inside it: the inlined mix, and the line of mix's loop body.
        let inside = p["inside"].as_array().unwrap_or_else(|| panic!("{p}"));
        assert_eq!(inside[0]["what"], "inlined mix", "{p}");
        assert!(inside[0]["share_percent"].as_f64().unwrap() > 90.0, "{p}");
        let source = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/c/recursive.c"),
        )
        .unwrap();
        let body = 1 + source
            .lines()
            .position(|l| l.contains("sink += (unsigned long)(n ^ k);"))
            .unwrap();
        let line = format!("recursive.c:{body}");
        assert!(
            inside
                .iter()
                .any(|i| i["what"].as_str().is_some_and(|w| w.ends_with(&line))),
            "{line} in {p}"
        );
    }
    // Allocations: parse_string's extra block, through the same recursion.
    let run = b.pinpoint(0, 2, &["--metric", "alloc"], &[]);
    assert_eq!(run.code(), Some(1), "{}", run.stderr());
    let c = chain(&run);
    assert_eq!(c[..3], ["main", "parse_value", "parse_string"], "{c:?}");
    let v = run.json();
    assert_eq!(v["pinpoint"]["bottleneck"], "parse_string");
    // On the call path main -> parse_value -> parse_string: main's 5 parses (1,000
    // strings each), not check's sixth, which calls parse_value too.
    let links = &v["pinpoint"]["chain"];
    for side in ["previous", "current"] {
        assert_eq!(links[2][side], links[1][side], "{side}: {v}");
    }
    assert_eq!(links[2]["previous"], 5000.0, "{v}");
    assert!(links[2]["note"].is_null(), "{v}");
    // Inside it, the line of the extra block's malloc (DHAT's frame in parse_string).
    let source = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/c/recursive.c"),
    )
    .unwrap();
    let extra = 1 + source
        .lines()
        .position(|l| l.contains("char *extra = malloc(len + 1);"))
        .unwrap();
    let line = format!("recursive.c:{extra}");
    let inside = v["pinpoint"]["inside"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        inside
            .iter()
            .any(|i| i["what"].as_str().is_some_and(|w| w.ends_with(&line))),
        "{line} in {v}"
    );
    // The same build on both sides (A/A): nothing, for both metrics.
    for metric in ["instructions", "alloc"] {
        let run = b.pinpoint(0, 0, &["--metric", metric], &[]).success();
        let v = run.json();
        assert!(v["pinpoint"]["bottleneck"].is_null(), "{metric}: {v}");
        assert_eq!(chain(&run), ["main"], "{metric}");
    }
}

/// `banner` got worse (+100% of its instructions, one more block) but explains almost
/// nothing of main's change: neither strategy follows it; inspected alone it did regress.
#[test]
fn a_cheap_function_that_changed_much_but_explains_little_is_not_followed() {
    let Some(b) = recursive_builds() else { return };
    for (metric, current) in [("instructions", 1), ("alloc", 2)] {
        let alone = b.pinpoint(
            0,
            current,
            &["--metric", metric, "--function", "banner"],
            &[],
        );
        assert_eq!(
            alone.code(),
            Some(1),
            "banner did get worse: {}",
            alone.stderr()
        );
        for strategy in ["binary", "linear"] {
            let run = b.pinpoint(
                0,
                current,
                &["--metric", metric, "--strategy", strategy],
                &[],
            );
            let c = chain(&run);
            assert!(
                !c.iter().any(|f| f == "banner"),
                "{metric} {strategy}: {c:?}"
            );
            // Each link says its share of the change.
            for link in run.json()["pinpoint"]["chain"].as_array().unwrap() {
                assert!(link["share_percent"].as_f64().is_some(), "{link}");
            }
        }
    }
}

/// The same build run from two paths of different lengths: `banner` reads argv[0], yet
/// with both builds run from one path the counts are the same to the instruction.
#[test]
fn both_builds_see_the_same_argv0() {
    let Some(b) = recursive_builds() else { return };
    let far = b
        .dir()
        .join("a-much-longer-directory-name/and-a-longer-file-name");
    std::fs::create_dir_all(far.parent().unwrap()).unwrap();
    std::fs::copy(b.exe(0), &far).unwrap();
    for metric in ["instructions", "alloc"] {
        let run = sbs([
            "pinpoint",
            "--format",
            "json",
            "--metric",
            metric,
            "--threshold",
            "0",
            "--previous",
            b.exe(0).to_str().unwrap(),
            "--",
            far.to_str().unwrap(),
        ]);
        assert_eq!(run.code(), Some(0), "{metric}: {}", run.stderr());
        let v = run.json();
        assert_eq!(
            v["pinpoint"]["chain"][0]["previous"], v["pinpoint"]["chain"][0]["current"],
            "{metric}: {v}"
        );
    }
}

/// Readable: a changed call list as what was added and removed; a link that changed more
/// than the call above it, with why (parse_value has two callers, main and check).
#[test]
fn a_changed_call_list_and_a_link_larger_than_its_parent_are_explained() {
    let Some(b) = recursive_builds() else { return };
    let run = b.pinpoint(0, 2, &["--metric", "alloc"], &[]);
    let p = &run.json()["pinpoint"];
    assert_eq!(p["stop"], "call_list_changed", "{p}");
    let stopped = p["stopped"].as_str().unwrap();
    assert!(
        stopped.contains("(added: ") && stopped.contains("; removed: none)"),
        "{stopped}"
    );
    assert!(!stopped.contains("] -> ["), "two full lists: {stopped}");
    let run = b.pinpoint(0, 1, &[], &[]);
    let p = &run.json()["pinpoint"];
    let note = p["chain"][2]["note"]
        .as_str()
        .unwrap_or_else(|| panic!("{p}"));
    assert!(
        note.contains("parse_value is called from 2 functions (check, main)"),
        "{note}"
    );
    // The link above changed less, and has no note.
    assert!(p["chain"][1]["note"].is_null(), "{p}");
}

/// Counts: one run per build when a second run of the previous build repeats its counts
/// (3 valgrind runs, where 3 runs per build made 6); 3 per build when it does not
/// (`vary` does work that depends on the pid).
#[test]
fn counts_take_one_run_per_build_unless_two_runs_disagree() {
    let Some(b) = recursive_builds() else { return };
    let real = real_valgrind().expect("valgrind runs, so PATH finds it");
    for (args, runs, repeated, valgrinds) in [(&[][..], 1, true, 3), (&["vary"][..], 3, false, 6)] {
        let fake = tempfile::tempdir().unwrap();
        recording_valgrind(fake.path(), &real);
        let path = std::env::join_paths(
            std::iter::once(fake.path().to_path_buf())
                .chain(std::env::split_paths(&std::env::var_os("PATH").unwrap())),
        )
        .unwrap();
        let out = Command::new(util::sbs_profile())
            .args(["pinpoint", "--format", "json", "--previous"])
            .arg(b.exe(0))
            .arg("--")
            .arg(b.exe(1))
            .args(args)
            .env("PATH", &path)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["pinpoint"]["runs"], runs, "{args:?}: {v}");
        assert_eq!(v["pinpoint"]["repeated"], repeated, "{args:?}: {v}");
        assert_eq!(v["pinpoint"]["chain"][0]["runs"], runs, "{args:?}: {v}");
        let made = std::fs::read_to_string(fake.path().join("args")).unwrap();
        assert_eq!(made.lines().count(), valgrinds, "{args:?}: {made}");
    }
    // --runs is obeyed as given.
    let run = b.pinpoint(0, 1, &["--runs", "2"], &[]);
    let v = run.json();
    assert_eq!(v["pinpoint"]["runs"], 2, "{v}");
    assert!(v["pinpoint"]["repeated"].is_null(), "{v}");
}
