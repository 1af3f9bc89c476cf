//! divan bench files through `sbs-divan`: a fixture with known answers, the bundled
//! example's divan suite against its sbs-harness suite, and a real crate's own bench file
//! from the registry, unchanged but for its divan dependency line, under `sbs-profile
//! --bench` and plain `cargo bench`.

mod util;

use std::path::{Path, PathBuf};

use util::bench_files::{
    cargo_bench, example, local_target, names, per_op, repo, sbs_in, set_up_outside_the_region,
};
use util::registry;
use util::Finished;

/// sbs-profile's options for a short allocation-counting run.
const ALLOC_RUN: [&str; 8] = [
    "--alloc",
    "--runs",
    "2",
    "--ops",
    "3",
    "--harness-arg=--max-iterations=40",
    "-f",
    "json",
];

fn fixture_dir() -> PathBuf {
    repo().join("tests/divan-fixture")
}

/// `sbs-profile --bench NAME` with [`ALLOC_RUN`] and then `more`.
fn alloc_run(dir: &Path, target: &Path, name: &str, more: &[&str]) -> Finished {
    let mut args = vec!["--bench", name];
    args.extend(ALLOC_RUN);
    args.extend(more);
    sbs_in(dir, target, &args).success()
}

/// The paths of the timing lines `cargo bench` printed: `PATH  fastest  slowest  median
/// mean  samples  iters`, each time a number and a unit.
fn timed_paths(stdout: &str) -> Vec<String> {
    let mut paths = Vec::new();
    for line in stdout
        .lines()
        .skip_while(|l| !l.starts_with("benchmark "))
        .skip(1)
    {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let well_formed = fields.len() >= 11
            && fields[1..9].chunks(2).all(|c| {
                c[0].parse::<f64>().is_ok_and(|v| v >= 0.0)
                    && ["ns", "µs", "ms", "s"].contains(&c[1])
            })
            && fields[9..11]
                .iter()
                .all(|n| n.parse::<u64>().is_ok_and(|n| n > 0));
        assert!(well_formed, "a malformed timing line: {line:?}\n{stdout}");
        paths.push(fields[0].to_string());
    }
    paths
}

/// The fixture's benchmarks, by divan's paths, and the allocations (count, bytes) each
/// operation makes by its code.
const FIXTURE: [(&str, f64, f64); 16] = [
    ("fixture::array::3", 0.0, 0.0),
    ("fixture::array::40", 0.0, 0.0),
    ("fixture::boxed::u8", 1.0, 1.0),
    ("fixture::boxed::u64", 1.0, 8.0),
    ("fixture::collect::1", 1.0, 8.0),
    ("fixture::collect::10", 1.0, 80.0),
    ("fixture::collect::100", 1.0, 800.0),
    ("fixture::count_chars::a", 0.0, 0.0),
    ("fixture::count_chars::bcd", 0.0, 0.0),
    ("fixture::new_string", 1.0, 12.0),
    ("fixture::reused_buffer", 0.0, 0.0),
    // A `Vec` of N `String`s (24 bytes each) and N one-byte strings.
    ("fixture::strings::2", 3.0, 50.0),
    ("fixture::strings::5", 6.0, 125.0),
    ("fixture::grouped::format", 1.0, 8.0),
    ("fixture::inputs::len_values", 0.0, 0.0),
    ("fixture::inputs::sort_refs", 0.0, 0.0),
];

/// `args`, `types`, `consts` and groups expand to divan's paths; an operation's
/// allocations are its code's (a new `String` is 1, a reused buffer 0, `with_inputs`'
/// set-ups are outside the region).
#[test]
fn the_fixture_counts_what_its_code_allocates() {
    let target = local_target();
    let out = sbs_in(&fixture_dir(), &target, &["--bench", "fixture", "--list"]).success();
    let listed: Vec<String> = out
        .stdout()
        .lines()
        .map(|l| l.split("  ").next().unwrap_or_default().trim().to_string())
        .collect();
    let paths: Vec<&str> = FIXTURE.iter().map(|f| f.0).collect();
    out.check(
        listed == paths,
        &format!("divan's paths, ignored left out: {listed:?}"),
    );

    let out = alloc_run(&fixture_dir(), &target, "fixture", &[]);
    let report = out.json();
    out.check(names(&report) == paths, "every benchmark, by its path");
    for (path, count, bytes) in FIXTURE {
        let got = (
            per_op(&report, path, "alloc.count/op"),
            per_op(&report, path, "alloc.bytes/op"),
        );
        out.check(
            got == (vec![count, count], vec![bytes, bytes]),
            &format!("{path}: {got:?}, want {count} allocations of {bytes} bytes"),
        );
        let times = per_op(&report, path, "time.op");
        out.check(
            times.len() == 2 && times.iter().all(|&t| t > 0.0),
            &format!("{path}: time.op {times:?}"),
        );
    }
}

