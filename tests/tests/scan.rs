//! Parameter scans (`-P`, `-L`): one benchmark per value, and how each metric grows.

mod util;

use util::sbs;

fn fits(report: &serde_json::Value) -> &Vec<serde_json::Value> {
    report["scans"][0]["fits"]
        .as_array()
        .expect("a scan with fits")
}

fn fit<'a>(report: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    fits(report)
        .iter()
        .find(|f| f["metric"] == id)
        .unwrap_or_else(|| panic!("no fit of {id}: {report:#}"))
}

#[test]
fn allocations_that_grow_as_n_and_as_n_squared_are_told_apart() {
    let allocate = fixture!("allocate");
    // `allocate N 64` makes N blocks: alloc.count = N + the runtime's own.
    let linear = sbs([
        "--runs", "2", "--warmup", "0", "--alloc", "-f", "json", "-P", "n", "100", "500", "-D",
        "100", "--", allocate, "{n}", "64",
    ])
    .success()
    .json();
    let names: Vec<&str> = linear["benchmarks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 5);
    assert!(names[0].ends_with("allocate 100 64") && names[4].ends_with("allocate 500 64"));
    let count = fit(&linear, "alloc.count");
    assert_eq!(count["shape"], "n", "{count}");
    assert!(
        (count["slope"].as_f64().unwrap() - 1.0).abs() < 1e-9,
        "{count}"
    );
    assert!(count["r2"].as_f64().unwrap() > 0.999_999, "{count}");
    // The runtime's allocations do not change with n.
    assert_eq!(fit(&linear, "alloc.processes")["shape"], "1");

    // N² blocks through the shell's arithmetic.
    let command = format!("{allocate} $(( {{n}} * {{n}} )) 64");
    let square = sbs([
        "--runs", "2", "--warmup", "0", "--alloc", "-f", "json", "-P", "n", "10", "50", "-D", "10",
        "--shell", "sh", &command,
    ])
    .success()
    .json();
    let count = fit(&square, "alloc.count");
    assert_eq!(count["shape"], "n^2", "{count}");
    assert!(
        (count["slope"].as_f64().unwrap() - 1.0).abs() < 1e-9,
        "{count}"
    );

    // The text report says it in words.
    let text = sbs([
        "--runs",
        "1",
        "--warmup",
        "0",
        "--alloc",
        "-L",
        "n",
        "100,200,400",
        "--",
        allocate,
        "{n}",
        "64",
    ])
    .success()
    .stdout();
    assert!(
        text.contains("Growth over n (3 points of `")
            && text.contains("alloc.count grows as n: 1.00 per unit of n, R^2 = 1.000"),
        "{text}"
    );
}

#[test]
fn a_saved_scan_is_compared_point_by_point() {
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("h");
    let history = history.to_str().unwrap();
    let allocate = fixture!("allocate");
    let scan = |command: &str| {
        sbs([
            "--history",
            history,
            "--save",
            "--runs",
            "2",
            "--warmup",
            "0",
            "--alloc",
            "-f",
            "json",
            "-n",
            "grow {n}",
            "-P",
            "n",
            "10",
            "40",
            "-D",
            "10",
            "--shell",
            "sh",
            command,
        ])
    };
    scan(&format!("{allocate} $(( {{n}} * 10 )) 64")).success();
    // Quadratic now: equal at n = 10, worse at every later point, so the run fails.
    let run = scan(&format!("{allocate} $(( {{n}} * {{n}} )) 64"));
    assert_eq!(run.code(), Some(1), "{}", run.stderr());
    let report = run.json();
    let verdict = |name: &str| {
        let b = report["benchmarks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["name"] == name)
            .unwrap();
        let m = b["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["id"] == "alloc.count")
            .unwrap();
        m["comparison"]["verdict"].clone()
    };
    assert_eq!(verdict("grow 10"), "no_change");
    assert_eq!(verdict("grow 40"), "regressed");
    assert!(
        run.stderr().contains("alloc.count of `grow 40` regressed"),
        "{}",
        run.stderr()
    );
    assert_eq!(fit(&report, "alloc.count")["shape"], "n^2");
}

#[test]
fn a_scan_must_name_its_parameter_in_the_command() {
    sbs(["-P", "n", "1", "3", "--", fixture!("exit_with"), "0"]).fails_with(
        2,
        "the scanned parameter `n` appears nowhere in the command; write {n} where its value goes",
    );
    sbs(["compare", "-P", "n", "1", "3", "a {n}", "b {n}"])
        .fails_with(2, "compare does not scan parameters");
}

#[test]
fn the_hooks_of_a_scan_point_see_its_value() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let log = log.to_str().unwrap();
    sbs([
        "--runs",
        "1",
        "--warmup",
        "0",
        "-L",
        "n",
        "7,8",
        "--setup",
        &format!("echo setup {{n}} >> {log}"),
        "--prepare",
        &format!("echo prepare {{n}} >> {log}"),
        "--",
        fixture!("allocate"),
        "{n}",
        "64",
    ])
    .success();
    assert_eq!(
        std::fs::read_to_string(log).unwrap(),
        "setup 7\nsetup 8\nprepare 7\nprepare 8\n"
    );
}
