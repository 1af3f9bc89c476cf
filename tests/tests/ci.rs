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
    let output = dir.join("github_output");
    let _ = std::fs::remove_file(&output);
    // Timing on this shared test machine would make the gate's answer depend on the load;
    // the counts decide alone here.
    let script = script
        .replace("./target/release/wordfreq", bench)
        .replace(" --time ", " ");
    let sbs_dir = util::sbs_profile();
    let path = format!(
        "{}:{}",
        sbs_dir.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let status = Command::new("bash")
        .args(["-e", "-c", &script])
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
