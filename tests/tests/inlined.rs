//! `--invocations` on inlined functions: a release build (opt-level 3, debug info) of
//! `tests/fixtures/rust/inlined.rs`, where `Vec::push` and `bump` exist only inlined,
//! counted exactly per call site. Needs root (uprobes) and rustc; skipped with a printed
//! reason otherwise.

mod util;

use std::path::{Path, PathBuf};
use std::process::Command;

use sbs_skip::{build, Need};
use util::{metric, samples, sbs, skip_without_uprobes};

fn build_fixture(dir: &Path) -> Option<PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/rust/inlined.rs");
    let exe = dir.join("inlined");
    build!(
        Need::Rustc,
        sbs_skip::rustc_release().arg("-o").arg(&exe).arg(&src)
    )?;
    Some(exe)
}

/// Details (label -> first sample) of a metric.
fn details(m: &serde_json::Value) -> Vec<(String, f64)> {
    m["details"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|d| (d["label"].as_str().unwrap().to_string(), samples(d)[0]))
                .collect()
        })
        .unwrap_or_default()
}

/// The count of the site inlined at `inlined.rs:LINE`.
fn at_line(m: &serde_json::Value, line: u32) -> f64 {
    let needle = format!("fixtures/rust/inlined.rs:{line}]");
    let found: Vec<(String, f64)> = details(m)
        .into_iter()
        .filter(|(l, _)| l.contains(&needle))
        .collect();
    assert_eq!(found.len(), 1, "one row for line {line} in {m:#}");
    found[0].1
}

/// Each counting test runs with uprobes alone and with the default engine (in-process
/// where a site can be patched, uprobes for the rest), and requires the same counts.
const ENGINES: [&str; 2] = ["uprobe", "auto"];

/// The metric was counted by `engine` (with `auto`, at least partly in-process: else the
/// agreement of both runs would prove nothing).
fn uses_engine(m: &serde_json::Value, engine: &str) {
    let source = m["source"].as_str().unwrap_or_default();
    match engine {
        "uprobe" => assert_eq!(source, "uprobe", "{m:#}"),
        _ => assert!(source.starts_with("inproc"), "{m:#}"),
    }
}

#[test]
fn inlined_vec_push_and_inline_always_are_counted_exactly() {
    if skip_without_uprobes("uprobes") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = build_fixture(dir.path()) else {
        return;
    };
    for (engine, n) in ENGINES
        .into_iter()
        .flat_map(|e| [1u64, 1000, 4097].map(|n| (e, n)))
    {
        let arg = n.to_string();
        let run = sbs([
            "--invocations-engine".as_ref(),
            engine.as_ref(),
            "--runs".as_ref(),
            "2".as_ref(),
            "--format".as_ref(),
            "json".as_ref(),
            "--invocations-detail".as_ref(),
            "--invocations".as_ref(),
            "Vec::push".as_ref(),
            "--invocations".as_ref(),
            "bump".as_ref(),
            "--".as_ref(),
            exe.as_os_str(),
            arg.as_ref(),
        ])
        .success();
        let report = run.json();
        let push = metric(&report, "invocations.Vec::push");
        let third = n.div_ceil(3) as f64;
        let n = n as f64;
        assert_eq!(at_line(push, 19), n, "fill_a");
        assert_eq!(at_line(push, 26), n, "fill_b");
        assert_eq!(at_line(push, 28), third, "fill_b, every third");
        assert_eq!(at_line(push, 37), n, "fill_c, first loop");
        assert_eq!(at_line(push, 40), n, "fill_c, second loop");
        assert_eq!(at_line(push, 57), 7.0, "main");
        // std::env::args collects argv (program and N) with Vec::push, inlined in std.
        let args_os: f64 = details(push)
            .iter()
            .filter(|(l, _)| l.contains("OsString>>::push [inlined in std::env::args_os"))
            .map(|(_, v)| v)
            .sum();
        assert_eq!(args_os, 2.0, "{push:#}");
        let total = 4.0 * n + third + 7.0 + 2.0;
        assert_eq!(samples(push), vec![total; 2], "{push:#}");
        uses_engine(push, engine);

        let bump = metric(&report, "invocations.bump");
        assert_eq!(at_line(bump, 61), n);
        assert_eq!(at_line(bump, 64), 2.0 * n);
        assert_eq!(at_line(bump, 66), 1.0);
        assert_eq!(samples(bump), vec![3.0 * n + 1.0; 2]);
    }
}

#[test]
fn default_report_has_one_inlined_row_per_function() {
    if skip_without_uprobes("uprobes") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = build_fixture(dir.path()) else {
        return;
    };
    let run = sbs([
        "--runs".as_ref(),
        "1".as_ref(),
        "--invocations".as_ref(),
        "bump".as_ref(),
        "--".as_ref(),
        exe.as_os_str(),
        "10".as_ref(),
    ])
    .success();
    let out = run.stdout();
    run.check(
        out.contains("inlined::bump [inlined, 3 sites]"),
        "one row for the three inlined sites",
    );
    run.check(out.contains("31"), "3 * 10 + 1 calls");
}

const BOTH: &str = r#"
#include <stdlib.h>
static volatile int sink;
int both(int x) { sink = x + 1; return sink; }
__attribute__((noinline)) int loop(int n) { int s = 0; for (int i = 0; i < n; i++) s += both(i); return s; }
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 10;
    int (*volatile call)(int) = both;
    int s = loop(n);
    for (int i = 0; i < 3; i++) s += call(i);
    return s & 1;
}
"#;

#[test]
fn out_of_line_and_inlined_copies_are_counted_apart() {
    if skip_without_uprobes("uprobes") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("both.c");
    std::fs::write(&src, BOTH).unwrap();
    let exe = dir.path().join("both");
    let Some(()) = build!(
        Need::Gcc,
        Command::new("cc")
            .args(["-O2", "-g", "-o"])
            .arg(&exe)
            .arg(&src)
    ) else {
        return;
    };
    for engine in ENGINES {
        let run = sbs([
            "--invocations-engine".as_ref(),
            engine.as_ref(),
            "--runs".as_ref(),
            "2".as_ref(),
            "--format".as_ref(),
            "json".as_ref(),
            "--invocations".as_ref(),
            "both".as_ref(),
            "--".as_ref(),
            exe.as_os_str(),
            "500".as_ref(),
        ]);
        let report = run.json();
        let m = metric(&report, "invocations.both");
        let rows = details(m);
        run.check(
            rows.iter().any(|(l, v)| l == "both" && *v == 3.0),
            "out-of-line copy: 3 calls through the pointer",
        );
        run.check(
            rows.iter()
                .any(|(l, v)| l == "both [inlined, 1 site]" && *v == 500.0),
            "inlined copy in loop(): 500 calls",
        );
        assert_eq!(samples(m), vec![503.0; 2]);
        uses_engine(m, engine);
    }
}

