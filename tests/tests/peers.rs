//! Real programs nobody here wrote, as the judge of "the program runs as it would alone":
//! Python's own test modules, and sqlite3, xz, gzip and git, give the same results, bytes
//! and exit status bare, under `--alloc`, and under in-process counting with wide patterns.

mod util;

use std::path::Path;
use std::process::{Command, Output};

use sbs_skip::{skip, Need};

/// Debian's interpreter, whose test suite and symbols the packages install.
const PYTHON: &str = "/usr/bin/python3.11";

/// Exported dict functions of CPython 3.11: twenty patterns, counted in-process (the
/// symbols and DWARF come from `python3.11-dbg`), most with inlined copies too. Not
/// `PyDict_GetItemWithError` nor `PyDict_DelItem`: since the debug file's symbol table is
/// read, six of their inlined copies are known to sit in functions whose jump tables
/// forbid a patch, and with uprobes counting them (`auto`) `test_subprocess`'s
/// `test_leak_fast_process_del_killed` failed: its killed child was not reaped yet when
/// the test looked.
const DICT_FUNCTIONS: [&str; 20] = [
    "PyDict_SetItem",
    "PyDict_GetItem",
    "PyDict_DelItemString",
    "PyDict_New",
    "_PyDict_SetItem_KnownHash",
    "PyDict_Next",
    "PyDict_Size",
    "PyDict_Keys",
    "PyDict_Values",
    "PyDict_Items",
    "PyDict_Copy",
    "PyDict_Clear",
    "PyDict_Contains",
    "PyDict_Update",
    "PyDict_Merge",
    "PyDict_SetItemString",
    "PyDict_GetItemString",
    "PyDict_SetDefault",
    "_PyDict_Pop",
    "PyDict_MergeFromSeq2",
];

/// How a program is run: bare, or under sbs-profile with these options.
fn modes() -> Vec<(&'static str, Vec<String>)> {
    let mut inproc = vec!["--invocations-engine".to_string(), "inproc".to_string()];
    for f in DICT_FUNCTIONS {
        inproc.push("--invocations".into());
        inproc.push(f.into());
    }
    vec![
        ("bare", Vec::new()),
        ("--alloc", vec!["--alloc".into()]),
        ("in-process counting", inproc),
    ]
}

/// Run `argv` in `dir` bare (`options` empty) or as the one measured run of sbs-profile
/// with `options`, its output shown and its report written to a file: what the program
/// printed and its exit status are then the program's own.
fn run(dir: &Path, options: &[String], argv: &[&str]) -> Output {
    if options.is_empty() {
        return Command::new(argv[0])
            .args(&argv[1..])
            .current_dir(dir)
            .output()
            .expect("run the program");
    }
    let report = dir.join("report.json");
    Command::new(util::sbs_profile())
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
        .args(options)
        .arg("--")
        .args(argv)
        .current_dir(dir)
        .output()
        .expect("run sbs-profile")
}

/// The lines of regrtest's summary: which tests ran, and how they ended.
fn regrtest_summary(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| {
            l.starts_with("Tests result:")
                || l.ends_with(" OK.")
                || l.contains(" failed")
                || l.contains(" skipped")
        })
        .map(str::to_owned)
        .collect()
}

/// What regrtest printed, line by line, without what changes from run to run: the clock
/// and load average that start a progress line, and the durations. A "NAME passed in 31.2
/// sec" line (or line end after " -- ") is left out: regrtest prints it only for a test
/// slower than 30 s, so a loaded machine prints it in one run and not in the next.
fn without_timings(text: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(text)
        .lines()
        .filter_map(|l| {
            let l = match l.split_once(" load avg: ") {
                Some((_, rest)) => rest.split_once(' ').map_or("", |(_, r)| r),
                None => l,
            };
            if l.contains(" passed in ") {
                // "[2/3] test_b -- test_a passed in 31.2 sec" keeps its "[2/3] test_b".
                l.split_once(" -- ")
                    .map(|(progress, _)| progress.to_string())
            } else if l.starts_with("Total duration:") {
                Some("Total duration:".to_string())
            } else {
                Some(l.to_string())
            }
        })
        .collect()
}

/// Whether Debian's python3.11, its test suite and its symbols are here; a recorded skip
/// when not.
fn python_testsuite() -> bool {
    let suite = Path::new("/usr/lib/python3.11/test/test_json");
    let symbols = Command::new("sh")
        .args(["-c", "ls /usr/lib/debug/.build-id/*/*.debug | head -1"])
        .output()
        .is_ok_and(|o| !o.stdout.is_empty());
    if !Path::new(PYTHON).exists() || !suite.exists() || !symbols {
        skip!(
            Need::PythonTestsuite,
            "Debian's python3.11 with its test suite and symbols is missing \
             (apt-get install python3.11 libpython3.11-testsuite python3.11-dbg)"
        );
        return false;
    }
    true
}

