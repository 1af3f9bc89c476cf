//! The history store: saved runs and named baselines, as CSV files a person can read,
//! diff and commit.
//!
//! Layout under the history directory (default [`DEFAULT_DIR`]):
//!
//! ```text
//! .sbs/
//!   history/<benchmark>/<entry id>.csv     one file per saved run (--save), never rewritten
//!   baselines/<name>/<benchmark>.csv       one file per named baseline and benchmark
//! ```
//!
//! `<benchmark>` is the benchmark's name made safe for a file name, followed by a hash of
//! the full name. Every file holds one row per sample, in long form, with the metadata
//! repeated on each row (time, command, tool version, git commit, host, the metric's unit
//! and source), so any row stands on its own and `grep` or a spreadsheet reads it as is.
//!
//! Writes are atomic: a file is written to a hidden temporary file in the same directory,
//! synced, then renamed into place. A saved entry is a new file with a unique name
//! (time, pid, counter) created without replacing anything, so two collectors saving at
//! once both keep their data. A baseline is replaced under an exclusive lock, and only if
//! the file it replaces is one of ours. Hidden files (temporaries left by a killed writer)
//! are ignored on reading; any other file that does not parse is reported with its path
//! and never overwritten.

mod entry;
mod read;
mod writable;
mod write;

use std::io;
use std::path::{Path, PathBuf};

use sbs_reports::model::Unit;
use serde::{Deserialize, Serialize};

pub use entry::{Entry, EntryMeta, SavedMetric};

/// Default history directory, relative to the current directory.
pub const DEFAULT_DIR: &str = ".sbs";

/// Version of the history file format; changes only for incompatible changes.
pub const HISTORY_SCHEMA: u32 = 4;

/// Name of the first CSV column: marks a file as ours.
const MARKER: &str = "sbs_history_schema";

/// What went wrong with the history store.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// A file system operation failed.
    #[error("cannot {action} {path}: {error}; {}", advice(action))]
    Io {
        /// What was attempted (`create directory`, `write`...).
        action: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The error (in the message, so not also a `source` that would print it twice).
        error: io::Error,
    },
    /// A file that is not an sbs-profile history file.
    #[error("{} is not an sbs-profile history file ({reason}); it was left untouched: move it out of the history directory or use another --history", path.display())]
    Foreign {
        /// The file.
        path: PathBuf,
        /// Why it is not ours.
        reason: String,
    },
    /// A history file that does not parse.
    #[error("{} is corrupt (line {line}: {reason}); it was left untouched: restore it from version control or delete it", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: u64,
        /// What is wrong.
        reason: String,
    },
    /// A history file written by a newer version.
    #[error("{} was written by a newer sbs-profile (history schema {found}; this one reads {HISTORY_SCHEMA}): upgrade sbs-profile", path.display())]
    NewerSchema {
        /// The file.
        path: PathBuf,
        /// Its schema version.
        found: u32,
    },
    /// An invalid baseline name.
    #[error("baseline name `{0}` is invalid: use 1 to 100 letters, digits, `.`, `_` or `-`, not starting with `.`")]
    BadName(String),
    /// Nothing to save.
    #[error("benchmark `{0}` has no samples to save: check that its runs succeeded")]
    Empty(String),
    /// A baseline asked for has no file for a benchmark.
    #[error("baseline `{name}` has no entry for benchmark `{benchmark}` ({} does not exist)", path.display())]
    NoBaseline {
        /// The baseline's name.
        name: String,
        /// The benchmark.
        benchmark: String,
        /// The file that would hold it.
        path: PathBuf,
        /// The baselines saved for the benchmark, sorted (for a suggestion).
        saved: Vec<String>,
    },
}

/// What to check after a failed `action` on the history: reading needs permission to
/// read, writing also room.
fn advice(action: &str) -> &'static str {
    match action {
        "list" | "open" | "read" => {
            "check that --history names an sbs-profile history directory that this user can read"
        }
        _ => "check that the history directory (--history) is writable and the disk has room",
    }
}

fn io_error<'a>(
    action: &'static str,
    path: &'a Path,
) -> impl FnOnce(io::Error) -> HistoryError + 'a {
    move |error| HistoryError::Io {
        action,
        path: path.to_path_buf(),
        error,
    }
}