#[test]
fn inlined_cpp_push_back_is_counted_exactly() {
    if skip_without_uprobes("uprobes") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/cpp/push_back.cpp");
    let exe = dir.path().join("push_back");
    let Some(()) = build!(
        Need::Gxx,
        Command::new("g++")
            .args(["-O2", "-g", "-o"])
            .arg(&exe)
            .arg(&src)
    ) else {
        return;
    };
    for (engine, n) in ENGINES
        .into_iter()
        .flat_map(|e| [1u32, 1000, 3001].map(|n| (e, n)))
    {
        let arg = n.to_string();
        let run = sbs([
            "--invocations-engine".as_ref(),
            engine.as_ref(),
            "--runs".as_ref(),
            "1".as_ref(),
            "--format".as_ref(),
            "json".as_ref(),
            "--invocations".as_ref(),
            "vector::push_back".as_ref(),
            "--".as_ref(),
            exe.as_os_str(),
            arg.as_ref(),
        ]);
        let report = run.json();
        let m = metric(&report, "invocations.vector::push_back");
        let rows = details(m);
        let n = f64::from(n);
        let row = |prefix: &str| {
            rows.iter()
                .filter(|(l, _)| l.starts_with(prefix))
                .map(|(_, v)| *v)
                .sum::<f64>()
        };
        assert_eq!(
            row("std::vector<int, std::allocator<int> >::push_back"),
            n,
            "{m:#}"
        );
        let odd = (n / 2.0).floor();
        assert_eq!(
            row("std::vector<long, std::allocator<long> >::push_back"),
            n + odd,
            "{m:#}"
        );
        assert_eq!(samples(m), vec![2.0 * n + odd]);
        uses_engine(m, engine);
    }
}

#[test]
fn detail_without_invocations_is_an_error() {
    sbs(["--invocations-detail", "--", "/bin/true"]).fails_with(2, "add --invocations PATTERN");
}

/// Run `--invocations PATTERN --format json` on `exe 100`.
fn invocations_of(exe: &Path, pattern: &str) -> util::Finished {
    sbs([
        "--runs".as_ref(),
        "1".as_ref(),
        "--format".as_ref(),
        "json".as_ref(),
        "--invocations".as_ref(),
        pattern.as_ref(),
        "--".as_ref(),
        exe.as_os_str(),
        "100".as_ref(),
    ])
}

#[test]
fn unreadable_debug_info_is_said_with_its_cause() {
    if skip_without_uprobes("uprobes") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = util::gcc_fixture(dir.path(), "lock_first", &[]) else {
        return;
    };
    // A copy whose .debug_info claims a DWARF version that does not exist.
    let mut data = std::fs::read(&exe).unwrap();
    let (start, _) = {
        use object::{Object, ObjectSection};
        let file = object::File::parse(&*data).unwrap();
        file.section_by_name(".debug_info")
            .and_then(|s| s.file_range())
            .expect(".debug_info in the file")
    };
    let version = start as usize + 4;
    data[version..version + 2].copy_from_slice(&[0x7f, 0x00]);
    let broken = dir.path().join("broken");
    std::fs::write(&broken, &data).unwrap();
    std::fs::set_permissions(&broken, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();

    // The out-of-line copy is still counted; the warning says the inlined ones are
    // unknown, and why.
    let run = invocations_of(&broken, "bump_ool").success();
    let warnings = run.json()["benchmarks"][0]["warnings"].to_string();
    run.check(
        warnings.contains("inlined instances unknown, DWARF unreadable")
            && warnings.contains("malformed DWARF")
            && warnings.contains("unknown DWARF version"),
        "the warning names the cause",
    );
    // A function that exists only inlined: the error says why none was found.
    let run = invocations_of(&broken, "bump_inl").fails_with(2, "matches no function");
    run.check(
        run.stderr().contains("debug info is unreadable")
            && run.stderr().contains("unknown DWARF version"),
        "the error names the cause",
    );

    // Split DWARF (-gsplit-dwarf): the inlined copies are in a .dwo file that is not read;
    // it used to be a silent undercount (the inlined calls simply missing).
    let split = tempfile::tempdir().unwrap();
    let Some(exe) = util::gcc_fixture(split.path(), "lock_first", &["-gsplit-dwarf"]) else {
        return;
    };
    let run = invocations_of(&exe, "bump_ool").success();
    let warnings = run.json()["benchmarks"][0]["warnings"].to_string();
    run.check(
        warnings.contains("split into .dwo/.dwp files"),
        "split DWARF is named",
    );
    invocations_of(&exe, "bump_inl").fails_with(2, "split into .dwo/.dwp files");
}

const BOXES: &str = r#"
use std::hint::black_box;
fn main() {
    let n: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(0);
    let mut kept: Vec<Box<u64>> = Vec::new();
    for i in 0..n {
        kept.push(Box::new(black_box(i as u64)));
    }
    black_box(&kept);
}
"#;

/// `--boxing` in a release build, where `Box::new` exists only inlined: its inlined
/// copies are counted like any inlined function's, by both engines.
#[test]
fn boxing_counts_inlined_box_new_in_a_release_build() {
    if skip_without_uprobes("uprobes") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("boxes.rs");
    std::fs::write(&src, BOXES).unwrap();
    let exe = dir.path().join("boxes");
    let Some(()) = build!(
        Need::Rustc,
        sbs_skip::rustc_release().arg("-o").arg(&exe).arg(&src)
    ) else {
        return;
    };
    for engine in ENGINES {
        let count = |n: &str| {
            let report = sbs([
                "--invocations-engine".as_ref(),
                engine.as_ref(),
                "--boxing".as_ref(),
                "--runs".as_ref(),
                "1".as_ref(),
                "--warmup".as_ref(),
                "0".as_ref(),
                "-f".as_ref(),
                "json".as_ref(),
                "--".as_ref(),
                exe.as_os_str(),
                n.as_ref(),
            ])
            .success()
            .json();
            let m = metric(&report, "boxing.count");
            uses_engine(m, engine);
            samples(m)[0]
        };
        let (none, some) = (count("0"), count("300"));
        assert_eq!(some - none, 300.0, "{engine}: {some} vs {none}");
    }
}

/// `tests/fixtures/rust/shapes.rs` built at opt-level 3 and at opt-level 0 (where every
/// push is a call: the truth), in `dir`.
fn build_shapes(dir: &Path) -> Option<(PathBuf, PathBuf)> {
    build_pair(dir, "shapes")
}

/// `tests/fixtures/rust/NAME.rs` built at opt-level 3 and at opt-level 0, in `dir`.
fn build_pair(dir: &Path, name: &str) -> Option<(PathBuf, PathBuf)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("fixtures/rust/{name}.rs"));
    let (release, debug) = (
        dir.join(format!("{name}-O3")),
        dir.join(format!("{name}-O0")),
    );
    build!(
        Need::Rustc,
        sbs_skip::rustc_release().arg("-o").arg(&release).arg(&src)
    )?;
    build!(
        Need::Rustc,
        sbs_skip::rustc_release()
            .args(["-C", "opt-level=0", "-o"])
            .arg(&debug)
            .arg(&src)
    )?;
    Some((release, debug))
}

