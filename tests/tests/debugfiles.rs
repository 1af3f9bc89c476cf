//! Separate debug files: a stripped program whose symbol table and DWARF were split off
//! (`objcopy --only-keep-debug`, `strip`, `objcopy --add-gnu-debuglink`) counts a static
//! function and an inlined copy exactly as its unstripped build does; a debug file of
//! another build or none falls back to the stripped file's exported symbols, with a note
//! saying why. Debian's `python3.11` with `python3.11-dbg` counts `list_append` (a static
//! function) and inlined copies, with both engines and `perf probe` agreeing. Needs root
//! (uprobes), gcc and binutils; the python test needs Debian's packages. Skipped with a
//! printed reason otherwise.

mod util;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use sbs_skip::{build, skip, Need};
use util::{metric, samples, sbs, sbs_env, skip_without_uprobes};

/// Each count runs with uprobes alone and with the default engine (in-process where a
/// site can be patched).
const ENGINES: [&str; 2] = ["uprobe", "auto"];

/// (label, first sample) of each detail row of a metric.
fn rows(m: &serde_json::Value) -> Vec<(String, f64)> {
    m["details"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|d| (d["label"].as_str().unwrap().to_string(), samples(d)[0]))
                .collect()
        })
        .unwrap_or_default()
}

/// Run `objcopy` or `strip` with `args` in `dir`; `None` (a recorded skip) without
/// binutils.
fn binutil(dir: &Path, tool: &str, args: &[&str]) -> Option<()> {
    build!(
        Need::Binutils,
        Command::new(tool).args(args).current_dir(dir)
    )
}

/// Split `dir/name` into a stripped program and `dir/name.debug`, linked by
/// `.gnu_debuglink`.
fn split(dir: &Path, name: &str) -> Option<()> {
    let debug = format!("{name}.debug");
    binutil(dir, "objcopy", &["--only-keep-debug", name, &debug])?;
    binutil(dir, "strip", &[name])?;
    binutil(
        dir,
        "objcopy",
        &[&format!("--add-gnu-debuglink={debug}"), name],
    )
}

/// The fixture `split_debug.c` built in `dir` as `name` with `flags` after -O2 -g.
fn build_fixture(dir: &Path, name: &str, flags: &[&str]) -> Option<PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/c/split_debug.c");
    let exe = dir.join(name);
    build!(
        Need::Gcc,
        Command::new("gcc")
            .args(["-O2", "-g", "-Wall"])
            .args(flags)
            .arg("-o")
            .arg(&exe)
            .arg(&src)
    )?;
    Some(exe)
}

/// Count `scale` and `mix` in `exe 1000` with `engine`: the report's rows of both.
fn count(engine: &str, exe: &Path, env: &[(&str, &OsStr)]) -> Vec<(String, f64)> {
    let run = sbs_env(
        [
            "--invocations-engine".as_ref(),
            engine.as_ref(),
            "--runs".as_ref(),
            "1".as_ref(),
            "-w".as_ref(),
            "0".as_ref(),
            "-f".as_ref(),
            "json".as_ref(),
            "--invocations".as_ref(),
            "scale".as_ref(),
            "--invocations".as_ref(),
            "mix".as_ref(),
            "--".as_ref(),
            exe.as_os_str(),
            "1000".as_ref(),
        ],
        env,
    )
    .success();
    let report = run.json();
    let mut out = rows(metric(&report, "invocations.scale"));
    out.extend(rows(metric(&report, "invocations.mix")));
    out
}

