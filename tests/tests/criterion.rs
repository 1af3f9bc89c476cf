//! Criterion bench files through `sbs-criterion`: the bundled example's criterion suite
//! against its sbs-harness suite, and real crates' own bench files from the registry,
//! unchanged but for their criterion dependency line, under `sbs-profile --bench` and
//! plain `cargo bench`.

mod util;

use std::path::Path;

use util::bench_files::{
    cargo_bench, example, local_target, names, per_op, repo, sbs_in, set_up_outside_the_region,
};
use util::registry::{self, RegistryCrate};

/// The ids of criterion's timing lines in `cargo bench`'s output: a line `ID  time:   [a
/// b c]`, or the id on its own line followed by the indented `time:` line, each of the
/// three a number and a unit.
fn timed_ids(stdout: &str) -> Vec<String> {
    let lines: Vec<&str> = stdout.lines().collect();
    let mut ids = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(at) = line.find("time:   [") else {
            continue;
        };
        let inside = line[at + 9..].trim_end().trim_end_matches(']');
        let fields: Vec<&str> = inside.split_whitespace().collect();
        let well_formed = fields.len() == 6
            && fields.chunks(2).all(|c| {
                c[0].parse::<f64>().is_ok_and(|v| v >= 0.0)
                    && ["ps", "ns", "µs", "ms", "s"].contains(&c[1])
            });
        assert!(well_formed, "a malformed timing line: {line:?}\n{stdout}");
        let id = line[..at].trim();
        let id = if id.is_empty() && i > 0 {
            lines[i - 1].trim()
        } else {
            id
        };
        ids.push(id.to_string());
    }
    ids
}

const EXAMPLE_IDS: [&str; 6] = [
    "wordfreq/count/200000",
    "wordfreq/top",
    "wordfreq/top-batched",
    "wordfreq/top-batched-ref",
    "wordfreq/top-with-setup",
    "wordfreq/top-custom",
];

/// The criterion suite of the example measures the same routines as its sbs-harness
/// suite: the same allocations per operation, its set-ups (`iter_batched`'s and
/// `iter_with_setup`'s counts, the text) outside the region, and the criterion ids in the
/// report.
#[test]
fn the_example_criterion_suite_counts_what_its_harness_suite_counts() {
    let target = local_target();
    let options = [
        "--alloc",
        "--runs",
        "2",
        "--ops",
        "3",
        "--harness-arg=--max-iterations=40",
        "-f",
        "json",
    ];
    let out = sbs_in(
        &example(),
        &target,
        &["--bench", "wordfreq_criterion", "--list"],
    )
    .success();
    // `NAME` or `NAME  (parameters)` per line.
    let listed: Vec<String> = out
        .stdout()
        .lines()
        .map(|l| l.split("  ").next().unwrap_or_default().trim().to_string())
        .collect();
    out.check(
        listed == EXAMPLE_IDS,
        &format!("criterion's ids listed: {listed:?}"),
    );

    let mut args = vec!["--bench", "wordfreq"];
    args.extend(options);
    let harness = sbs_in(&example(), &target, &args).success().json();
    let mut args = vec!["--bench", "wordfreq_criterion"];
    args.extend(options);
    let out = sbs_in(&example(), &target, &args).success();
    let criterion = out.json();
    out.check(
        names(&criterion) == EXAMPLE_IDS,
        "every benchmark, by its criterion id",
    );

    for metric in ["alloc.count/op", "alloc.bytes/op"] {
        let want = per_op(&harness, "wordfreq/count", metric);
        let got = per_op(&criterion, "wordfreq/count/200000", metric);
        out.check(
            want.len() == 2 && want[0] > 0.0 && got == want,
            &format!("{metric} of count: criterion {got:?}, harness {want:?}"),
        );
        let want = per_op(&harness, "wordfreq/top", metric);
        for id in &EXAMPLE_IDS[1..] {
            let got = per_op(&criterion, id, metric);
            out.check(
                want.len() == 2 && want[0] > 0.0 && got == want,
                &format!(
                    "{metric} of {id}: criterion {got:?}, harness top {want:?} (set-ups outside)"
                ),
            );
        }
    }
    for id in EXAMPLE_IDS {
        let times = per_op(&criterion, id, "time.op");
        out.check(
            times.len() == 2 && times.iter().all(|&t| t > 0.0),
            &format!("{id}: time.op per process {times:?}"),
        );
    }
}

/// The set-up of `iter_batched` runs before every operation, outside the measured region:
/// `wordfreq/top-batched` makes its input with `count` each time, yet no call of `count`
/// is in its region, and one of `top` per operation is.
#[test]
fn iter_batched_set_ups_stay_outside_the_counted_region() {
    if util::skip_without_uprobes("invocation counts of the example's functions") {
        return;
    }
    set_up_outside_the_region(
        "wordfreq_criterion",
        "wordfreq/count/200000",
        "wordfreq/top-batched",
    );
}

