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
            "at most 1000000000 runs per group",
        ),
        (
            vec!["--runs", "2000000000", "--", "true"],
            "at most 1000000000 runs per group",
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

/// The candidates bash's completion of `sbs-profile` offers for the last of `words`: the
/// generated script is sourced, and the function it registers for `sbs-profile` is called
/// as bash calls it on a Tab (COMP_WORDS, COMP_CWORD; the command, the word and the one
/// before it as arguments).
fn bash_candidates(script: &std::path::Path, words: &[&str]) -> Vec<String> {
    let program = r#"
        source "$1"; shift
        spec=($(complete -p sbs-profile)) || exit 3
        for ((i = 0; i < ${#spec[@]}; i++)); do
            [[ ${spec[i]} == -F ]] && fn=${spec[i + 1]}
        done
        [[ -n $fn ]] || exit 4
        COMP_WORDS=("$@")
        COMP_CWORD=$(($# - 1))
        COMP_LINE="$*"
        COMP_POINT=${#COMP_LINE}
        "$fn" sbs-profile "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
        printf '%s\n' "${COMPREPLY[@]}"
    "#;
    let out = Command::new("bash")
        .args(["-c", program, "bash"])
        .arg(script)
        .args(words)
        .output()
        .expect("run bash");
    assert!(
        out.status.success(),
        "bash failed for {words:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

#[test]
fn bash_completes_the_options_of_each_subcommand() {
    // clap_complete's bash script never matched a subcommand of a program whose name has a
    // hyphen (clap-rs/clap#6421): `sbs-profile pinpoint --me<Tab>` offered nothing.
    let out = Command::new(env!("CARGO_BIN_EXE_sbs-profile"))
        .args(["completions", "bash"])
        .output()
        .expect("run sbs-profile");
    assert_eq!(out.status.code(), Some(0));
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("sbs-profile.bash");
    std::fs::write(&script, &out.stdout).unwrap();

    let cases: [(&[&str], &str); 6] = [
        (&["sbs-profile", "--invoc"], "--invocations"),
        (&["sbs-profile", "pin"], "pinpoint"),
        (&["sbs-profile", "pinpoint", "--me"], "--metric"),
        (&["sbs-profile", "pinpoint", "--metric", ""], "alloc-bytes"),
        (&["sbs-profile", "report", "--hist"], "--history"),
        (&["sbs-profile", "compare", "--sa"], "--save-baseline"),
    ];
    for (words, expected) in cases {
        let candidates = bash_candidates(&script, words);
        assert!(
            candidates.iter().any(|c| c == expected),
            "`{}<Tab>` offers {candidates:?}, not {expected}",
            words.join(" ")
        );
    }
    // Options of one subcommand are not offered for another.
    let candidates = bash_candidates(&script, &["sbs-profile", "report", "--prev"]);
    assert!(candidates.is_empty(), "{candidates:?}");
}

#[test]
fn every_manual_page_the_pages_refer_to_is_there() {
    // The main page's SUBCOMMANDS section names sbs-profile-compare(1) and the others,
    // which no command wrote before.
    let dir = tempfile::tempdir().unwrap();
    let man1 = dir.path().join("man1");
    let out = Command::new(env!("CARGO_BIN_EXE_sbs-profile"))
        .args(["man", "--dir"])
        .arg(&man1)
        .output()
        .expect("run sbs-profile");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut files: Vec<String> = std::fs::read_dir(&man1)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    files.sort();
    assert!(files.contains(&"sbs-profile.1".to_string()), "{files:?}");
    let mut referred = 0;
    for file in &files {
        let page = std::fs::read_to_string(man1.join(file)).unwrap();
        assert!(page.starts_with(".ie") || page.contains(".TH "), "{file}");
        // References look like `sbs\-profile\-pinpoint(1)` in roff.
        for (at, _) in page.match_indices("(1)") {
            let start = page[..at]
                .rfind(|c: char| c.is_whitespace())
                .map_or(0, |i| i + 1);
            let name = page[start..at].replace("\\-", "-");
            if name.starts_with("sbs-profile") {
                referred += 1;
                assert!(
                    files.contains(&format!("{name}.1")),
                    "{file} refers to {name}(1), which is not among {files:?}"
                );
            }
        }
    }
    assert!(referred >= 5, "the main page lists the subcommands' pages");

    // One subcommand's page on stdout, as `--dir` writes it.
    let out = Command::new(env!("CARGO_BIN_EXE_sbs-profile"))
        .args(["man", "pinpoint"])
        .output()
        .expect("run sbs-profile");
    assert_eq!(out.status.code(), Some(0));
    let page = String::from_utf8(out.stdout).unwrap();
    assert!(page.contains(".TH sbs-profile-pinpoint 1"), "{page:.200}");
    assert!(page.contains("\\-\\-previous"), "{page:.200}");
    assert_eq!(
        page,
        std::fs::read_to_string(man1.join("sbs-profile-pinpoint.1")).unwrap()
    );
    let (code, err) = sbs(&["man", "pinpiont"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("invalid value 'pinpiont'"), "{err}");
    assert!(err.contains("pinpoint"), "{err}");
}

#[test]
fn short_help_fits_a_screen_and_long_help_is_grouped() {
    let out = Command::new(env!("CARGO_BIN_EXE_sbs-profile"))
        .arg("-h")
        .output()
        .unwrap();
    let short = String::from_utf8(out.stdout).unwrap();
    assert!(
        short.lines().count() <= 60,
        "{} lines:\n{short}",
        short.lines().count()
    );
    let out = Command::new(env!("CARGO_BIN_EXE_sbs-profile"))
        .arg("--help")
        .output()
        .unwrap();
    let long = String::from_utf8(out.stdout).unwrap();
    let headings = [
        "What to measure:",
        "How to run:",
        "Statistics and the gate:",
        "Output:",
        "History:",
    ];
    for help in [&short, &long] {
        let at: Vec<Option<usize>> = headings.iter().map(|h| help.find(h)).collect();
        assert!(at.iter().all(Option::is_some), "{at:?}\n{help}");
        assert!(at.windows(2).all(|w| w[0] < w[1]), "{at:?}\n{help}");
    }
    // -h is the common options; --help has them all.
    assert!(!short.contains("--export-csv") && long.contains("--export-csv"));
}

#[test]
fn the_manual_on_a_terminal_is_formatted() {
    // `script` gives the command a terminal for its stdout; MANPAGER=cat prints what the
    // pager would show.
    if Command::new("script").arg("--version").output().is_err() {
        sbs_skip::skip!(
            sbs_skip::Need::UtilLinux,
            "`script` is not installed (apt-get install bsdutils)"
        );
        return;
    }
    let exe = env!("CARGO_BIN_EXE_sbs-profile");
    let out = Command::new("script")
        .args(["-qec", &format!("{exe} man compare"), "/dev/null"])
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "80")
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    let has_man = Command::new("man").arg("--version").output().is_ok();
    if has_man {
        assert!(out.status.success(), "{shown}");
        assert!(!shown.contains(".TH "), "roff on a terminal: {shown:.500}");
        assert!(
            shown.contains("SYNOPSIS") || shown.contains("S\x08SY"),
            "{shown:.500}"
        );
    } else {
        assert!(shown.contains("`man` could not be started"), "{shown:.500}");
    }
    // Into a pipe it stays roff, for `> sbs-profile.1`.
    let (code, _) = sbs(&["man"]);
    assert_eq!(code, Some(0));
    let out = Command::new(exe).arg("man").output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains(".TH sbs-profile 1"));
}

#[test]
fn bash_completes_page_names_and_bench_targets() {
    let out = Command::new(env!("CARGO_BIN_EXE_sbs-profile"))
        .args(["completions", "bash"])
        .output()
        .expect("run sbs-profile");
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("sbs-profile.bash");
    std::fs::write(&script, &out.stdout).unwrap();

    let pages = bash_candidates(&script, &["sbs-profile", "man", ""]);
    for page in ["compare", "pinpoint", "report"] {
        assert!(pages.iter().any(|p| p == page), "{pages:?}");
    }

    // A cargo project with two bench targets; the completion runs in its directory with
    // this sbs-profile first in PATH.
    let project = dir.path().join("proj");
    std::fs::create_dir_all(project.join("benches")).unwrap();
    std::fs::create_dir_all(project.join("src")).unwrap();
    std::fs::write(
        project.join("Cargo.toml"),
        "[package]\nname = \"proj\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
         [[bench]]\nname = \"parse\"\nharness = false\n\n\
         [[bench]]\nname = \"print\"\nharness = false\n",
    )
    .unwrap();
    std::fs::write(project.join("src/lib.rs"), "").unwrap();
    for b in ["parse", "print"] {
        std::fs::write(project.join(format!("benches/{b}.rs")), "fn main() {}\n").unwrap();
    }
    let exe_dir = std::path::Path::new(env!("CARGO_BIN_EXE_sbs-profile"))
        .parent()
        .unwrap()
        .to_owned();
    let path = format!(
        "{}:{}",
        exe_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let program = r#"
        source "$1"; shift
        COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}
        _sbs__profile sbs-profile "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
        printf '%s\n' "${COMPREPLY[@]}"
    "#;
    let out = Command::new("bash")
        .args(["-c", program, "bash"])
        .arg(&script)
        .args(["sbs-profile", "--bench", "p"])
        .current_dir(&project)
        .env("PATH", path)
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .unwrap();
    let got: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    assert_eq!(
        got,
        ["parse", "print"],
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
