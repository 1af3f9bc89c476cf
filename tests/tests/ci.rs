//! The GitHub Actions workflow of docs/ci/benchmarks.yml: its measuring step, run as it is
//! written (bash, the same env), saves a baseline on a push and gates a pull request.

mod util;

use std::path::Path;
use std::process::Command;

/// The `run:` block of the step named `name`, unindented.
fn step_script(workflow: &str, name: &str) -> String {
    let mut lines = workflow
        .lines()
        .skip_while(|l| l.trim() != format!("- name: {name}"));
    lines
        .next()
        .unwrap_or_else(|| panic!("no step `{name}` in the workflow"));
    let mut lines = lines.skip_while(|l| l.trim() != "run: |");
    lines
        .next()
        .unwrap_or_else(|| panic!("step `{name}` has no `run: |` block"));
    let block: Vec<&str> = lines
        .take_while(|l| l.trim().is_empty() || l.starts_with("          "))
        .collect();
    block
        .iter()
        .map(|l| l.get(10..).unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Run the measuring step in `dir` as GitHub would for `event`, with the workflow's
/// benchmark replaced by `bench` (the debug build of the bundled example); the exit code
/// the step wrote to `$GITHUB_OUTPUT`.
fn measure(script: &str, dir: &Path, event: &str, bench: &str) -> String {
    // Timing on this shared test machine would make the gate's answer depend on the load;
    // the counts decide alone here.
    let script = script
        .replace("./target/release/wordfreq", bench)
        .replace(" --time ", " ");
    run_step(&script, dir, event)
}

/// Run a step's script in `dir` as GitHub would for `event`, with this build of
/// sbs-profile first in `PATH`; what it wrote to `$GITHUB_OUTPUT`.
fn run_step(script: &str, dir: &Path, event: &str) -> String {
    let output = dir.join("github_output");
    let _ = std::fs::remove_file(&output);
    let sbs_dir = util::sbs_profile();
    let path = format!(
        "{}:{}",
        sbs_dir.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let status = Command::new("bash")
        .args(["-e", "-c", script])
        .current_dir(dir)
        .env("PATH", path)
        .env("EVENT", event)
        .env("GITHUB_OUTPUT", &output)
        .status()
        .expect("run bash");
    assert!(status.success(), "the step itself failed");
    std::fs::read_to_string(&output).unwrap()
}

#[test]
fn the_workflow_saves_a_baseline_on_main_and_gates_a_pull_request() {
    let workflow = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/ci/benchmarks.yml"),
    )
    .unwrap();
    let script = step_script(&workflow, "Measure");
    assert!(script.contains("sbs-profile --alloc --time "), "{script}");
    let dir = tempfile::tempdir().unwrap();
    let wordfreq = fixture!("wordfreq");

    // main: the baseline is saved, nothing to gate.
    let out = measure(&script, dir.path(), "push", &format!("{wordfreq} 20000"));
    assert_eq!(out.trim(), "code=0");
    assert!(dir.path().join(".sbs").is_dir());

    // A pull request that allocates 5% more: the gate's code is 1, the comment names it.
    let out = measure(
        &script,
        dir.path(),
        "pull_request",
        &format!("{wordfreq} 21000"),
    );
    assert_eq!(out.trim(), "code=1");
    let report = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    assert!(
        report.contains("regressed against baseline \\`main\\`: alloc.count +"),
        "{report}"
    );
    let bmf: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("bmf.json")).unwrap())
            .unwrap();
    assert!(bmf["wordfreq"]["alloc.count"]["value"].as_f64().unwrap() > 0.0);

    // The same work again: code 0.
    let out = measure(
        &script,
        dir.path(),
        "pull_request",
        &format!("{wordfreq} 20000"),
    );
    assert_eq!(out.trim(), "code=0");
}

/// docs/ci/compare.yml, the relative way: its compare step, run as written, with the base
/// and the pull request replaced by two commands of the bundled example. 5% more
/// allocations in the pull request: code 1 and a report that names alloc.count; the same
/// work on both sides: code 0.
#[test]
fn the_relative_workflow_compares_a_pull_request_with_its_base() {
    let workflow = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/ci/compare.yml"),
    )
    .unwrap();
    let script = step_script(&workflow, "Compare");
    assert!(
        script.contains("sbs-profile compare --alloc --time ")
            && script.contains("./wordfreq-base ./wordfreq-pr"),
        "{script}"
    );
    let dir = tempfile::tempdir().unwrap();
    // The step as written is accepted (its time thresholds name measured metrics): it
    // decides (code 0 or 1, on time here) rather than failing (2).
    let as_written = script
        .replace("--runs 20", "--runs 2")
        .replace("./wordfreq-base ./wordfreq-pr", "/bin/true /bin/true");
    let out = run_step(&as_written, dir.path(), "pull_request");
    assert!(matches!(out.trim(), "code=0" | "code=1"), "{out}");
    let wordfreq = fixture!("wordfreq");
    // Timing on this shared test machine would make the answer depend on the load, and
    // thresholds of time that is not measured are refused: the counts decide alone here.
    let script: String = script
        .lines()
        .filter(|l| !l.trim_start().starts_with("--threshold 'time."))
        .collect::<Vec<_>>()
        .join("\n");
    let compare = |base: &str, pr: &str| {
        let script = script.replace(
            "./wordfreq-base ./wordfreq-pr",
            &format!("'{wordfreq} {base}' '{wordfreq} {pr}'"),
        );
        let out = run_step(&script.replace(" --time ", " "), dir.path(), "pull_request");
        let report = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
        (out.trim().to_string(), report)
    };
    let (code, report) = compare("20000", "21000");
    assert_eq!(code, "code=1", "{report}");
    assert!(report.contains("alloc.count"), "{report}");
    let (code, report) = compare("20000", "20000");
    assert_eq!(code, "code=0", "{report}");
}