/// Plain `cargo bench` prints criterion's timing line for each benchmark (libtest's with
/// `--output-format bencher`); criterion's `--list`, filters, `--exact`, `--test` and bad
/// options behave as criterion's do.
#[test]
fn the_example_criterion_suite_under_cargo_bench() {
    let target = local_target();
    let bench = |args: &[&str]| cargo_bench(&example(), &target, "wordfreq_criterion", args);
    let out = bench(&["--warm-up-time", "0.05", "--measurement-time", "0.2"]).success();
    let ids = timed_ids(&out.stdout());
    out.check(
        ids == EXAMPLE_IDS,
        &format!("a timing line per benchmark: {ids:?}"),
    );
    out.check(
        out.stdout().contains("                        thrpt:  ["),
        "the count's throughput line",
    );

    let out = bench(&[
        "--output-format",
        "bencher",
        "--warm-up-time",
        "0.05",
        "--measurement-time",
        "0.1",
        "--exact",
        "wordfreq/top",
    ])
    .success();
    let line = out.stdout();
    let numbers: Vec<&str> = line
        .strip_prefix("test wordfreq/top ... bench: ")
        .and_then(|rest| rest.trim_end().strip_suffix(')'))
        .map(|rest| rest.split(" ns/iter (+/- ").map(str::trim).collect())
        .unwrap_or_default();
    out.check(
        numbers.len() == 2
            && numbers
                .iter()
                .all(|n| n.replace(',', "").parse::<u64>().is_ok()),
        "--output-format bencher: libtest's line",
    );

    let out = bench(&["--list"]).success();
    let expected: String = EXAMPLE_IDS
        .iter()
        .map(|id| format!("{id}: benchmark\n"))
        .collect();
    out.check(out.stdout() == expected, "criterion's list");
    let out = bench(&["--list", "top-batched"]).success();
    out.check(
        out.stdout() == "wordfreq/top-batched: benchmark\nwordfreq/top-batched-ref: benchmark\n",
        "a filter is a substring",
    );
    let out = bench(&["--list", "--exact", "wordfreq/top"]).success();
    out.check(out.stdout() == "wordfreq/top: benchmark\n", "--exact");

    let out = bench(&["--test", "top-custom"]).success();
    out.check(
        out.stdout() == "Testing wordfreq/top-custom\nSuccess\n\n",
        "--test runs the routine once",
    );
    let out = bench(&["--sample-size", "3"]);
    let err = out.stderr();
    out.check(
        out.code() == Some(2)
            && err
                .lines()
                .any(|l| l == "error: --sample-size 3: must be at least 10 (criterion's minimum)"),
        "a bad option is a one-line error and exit code 2",
    );
}

/// `hex` 0.4.3 as published (criterion 0.3): `hex::encode` returns a new `String` of
/// twice the input's length, made from an exact-size iterator (one allocation of exactly
/// that size); `faster_hex::hex_decode` writes into a buffer the closure made once (no
/// allocation).
#[test]
fn hex_published_benches_run_unchanged() {
    let krate = registry::fetch("hex", "0.4.3");
    use_sbs_criterion(&krate);
    let data = std::fs::metadata(krate.dir.join("src/lib.rs"))
        .expect("the input of hex's benches: its src/lib.rs")
        .len() as f64;
    let out = sbs_in(
        &krate.dir,
        &registry::target_dir(),
        &[
            "--bench",
            "hex",
            "--alloc",
            "--runs",
            "2",
            "--ops",
            "3",
            "--harness-arg=--max-iterations=40",
            "-f",
            "json",
            "--",
            "--exact",
            "hex_encode",
            "faster_hex_decode",
        ],
    )
    .success();
    let report = out.json();
    out.check(
        names(&report) == ["hex_encode", "faster_hex_decode"],
        "the two benchmarks --exact selects",
    );
    let count = per_op(&report, "hex_encode", "alloc.count/op");
    let bytes = per_op(&report, "hex_encode", "alloc.bytes/op");
    out.check(
        count == [1.0, 1.0] && bytes == [2.0 * data, 2.0 * data],
        &format!(
            "hex_encode: one String of {} bytes per call: {count:?} {bytes:?}",
            2.0 * data
        ),
    );
    let count = per_op(&report, "faster_hex_decode", "alloc.count/op");
    out.check(
        count == [0.0, 0.0],
        &format!("faster_hex_decode writes into a reused buffer: {count:?}"),
    );

    let out = cargo_bench(
        &krate.dir,
        &registry::target_dir(),
        "hex",
        &["--warm-up-time", "0.02", "--measurement-time", "0.05"],
    )
    .success();
    let ids = timed_ids(&out.stdout());
    out.check(
        ids == [
            "hex_encode",
            "rustc_hex_encode",
            "faster_hex_encode",
            "faster_hex_encode_fallback",
            "hex_decode",
            "rustc_hex_decode",
            "faster_hex_decode",
            "faster_hex_decode_unchecked",
            "faster_hex_decode_fallback",
        ],
        &format!("a timing line per benchmark of benches/hex.rs: {ids:?}"),
    );
}