/// The version of divan the fixture is checked against.
const DIVAN: &str = "0.1.21";

/// The fixture as a package of its own in the cache, depending on divan itself: the same
/// bench file, the dependency line as divan's users write it.
fn fixture_with_divan() -> PathBuf {
    let dir = registry::checkout_dir().join(format!("divan-fixture-divan-{DIVAN}"));
    std::fs::create_dir_all(dir.join("benches")).expect("the package's directory");
    let manifest = format!(
        "[package]\nname = \"divan-fixture\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\
         publish = false\n\n[dev-dependencies]\ndivan = \"={DIVAN}\"\n\n\
         [[bench]]\nname = \"fixture\"\nharness = false\n\n[workspace]\n"
    );
    let bench = std::fs::read_to_string(fixture_dir().join("benches/fixture.rs"))
        .expect("the fixture's bench file");
    for (path, text) in [("Cargo.toml", manifest), ("benches/fixture.rs", bench)] {
        // Written only when changed, so that the cached build stays fresh.
        if std::fs::read_to_string(dir.join(path)).ok().as_deref() != Some(text.as_str()) {
            std::fs::write(dir.join(path), text).expect("write the package");
        }
    }
    std::fs::create_dir_all(dir.join("src")).expect("src");
    std::fs::write(dir.join("src/lib.rs"), "").expect("src/lib.rs");
    dir
}

/// The (count, bytes) of divan's `alloc:` rows (the median column) in its output for one
/// benchmark; (0, 0) when it prints none.
fn divan_allocs(stdout: &str) -> Option<(f64, f64)> {
    let lines: Vec<&str> = stdout.lines().collect();
    // The median column: the third cell from the end but one (fastest │ slowest │ median
    // │ mean │ samples │ iters); the tree's own `│`s come before the cells.
    let median = |line: &str| -> Option<String> {
        let cells: Vec<&str> = line.split('│').collect();
        let cell = cells.get(cells.len().checked_sub(4)?)?;
        Some(cell.trim().to_string())
    };
    let Some(at) = lines.iter().position(|l| {
        l.trim_start_matches(|c: char| !c.is_alphanumeric())
            .starts_with("alloc:")
    }) else {
        return Some((0.0, 0.0));
    };
    let count: f64 = median(lines.get(at + 1)?)?.parse().ok()?;
    let bytes = median(lines.get(at + 2)?)?;
    let (number, unit) = bytes.split_once(' ')?;
    let scale = match unit {
        "B" => 1.0,
        "KB" => 1e3,
        "MB" => 1e6,
        _ => return None,
    };
    Some((count, number.parse::<f64>().ok()? * scale))
}

/// divan's own `AllocProfiler`, on the same bench file built with divan itself, counts
/// the allocations per iteration that sbs-profile counts per operation with sbs-divan
/// (the fixture's allocations grow no block, where the two count differently).
#[test]
fn the_fixture_counts_agree_with_divans_alloc_profiler() {
    let dir = fixture_with_divan();
    for (path, count, bytes) in FIXTURE {
        let out = cargo_bench(
            &dir,
            &registry::target_dir(),
            "fixture",
            &["--exact", path, "--sample-count", "3", "--color", "never"],
        )
        .success();
        let got = divan_allocs(&out.stdout());
        out.check(
            got == Some((count, bytes)),
            &format!("{path}: divan's AllocProfiler {got:?}, sbs-profile's ({count}, {bytes})"),
        );
    }
}