/// Python's own test modules pass exactly as they do alone: the same summary (tests run,
/// passed, skipped, failed), the same stdout but for timings, the same stderr and exit
/// status bare, under `--alloc`, and with twenty dict functions counted in-process.
/// (`test_json` failed 12 `test_tool` tests under `--alloc` when the agent was named
/// `/proc/self/fd/N`: children that close their descriptors printed a loader error; and
/// `test_subprocess`'s children run as `nobody` printed four more into its stderr while it
/// was named `/proc/<sbs-profile's pid>/fd/N`.)
#[test]
fn python_s_own_test_modules_pass_alike_bare_and_measured() {
    if !python_testsuite() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for module in [
        "test_json",
        "test_dict",
        "test_list",
        "test_re",
        "test_subprocess",
    ] {
        let argv = [PYTHON, "-m", "test", module];
        let alone = run(dir.path(), &[], &argv);
        let expected = regrtest_summary(&alone);
        assert!(
            alone.status.success() && expected.iter().any(|l| l == "Tests result: SUCCESS"),
            "{module} fails alone on this machine: {expected:?}"
        );
        for (mode, options) in modes().into_iter().skip(1) {
            let measured = run(dir.path(), &options, &argv);
            assert_eq!(
                regrtest_summary(&measured),
                expected,
                "{module} under {mode}: {}",
                String::from_utf8_lossy(&measured.stderr)
            );
            assert!(
                measured.status.success(),
                "{module} under {mode}: {}",
                String::from_utf8_lossy(&measured.stderr)
            );
            assert_eq!(
                without_timings(&measured.stdout),
                without_timings(&alone.stdout),
                "{module} under {mode}: stdout"
            );
            assert_eq!(
                String::from_utf8_lossy(&measured.stderr),
                String::from_utf8_lossy(&alone.stderr),
                "{module} under {mode}: stderr"
            );
        }
    }
}

/// sqlite3, xz with threads, gzip and git print the same bytes and exit the same way bare
/// and measured, with `--alloc` and with the allocator's functions and a few of libc's
/// counted by the default engine (in-process where it can, uprobes elsewhere: root).
#[test]
fn real_programs_print_the_same_bytes_bare_and_measured() {
    if util::skip_without_uprobes("the sites in-process counting refuses need uprobes") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let text: String = (0..40_000)
        .map(|i| format!("line {i} {}\n", i * 7919 % 104_729))
        .collect();
    std::fs::write(&data, text).unwrap();
    let data = data.to_str().unwrap();
    let programs: Vec<Vec<&str>> = vec![
        vec![
            "sqlite3",
            ":memory:",
            "create table t(a); insert into t select value from generate_series(1, 20000); \
             select count(*), sum(a) from t;",
        ],
        vec!["xz", "-T2", "-3", "-c", data],
        vec!["gzip", "-c", data],
        vec!["git", "--version"],
        vec!["git", "hash-object", data],
        // A failing command fails the same way (sbs-profile's own exit code aside).
        vec!["gzip", "-d", "-c", data],
    ];
    let alloc_functions = [
        "malloc", "free", "calloc", "realloc", "getenv", "fwrite", "fclose",
    ];
    let mut counted = Vec::new();
    for f in alloc_functions {
        counted.push("--invocations".into());
        counted.push(f.into());
    }
    let mut ran = 0;
    for argv in &programs {
        if which(argv[0]).is_none() {
            continue;
        }
        ran += 1;
        let alone = run(dir.path(), &[], argv);
        for (mode, options) in [
            ("--alloc", vec!["--alloc".to_string()]),
            ("--invocations", counted.clone()),
        ] {
            let mut options = options;
            if !alone.status.success() {
                options.push("--ignore-failure".into());
            }
            let measured = run(dir.path(), &options, argv);
            assert!(
                measured.stdout == alone.stdout,
                "{argv:?} under {mode} printed other bytes ({} against {} alone): {}",
                measured.stdout.len(),
                alone.stdout.len(),
                String::from_utf8_lossy(&measured.stderr)
            );
            if alone.status.success() {
                assert!(
                    measured.status.success(),
                    "{argv:?} under {mode}: {}",
                    String::from_utf8_lossy(&measured.stderr)
                );
            } else {
                // The child's own error message is shown, unchanged, before ours.
                let own = String::from_utf8_lossy(&alone.stderr);
                let theirs = String::from_utf8_lossy(&measured.stderr);
                assert!(
                    theirs.starts_with(own.as_ref()),
                    "{argv:?} under {mode}: {theirs}"
                );
            }
        }
    }
    assert!(ran > 0, "none of sqlite3, xz, gzip, git is installed");
}

fn which(program: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(program))
        .find(|p| p.exists())
}