/// The report of `--invocations Vec::push --invocations-detail` on `exe N` with `engine`.
fn push_report(exe: &Path, engine: &str, n: &str) -> serde_json::Value {
    sbs([
        "--invocations-engine".as_ref(),
        engine.as_ref(),
        "--runs".as_ref(),
        "1".as_ref(),
        "-f".as_ref(),
        "json".as_ref(),
        "--invocations-detail".as_ref(),
        "--invocations".as_ref(),
        "Vec::push".as_ref(),
        "--".as_ref(),
        exe.as_os_str(),
        n.as_ref(),
    ])
    .success()
    .json()
}

/// The rows of [`push_report`].
fn push_rows(exe: &Path, engine: &str, n: &str) -> Vec<(String, f64)> {
    details(metric(
        &push_report(exe, engine, n),
        "invocations.Vec::push",
    ))
}

/// The pushes of `escape` share code that DWARF gives an inlined instance of its own
/// without a call line (the capacity load hoisted before the branch, the store and length
/// update merged into one tail). Every push entered it, so it was counted as a call of
/// its own: 2,500 where 1,500 were made. It is part of the calls that enter it: the
/// rows of `escape` sum to the opt-level-0 build's count, each row its own line's.
#[test]
fn a_tail_that_inlined_copies_share_is_part_of_their_calls() {
    if skip_without_uprobes("uprobes") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some((release, debug)) = build_shapes(dir.path()) else {
        return;
    };
    let n: u64 = 1000;
    let truth: f64 = push_rows(&debug, "uprobe", &n.to_string())
        .iter()
        .filter(|(l, _)| l.contains("push<u8"))
        .map(|(_, v)| v)
        .sum();
    let escaped = n.div_ceil(4) as f64;
    assert_eq!(truth, (n as f64 - escaped) + 3.0 * escaped, "opt-level 0");
    for engine in ENGINES {
        let rows: Vec<(String, f64)> = push_rows(&release, engine, &n.to_string())
            .into_iter()
            .filter(|(l, _)| l.contains("[inlined in shapes::escape at"))
            .collect();
        let line = |l: u32| {
            let at = format!("fixtures/rust/shapes.rs:{l}]");
            rows.iter().find(|(r, _)| r.contains(&at)).map(|(_, v)| *v)
        };
        assert_eq!(line(18), Some(n as f64 - escaped), "{engine}: {rows:?}");
        for l in [21, 22, 23] {
            assert_eq!(line(l), Some(escaped), "{engine}: line {l}: {rows:?}");
        }
        assert_eq!(
            rows.len(),
            4,
            "{engine}: no row of its own for the tail: {rows:?}"
        );
        assert_eq!(rows.iter().map(|(_, v)| v).sum::<f64>(), truth, "{engine}");
    }
}

/// `eight`'s loop of 8 pushes became straight-line stores covered by one inlined copy:
/// one counted pass is 8 calls. It was counted as 1 per call of `eight`, as exact. The
/// row is now marked uncertain, the total is no exact count, and its note gives bounds
/// that hold the opt-level-0 build's count.
#[test]
fn an_unrolled_loop_is_a_lower_bound_whose_bounds_hold_the_truth() {
    if skip_without_uprobes("uprobes") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some((release, debug)) = build_shapes(dir.path()) else {
        return;
    };
    let n = "1000";
    let truth: f64 = push_rows(&debug, "uprobe", n).iter().map(|(_, v)| v).sum();
    for engine in ENGINES {
        let report = push_report(&release, engine, n);
        let m = metric(&report, "invocations.Vec::push");
        assert_eq!(m["exact"], false, "{engine}: {m:#}");
        let eight = details(m)
            .into_iter()
            .find(|(l, _)| l.contains("[inlined in shapes::eight at"))
            .unwrap_or_else(|| panic!("{engine}: no row of `eight`: {m:#}"));
        assert!(eight.0.contains(", uncertain]"), "{engine}: {eight:?}");
        let notes = m["notes"].to_string();
        let bounds: Vec<f64> = notes
            .split("each run made between ")
            .nth(1)
            .and_then(|rest| rest.split(" calls").next())
            .map(|b| {
                b.split(" and ")
                    .map(|x| x.replace(',', "").parse().unwrap())
                    .collect()
            })
            .unwrap_or_else(|| panic!("{engine}: no bounds in {notes}"));
        assert!(
            bounds[0] <= truth && truth <= bounds[1],
            "{engine}: {truth} made, bounds {bounds:?}"
        );
    }
}