/// Plain `cargo bench` prints a timing line per benchmark; divan's `--list`, filters,
/// `--exact`, `--skip`, `--ignored`, `--test` and a bad option behave as divan's do.
#[test]
fn the_fixture_under_cargo_bench() {
    let target = local_target();
    let bench = |args: &[&str]| cargo_bench(&fixture_dir(), &target, "fixture", args);
    let out = bench(&["--max-time", "0.05"]).success();
    let timed = timed_paths(&out.stdout());
    let paths: Vec<&str> = FIXTURE.iter().map(|f| f.0).collect();
    out.check(
        timed == paths,
        &format!("a timing line per benchmark: {timed:?}"),
    );
    out.check(
        out.stdout()
            .lines()
            .any(|l| l.starts_with("fixture::inputs::sort_refs") && l.ends_with("item/s (median)")),
        "input_counter's throughput",
    );

    let list = |args: &[&str]| {
        let mut all = vec!["--list"];
        all.extend(args);
        bench(&all).success()
    };
    let out = list(&["collect"]);
    out.check(
        out.stdout()
            == "fixture::collect::1: benchmark\nfixture::collect::10: benchmark\nfixture::collect::100: benchmark\n",
        "a filter is a substring of the path",
    );
    let out = list(&["--exact", "fixture::collect::1", "fixture::boxed::u8"]);
    out.check(
        out.stdout() == "fixture::boxed::u8: benchmark\nfixture::collect::1: benchmark\n",
        "--exact",
    );
    let out = list(&["inputs", "--skip", "sort"]);
    out.check(
        out.stdout() == "fixture::inputs::len_values: benchmark\n",
        "--skip",
    );
    let out = list(&["--ignored"]);
    out.check(
        out.stdout() == "fixture::skipped: benchmark\n",
        "--ignored lists the ignored one",
    );
    let out = bench(&["--test", "strings"]).success();
    out.check(
        out.stdout() == "fixture::strings::2 ... ok\nfixture::strings::5 ... ok\n",
        "--test runs each once",
    );
    let out = bench(&["--sample-count", "0"]);
    out.check(
        out.code() == Some(2)
            && out
                .stderr()
                .lines()
                .any(|l| l == "error: --sample-count 0: expected a whole number, 1 or more"),
        "a bad option is a one-line error and exit code 2",
    );
}

/// The divan suite of the example measures the same routines as its sbs-harness suite:
/// the same allocations per operation, its `with_inputs` set-ups (the counts) outside the
/// region.
#[test]
fn the_example_divan_suite_counts_what_its_harness_suite_counts() {
    let target = local_target();
    let ids = [
        "wordfreq_divan::count::200000",
        "wordfreq_divan::top::plain",
        "wordfreq_divan::top::refs",
        "wordfreq_divan::top::values",
    ];
    let harness = alloc_run(&example(), &target, "wordfreq", &[]).json();
    let out = alloc_run(&example(), &target, "wordfreq_divan", &[]);
    let divan = out.json();
    out.check(names(&divan) == ids, "every benchmark, by its divan path");
    for metric in ["alloc.count/op", "alloc.bytes/op"] {
        let want = per_op(&harness, "wordfreq/count", metric);
        let got = per_op(&divan, ids[0], metric);
        out.check(
            want.len() == 2 && want[0] > 0.0 && got == want,
            &format!("{metric} of count: divan {got:?}, harness {want:?}"),
        );
        let want = per_op(&harness, "wordfreq/top", metric);
        for id in &ids[1..] {
            let got = per_op(&divan, id, metric);
            out.check(
                want.len() == 2 && want[0] > 0.0 && got == want,
                &format!("{metric} of {id}: divan {got:?}, harness top {want:?} (set-ups outside)"),
            );
        }
    }
    let out = cargo_bench(
        &example(),
        &target,
        "wordfreq_divan",
        &["--max-time", "0.2"],
    )
    .success();
    let timed = timed_paths(&out.stdout());
    out.check(
        timed == ids,
        &format!("a timing line per benchmark: {timed:?}"),
    );
}

/// `with_inputs` runs before every operation, outside the counted region:
/// `top::values` makes its input with `count` each time, yet no call of `count` is in its
/// region, and one of `top` per operation is.
#[test]
fn with_inputs_stays_outside_the_counted_region() {
    if util::skip_without_uprobes("invocation counts of the example's functions") {
        return;
    }
    set_up_outside_the_region(
        "wordfreq_divan",
        "wordfreq_divan::count::200000",
        "wordfreq_divan::top::values",
    );
}

/// `bytesize` 2.7.0 as published (divan 0.1): its `benches/display.rs` formats
/// `ByteSize::kib(42)` with `format!("{}", ...)`, which writes "42.0 KiB" straight into
/// the new `String`: that string's first write grows it to 8 bytes, enough for all 8, so
/// 1 allocation of 8 bytes per operation.
#[test]
fn bytesize_published_benches_run_unchanged() {
    let krate = registry::fetch("bytesize", "2.7.0");
    krate.swap_dependency("divan", "sbs-divan", &repo().join("agent/divan"));
    let out = alloc_run(
        &krate.dir,
        &registry::target_dir(),
        "display",
        &["--", "standard", "inner"],
    );
    let report = out.json();
    let ids = [
        "display::display_always_pad_standard",
        "display::display_bytesize_standard",
        "display::display_inner_display",
    ];
    out.check(names(&report) == ids, "divan's paths, as filtered");
    // The padding wrapper formats into a `String` of its own first (`to_string`, 8 bytes
    // the same way), then pads it into the result: 2 allocations of 8 bytes.
    for (id, count) in [(ids[0], 2.0), (ids[1], 1.0), (ids[2], 1.0)] {
        let got = (
            per_op(&report, id, "alloc.count/op"),
            per_op(&report, id, "alloc.bytes/op"),
        );
        out.check(
            got == (vec![count, count], vec![8.0 * count, 8.0 * count]),
            &format!("{id}: {count} String(s) of 8 bytes per call: {got:?}"),
        );
    }

    let out = cargo_bench(
        &krate.dir,
        &registry::target_dir(),
        "display",
        &["--max-time", "0.05"],
    )
    .success();
    let timed = timed_paths(&out.stdout());
    out.check(
        timed
            == [
                "display::display_always_pad_custom",
                "display::display_always_pad_standard",
                "display::display_bytesize_custom",
                "display::display_bytesize_standard",
                "display::display_inner_display",
            ],
        &format!("a timing line per benchmark of benches/display.rs: {timed:?}"),
    );
}