/// One CSV row: one sample of one metric of one saved entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Row {
    #[serde(rename = "sbs_history_schema")]
    schema: u32,
    entry: String,
    time: String,
    benchmark: String,
    command: String,
    tool_version: String,
    git_commit: String,
    host: String,
    metric: String,
    /// Empty for the metric's own value; a breakdown label (e.g. one probed symbol) for
    /// a row of its details. Schema 1 files have no such column.
    #[serde(default)]
    detail: String,
    unit: Unit,
    source: String,
    exact: bool,
    run: usize,
    value: f64,
    /// Whether this run's child failed (kept by `--ignore-failure`). Files before schema 3
    /// have no such column.
    #[serde(default)]
    failed: bool,
    /// What the machine did during the entry's runs (the report's `conditions.machine`),
    /// as compact JSON; empty when it was not read. Files before schema 4 have no such
    /// column.
    #[serde(default)]
    machine: String,
}

/// The column schema 2 added: a breakdown label, empty on a metric's own rows.
const DETAIL: &str = "detail";

/// The column schema 3 added: whether the run's child failed.
const FAILED: &str = "failed";

/// The column schema 4 added: the machine's conditions during the runs.
const MACHINE: &str = "machine";

/// The columns of schema 4. Schema 3 (still read) had the same without [`MACHINE`],
/// schema 2 also without [`FAILED`], and schema 1 also without [`DETAIL`].
const COLUMNS: [&str; 17] = [
    MARKER,
    "entry",
    "time",
    "benchmark",
    "command",
    "tool_version",
    "git_commit",
    "host",
    "metric",
    DETAIL,
    "unit",
    "source",
    "exact",
    "run",
    "value",
    FAILED,
    MACHINE,
];

/// The columns of schema 3.
fn columns_v3() -> impl Iterator<Item = &'static str> {
    COLUMNS.into_iter().filter(|c| *c != MACHINE)
}

/// The columns of schema 2.
fn columns_v2() -> impl Iterator<Item = &'static str> {
    columns_v3().filter(|c| *c != FAILED)
}

/// The columns of schema 1.
fn columns_v1() -> impl Iterator<Item = &'static str> {
    columns_v2().filter(|c| *c != DETAIL)
}

/// What a run saves once its report is final.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Saving {
    /// Each benchmark as a new history entry (`--save`).
    pub entries: bool,
    /// Each benchmark as this baseline, replacing the previous one (`--save-baseline`).
    pub baseline: Option<String>,
}

impl Saving {
    /// Whether anything is saved.
    fn any(&self) -> bool {
        self.entries || self.baseline.is_some()
    }
}

/// What a run compares each benchmark with, read before its runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wanted<'a> {
    /// Nothing saved (`compare`: its commands are compared with each other).
    Nothing,
    /// The named baseline, which every benchmark must have.
    Baseline(&'a str),
    /// At most this many of the latest saved entries.
    Latest(usize),
}

/// The history store rooted at a directory, and what a run saves in it.
#[derive(Debug, Clone)]
pub struct History {
    root: PathBuf,
    saving: Saving,
}

impl History {
    /// A store rooted at `root` (created on the first save) that saves nothing.
    pub fn new(root: impl Into<PathBuf>) -> History {
        History {
            root: root.into(),
            saving: Saving::default(),
        }
    }

    /// The store of a run rooted at `root`, saving as `saving` asks, its baseline names
    /// checked: `compared_with` (`--baseline`), then the baseline it saves. Reads and
    /// writes nothing yet.
    pub fn open(
        root: impl Into<PathBuf>,
        saving: Saving,
        compared_with: Option<&str>,
    ) -> Result<History, HistoryError> {
        for name in [compared_with, saving.baseline.as_deref()]
            .into_iter()
            .flatten()
        {
            check_name(name)?;
        }
        Ok(History {
            root: root.into(),
            saving,
        })
    }

    /// Directory of a benchmark's saved entries.
    pub fn entries_dir(&self, benchmark: &str) -> PathBuf {
        self.root.join("history").join(slug(benchmark))
    }

    /// File of a benchmark's named baseline.
    pub fn baseline_path(&self, name: &str, benchmark: &str) -> Result<PathBuf, HistoryError> {
        check_name(name)?;
        Ok(self
            .root
            .join("baselines")
            .join(name)
            .join(format!("{}.csv", slug(benchmark))))
    }
}

fn check_name(name: &str) -> Result<(), HistoryError> {
    let ok = !name.is_empty()
        && name.len() <= 100
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(HistoryError::BadName(name.to_string()))
    }
}

