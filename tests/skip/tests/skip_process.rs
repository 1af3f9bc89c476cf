//! `skip!` as a test binary sees it: this binary runs itself as a child, asking for the
//! ignored test below only, under the variables each case sets, and reads what libtest and
//! the summary at exit printed.

use std::path::Path;
use std::process::{Command, Output};

use sbs_skip::{skip, Need, LOG_VAR, REQUIRE_VAR};

#[test]
#[ignore = "a child process of the tests below runs it, with the variables they set"]
fn child_lacking_valgrind() {
    skip!(Need::Valgrind, "valgrind is {}", "missing\n(on purpose)");
}

/// Run `child_lacking_valgrind` in a child, with these values of the two variables.
fn child(require: Option<&str>, log: Option<&Path>) -> Output {
    let exe = std::env::current_exe().expect("path of this test binary");
    let mut cmd = Command::new(exe);
    cmd.args(["--ignored", "--exact", "child_lacking_valgrind"])
        .env_remove(REQUIRE_VAR)
        .env_remove(LOG_VAR);
    if let Some(r) = require {
        cmd.env(REQUIRE_VAR, r);
    }
    if let Some(l) = log {
        cmd.env(LOG_VAR, l);
    }
    cmd.output().expect("run this test binary as a child")
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const LINE: &str =
    "skipped: skip_process::child_lacking_valgrind: valgrind is missing (on purpose) [needs valgrind]";

#[test]
fn a_skip_passes_and_is_listed_at_exit_and_in_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("skips.txt");
    let out = child(Some("root,gcc"), Some(&log));
    let (stdout, stderr) = text(&out);
    let all = format!("--- stdout\n{stdout}\n--- stderr\n{stderr}");
    assert!(out.status.success(), "{all}");
    assert!(
        stdout.contains("test child_lacking_valgrind ... ok"),
        "{all}"
    );
    // The summary bypasses libtest's capture: the test passed, yet its skip is shown.
    assert!(
        stderr.contains("1 skipped in skip_process (") && stderr.contains(LINE),
        "{all}"
    );
    assert_eq!(std::fs::read_to_string(&log).unwrap(), format!("{LINE}\n"));
}

#[test]
fn a_skip_of_a_promised_capability_fails_the_test() {
    let out = child(Some("root,valgrind"), None);
    let (stdout, stderr) = text(&out);
    let all = format!("--- stdout\n{stdout}\n--- stderr\n{stderr}");
    assert_eq!(out.status.code(), Some(101), "{all}");
    assert!(
        stdout.contains("test child_lacking_valgrind ... FAILED"),
        "{all}"
    );
    assert!(
        format!("{stdout}{stderr}").contains("supposed to have `valgrind`"),
        "{all}"
    );
    // A failure is not listed as a skip.
    assert!(!stderr.contains("skipped in"), "{all}");
}

#[test]
fn a_misspelt_capability_fails_rather_than_promising_nothing() {
    let out = child(Some("valgirnd"), None);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(101), "{stdout}{stderr}");
    assert!(
        format!("{stdout}{stderr}").contains("`valgirnd`, which is not a capability"),
        "{stdout}{stderr}"
    );
}