/// The (count, bytes) of divan's `alloc:` rows in the mean column (the third cell from the
/// end: mean │ samples │ iters); `None` when it prints none or they do not parse.
fn divan_mean_allocs(stdout: &str) -> Option<(f64, f64)> {
    let lines: Vec<&str> = stdout.lines().collect();
    let mean = |line: &str| -> Option<String> {
        let cells: Vec<&str> = line.split('│').collect();
        Some(cells.get(cells.len().checked_sub(3)?)?.trim().to_string())
    };
    let at = lines.iter().position(|l| {
        l.trim_start_matches(|c: char| !c.is_alphanumeric())
            .starts_with("alloc:")
    })?;
    let count: f64 = mean(lines.get(at + 1)?)?.parse().ok()?;
    let bytes = mean(lines.get(at + 2)?)?;
    let (number, unit) = bytes.split_once(' ')?;
    let scale = match unit {
        "B" => 1.0,
        "KB" => 1e3,
        _ => return None,
    };
    Some((count, number.parse::<f64>().ok()? * scale))
}

/// `vart` 0.9.3 as published: `benches/allocs.rs` (`b.counter(count)` with a `usize`,
/// `AllocProfiler` as the global allocator, `seq_insert` inserting a random key into a
/// tree that grows with every operation) compiles unchanged with sbs-divan. sbs-profile
/// counts one operation after one warm-up operation: the second insert into a fresh
/// tree. divan 0.1.21's own `AllocProfiler`, on the same file, counts that insert as its
/// second one-iteration sample: twice the mean of two samples less the first alone.
/// (The keys are random: when two of the first keys share their first byte, 1 in 256,
/// the tree's shape, and so the count, differs from the usual 15.)
#[test]
fn vart_published_allocs_bench_agrees_with_divans_alloc_profiler() {
    let krate = registry::fetch("vart", "0.9.3");
    let divan = repo().join("agent/divan");
    let criterion = repo().join("agent/criterion");
    // criterion (for its other bench file) is swapped too, so that neither build compiles
    // criterion itself.
    let sbs_criterion = ("criterion", "sbs-criterion", criterion.as_path());
    krate.swap_dependencies(&[("divan", "sbs-divan", divan.as_path()), sbs_criterion]);
    let with_divan = krate.variant("divan", ("divan", &format!("={DIVAN}")), &[sbs_criterion]);
    // Random keys change the count about 1 time in 256 per process: a disagreement is
    // measured again, up to three times, before it fails.
    for attempt in 1..=3 {
        let out = sbs_in(
            &krate.dir,
            &registry::target_dir(),
            &[
                "--bench",
                "allocs",
                "--alloc",
                "--runs",
                "2",
                "--ops",
                "1",
                "--harness-arg=--max-iterations=40",
                "-f",
                "json",
            ],
        )
        .success();
        let report = out.json();
        let id = "allocs::seq_insert::1000000";
        out.check(names(&report) == [id], "divan's path, the argument by name");
        let ours = (
            per_op(&report, id, "alloc.count/op"),
            per_op(&report, id, "alloc.bytes/op"),
        );

        let samples = |n: &str| {
            let out = cargo_bench(
                &with_divan,
                &registry::target_dir(),
                "allocs",
                &[
                    "--sample-count",
                    n,
                    "--sample-size",
                    "1",
                    "--color",
                    "never",
                ],
            )
            .success();
            let got = divan_mean_allocs(&out.stdout());
            out.check(got.is_some(), "divan prints its alloc: rows");
            got.unwrap_or_default()
        };
        let first = samples("1");
        let two = samples("2");
        let second = (2.0 * two.0 - first.0, 2.0 * two.1 - first.1);
        let agree = ours == (vec![second.0; 2], vec![second.1; 2]);
        if agree || attempt == 3 {
            out.check(
                agree,
                &format!(
                    "the second insert: divan's AllocProfiler {second:?} (first {first:?}, two \
                     {two:?}), sbs-profile's {ours:?}, in 3 attempts"
                ),
            );
            return;
        }
    }
}
