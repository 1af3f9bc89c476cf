//! `compare` runs its commands interleaved (A B A B ...) and judges every metric on its
//! pairs of runs: run i of B against run i of A. The fixture does twice the work in B, a
//! difference no load can hide in CPU time; the test checks, from the samples in the
//! report, that the change reported is the one the pairs give, and that the summary
//! reports CPU time beside wall time.

mod util;

use util::sbs;

/// The metric `id` of benchmark `b` in a JSON report.
fn metric<'a>(report: &'a serde_json::Value, b: usize, id: &str) -> &'a serde_json::Value {
    report["benchmarks"][b]["metrics"]
        .as_array()
        .expect("metrics array")
        .iter()
        .find(|m| m["id"] == id)
        .unwrap_or_else(|| panic!("no metric {id} in benchmark {b}: {report:#}"))
}

/// The mean of the per-pair log ratios, or their 20% trimmed mean: what the report's
/// method says decided, computed here from the report's own samples.
fn paired_estimate(a: &[f64], b: &[f64], trimmed: bool) -> f64 {
    let mut logs: Vec<f64> = a.iter().zip(b).map(|(x, y)| (y / x).ln()).collect();
    logs.sort_by(f64::total_cmp);
    let g = if trimmed { logs.len() / 5 } else { 0 };
    let kept = &logs[g..logs.len() - g];
    kept.iter().sum::<f64>() / kept.len() as f64
}

#[test]
fn compare_judges_interleaved_runs_in_pairs_and_reports_cpu_time() {
    let a = format!("{} 20000000", fixture!("work"));
    let b = format!("{} 40000000", fixture!("work"));
    let run = sbs([
        "compare",
        "--runs",
        "6",
        "--warmup",
        "1",
        // Twice the work must be judged also while other tests keep the machine busy.
        "--judge-busy",
        "-n",
        "half",
        "-n",
        "double",
        "-f",
        "json",
        &a,
        &b,
    ]);
    // Twice the work: the CPU time regresses, the exit code says so.
    assert_eq!(run.code(), Some(1), "{}", run.stderr());
    let report = run.json();
    for id in ["time.wall", "time.cpu", "time.user"] {
        let (ma, mb) = (metric(&report, 0, id), metric(&report, 1, id));
        let c = &mb["comparison"];
        let method = c["method"].as_str().unwrap();
        assert!(
            method == "paired_t" || method == "paired_trimmed",
            "{id} was judged by {method}, not on its pairs: {c:#}"
        );
        let (sa, sb) = (util::samples(ma), util::samples(mb));
        if sa.iter().chain(&sb).all(|&v| v > 0.0) {
            let estimate = paired_estimate(&sa, &sb, method == "paired_trimmed");
            let relative = c["relative"].as_f64().unwrap();
            assert!(
                (relative - estimate.exp_m1()).abs() < 1e-9,
                "{id}: {relative} is not the ratio of the pairs, {}",
                estimate.exp_m1()
            );
        }
    }
    // time.cpu is each run's user and system time together.
    let (cpu, user, sys) = (
        util::samples(metric(&report, 1, "time.cpu")),
        util::samples(metric(&report, 1, "time.user")),
        util::samples(metric(&report, 1, "time.sys")),
    );
    for i in 0..cpu.len() {
        assert!((cpu[i] - user[i] - sys[i]).abs() < 1e-9, "run {i}: {cpu:?}");
    }
    let c = &metric(&report, 1, "time.cpu")["comparison"];
    assert_eq!(c["verdict"], "regressed", "{c:#}");
    // The summary has CPU time beside wall time, from the same comparison.
    let speed = &report["speed"][0];
    let ratio = speed["cpu"]["ratio"].as_f64().unwrap();
    assert!((ratio - 1.0 - c["relative"].as_f64().unwrap()).abs() < 1e-12);
    assert!((1.5..2.5).contains(&ratio), "{speed:#}");
    assert_eq!(speed["cpu"]["verdict"], "regressed");
    assert_eq!(speed["cpu"]["method"], c["method"]);
    let headline = report["headline"].as_str().unwrap();
    assert!(headline.contains("CPU time"), "{headline}");

    // The text report names the method of each comparison and ends with the summary.
    let text = sbs([
        "compare",
        "--runs",
        "3",
        "--warmup",
        "0",
        "--judge-busy",
        "-n",
        "half",
        "-n",
        "double",
        &a,
        &b,
    ])
    .stdout();
    let row = text
        .lines()
        .find(|l| l.trim_start().starts_with("time.cpu") && l.contains("REGRESSED"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(row.contains("paired-"), "{row}");
    assert!(text.contains("Summary (wall and CPU time):"), "{text}");
}