/// A whole count as reports print it: `9,502`.
fn thousands(v: f64) -> String {
    let digits = format!("{v:.0}");
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The bounds of a count that is not exact were prose only (issue 44): `eight`'s unrolled
/// loop bounds its pushes, copies whose entries are uncertain have no bound. The JSON
/// metric carries both now as `range`, the numbers of the notes, its bounds holding the
/// opt-level-0 build's count; CSV gives them in columns of their own, text and Markdown
/// in words.
#[test]
fn the_bounds_of_a_count_that_is_not_exact_are_in_every_format() {
    if skip_without_uprobes("uprobes") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some((release, debug)) = build_shapes(dir.path()) else {
        return;
    };
    let n = "1000";
    let truth: f64 = push_rows(&debug, "uprobe", n).iter().map(|(_, v)| v).sum();
    for engine in ENGINES {
        let report = push_report(&release, engine, n);
        let m = metric(&report, "invocations.Vec::push");
        assert_eq!(m["exact"], false, "{engine}: {m:#}");
        let range = &m["range"];
        let (low, high) = (
            range["low"]
                .as_f64()
                .unwrap_or_else(|| panic!("{engine}: {m:#}")),
            range["high"]
                .as_f64()
                .unwrap_or_else(|| panic!("{engine}: {m:#}")),
        );
        let (sites, unbounded) = (
            range["sites"].as_u64().unwrap_or(0),
            range["unbounded_sites"].as_u64().unwrap_or(0),
        );
        // The notes' numbers, from the same runs: the bounds, and the places (copies
        // whose entries are uncertain) that have none, if any (none since landing pads and
        // entries one call may pass twice have bounds: the copies of std's `addr2line`
        // here).
        let notes = m["notes"].to_string();
        let between = format!(
            "each run made between {} and {} calls{} (",
            thousands(low),
            thousands(high),
            if unbounded > 0 {
                " as far as its other sites bound them"
            } else {
                ""
            }
        );
        assert!(notes.contains(&between), "{engine}: {between} in {m:#}");
        let places = format!("{unbounded} of the {sites} places it counts at");
        assert_eq!(notes.contains(&places), unbounded > 0, "{engine}: {m:#}");
        assert!(unbounded < sites, "{engine}: {range}");
        assert!(sites as usize >= details(m).len(), "{engine}: {range}");
        assert_eq!(
            low,
            samples(m)[0],
            "{engine}: the count is the fewest calls"
        );
        assert!(
            low <= truth && truth <= high,
            "{engine}: {truth} made, {range}"
        );
        let format = |f: &str| {
            sbs([
                "--invocations-engine".as_ref(),
                engine.as_ref(),
                "--runs".as_ref(),
                "1".as_ref(),
                "-f".as_ref(),
                f.as_ref(),
                "--invocations".as_ref(),
                "Vec::push".as_ref(),
                "--".as_ref(),
                release.as_os_str(),
                n.as_ref(),
            ])
            .success()
            .stdout()
        };
        let csv = format("csv");
        let mut rows = csv::Reader::from_reader(csv.as_bytes());
        let header = rows.headers().unwrap().clone();
        let column = |name: &str| header.iter().position(|h| h == name).unwrap();
        let row = rows
            .records()
            .map(Result::unwrap)
            .find(|r| &r[column("metric")] == "invocations.Vec::push")
            .unwrap_or_else(|| panic!("{engine}: no row in {csv}"));
        let number = |name: &str| -> f64 {
            row[column(name)]
                .parse()
                .unwrap_or_else(|_| panic!("{engine}: {name} in {csv}"))
        };
        // The count is the same in every run: the other run's bounds are these.
        assert_eq!(number("range_low"), low, "{engine}: {csv}");
        assert_eq!(number("range_high"), high, "{engine}: {csv}");
        assert_eq!(number("range_sites"), sites as f64, "{engine}: {csv}");
        assert_eq!(
            number("range_unbounded_sites"),
            unbounded as f64,
            "{engine}: {csv}"
        );
        let words = format!(
            "{} to {} per run{}",
            thousands(low),
            thousands(high),
            if unbounded > 0 {
                format!(", as far as sites are bounded: {unbounded} of {sites} unbounded")
            } else {
                String::new()
            }
        );
        let markdown = format("markdown");
        assert!(
            markdown.contains(&format!(" (bounds {words}) |")),
            "{engine}: {words} in {markdown}"
        );
        let text = format("text");
        assert!(
            text.contains(&format!("bounds (invocations.Vec::push): {words}\n")),
            "{engine}: {words} in {text}"
        );
    }
}

/// `tests/fixtures/rust/NAME.rs` at opt-level 3 counted with `N`: every site of
/// `Vec::push` is bounded (`range.unbounded_sites` 0, where ripgrep had 218 of 688 places
/// without a bound), the bounds hold the count of the same source at opt-level 0, and the
/// row of the copy in `CALLER` is marked uncertain. Returns the truth and the range per
/// engine.
fn bounded_with_truth(name: &str, caller: &str, n: &str) -> Option<Vec<(f64, f64, f64)>> {
    if skip_without_uprobes("uprobes") {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let (release, debug) = build_pair(dir.path(), name)?;
    let truth: f64 = push_rows(&debug, "uprobe", n).iter().map(|(_, v)| v).sum();
    let mut out = Vec::new();
    for engine in ENGINES {
        let report = push_report(&release, engine, n);
        let m = metric(&report, "invocations.Vec::push");
        assert_eq!(m["exact"], false, "{engine}: {m:#}");
        // No range: bounds that are the count itself, with every place bounded.
        let range = &m["range"];
        let count = samples(m)[0];
        let unbounded = range["unbounded_sites"].as_u64().unwrap_or(0);
        assert_eq!(unbounded, 0, "{engine}: {m:#}");
        let (low, high) = (range["low"].as_f64(), range["high"].as_f64());
        let (low, high) = match range.is_null() {
            true => (count, count),
            false => match (low, high) {
                (Some(low), Some(high)) => (low, high),
                _ => panic!("{engine}: no bounds: {m:#}"),
            },
        };
        assert!(
            low <= truth && truth <= high,
            "{engine}: {truth} made, {range}"
        );
        let row = details(m)
            .into_iter()
            .find(|(l, _)| l.contains(&format!("[inlined in {caller} at")))
            .unwrap_or_else(|| panic!("{engine}: no row of {caller}: {m:#}"));
        assert!(row.0.contains(", uncertain]"), "{engine}: {row:?}");
        out.push((truth, low, high));
    }
    Some(out)
}

/// A landing pad inside an inlined push (`tests/fixtures/rust/landing.rs`, the shape of
/// ripgrep's `ConfiguredHIR::new`): nothing jumps there, only the unwinder enters. It was
/// not probed, and the copy's count had no bound. It is probed now, each pass there taken
/// as up to one call: with no panic the bounds are the count itself, and the count is the
/// opt-level-0 build's.
#[test]
fn a_landing_pad_inside_a_copy_is_bounded() {
    let Some(runs) = bounded_with_truth("landing", "landing::names", "1000") else {
        return;
    };
    for (truth, low, high) in runs {
        assert_eq!((low, high), (truth, truth), "{truth} made");
    }
}

/// An inner loop copied once per value of a flag (`tests/fixtures/rust/unswitched.rs`,
/// the shape of ripgrep's `Minimizer::new`): the push has an entry in each copy, and one
/// can reach the other through the outer loop, so one call might pass both. The count
/// had no bound; every call passes an entry, so it is at most the count and at least
/// none, which holds the opt-level-0 build's count.
#[test]
fn two_entries_one_call_might_pass_are_bounded() {
    let Some(runs) = bounded_with_truth("unswitched", "unswitched::ids", "1000") else {
        return;
    };
    for (truth, low, high) in runs {
        assert!(
            low < truth && high == truth,
            "{truth} made, {low} to {high}"
        );
    }
}

/// A loop unrolled into copies of one piece of code on one source line (the shape of
/// ripgrep's `Pool::new`, `tests/fixtures/rust/slots.rs`): the line table shows nothing
/// repeated, the machine code does. Its row was counted as exact, one call per `slots`
/// for 8 made; it is uncertain now, with bounds that hold the opt-level-0 build's count,
/// and the check calls that line bounded, not differing.
#[test]
fn a_loop_unrolled_into_copies_on_one_line_is_bounded() {
    let Some((run, report)) = checked_fixture("slots", "1000") else {
        return;
    };
    let m = metric(&report, "invocations.Vec::push");
    run.check(m["exact"] == false, "the total is no exact count");
    let notes = m["notes"].to_string();
    run.check(
        notes.contains("each run made between") && notes.contains("and 8,0"),
        "the bounds reach the 8,000 pushes made",
    );
    let line = group_that_made(&report, 8000);
    assert_eq!(line["verdict"], "bounded", "{line:#}");
    let groups = check_groups(&report);
    run.check(
        groups.iter().all(|g| g["verdict"] != "differs"),
        "nothing differs",
    );
}

/// Two arms of a `match` that push alike, merged into one piece of code that the match's
/// jump table enters (the shape of regex-automata's `Builder::patch`,
/// `tests/fixtures/rust/arms.rs`): DWARF gives that code an inlined `Vec::push` without
/// a call line and nothing to the two pushes. Its only entry is a jump-table target, which
/// was not probed: 0 counted, as exact, for 2,000 made. The table is read now, the code is
/// the calls' only code, so each entry is a call: equal to the opt-level-0 build's count
/// at both lines.
#[test]
fn arms_merged_behind_a_jump_table_are_counted_exactly() {
    let Some((run, report)) = checked_fixture("arms", "1000") else {
        return;
    };
    let m = metric(&report, "invocations.Vec::push");
    let arms = group_that_made(&report, 2000);
    let groups = check_groups(&report);
    assert_eq!(arms["verdict"], "equal", "{arms:#}");
    assert_eq!(arms["lines"].as_array().map(Vec::len), Some(2), "{arms:#}");
    // The arms' site is no shared code a call may continue into: no bounds for it.
    run.check(
        !m["notes"].to_string().contains("may be no call of its own"),
        "the merged arms are counted as calls, not bounded",
    );
    run.check(
        groups.iter().all(|g| g["verdict"] == "equal"),
        "every group is equal",
    );
}

/// Two inlined calls of one function merged into code of their own (the shape of
/// regex-syntax's `parse_flags`, `tests/fixtures/rust/merged.rs`): DWARF gives the merged
/// `add_item` no call line and the push inside it the push's line, so it was counted as
/// calls of its own: 10,000 pushes, as exact, for 5,000 made. It is code that the two
/// calls' pushes continue into now, part of their calls: equal to the opt-level-0 build.
#[test]
fn a_push_inside_merged_copies_of_its_caller_is_part_of_their_calls() {
    let Some((run, report)) = checked_fixture("merged", "1000") else {
        return;
    };
    let pushes = group_that_made(&report, 5000);
    assert_eq!(pushes["counted"], 5000, "{pushes:#}");
    run.check(
        check_groups(&report)
            .iter()
            .all(|g| g["verdict"] != "differs"),
        "nothing differs",
    );
}

/// `tests/fixtures/rust/NAME.rs` built at opt-level 3 and 0, the first run with `N` and
/// its `Vec::push` counts checked against the second: the run and its report; `None` when
/// the check or the builds cannot run here (the skip is recorded).
fn checked_fixture(name: &str, n: &str) -> Option<(util::Finished, serde_json::Value)> {
    checked_fixture_with(name, "Vec::push", n)
}

/// [`checked_fixture`] counting `pattern`.
fn checked_fixture_with(
    name: &str,
    pattern: &str,
    n: &str,
) -> Option<(util::Finished, serde_json::Value)> {
    if cannot_check() {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let (release, debug) = build_pair(dir.path(), name)?;
    Some(checked(&release, &debug, pattern, n))
}

/// The groups of call lines of the report's first check.
fn check_groups(report: &serde_json::Value) -> &Vec<serde_json::Value> {
    report["benchmarks"][0]["invocation_checks"][0]["groups"]
        .as_array()
        .unwrap_or_else(|| panic!("no check in the report: {report:#}"))
}

/// The group of call lines of the report's first check where `made` calls were made.
fn group_that_made(report: &serde_json::Value, made: u64) -> &serde_json::Value {
    check_groups(report)
        .iter()
        .find(|g| g["made"] == made)
        .unwrap_or_else(|| panic!("no group of call lines made {made} calls: {report:#}"))
}

/// Whether `--invocations-check` cannot run here (it needs uprobes for some sites and
/// valgrind for the truth); the skip is recorded.
fn cannot_check() -> bool {
    if skip_without_uprobes("uprobes") {
        return true;
    }
    let valgrind = Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !valgrind {
        sbs_skip::skip!(Need::Valgrind, "valgrind is not installed");
    }
    !valgrind
}

/// One run of `release N` counting `Vec::push`, checked against `debug`; the run and its
/// JSON report.
fn checked_push(release: &Path, debug: &Path, n: &str) -> (util::Finished, serde_json::Value) {
    checked(release, debug, "Vec::push", n)
}

/// One run of `release N` counting `pattern`, checked against `debug`; the run and its
/// JSON report.
fn checked(
    release: &Path,
    debug: &Path,
    pattern: &str,
    n: &str,
) -> (util::Finished, serde_json::Value) {
    let run = sbs([
        "--runs".as_ref(),
        "1".as_ref(),
        "-f".as_ref(),
        "json".as_ref(),
        "--invocations".as_ref(),
        pattern.as_ref(),
        "--invocations-check".as_ref(),
        debug.as_os_str(),
        "--".as_ref(),
        release.as_os_str(),
        n.as_ref(),
    ])
    .success();
    let report = run.json();
    (run, report)
}

/// `--invocations-check`: `shapes` at opt-level 3 checked against the same source at
/// opt-level 0 under callgrind. Every call line of `escape` agrees (the merged tail is
/// part of the calls that enter it), `eight`'s unrolled loop lies within its stated
/// bound, nothing differs. Against an opt-level-0 build of a changed source (one more
/// push on line 18 for each `a`), the check finds exactly that line.
#[test]
fn the_check_against_the_opt_level_0_build_finds_every_line_and_only_the_changed_one() {
    if cannot_check() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // Both builds from the same path, so that their call lines name the same file.
    let src_dir = dir.path().join("src");
    std::fs::create_dir(&src_dir).unwrap();
    let src = src_dir.join("shapes.rs");
    let original = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/rust/shapes.rs"),
    )
    .unwrap();
    let build = |out: &str, level: &str| -> Option<PathBuf> {
        let exe = dir.path().join(out);
        build!(
            Need::Rustc,
            sbs_skip::rustc_release()
                .args(["-C", &format!("opt-level={level}"), "-o"])
                .arg(&exe)
                .arg(&src)
        )?;
        Some(exe)
    };
    std::fs::write(&src, &original).unwrap();
    let Some(release) = build("shapes-O3", "3") else {
        return;
    };
    let Some(debug) = build("shapes-O0", "0") else {
        return;
    };
    let changed = original.replacen(
        "            out.push(b);",
        "            out.push(b); if b == b'a' { out.push(b) }",
        1,
    );
    assert_ne!(changed, original, "line 18 of shapes.rs is the plain push");
    std::fs::write(&src, &changed).unwrap();
    let Some(changed) = build("shapes-changed-O0", "0") else {
        return;
    };
    let check = |against: &Path| {
        let (run, report) = checked_push(&release, against, "1000");
        let checks = report["benchmarks"][0]["invocation_checks"].clone();
        let warnings = report["benchmarks"][0]["warnings"].to_string();
        (run, checks, warnings)
    };
    let line = |n: u32| format!("{}:{n}", src.display());
    let (run, checks, warnings) = check(&debug);
    let c = &checks[0];
    run.check(
        c["metric"] == "invocations.Vec::push",
        "the metric is named",
    );
    let groups = c["groups"].as_array().unwrap();
    let verdict = |l: &str| {
        groups
            .iter()
            .find(|g| g["lines"].as_array().unwrap().iter().any(|x| x == l))
            .map(|g| {
                (
                    g["verdict"].as_str().unwrap().to_string(),
                    g["made"].as_u64().unwrap(),
                )
            })
    };
    // 1000 bytes: 750 kept (line 18), 250 escaped (lines 21-23), 8 pushes per `eight`.
    assert_eq!(verdict(&line(18)), Some(("equal".into(), 750)), "{c:#}");
    for l in [21, 22, 23] {
        assert_eq!(verdict(&line(l)), Some(("equal".into(), 250)), "{c:#}");
    }
    assert_eq!(verdict(&line(33)), Some(("bounded".into(), 8000)), "{c:#}");
    assert_eq!(c["made"], 9500, "{c:#}");
    run.check(
        groups.iter().all(|g| g["verdict"] != "differs") && !warnings.contains("disagree"),
        "nothing differs",
    );

    let (run, checks, warnings) = check(&changed);
    let c = &checks[0];
    let differing: Vec<&serde_json::Value> = c["groups"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|g| g["verdict"] == "differs")
        .collect();
    // Byte i is `a` where i is a multiple of 26, kept where i is no multiple of 4: 39
    // multiples of 26 below 1000, 20 of them multiples of 52, so 19 more pushes.
    run.check(
        differing.len() == 1
            && differing[0]["lines"][0] == line(18).as_str()
            && differing[0]["counted"] == 750
            && differing[0]["made"] == 750 + 19,
        &format!("only line 18 differs: {c:#}"),
    );
    run.check(
        warnings.contains("disagree") && warnings.contains(&line(18)),
        "the warning names the line",
    );
}

/// The check's inputs are checked before the runs, each in one line.
#[test]
fn the_check_refuses_what_it_cannot_use_before_the_runs() {
    let run = sbs([
        "--runs",
        "1",
        "--invocations",
        "Vec::push",
        "--invocations-check",
        "/nonexistent/debug-build",
        "--",
        "/bin/true",
    ]);
    run.fails_with(
        2,
        "--invocations-check /nonexistent/debug-build: cannot read it",
    );
    let run = sbs([
        "--runs",
        "1",
        "--invocations-check",
        "/bin/true",
        "--",
        "/bin/true",
    ]);
    run.check(
        run.code() == Some(2),
        "--invocations-check needs --invocations",
    );
    // `compare` of two programs: which one would the debug build stand for?
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("calls-copy");
    std::fs::copy(fixture!("calls"), &copy).unwrap();
    let calls = fixture!("calls");
    sbs([
        "compare",
        "--runs",
        "1",
        "--invocations",
        "calls::work",
        "--invocations-check",
        calls,
        &format!("{calls} 10 0"),
        &format!("{} 10 0", copy.display()),
    ])
    .fails_with(2, "these benchmarks run 2 programs");
}

/// A real crate's code: serde_json 1.0.145, from the registry, parsing and printing a
/// 200-object document (the driver is a dozen lines; the pushes are serde_json's), built
/// by cargo in release with debug info and at opt-level 0, in the test cache outside the
/// clone (util::registry). `--invocations-check` finds every group of call lines equal
/// to the opt-level-0 build's calls or within its bound: the 800 pushes of
/// `Value::deserialize` (equal) and the 200 of `parse_escape` (within the bounds of its
/// arms and the code without a call line they share).
#[test]
fn serde_json_from_the_registry_counts_the_pushes_its_opt_level_0_build_makes() {
    if cannot_check() {
        return;
    }
    let dir = util::registry::cache_dir().join("drivers/sjdriver");
    std::fs::create_dir_all(dir.join("src")).unwrap();
    let write_if_changed = |path: PathBuf, text: &str| {
        if std::fs::read_to_string(&path).ok().as_deref() != Some(text) {
            std::fs::write(&path, text).unwrap();
        }
    };
    write_if_changed(
        dir.join("Cargo.toml"),
        "[package]\nname = \"sjdriver\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
         [dependencies]\nserde_json = \"=1.0.145\"\n\n\
         [profile.release]\ndebug = true\n\n[profile.dev]\nopt-level = 0\ndebug = true\n\n\
         [workspace]\n",
    );
    write_if_changed(
        dir.join("src/main.rs"),
        r#"use serde_json::Value;
fn main() {
    let n: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(200);
    let mut doc = String::from("[");
    for i in 0..n {
        if i > 0 {
            doc.push(',');
        }
        doc.push_str(&format!(
            "{{\"id\":{i},\"name\":\"item{i}\",\"tags\":[\"a\",\"b\\n\",{i}],\"score\":{}.5}}",
            i * 3
        ));
    }
    doc.push(']');
    let v: Value = serde_json::from_str(&doc).expect("valid JSON");
    let out = serde_json::to_string(&v).expect("serialize");
    println!("{} {}", v.as_array().map_or(0, |a| a.len()), out.len());
}
"#,
    );
    let target = util::registry::target_dir();
    for profile in [&["--release"][..], &[][..]] {
        let built = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
            .args(["build", "-q"])
            .args(profile)
            .arg("--manifest-path")
            .arg(dir.join("Cargo.toml"))
            .env("CARGO_TARGET_DIR", &target)
            .output()
            .expect("run cargo");
        assert!(
            built.status.success(),
            "cargo build {profile:?} of the serde_json driver (crates.io must be reachable \
             the first time): {}",
            String::from_utf8_lossy(&built.stderr)
        );
    }
    let (release, debug) = (
        target.join("release/sjdriver"),
        target.join("debug/sjdriver"),
    );
    let (run, report) = checked_push(&release, &debug, "200");
    let c = &report["benchmarks"][0]["invocation_checks"][0];
    let groups = c["groups"].as_array().unwrap();
    run.check(
        groups.iter().all(|g| g["verdict"] != "differs") && c["made"] == 1000,
        &format!("every group equal or bounded, 1,000 pushes made: {c:#}"),
    );
    let made_at = |suffix: &str| {
        groups
            .iter()
            .find(|g| {
                g["lines"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|l| l.as_str().is_some_and(|l| l.ends_with(suffix)))
            })
            .map(|g| (g["counted"].as_u64(), g["made"].as_u64()))
    };
    assert_eq!(
        made_at("src/value/de.rs:114"),
        Some((Some(800), Some(800))),
        "{c:#}"
    );
    // `parse_escape`'s arms, behind its jump table, and the code they share: the arms
    // count their pushes, and the shared code, entered also from elsewhere, may count
    // them again (bounded, not equal).
    let escape = groups
        .iter()
        .find(|g| g["lines"].to_string().contains("src/read.rs:887"))
        .unwrap_or_else(|| panic!("no group at read.rs:887: {c:#}"));
    assert_eq!(escape["made"], 200, "{c:#}");
    let (low, high) = (&escape["counted_low"], &escape["counted_high"]);
    assert!(
        low.as_u64() <= Some(200) && high.as_u64() >= Some(200),
        "{escape:#}"
    );
}

/// A derived `Clone` places the `Arc`'s clone of `Shared(Arc<...>)` on the
/// `#[derive(Clone)]` line at opt-level 3 and on the field's line at opt-level 0
/// (`tests/fixtures/rust/derived.rs`, the shape of regex-automata's `nfa.rs:189/201`):
/// one equal group was split into two that differed (2,000 counted for 1,000 made at the
/// attribute's line with `Shared::clone`'s, 0 for 1,000 at the field's). The lines of a
/// derived item are one place now: every derived item's group is equal.
#[test]
fn the_calls_of_a_derived_clone_meet_in_one_group_in_both_builds() {
    let Some((run, report)) = checked_fixture_with("derived", "Clone::clone", "1000") else {
        return;
    };
    let src = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/rust/derived.rs"),
    )
    .unwrap();
    let derives: Vec<usize> = src
        .lines()
        .enumerate()
        .filter(|(_, l)| l.starts_with("#[derive(Clone)]"))
        .map(|(i, _)| i + 1)
        .collect();
    assert_eq!(derives.len(), 2, "Entry and Shared");
    let groups = check_groups(&report);
    let names = |g: &serde_json::Value, what: &str| {
        g["lines"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l.as_str().unwrap().contains(what))
    };
    for line in derives {
        let place = format!("fixtures/rust/derived.rs:{line}-");
        let g = groups
            .iter()
            .find(|g| names(g, &place))
            .unwrap_or_else(|| panic!("no group at {place}: {report:#}"));
        assert_eq!(g["verdict"], "equal", "{g:#}");
        assert!(g["made"].as_u64().unwrap() >= 1000, "{g:#}");
    }
    run.check(
        groups
            .iter()
            .filter(|g| g["verdict"] == "differs")
            .all(|g| !names(g, "fixtures/rust/derived.rs")),
        "no line of derived.rs differs",
    );
}

/// A debug build counts `Clone::clone` in copies of the precompiled standard library whose
/// entries are uncertain, so its total is no exact count; its runs made different numbers
/// of calls (`derived N FILE`). The note of its bounds gave no reason: "(; rows marked
/// uncertain)". It says why now.
#[test]
fn a_bound_from_runs_that_differ_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let Some((_, debug)) = build_pair(dir.path(), "derived") else {
        return;
    };
    let runs_file = dir.path().join("runs");
    let report = sbs([
        "--runs".as_ref(),
        "2".as_ref(),
        "-f".as_ref(),
        "json".as_ref(),
        "--invocations".as_ref(),
        "Clone::clone".as_ref(),
        "--".as_ref(),
        debug.as_os_str(),
        "1000".as_ref(),
        runs_file.as_os_str(),
    ])
    .success()
    .json();
    let m = metric(&report, "invocations.Clone::clone");
    assert_eq!(m["exact"], false, "{m:#}");
    let notes = m["notes"].to_string();
    let note = notes
        .split("\"")
        .find(|n| n.contains("each run made between"))
        .unwrap_or_else(|| panic!("no bounds in {notes}"));
    assert!(!note.contains("(;"), "{note}");
    assert!(note.contains("from run to run"), "{note}");
}

