//! Helpers of the tests that run bench files written for criterion or divan: the
//! repository's example, `cargo bench` and `sbs-profile --bench` in a package's directory,
//! and the benchmarks of a JSON report.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{samples, sbs_profile, Finished};

/// The environment of sbs-profile's own `cargo bench --no-run`, given to `cargo bench` so
/// that it reuses that build instead of making a second one.
pub const BUILD_ENV: [(&str, &str); 2] = [
    ("CARGO_PROFILE_BENCH_DEBUG", "true"),
    ("CARGO_PROFILE_BENCH_STRIP", "none"),
];

/// The repository's root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the repository")
        .canonicalize()
        .expect("the repository's path")
}

/// The bundled example.
pub fn example() -> PathBuf {
    repo().join("examples/wordfreq-bench")
}

/// The builds of the example and the fixtures: the harness tests' target directory.
pub fn local_target() -> PathBuf {
    PathBuf::from(crate::fixture!("exit_with"))
        .parent()
        .and_then(|d| d.parent())
        .expect("target dir")
        .join("sbs-bench-test")
}

fn finished(args: &[&str], cmd: &mut Command) -> Finished {
    let output = cmd.output().expect("spawn");
    Finished {
        args: args.iter().map(|s| s.to_string()).collect(),
        output,
    }
}

/// `sbs-profile ARGS` in `dir`, building into `target`.
pub fn sbs_in(dir: &Path, target: &Path, args: &[&str]) -> Finished {
    finished(
        args,
        Command::new(sbs_profile())
            .args(args)
            .current_dir(dir)
            .env("CARGO_TARGET_DIR", target),
    )
}

/// `cargo bench --bench NAME -- ARGS` in `dir`, building into `target`.
pub fn cargo_bench(dir: &Path, target: &Path, name: &str, args: &[&str]) -> Finished {
    let mut all = vec!["bench", "--bench", name, "--"];
    all.extend(args);
    finished(
        &all,
        Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
            .args(&all)
            .current_dir(dir)
            .env("CARGO_TARGET_DIR", target)
            .envs(BUILD_ENV),
    )
}

/// Benchmark `name` of a JSON report.
pub fn benchmark<'a>(report: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    report["benchmarks"]
        .as_array()
        .expect("benchmarks")
        .iter()
        .find(|b| b["name"] == name)
        .unwrap_or_else(|| panic!("no benchmark {name} in the report"))
}

/// The samples of metric `id` of benchmark `name`.
pub fn per_op(report: &serde_json::Value, name: &str, id: &str) -> Vec<f64> {
    let metric = benchmark(report, name)["metrics"]
        .as_array()
        .expect("metrics")
        .iter()
        .find(|m| m["id"] == id)
        .unwrap_or_else(|| panic!("no metric {id} for {name}"));
    samples(metric)
}

/// The names of a JSON report's benchmarks, in order.
pub fn names(report: &serde_json::Value) -> Vec<String> {
    report["benchmarks"]
        .as_array()
        .expect("benchmarks")
        .iter()
        .filter_map(|b| b["name"].as_str().map(str::to_string))
        .collect()
}

/// Under uprobes, the example's bench `bench`: benchmark `count_id` calls `count` once per
/// operation and `top` never, `top_id` the reverse, though `top_id`'s set-up calls `count`
/// before each operation: the set-up stays outside the counted region.
pub fn set_up_outside_the_region(bench: &str, count_id: &str, top_id: &str) {
    let out = sbs_in(
        &example(),
        &local_target(),
        &[
            "--bench",
            bench,
            "--invocations",
            "wordfreq_bench::count",
            "--invocations",
            "wordfreq_bench::top",
            "--runs",
            "2",
            "--ops",
            "3",
            "--harness-arg=--max-iterations=40",
            "-f",
            "json",
            "--",
            "--exact",
            count_id,
            top_id,
        ],
    )
    .success();
    let report = out.json();
    for (id, count, top) in [(count_id, 1.0, 0.0), (top_id, 0.0, 1.0)] {
        let counts = per_op(&report, id, "invocations.wordfreq_bench::count/op");
        let tops = per_op(&report, id, "invocations.wordfreq_bench::top/op");
        out.check(
            counts == [count, count] && tops == [top, top],
            &format!("{id}: count/op {counts:?} (want {count}), top/op {tops:?} (want {top})"),
        );
    }
}
