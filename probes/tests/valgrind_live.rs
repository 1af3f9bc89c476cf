//! The valgrind instruction count against valgrind's own figure for the same command.

use std::process::Command;

use sbs_probes::valgrind::{find_valgrind, parse_log, parse_out_file_summary, wrapper};
use sbs_skip::{skip, Need};

#[test]
fn wrapper_count_equals_cachegrinds_own_summary() {
    let valgrind = match find_valgrind() {
        Ok(v) => v,
        Err(e) => {
            skip!(Need::Valgrind, "{e}");
            return;
        }
    };
    // Our wrapper, its log on stderr (fd 2) for this test.
    let w = wrapper(&valgrind, 2);
    let out = Command::new(&w[0])
        .args(&w[1..])
        .args(["/bin/sh", "-c", "/bin/true; /bin/true"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let ours = parse_log(&String::from_utf8_lossy(&out.stderr)).unwrap();
    assert_eq!(ours.per_process.len(), 3, "sh and two children: {ours:?}");

    // Valgrind's own figure: the `summary:` lines of cachegrind's output files, one per
    // process (%p), for the same command.
    let dir = tempfile::tempdir().unwrap();
    let pattern = dir.path().join("cg.%p");
    let run = Command::new(&valgrind)
        .args([
            "--tool=cachegrind",
            "--cache-sim=no",
            "--branch-sim=no",
            "--trace-children=yes",
            "-q",
        ])
        .arg(format!("--cachegrind-out-file={}", pattern.display()))
        .args(["/bin/sh", "-c", "/bin/true; /bin/true"])
        .output()
        .unwrap();
    // Valgrind's notes (cache warnings) stay out of the test output unless it failed.
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let mut theirs = 0;
    let mut files = 0;
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let text = std::fs::read_to_string(e.unwrap().path()).unwrap();
        theirs += parse_out_file_summary(&text).unwrap();
        files += 1;
    }
    assert_eq!(files, 3);
    assert_eq!(ours.total, theirs);
}