/// The groups of a check whose lines include `file:LINE` for a line of `file` (a fixture
/// under `fixtures/rust/`) holding `text`.
fn groups_at<'a>(
    report: &'a serde_json::Value,
    file: &str,
    text: &str,
) -> Vec<&'a serde_json::Value> {
    let src = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("fixtures/rust/{file}")),
    )
    .unwrap();
    let line = src
        .lines()
        .position(|l| l.contains(text) && !l.trim_start().starts_with("//"))
        .unwrap_or_else(|| panic!("no `{text}` in {file}"))
        + 1;
    let place = format!("fixtures/rust/{file}:{line}");
    check_groups(report)
        .iter()
        .filter(|g| {
            g["lines"]
                .as_array()
                .unwrap()
                .iter()
                .any(|l| l.as_str().is_some_and(|l| l.ends_with(&place)))
        })
        .collect()
}

/// The arms of a depth-first walk share the store of their pushes and the jump back to
/// the loop (`tests/fixtures/rust/tails.rs`, the shape of regex-automata's `nfa.rs:1334`
/// in fd, 9 counted for 2 made): DWARF gives that jump to the copy at
/// `stack.push(alt1)`, whose entry then counted every push of the loop (16 for 7 made,
/// "off at uncertain sites"), and `Capture`'s push, which has no code of its own, read 0
/// for 6 made ("differs"). That copy now stands for the calls that share the code, with
/// the bounds of shared code: nothing differs.
#[test]
fn the_end_of_shared_code_named_after_one_call_is_bounded_with_its_calls() {
    let Some((run, report)) = checked_fixture_with("tails", "Vec::push", "1000") else {
        return;
    };
    let capture = groups_at(&report, "tails.rs", "State::Capture { next, .. } =>");
    assert!(
        capture.is_empty(),
        "the match arm's line is not a call line"
    );
    let alt1 = groups_at(&report, "tails.rs", "stack.push(alt1)");
    assert_eq!(alt1.len(), 1, "{report:#}");
    let g = alt1[0];
    let lines = g["lines"].to_string();
    let src = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/rust/tails.rs"),
    )
    .unwrap();
    // The line after the arm's.
    let capture_push = src
        .lines()
        .position(|l| l.contains("State::Capture { next, .. } =>"))
        .unwrap()
        + 2;
    assert!(
        lines.contains(&format!("tails.rs:{capture_push}\"")),
        "Capture's push is in the group of the code it shares: {g:#}"
    );
    assert_eq!(g["verdict"], "bounded", "{g:#}");
    let (low, high, made) = (
        g["counted_low"].as_u64().unwrap(),
        g["counted_high"].as_u64().unwrap(),
        g["made"].as_u64().unwrap(),
    );
    assert!(low <= made && made <= high && made > 0, "{g:#}");
    run.check(
        check_groups(&report)
            .iter()
            .all(|g| g["verdict"] != "differs" && g["verdict"] != "uncertain"),
        "nothing differs, nothing is off",
    );
}