/// `itoa` 1.0.18 as published (criterion 0.8, declared under `[target.'cfg(not(miri))']`
/// with `default-features = false`): both routines write into a buffer the closure owns
/// (`itoa::Buffer`, a `Vec` with capacity 20 cleared each time), so no operation
/// allocates; the `Vec` grows once for `u128::MAX`'s 39 digits, in the harness's
/// unmeasured first operation.
#[test]
fn itoa_published_benches_run_unchanged() {
    let krate = registry::fetch("itoa", "1.0.18");
    use_sbs_criterion(&krate);
    let ids = [
        "u128[0]/itoa",
        "u128[0]/std::fmt",
        "u128[max]/itoa",
        "u128[max]/std::fmt",
    ];
    let out = sbs_in(
        &krate.dir,
        &registry::target_dir(),
        &[
            "--bench",
            "bench",
            "--alloc",
            "--runs",
            "2",
            "--ops",
            "3",
            "--harness-arg=--max-iterations=40",
            "-f",
            "json",
            "--",
            "u128",
        ],
    )
    .success();
    let report = out.json();
    out.check(names(&report) == ids, "criterion's group/function ids");
    for id in ids {
        let count = per_op(&report, id, "alloc.count/op");
        out.check(
            count == [0.0, 0.0],
            &format!("{id}: writes into a reused buffer: {count:?}"),
        );
        let whole = per_op(&report, id, "alloc.count");
        out.check(
            whole.iter().all(|&n| n > 0.0),
            &format!("{id}: the process allocates outside the region: {whole:?}"),
        );
    }

    let out = cargo_bench(
        &krate.dir,
        &registry::target_dir(),
        "bench",
        &[
            "--warm-up-time",
            "0.02",
            "--measurement-time",
            "0.05",
            "u128",
        ],
    )
    .success();
    let timed = timed_ids(&out.stdout());
    out.check(
        timed == ids,
        &format!("a timing line per benchmark: {timed:?}"),
    );
}

/// Switch a registry crate to sbs-criterion the way a user does: its criterion
/// dependency line, nothing else.
fn use_sbs_criterion(krate: &RegistryCrate) {
    krate.swap_dependency(
        "criterion",
        "sbs-criterion",
        &repo().join("agent/criterion"),
    );
}

/// The switch rewrites the criterion dependency wherever the manifest declares it, and
/// keeps its features.
#[test]
fn the_dependency_swap_keeps_everything_but_the_source() {
    let at = Path::new("/s/agent/criterion");
    let parse = |text: &str| -> toml_edit::DocumentMut { text.parse().expect("TOML") };
    let swapped = parse(&registry::swap_dependency(
        "[package]\nname = \"x\"\n\n[dev-dependencies.criterion]\nversion = \"0.3\"\n\n[dev-dependencies.rand]\nversion = \"0.8\"\n",
        "criterion",
        "sbs-criterion",
        at,
    ));
    let dep = &swapped["dev-dependencies"]["criterion"];
    assert_eq!(dep["package"].as_str(), Some("sbs-criterion"));
    assert_eq!(dep["path"].as_str(), Some("/s/agent/criterion"));
    assert!(dep.get("version").is_none());
    assert_eq!(
        swapped["dev-dependencies"]["rand"]["version"].as_str(),
        Some("0.8")
    );
    assert!(swapped.contains_key("workspace"));

    let swapped = parse(&registry::swap_dependency(
        "[target.\"cfg(not(miri))\".dev-dependencies.criterion]\nversion = \"0.8\"\ndefault-features = false\n",
        "criterion",
        "sbs-criterion",
        at,
    ));
    let dep = &swapped["target"]["cfg(not(miri))"]["dev-dependencies"]["criterion"];
    assert_eq!(dep["package"].as_str(), Some("sbs-criterion"));
    assert_eq!(dep["default-features"].as_bool(), Some(false));
    assert!(dep.get("version").is_none());

    let swapped = parse(&registry::swap_dependency(
        "[dev-dependencies]\ncriterion = { version = \"0.5\", features = [\"html_reports\"] }\nplain = \"1\"\n",
        "criterion",
        "sbs-criterion",
        at,
    ));
    let dep = &swapped["dev-dependencies"]["criterion"];
    assert_eq!(dep["package"].as_str(), Some("sbs-criterion"));
    assert_eq!(dep["features"].as_array().map(|a| a.len()), Some(1));
    let swapped = parse(&registry::swap_dependency(
        "[dev-dependencies]\ncriterion = \"0.5\"\n",
        "criterion",
        "sbs-criterion",
        at,
    ));
    assert_eq!(
        swapped["dev-dependencies"]["criterion"]["path"].as_str(),
        Some("/s/agent/criterion")
    );
}
