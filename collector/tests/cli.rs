//! Argument errors of the `sbs-profile` binary: one clear line and exit code 2.

use std::process::Command;

fn sbs(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sbs-profile"))
        .args(args)
        .output()
        .expect("run sbs-profile");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

#[test]
fn malformed_numbers_are_rejected() {
    let cases = [
        (
            vec!["--runs", "0", "--", "true"],
            "invalid value '0' for '--runs <N>'",
        ),
        (
            vec!["--runs", "-3", "--", "true"],
            "invalid value '-3' for '--runs <N>'",
        ),
        (
            vec!["--runs", "ten", "--", "true"],
            "invalid value 'ten' for '--runs <N>'",
        ),
        (
            vec!["--warmup", "1.5", "--", "true"],
            "invalid value '1.5' for '--warmup <N>'",
        ),
        (
            vec!["--timeout", "-1", "--", "true"],
            "must be a positive duration",
        ),
        (vec!["--timeout", "soon", "--", "true"], "is not a duration"),
        (
            vec!["--confidence", "100", "--", "true"],
            "strictly between 0 and 100",
        ),
        (vec!["--env", "NOEQUALS", "--", "true"], "is not KEY=VALUE"),
        (
            vec!["-n", "a", "--name", "b", "--", "true"],
            "--name was given 2 times",
        ),
        // Counting them overflowed to an empty report with exit 0.
        (
            vec![
                "--runs",
                "18446744073709551615",
                "--warmup",
                "1",
                "--",
                "true",
            ],
            "more than 1000000000 runs per group",
        ),
        (
            vec!["--runs", "2000000000", "--", "true"],
            "more than 1000000000 runs per group",
        ),
    ];
    for (args, needle) in cases {
        let (code, err) = sbs(&args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(first_line(&err).contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn unwritable_output_fails_before_running() {
    let (code, err) = sbs(&["-o", "/nonexistent-dir/report.json", "--", "true"]);
    assert_eq!(code, Some(2));
    assert!(
        err.starts_with(
            "error: --output /nonexistent-dir/report.json: cannot write in /nonexistent-dir"
        ),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

#[test]
fn help_documents_exit_codes() {
    let out = Command::new(env!("CARGO_BIN_EXE_sbs-profile"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        help.contains("Exit codes: 0 success, 1 a metric regressed"),
        "{help}"
    );
}

#[test]
fn short_options_with_attached_values_are_options_not_the_command() {
    let out = Command::new(env!("CARGO_BIN_EXE_sbs-profile"))
        .args(["-r1", "-w0", "-fjson", "--", "true", "-r5"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["conditions"]["runs"], 1);
    assert_eq!(
        report["benchmarks"][0]["command"],
        serde_json::json!(["true", "-r5"])
    );
}

#[test]
fn completions_and_the_manual_page_come_from_the_command_line_definition() {
    let out = Command::new(env!("CARGO_BIN_EXE_sbs-profile"))
        .args(["completions", "bash"])
        .output()
        .expect("run sbs-profile");
    assert_eq!(out.status.code(), Some(0));
    let script = String::from_utf8(out.stdout).unwrap();
    for option in ["--invocations", "--export-json", "compare", "report"] {
        assert!(
            script.contains(option),
            "{option} missing from the bash completions"
        );
    }
    // The script is valid bash.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sbs-profile.bash");
    std::fs::write(&path, &script).unwrap();
    let check = Command::new("bash").arg("-n").arg(&path).status();
    assert!(
        check.expect("run bash -n").success(),
        "bash -n rejects the script"
    );

    let out = Command::new(env!("CARGO_BIN_EXE_sbs-profile"))
        .arg("man")
        .output()
        .expect("run sbs-profile");
    assert_eq!(out.status.code(), Some(0));
    let page = String::from_utf8(out.stdout).unwrap();
    assert!(page.contains(".TH sbs-profile 1"), "{page:.200}");
    assert!(
        page.contains("\\-\\-invocations"),
        "the page documents the options"
    );

    let (code, err) = sbs(&["completions", "tcsh"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("invalid value 'tcsh'"), "{err}");
}