/// Loops of 8 pushes that the optimizer unrolls and vectorizes
/// (`tests/fixtures/rust/packed.rs`): the bound of an unrolled loop counted one call per
/// instruction of the repeated line, 6 for `bytes`' 8 pushes and 2 for `words`' (one
/// `movdqu` stores 4), so the calls made lay above the bound: "differs". A store from a
/// vector register may hold one value per byte: the bounds hold the 8,000 pushes now.
#[test]
fn an_unrolled_loop_whose_stores_are_vectorized_is_bounded_above_its_calls() {
    let Some((run, report)) = checked_fixture_with("packed", "Vec::push", "1000") else {
        return;
    };
    for f in ["seed.wrapping_mul(k + 1)", "seed.wrapping_add(k)"] {
        let at = groups_at(&report, "packed.rs", f);
        assert_eq!(at.len(), 1, "{f}: {report:#}");
        let g = at[0];
        assert_eq!(g["made"], 8000, "{g:#}");
        assert_eq!(g["verdict"], "bounded", "{f}: {g:#}");
        assert!(g["counted_high"].as_u64() >= Some(8000), "{g:#}");
    }
    run.check(
        check_groups(&report)
            .iter()
            .all(|g| g["verdict"] != "differs"),
        "nothing differs",
    );
}