/// A file-name-safe form of a benchmark name: its safe characters (at most 48), then the
/// FNV-1a hash of the whole name, so different names never share a directory.
pub fn slug(benchmark: &str) -> String {
    let mut readable: String = benchmark
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    readable = readable.trim_matches(|c| c == '_' || c == '.').to_string();
    readable.truncate(48);
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in benchmark.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    if readable.is_empty() {
        format!("{hash:016x}")
    } else {
        format!("{readable}-{hash:016x}")
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::process::{Command, Stdio};

    use super::*;
    use sbs_reports::model::{BenchmarkResult, Detail, MetricResult, Summary};

    fn metric(id: &str, unit: Unit, source: &str, exact: bool, samples: &[f64]) -> MetricResult {
        MetricResult {
            id: id.to_string(),
            unit,
            source: source.to_string(),
            exact,
            group: "g".to_string(),
            samples: samples.to_vec(),
            failed_runs: Vec::new(),
            summary: Summary {
                n: samples.len(),
                mean: 0.0,
                sd: 0.0,
                cov: None,
                median: 0.0,
                min: 0.0,
                max: 0.0,
                ci_low: None,
                ci_high: None,
                confidence: 0.95,
            },
            details: Vec::new(),
            notes: Vec::new(),
            comparison: None,
            trend: Vec::new(),
            distinguishable: None,
            bound: None,
            range: None,
        }
    }

    fn bench(name: &str, wall: &[f64], allocs: f64) -> BenchmarkResult {
        BenchmarkResult {
            name: name.to_string(),
            command: vec!["./fixture".into(), "--size".into(), "a b".into()],
            metrics: vec![
                metric("time.wall", Unit::Seconds, "rusage", false, wall),
                metric("alloc.count", Unit::Count, "agent", true, &[allocs, allocs]),
            ],
            warnings: Vec::new(),
            invocation_checks: Vec::new(),
        }
    }

    fn meta(id: &str, time: &str) -> EntryMeta {
        EntryMeta {
            id: id.to_string(),
            time: time.to_string(),
            tool_version: "0.1.0".to_string(),
            git_commit: Some("0123456789abcdef".to_string()),
            host: "testhost".to_string(),
            machine: None,
        }
    }

    #[test]
    fn save_and_read_back_in_time_order() {
        let dir = tempfile::tempdir().unwrap();
        let h = History::new(dir.path().join(".sbs"));
        let tricky = [0.1 + 0.2, 1e-9, 123456.789];
        let late = h
            .save(
                &bench("b", &tricky, 100.0),
                &meta("20261121T100000Z-1", "2026-11-21T10:00:00.000000000Z"),
            )
            .unwrap();
        h.save(
            &bench("b", &[1.0, 2.0], 90.0),
            &meta("20261121T090000Z-1", "2026-11-21T09:00:00.000000000Z"),
        )
        .unwrap();
        h.save(
            &bench("other", &[5.0], 1.0),
            &meta("x", "2026-11-21T11:00:00.000000000Z"),
        )
        .unwrap();
        assert!(late.starts_with(h.entries_dir("b")));
        let entries = h.entries("b").unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].meta.time, "2026-11-21T09:00:00.000000000Z");
        let e = &entries[1];
        assert_eq!(e.path, late);
        assert_eq!(e.command, "./fixture --size 'a b'");
        assert_eq!(
            e.meta,
            meta("20261121T100000Z-1", "2026-11-21T10:00:00.000000000Z")
        );
        let wall = e.metric("time.wall", Unit::Seconds, "rusage").unwrap();
        assert_eq!(wall.samples, tricky);
        assert!(!wall.exact);
        let allocs = e.metric("alloc.count", Unit::Count, "agent").unwrap();
        assert_eq!(
            (allocs.exact, allocs.samples.clone()),
            (true, vec![100.0, 100.0])
        );
        // Another source or unit is another metric.
        assert!(e.metric("alloc.count", Unit::Count, "valgrind").is_none());
        assert!(e.metric("time.wall", Unit::Count, "rusage").is_none());
        assert!(h.entries("never saved").unwrap().is_empty());
        let latest = h.latest_entries("b", 1).unwrap();
        assert_eq!(latest.len(), 1);
        assert_eq!(latest[0].path, late);
        assert_eq!(h.latest_entries("b", 5).unwrap().len(), 2);
        assert_eq!(e.meta.label(), "2026-11-21T10:00:00.000Z @0123456");
        // Named by position in the benchmark's history, oldest first.
        let labels: Vec<String> = h.entries("b").unwrap().iter().map(|e| e.label()).collect();
        assert_eq!(labels, ["#1 @0123456", "#2 @0123456"]);
        assert_eq!(latest[0].label(), "#2 @0123456");
    }

    #[test]
    fn file_is_readable_long_form_csv() {
        let dir = tempfile::tempdir().unwrap();
        let h = History::new(dir.path());
        let path = h
            .save(
                &bench("b", &[1.5], 7.0),
                &meta("id1", "2026-11-21T10:00:00.000000000Z"),
            )
            .unwrap();
        let text = fs::read_to_string(path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], COLUMNS.join(","));
        assert_eq!(
            lines[1],
            "4,id1,2026-11-21T10:00:00.000000000Z,b,./fixture --size 'a b',0.1.0,\
             0123456789abcdef,testhost,time.wall,,seconds,rusage,false,0,1.5,false,"
        );
        assert_eq!(lines.len(), 4);
    }

    #[test]
    fn details_are_saved_after_their_metric_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let h = History::new(dir.path());
        let mut b = bench("b", &[1.5, 2.5], 7.0);
        let summary = b.metrics[1].summary.clone();
        b.metrics[1].details = ["Vec<u8>::push", "Vec<u32>::push"]
            .iter()
            .zip([[3.0, 3.0], [4.0, 4.0]])
            .map(|(label, samples)| Detail {
                label: label.to_string(),
                samples: samples.to_vec(),
                summary: summary.clone(),
            })
            .collect();
        let path = h
            .save(&b, &meta("id1", "2026-11-21T10:00:00.000000000Z"))
            .unwrap();
        let text = fs::read_to_string(path).unwrap();
        assert!(
            text.contains(",alloc.count,Vec<u32>::push,count,agent,true,1,4.0,false,\n"),
            "{text}"
        );
        let e = &h.entries("b").unwrap()[0];
        let allocs = e.metric("alloc.count", Unit::Count, "agent").unwrap();
        assert_eq!(allocs.samples, [7.0, 7.0]);
        assert_eq!(
            allocs.details,
            [
                ("Vec<u8>::push".to_string(), vec![3.0, 3.0]),
                ("Vec<u32>::push".to_string(), vec![4.0, 4.0])
            ]
        );
        assert!(e
            .metric("time.wall", Unit::Seconds, "rusage")
            .unwrap()
            .details
            .is_empty());

        // A detail row away from its metric, or a metric resumed after its details, is
        // corrupt.
        let d = h.entries_dir("b");
        let lines: Vec<&str> = text.lines().collect();
        let mut moved = lines.clone();
        let detail = moved.remove(lines.len() - 1);
        moved.insert(1, detail);
        fs::write(d.join("id1.csv"), moved.join("\n") + "\n").unwrap();
        let err = h.entries("b").unwrap_err().to_string();
        assert!(
            err.contains("does not follow the metric's own rows"),
            "{err}"
        );
    }

    #[test]
    fn schema_1_files_without_details_are_still_read() {
        let dir = tempfile::tempdir().unwrap();
        let h = History::new(dir.path());
        let d = h.entries_dir("b");
        fs::create_dir_all(&d).unwrap();
        fs::write(
            d.join("old.csv"),
            format!(
                "{}\n1,old,2026-11-20T10:00:00Z,b,./b,0.1.0,,host,time.wall,seconds,clock,false,0,0.5\n\
                 1,old,2026-11-20T10:00:00Z,b,./b,0.1.0,,host,time.wall,seconds,clock,false,1,0.25\n",
                columns_v1().collect::<Vec<_>>().join(",")
            ),
        )
        .unwrap();
        let e = &h.entries("b").unwrap()[0];
        let wall = e.metric("time.wall", Unit::Seconds, "clock").unwrap();
        assert_eq!(wall.samples, [0.5, 0.25]);
        assert!(wall.details.is_empty());
    }

    #[test]
    fn concurrent_saves_lose_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let h = History::new(dir.path());
        // Same entry id on purpose: names collide and must get counter suffixes.
        let m = meta("20261121T100000Z-7", "2026-11-21T10:00:00.000000000Z");
        std::thread::scope(|s| {
            for t in 0..8 {
                let (h, m) = (&h, &m);
                s.spawn(move || {
                    for i in 0..10 {
                        h.save(&bench("b", &[f64::from(t * 100 + i)], 1.0), m)
                            .unwrap();
                    }
                });
            }
        });
        let entries = h.entries("b").unwrap();
        assert_eq!(entries.len(), 80);
        let mut values: Vec<f64> = entries
            .iter()
            .map(|e| {
                e.metric("time.wall", Unit::Seconds, "rusage")
                    .unwrap()
                    .samples[0]
            })
            .collect();
        values.sort_by(f64::total_cmp);
        let expected: Vec<f64> = (0..8)
            .flat_map(|t| (0..10).map(move |i| f64::from(t * 100 + i)))
            .collect();
        assert_eq!(values, expected);
        // No temporaries left behind.
        let hidden = fs::read_dir(h.entries_dir("b"))
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .starts_with('.')
            })
            .count();
        assert_eq!(hidden, 0);
    }

    #[test]
    fn leftover_temporaries_are_ignored_but_foreign_and_corrupt_files_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        let h = History::new(dir.path());
        h.save(&bench("b", &[1.0], 1.0), &meta("id1", "t1"))
            .unwrap();
        let d = h.entries_dir("b");
        // What a killed writer leaves: a hidden, half-written temporary.
        fs::write(d.join(".tmp-abc.csv"), "sbs_history_schema,entry\n1,id").unwrap();
        assert_eq!(h.entries("b").unwrap().len(), 1);

        type Check = fn(&HistoryError) -> bool;
        let cases: [(&str, &str, Check); 5] = [
            ("notes.txt", "hello", |e| {
                matches!(e, HistoryError::Foreign { .. })
            }),
            ("x.csv", "a,b\n1,2\n", |e| {
                matches!(e, HistoryError::Foreign { .. })
            }),
            ("y.csv", "", |e| matches!(e, HistoryError::Foreign { .. })),
            ("z.csv", "sbs_history_schema,entry\n1,id\n", |e| {
                matches!(e, HistoryError::Corrupt { line: 1, .. })
            }),
            ("w.csv", "sbs_history_schema,whatever\n5,id\n", |e| {
                matches!(e, HistoryError::NewerSchema { found: 5, .. })
            }),
        ];
        for (name, content, is_expected) in cases {
            let path = d.join(name);
            fs::write(&path, content).unwrap();
            let err = h.entries("b").unwrap_err();
            assert!(is_expected(&err), "{name}: {err:?}");
            assert!(
                err.to_string().contains(&path.display().to_string()),
                "{err}"
            );
            // Saving more still works and leaves the bad file alone.
            h.save(&bench("b", &[2.0], 1.0), &meta("id2", "t2"))
                .unwrap();
            assert_eq!(fs::read_to_string(&path).unwrap(), content);
            fs::remove_file(&path).unwrap();
        }
        // A valid file with a bad row: corrupt, with its line.
        let good = fs::read_to_string(h.entries_dir("b").join("id1.csv")).unwrap();
        let bad = good.replacen(",0,1.0,false,\n", ",0,not-a-number,false,\n", 1);
        assert_ne!(good, bad);
        fs::write(d.join("v.csv"), &bad).unwrap();
        match h.entries("b").unwrap_err() {
            HistoryError::Corrupt { line, .. } => assert_eq!(line, 2),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn values_no_measurement_can_take_are_corrupt_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let h = History::new(dir.path());
        // Differences may be below 0: a calibrated value, what is live at exit.
        let mut b = bench("b", &[1.0], 1.0);
        b.metrics.push(metric(
            "time.op.calibrated",
            Unit::Seconds,
            "harness",
            false,
            &[-1e-9],
        ));
        b.metrics.push(metric(
            "heap.live_at_exit",
            Unit::Bytes,
            "agent",
            true,
            &[-64.0],
        ));
        let path = h.save(&b, &meta("id1", "t1")).unwrap();
        assert_eq!(h.entries("b").unwrap().len(), 1);
        let good = fs::read_to_string(&path).unwrap();
        let wall = ",time.wall,,seconds,rusage,false,0,1.0,";
        let count = ",alloc.count,,count,agent,true,0,1.0,";
        let cases = [
            (wall, "-1e308", "negative, which a time cannot be"),
            (wall, "-0.5", "negative, which a time cannot be"),
            (count, "-1", "negative, which a count cannot be"),
            (wall, "1e308", "beyond any measurement"),
            (count, "1e20", "beyond any measurement"),
            (wall, "NaN", "not finite"),
            (wall, "inf", "not finite"),
            (count, "-inf", "not finite"),
        ];
        for (row, value, reason) in cases {
            assert!(good.contains(row), "{row} in {good}");
            let bad = good.replacen(row, &row.replace(",1.0,", &format!(",{value},")), 1);
            fs::write(&path, &bad).unwrap();
            let err = h.entries("b").unwrap_err();
            assert!(
                matches!(&err, HistoryError::Corrupt { reason: r, .. } if r.contains(reason)),
                "{value}: {err}"
            );
            assert!(err.to_string().contains("left untouched"), "{err}");
            assert_eq!(fs::read_to_string(&path).unwrap(), bad, "never rewritten");
        }
    }

    #[test]
    fn baselines_are_named_replaced_atomically_and_never_clobber_foreign_files() {
        let dir = tempfile::tempdir().unwrap();
        let h = History::new(dir.path());
        assert_eq!(h.baseline("main", "b").unwrap(), None);
        h.save_baseline("main", &bench("b", &[1.0, 1.1], 10.0), &meta("a", "t1"))
            .unwrap();
        let path = h
            .save_baseline("main", &bench("b", &[2.0, 2.1], 20.0), &meta("b", "t2"))
            .unwrap();
        let base = h.baseline("main", "b").unwrap().unwrap();
        assert_eq!(base.meta.id, "b");
        assert_eq!(
            base.metric("alloc.count", Unit::Count, "agent")
                .unwrap()
                .samples,
            [20.0, 20.0]
        );
        assert_eq!(h.baseline("other", "b").unwrap(), None);
        assert_eq!(h.baseline("main", "c").unwrap(), None);
        // A corrupt baseline is reported and left as it is.
        fs::write(&path, "garbage\n").unwrap();
        let err = h
            .save_baseline("main", &bench("b", &[3.0], 30.0), &meta("c", "t3"))
            .unwrap_err();
        assert!(matches!(err, HistoryError::Foreign { .. }), "{err:?}");
        assert!(err.to_string().contains(&path.display().to_string()));
        assert_eq!(fs::read_to_string(&path).unwrap(), "garbage\n");
        assert!(h.baseline("main", "b").is_err());
        for bad in ["", ".hidden", "a/b", "a b", "../x"] {
            assert!(
                matches!(h.baseline(bad, "b"), Err(HistoryError::BadName(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn concurrent_baseline_saves_leave_one_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let h = History::new(dir.path());
        std::thread::scope(|s| {
            for t in 0..4 {
                let h = &h;
                s.spawn(move || {
                    for i in 0..10 {
                        let v = f64::from(t * 100 + i);
                        h.save_baseline("ci", &bench("b", &[v; 50], v), &meta("m", "t"))
                            .unwrap();
                    }
                });
            }
        });
        let base = h.baseline("ci", "b").unwrap().unwrap();
        let wall = &base
            .metric("time.wall", Unit::Seconds, "rusage")
            .unwrap()
            .samples;
        assert_eq!(wall.len(), 50);
        assert!(wall.iter().all(|v| *v == wall[0]));
    }

    #[test]
    fn a_full_disk_leaves_no_file_behind_and_the_old_ones_intact() {
        let dir = tempfile::tempdir().unwrap();
        let small = dir.path().join("small");
        fs::create_dir(&small).unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=64k", "sbs-test"])
            .arg(&small)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            sbs_skip::skip!(
                sbs_skip::Need::Root,
                "cannot mount a 64 KiB tmpfs to fill (needs root)"
            );
            return;
        }
        struct Unmount(PathBuf);
        impl Drop for Unmount {
            fn drop(&mut self) {
                let _ = Command::new("umount").arg(&self.0).status();
            }
        }
        let _unmount = Unmount(small.clone());
        let h = History::new(&small);
        let first = h.save(&bench("b", &[1.0], 1.0), &meta("a", "t1")).unwrap();
        h.save_baseline("main", &bench("b", &[1.0], 1.0), &meta("a", "t1"))
            .unwrap();
        let before = fs::read_to_string(h.baseline_path("main", "b").unwrap()).unwrap();
        // About 3 MB of rows: far more than fits.
        let big: Vec<f64> = (0..20_000).map(f64::from).collect();
        for result in [
            h.save(&bench("b", &big, 1.0), &meta("big", "t2")),
            h.save_baseline("main", &bench("b", &big, 1.0), &meta("big", "t2")),
        ] {
            match result {
                Err(HistoryError::Io { error, .. }) => {
                    assert_eq!(error.raw_os_error(), Some(libc::ENOSPC), "{error}")
                }
                other => panic!("expected ENOSPC, got {other:?}"),
            }
        }
        // Only the first entry, whole; no temporary left; the baseline unchanged.
        let names: Vec<_> = fs::read_dir(h.entries_dir("b"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(names, [first]);
        assert_eq!(h.entries("b").unwrap().len(), 1);
        let base_dir = h.baseline_path("main", "b").unwrap();
        let base_dir = base_dir.parent().unwrap();
        let hidden: Vec<_> = fs::read_dir(base_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".tmp"))
            .collect();
        assert!(hidden.is_empty(), "{hidden:?}");
        assert_eq!(
            fs::read_to_string(h.baseline_path("main", "b").unwrap()).unwrap(),
            before
        );
    }

    #[test]
    fn empty_results_are_not_saved() {
        let dir = tempfile::tempdir().unwrap();
        let h = History::new(dir.path());
        let mut b = bench("b", &[], 1.0);
        b.metrics.clear();
        assert!(matches!(
            h.save(&b, &meta("a", "t")),
            Err(HistoryError::Empty(_))
        ));
        assert!(!h.entries_dir("b").exists());
    }

    #[test]
    fn a_run_opens_the_store_once_loads_what_it_compares_with_and_saves_as_asked() {
        let dir = tempfile::tempdir().unwrap();
        let saving = Saving {
            entries: true,
            baseline: Some("main".into()),
        };
        assert!(matches!(
            History::open(dir.path(), saving.clone(), Some(".bad")),
            Err(HistoryError::BadName(_))
        ));
        let h = History::open(dir.path(), saving, None).unwrap();
        let names = ["b".to_string()];
        assert_eq!(h.load(&names, Wanted::Latest(5)).unwrap(), [vec![]]);
        let written = h.save_run(&[bench("b", &[1.0], 1.0)], None).unwrap();
        assert_eq!(written.len(), 2);
        let latest = h.load(&names, Wanted::Latest(5)).unwrap();
        assert_eq!(latest[0].len(), 1);
        let base = h.load(&names, Wanted::Baseline("main")).unwrap();
        assert_eq!(base[0][0].benchmark, "b");
        match h.load(&names, Wanted::Baseline("mian")) {
            Err(HistoryError::NoBaseline { saved, .. }) => assert_eq!(saved, ["main"]),
            other => panic!("{other:?}"),
        }
        assert_eq!(h.load(&names, Wanted::Nothing).unwrap(), [vec![]]);
        // A store that saves nothing writes nothing.
        let none = History::new(dir.path().join("other"));
        assert!(none
            .save_run(&[bench("b", &[1.0], 1.0)], None)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn a_copy_of_an_entry_counts_once_and_displaces_no_newer_one() {
        let dir = tempfile::tempdir().unwrap();
        let h = History::new(dir.path());
        let saved: Vec<PathBuf> = (1..=4)
            .map(|i| {
                let id = format!("20261121T0{i}0000Z-1");
                let time = format!("2026-11-21T0{i}:00:00.000000000Z");
                h.save(&bench("b", &[f64::from(i)], 1.0), &meta(&id, &time))
                    .unwrap()
            })
            .collect();
        // The oldest under a name that sorts last; the newest as if saved twice.
        let old_copy = saved[0].with_file_name("zz copy.csv");
        fs::copy(&saved[0], &old_copy).unwrap();
        let new_copy = saved[3].with_file_name("20261121T040000Z-1-1.csv");
        fs::copy(&saved[3], &new_copy).unwrap();
        // Same id and time, other samples: another entry (two benchmarks of one run
        // saved under one name), kept.
        h.save(
            &bench("b", &[9.0], 1.0),
            &meta("20261121T020000Z-1", "2026-11-21T02:00:00.000000000Z"),
        )
        .unwrap();
        let all = h.entries("b").unwrap();
        let paths: Vec<&Path> = all.iter().map(|e| e.path.as_path()).collect();
        assert_eq!(paths.len(), 5, "{paths:?}");
        assert_eq!(paths[0], saved[0], "the file named after the id is kept");
        assert_eq!(all[0].duplicates, std::slice::from_ref(&old_copy));
        assert_eq!(all[4].path, saved[3]);
        assert_eq!(all[4].duplicates, std::slice::from_ref(&new_copy));
        assert!(all[1..4].iter().all(|e| e.duplicates.is_empty()));
        assert_eq!(
            all.iter().map(|e| e.position).collect::<Vec<_>>(),
            [1, 2, 3, 4, 5]
        );
        let note: Vec<String> = all[0].duplicate_notes().collect();
        assert_eq!(
            note,
            [format!(
                "{} holds the same saved entry as {} (entry 20261121T010000Z-1): counted \
                 once; delete the copy",
                old_copy.display(),
                saved[0].display()
            )]
        );
        // The two latest are the two newest, the copy of the oldest notwithstanding.
        let latest = h.latest_entries("b", 2).unwrap();
        let times: Vec<&str> = latest.iter().map(|e| e.meta.time.as_str()).collect();
        assert_eq!(
            times,
            [
                "2026-11-21T03:00:00.000000000Z",
                "2026-11-21T04:00:00.000000000Z"
            ]
        );
        assert_eq!(latest[1].duplicates, [new_copy]);
        assert_eq!(
            latest.iter().map(|e| e.position).collect::<Vec<_>>(),
            [4, 5]
        );
        // Nothing was changed or removed.
        assert!(old_copy.exists() && saved.iter().all(|p| p.exists()));
    }

    #[test]
    fn slugs_are_safe_and_distinct() {
        let a = slug("/usr/bin/sort -n /tmp/data file");
        assert!(a.starts_with("usr_bin_sort_-n__tmp_data_file-"), "{a}");
        assert_ne!(slug("a b"), slug("a_b"));
        assert_eq!(slug("..").len(), 16);
        assert!(slug(&"x".repeat(500)).len() <= 48 + 17);
        assert!(!slug("../../etc").contains('/'));
    }

    #[test]
    fn meta_now_is_filled_in() {
        let m = EntryMeta::now();
        assert!(m.time.ends_with('Z') && m.time.len() == 30, "{}", m.time);
        assert!(m.id.ends_with(&format!("-{}", std::process::id())));
        assert!(!m.id.contains(':'));
        assert!(!m.host.is_empty());
        assert_eq!(m.tool_version, env!("CARGO_PKG_VERSION"));
    }

    #[test]
    fn failed_runs_are_marked_and_read_back_and_schema_2_files_still_read() {
        let dir = tempfile::tempdir().unwrap();
        let h = History::new(dir.path());
        let mut b = bench("b", &[1.5, 2.5, 9.0], 7.0);
        b.metrics[0].failed_runs = vec![2];
        let path = h
            .save(&b, &meta("id1", "2026-11-21T10:00:00.000000000Z"))
            .unwrap();
        let text = fs::read_to_string(&path).unwrap();
        assert!(
            text.contains(",time.wall,,seconds,rusage,false,2,9.0,true,\n"),
            "{text}"
        );
        let e = &h.entries("b").unwrap()[0];
        let wall = e.metric("time.wall", Unit::Seconds, "rusage").unwrap();
        assert_eq!(
            (wall.failed.as_slice(), wall.good_samples()),
            (&[2][..], vec![1.5, 2.5])
        );
        // The same file as schema 2 wrote it: no `failed` column, no failed run (and no
        // `machine` column, which schema 4 added).
        let v2: String = text
            .lines()
            .map(|l| {
                let l = l
                    .strip_suffix(",machine")
                    .or(l.strip_suffix(','))
                    .unwrap_or(l);
                let l = [",failed", ",false", ",true"]
                    .iter()
                    .find_map(|suffix| l.strip_suffix(suffix))
                    .unwrap_or(l);
                format!("{}\n", l.replacen("4,", "2,", 1))
            })
            .collect();
        fs::write(&path, &v2).unwrap();
        let e = &h.entries("b").unwrap()[0];
        let wall = e.metric("time.wall", Unit::Seconds, "rusage").unwrap();
        assert_eq!((wall.samples.len(), wall.failed.len()), (3, 0));
    }

    #[test]
    fn machine_conditions_are_saved_and_read_back_and_schema_3_files_still_read() {
        let dir = tempfile::tempdir().unwrap();
        let h = History::new(dir.path());
        let machine = sbs_reports::model::Machine {
            cpus: 2,
            load_start: 5.25,
            load_end: 5.5,
            others: 0.8,
            steal: 0.0,
            busy: vec!["rustc (42) 97%".into()],
            governor: None,
            turbo: None,
            virtual_machine: Some("KVM".into()),
        };
        let m = EntryMeta {
            machine: Some(machine.clone()),
            ..meta("id1", "2026-11-21T10:00:00.000000000Z")
        };
        let path = h.save(&bench("b", &[1.5, 2.5], 7.0), &m).unwrap();
        let text = fs::read_to_string(&path).unwrap();
        // One JSON field, quoted as CSV quotes it.
        assert!(text.contains(r#",""others"":0.8,"#), "{text}");
        let e = &h.entries("b").unwrap()[0];
        assert_eq!(e.meta.machine.as_ref(), Some(&machine));
        // The same file as schema 3 wrote it: no `machine` column.
        let v3: String = text
            .lines()
            .map(|l| match l.find(",\"{").or_else(|| l.rfind(",machine")) {
                Some(at) => format!("{}\n", l[..at].replacen("4,", "3,", 1)),
                None => format!("{l}\n"),
            })
            .collect();
        assert!(
            !v3.contains("machine") && v3.starts_with(&columns_v3().collect::<Vec<_>>().join(","))
        );
        fs::write(&path, &v3).unwrap();
        let e = &h.entries("b").unwrap()[0];
        assert_eq!(e.meta.machine, None);
        assert_eq!(e.metrics[0].samples, [1.5, 2.5]);
        // A machine column that does not read is a corrupt file, left as it is.
        let broken = text.replace(r#""others"":0.8"#, r#""others"":"#);
        fs::write(&path, &broken).unwrap();
        let err = h.entries("b").unwrap_err().to_string();
        assert!(
            err.contains("is corrupt (line 2: the machine column"),
            "{err}"
        );
        assert_eq!(fs::read_to_string(&path).unwrap(), broken);
    }
}