#[test]
fn a_split_program_counts_its_static_and_inlined_functions_like_the_unstripped_one() {
    if skip_without_uprobes("uprobes") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let Some(full) = build_fixture(d, "full", &[]) else {
        return;
    };
    let split_exe = d.join("split");
    std::fs::copy(&full, &split_exe).unwrap();
    if split(d, "split").is_none() {
        return;
    }
    let expected = vec![
        ("scale".to_string(), 1000.0),
        ("mix [inlined, 1 site]".to_string(), 1000.0),
    ];
    for engine in ENGINES {
        assert_eq!(count(engine, &full, &[]), expected, "{engine}, unstripped");
        assert_eq!(count(engine, &split_exe, &[]), expected, "{engine}, split");
    }

    // The site cache keys on the debug file too: a hit while it is the same, a miss once
    // it is replaced (the label edited in the cache file shows a hit).
    let cache = d.join("cache");
    let env = [("XDG_CACHE_HOME", cache.as_os_str())];
    assert_eq!(count("auto", &split_exe, &env), expected);
    let entries: Vec<PathBuf> = std::fs::read_dir(cache.join("sbs-profile/sites"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    let text = std::fs::read_to_string(&entries[0]).unwrap();
    let edited = text.replace("[\"scale\",", "[\"scale (cached)\",");
    assert_ne!(text, edited, "the row label is in the cache file");
    std::fs::write(&entries[0], edited).unwrap();
    assert_eq!(count("auto", &split_exe, &env)[0].0, "scale (cached)");
    let debug = d.join("split.debug");
    let kept = d.join("kept.debug");
    std::fs::rename(&debug, &kept).unwrap();
    std::fs::copy(&kept, &debug).unwrap();
    assert_eq!(
        count("auto", &split_exe, &env),
        expected,
        "a new debug file is read again"
    );

    // A debug file of another build (-O1): its build id differs, so it is not used; the
    // static function is unknown, as in a stripped program, and the error says why.
    let Some(_) = build_fixture(d, "other", &["-O1"]) else {
        return;
    };
    if binutil(d, "objcopy", &["--only-keep-debug", "other", "split.debug"]).is_none() {
        return;
    }
    let args = |pattern: &str| {
        vec![
            "--runs".to_string(),
            "1".into(),
            "--invocations".into(),
            pattern.into(),
            "--".into(),
            split_exe.display().to_string(),
            "10".into(),
        ]
    };
    let other_build = sbs_env(args("scale"), &env).fails_with(2, "is not the program's");
    other_build.check(
        other_build
            .stderr()
            .contains("(a debug file of another build)")
            && other_build
                .stderr()
                .contains("install the separate debug file of this build"),
        "the build id mismatch is said, with what to do",
    );
    // No debug file at all: today's message for a stripped program.
    std::fs::remove_file(&debug).unwrap();
    sbs(args("scale")).fails_with(2, "no separate debug file was found");
    sbs(args("mix")).fails_with(2, "has no debug info");
}

#[test]
fn without_build_ids_the_debuglink_crc_tells_the_right_debug_file() {
    if skip_without_uprobes("uprobes") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let Some(exe) = build_fixture(d, "nobid", &["-Wl,--build-id=none"]) else {
        return;
    };
    if split(d, "nobid").is_none() {
        return;
    }
    // Without a build id the in-process engine cannot tell the module: uprobes count.
    let expected = vec![
        ("scale".to_string(), 1000.0),
        ("mix [inlined, 1 site]".to_string(), 1000.0),
    ];
    assert_eq!(count("uprobe", &exe, &[]), expected);
    let Some(_) = build_fixture(d, "other", &["-O1", "-Wl,--build-id=none"]) else {
        return;
    };
    if binutil(d, "objcopy", &["--only-keep-debug", "other", "nobid.debug"]).is_none() {
        return;
    }
    sbs([
        "--runs".as_ref(),
        "1".as_ref(),
        "--invocations".as_ref(),
        "scale".as_ref(),
        "--".as_ref(),
        exe.as_os_str(),
    ])
    .fails_with(
        2,
        "that .gnu_debuglink records (a debug file of another build)",
    );
}

/// Debian's stripped interpreter, whose symbols and DWARF `python3.11-dbg` installs.
const PYTHON: &str = "/usr/bin/python3.11";

/// Appends exactly N times through `list.append`: a `map` over the bound method, which no
/// specialised bytecode (3.11's `PRECALL_NO_KW_LIST_APPEND`) can bypass.
const WORKLOAD: &str = r#"
import sys
from collections import deque
n = int(sys.argv[1])
lst = []
deque(map(lst.append, range(n)), maxlen=0)
assert len(lst) == n
"#;

/// Whether Debian's python3.11 and its debug package are here (asked of dpkg, not of
/// the code under test); a recorded skip when not.
fn python_dbg() -> bool {
    let installed = Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", "python3.11-dbg"])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("ok installed"));
    if !Path::new(PYTHON).exists() || !installed {
        skip!(
            Need::PythonDbg,
            "Debian's python3.11 with its debug symbols is missing (apt-get install python3.11 python3.11-dbg)"
        );
        return false;
    }
    true
}

/// The report of `python3.11 -I -S workload.py N` counting `patterns` with `engine`.
fn python_report(dir: &Path, engine: &str, n: u32, patterns: &[&str]) -> serde_json::Value {
    let mut args: Vec<String> = ["--invocations-engine", engine, "--runs", "1", "-w", "0"]
        .map(String::from)
        .to_vec();
    args.extend(["-f".into(), "json".into(), "--invocations-detail".into()]);
    for p in patterns {
        args.extend(["--invocations".into(), p.to_string()]);
    }
    args.extend([
        "--".into(),
        PYTHON.into(),
        "-I".into(),
        "-S".into(),
        dir.join("workload.py").display().to_string(),
        n.to_string(),
    ]);
    sbs(args).success().json()
}

#[test]
fn debian_python_counts_list_append_and_inlined_copies_from_python3_11_dbg() {
    if !python_dbg() || skip_without_uprobes("uprobes") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("workload.py"), WORKLOAD).unwrap();
    const N: u32 = 20_000;
    let patterns = ["list_append", "_PyList_AppendTakeRef"];
    let mut totals = Vec::new();
    for engine in ENGINES {
        let idle = python_report(dir.path(), engine, 0, &patterns);
        let busy = python_report(dir.path(), engine, N, &patterns);
        // A static function of the interpreter, known only from the debug file's symbol
        // table: N calls more.
        let append = |r: &serde_json::Value| samples(metric(r, "invocations.list_append"))[0];
        assert_eq!(append(&busy) - append(&idle), f64::from(N), "{engine}");
        let m = metric(&busy, "invocations.list_append");
        assert_eq!(
            rows(m)[0].0,
            format!(
                "list_append [clone .lto_priv.0] [{}]",
                match engine {
                    "uprobe" => "uprobe",
                    _ => "inproc",
                }
            )
        );
        // An inlined function, known only from the debug file's DWARF: its copy in
        // list_append is entered once per call of it.
        let take = metric(&busy, "invocations._PyList_AppendTakeRef");
        let in_append: Vec<f64> = rows(take)
            .into_iter()
            .filter(|(l, _)| l.contains("[inlined in list_append.lto_priv.0 at "))
            .map(|(_, v)| v)
            .collect();
        assert_eq!(in_append, vec![append(&busy)], "{take:#}");
        totals.push((engine, append(&busy), samples(take)[0]));
    }
    // Both engines count the same calls.
    assert_eq!(totals[0].1, totals[1].1, "{totals:?}");
    assert_eq!(totals[0].2, totals[1].2, "{totals:?}");

    // perf probe, which reads the same debug file, agrees on list_append.
    if Command::new("perf").arg("--version").output().is_err() {
        skip!(
            Need::Perf,
            "perf is not installed (apt-get install linux-perf): list_append not compared with perf probe"
        );
        return;
    }
    let workload = dir.path().join("workload.py");
    let (by_perf, text) = perf_probe_count(
        PYTHON,
        "list_append",
        &[workload.as_os_str(), N.to_string().as_ref()],
    );
    assert_eq!(by_perf, Some(totals[0].1), "perf stat: {text}");
}

/// Calls of `function` (a symbol of `file`, found by `perf probe` as it finds it) in one
/// run of `python3.11 -I -S ARGS`, counted by a `perf probe` event and `perf stat`; and
/// what `perf stat` printed.
fn perf_probe_count(file: &str, function: &str, args: &[&OsStr]) -> (Option<f64>, String) {
    let group = format!("sbsdbg{}", std::process::id());
    let event = format!("{group}:{function}");
    let added = Command::new("perf")
        .args(["probe", "-q", "-x", file, "-a"])
        .arg(format!("{event}={function}"))
        .output()
        .unwrap();
    assert!(added.status.success(), "perf probe: {added:?}");
    let stat = Command::new("perf")
        .args(["stat", "-x", ",", "-e", &event, "--", PYTHON, "-I", "-S"])
        .args(args)
        .output()
        .unwrap();
    let _ = Command::new("perf")
        .args(["probe", "-q", "-d", &format!("{group}:*")])
        .output();
    let text = String::from_utf8_lossy(&stat.stderr).into_owned();
    let count = text
        .lines()
        .find(|l| l.contains(&event))
        .and_then(|l| l.split(',').next()?.trim().parse().ok());
    (count, text)
}

/// `Py_XDECREF`, inlined 1,300 times into the stripped interpreter: its copies are found
/// through the debug file and counted (not refused as "stripped").
#[test]
fn debian_python_counts_the_inlined_copies_of_py_xdecref() {
    if !python_dbg() || skip_without_uprobes("the sites that cannot be patched") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("workload.py"), WORKLOAD).unwrap();
    let run = sbs([
        "--max-probes",
        "5000",
        "--runs",
        "1",
        "-w",
        "0",
        "-f",
        "json",
        "--invocations",
        "Py_XDECREF",
        "--",
        PYTHON,
        "-I",
        "-S",
        dir.path().join("workload.py").to_str().unwrap(),
        "10",
    ]);
    let run = run.success();
    let report = run.json();
    let m = metric(&report, "invocations.Py_XDECREF");
    let sites: usize = rows(m)
        .iter()
        .filter_map(|(label, _)| {
            label
                .strip_prefix("Py_XDECREF [inlined, ")?
                .split(' ')
                .next()?
                .parse::<usize>()
                .ok()
        })
        .sum();
    run.check(sites > 1000, "over a thousand inlined copies counted");
    run.check(samples(m)[0] > 0.0, "they ran");
    let warnings = report["benchmarks"][0]["warnings"].to_string();
    run.check(
        !warnings.contains("stripped"),
        "no copy refused because the interpreter is stripped",
    );
}