/// The clones of the zero-sized allocator inside `Vec::clone` and `Arc::clone`
/// (`tests/fixtures/rust/derived.rs`) are calls in the opt-level-0 build and have no
/// code in the release build: nothing there can be counted, as the "not counted"
/// warning says. Their groups read "differs" (0 counted, 1,000 made); they are told
/// apart now (`no_code`).
#[test]
fn calls_the_release_build_has_no_code_for_are_not_called_a_difference() {
    let Some((run, report)) = checked_fixture_with("derived", "Clone::clone", "1000") else {
        return;
    };
    let groups = check_groups(&report);
    let no_code: Vec<&serde_json::Value> = groups
        .iter()
        .filter(|g| g["verdict"] == "no_code")
        .collect();
    run.check(!no_code.is_empty(), "some groups have no code to count");
    for g in &no_code {
        assert_eq!(g["counted"], 0, "{g:#}");
        assert!(g["rows"].as_array().unwrap().is_empty(), "{g:#}");
        assert!(g["made"].as_u64().unwrap() >= 1000, "{g:#}");
    }
    run.check(
        groups.iter().all(|g| g["verdict"] != "differs"),
        "nothing differs",
    );
}

/// fd 10.2.0 from the registry, built as a user builds it (`cargo install --locked`) in
/// release with debug info (its release profile strips, so `strip` off), and the same at
/// opt-level 0 (without LTO, to build faster): not `--debug`, whose debug assertions run
/// code the release build does not have (clap's `debug_asserts.rs`: 93 pushes and 65,936
/// clones of its own). Kept in the test cache outside the clone (util::registry), the
/// executables `fd-10.2.0-{release,O0}/bin/fd` there; built from scratch when missing
/// (22 and about 10 minutes on this 2-core machine under load).
fn fd_builds() -> (PathBuf, PathBuf) {
    let cache = util::registry::cache_dir();
    std::fs::create_dir_all(&cache).unwrap();
    let build = |name: &str| -> PathBuf {
        let root = cache.join(format!("fd-10.2.0-{name}"));
        let exe = root.join("bin/fd");
        if exe.exists() {
            return exe;
        }
        let partial = cache.join(format!(".fd-10.2.0-{name}.{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&partial);
        let mut cargo = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
        cargo
            .args(["install", "-q", "--locked", "fd-find@10.2.0", "--root"])
            .arg(&partial)
            .env("CARGO_TARGET_DIR", util::registry::target_dir());
        cargo
            .env("CARGO_PROFILE_RELEASE_DEBUG", "true")
            .env("CARGO_PROFILE_RELEASE_STRIP", "false");
        if name == "O0" {
            cargo
                .env("CARGO_PROFILE_RELEASE_OPT_LEVEL", "0")
                .env("CARGO_PROFILE_RELEASE_LTO", "false")
                .env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "16");
        }
        let built = cargo.output().expect("run cargo");
        assert!(
            built.status.success(),
            "cargo install fd-find 10.2.0 ({name}; crates.io must be reachable the first \
             time): {}",
            String::from_utf8_lossy(&built.stderr)
        );
        // Another test may have got there first.
        if std::fs::rename(&partial, &root).is_err() {
            let _ = std::fs::remove_dir_all(&partial);
        }
        exe
    };
    (build("release"), build("O0"))
}

/// A tree for fd to walk: 8 directories of 3 levels with 12 files each, a third of them
/// `.rs`.
fn fd_tree(dir: &Path) {
    for d in 0..8 {
        let mut at = dir.to_path_buf();
        for level in 0..3 {
            at = at.join(format!("d{d}-{level}"));
            std::fs::create_dir_all(&at).unwrap();
            for f in 0..12 {
                let ext = ["rs", "txt", "md"][f % 3];
                std::fs::write(at.join(format!("f{f}.{ext}")), "x\n").unwrap();
            }
        }
    }
}

/// fd 10.2.0 from the registry (`fd_builds`) walking a small tree (`fd -j1 -e rs .`),
/// `Vec::push` checked against its opt-level-0 build. Every verdict follows from its
/// numbers (`equal` only when counted equals made, `bounded` only within the bounds; a
/// group that states a bound and misses it differs); no group of a derived item's lines
/// differs; regex-automata's `nfa.rs:1334` (9 counted for 2 made, not marked uncertain)
/// does not differ; calls the release build has no code for are `no_code`, not
/// `differs`. The verdicts' counts are printed. (`Clone::clone` on the same run needs
/// 3,000 probes and took 14 minutes with the test build of sbs-profile: measured by hand,
/// docs/inlined.md.)
#[test]
#[ignore = "15 minutes with the cache warm (over the CI budget): cargo test -p sbs-tests --test inlined -- --ignored fd_from"]
fn fd_from_the_registry_gets_true_verdicts_against_its_opt_level_0_build() {
    if cannot_check() {
        return;
    }
    let (release, o0) = fd_builds();
    let dir = tempfile::tempdir().unwrap();
    fd_tree(dir.path());
    let run = sbs([
        "--runs".as_ref(),
        "1".as_ref(),
        "-f".as_ref(),
        "json".as_ref(),
        "--invocations".as_ref(),
        "Vec::push".as_ref(),
        "--invocations-check".as_ref(),
        o0.as_os_str(),
        "--".as_ref(),
        release.as_os_str(),
        "-j1".as_ref(),
        "-e".as_ref(),
        "rs".as_ref(),
        ".".as_ref(),
        dir.path().as_os_str(),
    ])
    .success();
    let report = run.json();
    let checks = report["benchmarks"][0]["invocation_checks"]
        .as_array()
        .unwrap_or_else(|| panic!("no checks: {report:#}"));
    assert_eq!(checks.len(), 1, "{report:#}");
    for c in checks {
        let groups = c["groups"].as_array().unwrap();
        let mut verdicts: std::collections::BTreeMap<String, usize> = Default::default();
        for g in groups {
            let n = |k: &str| g[k].as_u64().unwrap_or_else(|| panic!("{k}: {g:#}"));
            let (counted, low, high, made) =
                (n("counted"), n("counted_low"), n("counted_high"), n("made"));
            let verdict = g["verdict"].as_str().unwrap();
            *verdicts.entry(verdict.to_string()).or_default() += 1;
            let within = low <= made && made <= high;
            let consistent = match verdict {
                "equal" => counted == made,
                "bounded" => counted != made && within,
                "uncertain" => counted != made && !within && low == high,
                "no_code" => counted == 0 && made > 0 && g["rows"] == serde_json::json!([]),
                "differs" => counted != made && !within,
                _ => false,
            };
            assert!(consistent, "{}: {g:#}", c["metric"]);
            let lines = g["lines"].to_string();
            // A derived item's place reads `file:FIRST-LAST`.
            let derived = g["lines"].as_array().unwrap().iter().all(|l| {
                l.as_str()
                    .unwrap()
                    .rsplit(':')
                    .next()
                    .unwrap()
                    .contains('-')
            });
            assert!(
                !(derived && verdict == "differs"),
                "a derived item's group differs: {g:#}"
            );
            assert!(
                !(lines.contains("thompson/nfa.rs:1334\"") && verdict == "differs"),
                "nfa.rs:1334: {g:#}"
            );
        }
        eprintln!(
            "{}: {} counted, {} made; groups: {verdicts:?}",
            c["metric"], c["counted"], c["made"]
        );
        assert!(verdicts.get("equal").copied().unwrap_or(0) > 10, "{c:#}");
    }
}