/// `_json`'s `scanstring_unicode` lives in a module python loads at run time (`dlopen`):
/// named without its library it is no function of the program (exit 2, with how to name
/// it); named `LIBRARY:NAME` it is counted once per JSON string by uprobes, equal to
/// `perf probe` on the same function, and by the in-process engine, which patches the
/// module as `dlopen` maps it (the default engine counts it in-process too).
#[test]
fn a_function_of_a_library_loaded_at_run_time_is_counted_when_its_library_is_named() {
    const JSON: &str = "/usr/lib/python3.11/lib-dynload/_json.cpython-311-x86_64-linux-gnu.so";
    if !python_dbg() || skip_without_uprobes("a library loaded at run time") {
        return;
    }
    if !Path::new(JSON).exists() {
        skip!(
            Need::PythonDbg,
            "{JSON} is missing (apt-get install python3.11)"
        );
        return;
    }
    // Two strings per document: 2N calls.
    const N: u64 = 3000;
    let script = format!("import json\nfor _ in range({N}): json.loads('[\"a\", \"b\"]')\n");
    let dir = tempfile::tempdir().unwrap();
    let workload = dir.path().join("json_workload.py");
    std::fs::write(&workload, script).unwrap();
    let count = |pattern: &str, engine: &str| {
        sbs([
            "--runs",
            "1",
            "-w",
            "0",
            "-f",
            "json",
            "--invocations-engine",
            engine,
            "--invocations",
            pattern,
            "--",
            PYTHON,
            "-I",
            "-S",
            workload.to_str().unwrap(),
        ])
    };
    count("scanstring_unicode", "auto").fails_with(2, "LIBRARY:NAME");
    let named = format!("{JSON}:scanstring_unicode");
    for (engine, source) in [
        ("uprobe", "uprobe"),
        ("inproc", "inproc"),
        ("auto", "inproc"),
    ] {
        let report = count(&named, engine).success().json();
        let m = metric(&report, &format!("invocations.{named}"));
        assert_eq!(samples(m), vec![2.0 * N as f64], "{engine}: {m:#}");
        assert_eq!(m["exact"], true, "{engine}: {m:#}");
        assert_eq!(m["source"], source, "{engine}: {m:#}");
    }

    if Command::new("perf").arg("--version").output().is_err() {
        skip!(
            Need::Perf,
            "perf is not installed (apt-get install linux-perf): scanstring_unicode not compared with perf probe"
        );
        return;
    }
    let (by_perf, text) = perf_probe_count(JSON, "scanstring_unicode", &[workload.as_os_str()]);
    assert_eq!(by_perf, Some(2.0 * N as f64), "perf stat: {text}");
}
