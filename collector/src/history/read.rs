//! Reading the history: the benchmarks saved, their entries, baselines, and the checks
//! that refuse a foreign or corrupt file with its path instead of guessing.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use sbs_reports::model::{Machine, MetricId, Unit};

use super::{
    columns_v1, columns_v2, columns_v3, io_error, Entry, EntryMeta, History, HistoryError, Row,
    SavedMetric, Wanted, COLUMNS, HISTORY_SCHEMA, MARKER,
};

/// The entries of `dir`; none when it does not exist (a store not written yet).
fn list(dir: &std::path::Path) -> Result<Vec<fs::DirEntry>, HistoryError> {
    match fs::read_dir(dir) {
        Ok(listing) => listing
            .map(|item| item.map_err(io_error("list", dir)))
            .collect(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(io_error("list", dir)(e)),
    }
}

impl History {
    /// Before a run's measurements: for each of `benchmarks` (by name), in order, the
    /// entries it is compared with as `wanted` says (the baseline's one, or the latest,
    /// oldest first; none for [`Wanted::Nothing`]), then that what the run saves can be
    /// written ([`History::check_writable`]). A missing baseline, a corrupt file or a
    /// history that cannot be written fails here, before minutes of runs.
    pub fn load(
        &self,
        benchmarks: &[String],
        wanted: Wanted<'_>,
    ) -> Result<Vec<Vec<Entry>>, HistoryError> {
        let entries = benchmarks
            .iter()
            .map(|name| match wanted {
                Wanted::Nothing => Ok(Vec::new()),
                Wanted::Baseline(base) => match self.baseline(base, name)? {
                    Some(entry) => Ok(vec![entry]),
                    None => Err(HistoryError::NoBaseline {
                        name: base.to_string(),
                        benchmark: name.clone(),
                        path: self.baseline_path(base, name)?,
                        saved: self.baselines_of(name)?,
                    }),
                },
                Wanted::Latest(depth) => self.latest_entries(name, depth),
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.check_writable(benchmarks)?;
        Ok(entries)
    }

    /// Names of the benchmarks with saved entries, sorted. A missing store has none.
    pub fn benchmarks(&self) -> Result<Vec<String>, HistoryError> {
        let dir = self.root.join("history");
        let mut names = Vec::new();
        for item in list(&dir)? {
            let path = item.path();
            if item.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            if !path.is_dir() {
                return Err(HistoryError::Foreign {
                    path,
                    reason: "not a benchmark directory".to_string(),
                });
            }
            // The name lives in the files; any entry tells it (`entries` checks the rest).
            let first = fs::read_dir(&path)
                .map_err(io_error("list", &path))?
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| {
                    p.extension().is_some_and(|x| x == "csv")
                        && !p
                            .file_name()
                            .is_some_and(|n| n.to_string_lossy().starts_with('.'))
                })
                .min();
            if let Some(file) = first {
                let entry = read_entry(&file)?;
                if self.entries_dir(&entry.benchmark) != path {
                    return Err(HistoryError::Foreign {
                        path: file,
                        reason: format!(
                            "it holds benchmark `{}`, which belongs in another directory",
                            entry.benchmark
                        ),
                    });
                }
                names.push(entry.benchmark);
            }
        }
        names.sort();
        Ok(names)
    }

    /// All saved entries of `benchmark`, oldest first. A missing directory is no history.
    pub fn entries(&self, benchmark: &str) -> Result<Vec<Entry>, HistoryError> {
        self.read_entries(benchmark, usize::MAX)
    }

    /// The `n` latest saved entries of `benchmark`, oldest first. Only those files are
    /// read (entry file names start with their UTC time, so they sort by time), and the
    /// files under other names (a copy may hold any entry); the other names in the
    /// directory are still checked. A copy of an entry counts once.
    pub fn latest_entries(&self, benchmark: &str, n: usize) -> Result<Vec<Entry>, HistoryError> {
        self.read_entries(benchmark, n)
    }

    fn read_entries(&self, benchmark: &str, latest: usize) -> Result<Vec<Entry>, HistoryError> {
        let dir = self.entries_dir(benchmark);
        let listing = match fs::read_dir(&dir) {
            Ok(l) => l,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_error("list", &dir)(e)),
        };
        let mut paths = Vec::new();
        for item in listing {
            let item = item.map_err(io_error("list", &dir))?;
            let name = item.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.') {
                continue; // temporaries of an interrupted writer, lock files
            }
            let path = item.path();
            if !name.ends_with(".csv") || !path.is_file() {
                return Err(HistoryError::Foreign {
                    path,
                    reason: "not a .csv file".to_string(),
                });
            }
            paths.push(path);
        }
        paths.sort();
        // Names made of an entry's id sort by time: the newest first, until `latest`
        // distinct entries. A file under another name (a copy, renamed) may hold any
        // entry: all such files are read. A copy of an entry is the same session, counted
        // once (with the copy named in it).
        let (dated, renamed): (Vec<PathBuf>, Vec<PathBuf>) =
            paths.into_iter().partition(|p| named_after_a_time(p));
        let mut found = Found::default();
        for path in dated.iter().rev() {
            if found.entries.len() >= latest {
                break;
            }
            found.add(read_entry(path)?, benchmark)?;
        }
        for path in &renamed {
            found.add(read_entry(path)?, benchmark)?;
        }
        let unread = dated.len() + renamed.len() - found.read;
        let mut entries = found.entries;
        entries.sort_by(|a, b| (&a.meta.time, &a.meta.id).cmp(&(&b.meta.time, &b.meta.id)));
        let older = entries.len().saturating_sub(latest);
        // Positions count the files not read as entries of their own, and the older
        // entries read but left out, except those found only under another name (most
        // likely copies of files not read).
        let older_dated = entries[..older]
            .iter()
            .filter(|e| named_after_a_time(&e.path))
            .count();
        let mut entries = entries.split_off(older);
        for (i, e) in entries.iter_mut().enumerate() {
            e.position = unread + older_dated + i + 1;
        }
        Ok(entries)
    }

    /// Names of the baselines saved for `benchmark`, sorted (for a suggestion when a
    /// name is not one of them). A missing store has none.
    pub fn baselines_of(&self, benchmark: &str) -> Result<Vec<String>, HistoryError> {
        let dir = self.root.join("baselines");
        let mut names = Vec::new();
        for item in list(&dir)? {
            let name = item.file_name().to_string_lossy().into_owned();
            let saved = self
                .baseline_path(&name, benchmark)
                .is_ok_and(|path| path.is_file());
            if saved {
                names.push(name);
            }
        }
        names.sort();
        Ok(names)
    }

    /// Baseline `name` of `benchmark`, if saved.
    pub fn baseline(&self, name: &str, benchmark: &str) -> Result<Option<Entry>, HistoryError> {
        let path = self.baseline_path(name, benchmark)?;
        if !path.exists() {
            return Ok(None);
        }
        let entry = read_entry(&path)?;
        if entry.benchmark != benchmark {
            return Err(HistoryError::Foreign {
                path,
                reason: format!("it holds benchmark `{}`", entry.benchmark),
            });
        }
        Ok(Some(entry))
    }
}

/// Whether a file's name starts as an entry id does, with its UTC time
/// (`20261121T234208...`): such names sort by time.
fn named_after_a_time(path: &Path) -> bool {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    let b = name.as_bytes();
    b.len() > 9 && b[..8].iter().all(u8::is_ascii_digit) && b[8] == b'T'
}

/// The entries of a benchmark read so far, each once.
#[derive(Default)]
struct Found {
    entries: Vec<Entry>,
    /// Indices into `entries` by entry id and time.
    by_id: HashMap<(String, String), Vec<usize>>,
    /// Files read.
    read: usize,
}

impl Found {
    /// Add the entry read from a file of `benchmark`'s directory: a new one, or a copy of
    /// one already found (counted once).
    fn add(&mut self, entry: Entry, benchmark: &str) -> Result<(), HistoryError> {
        self.read += 1;
        if entry.benchmark != benchmark {
            return Err(HistoryError::Foreign {
                path: entry.path,
                reason: format!("it holds benchmark `{}`", entry.benchmark),
            });
        }
        let same = self
            .by_id
            .entry((entry.meta.id.clone(), entry.meta.time.clone()))
            .or_default();
        match same.iter().find(|&&i| self.entries[i].same_entry(&entry)) {
            Some(&i) => counted_once(&mut self.entries[i], entry.path),
            None => {
                same.push(self.entries.len());
                self.entries.push(entry);
            }
        }
        Ok(())
    }
}

/// Count `copy` (a file holding `kept`'s entry again) once, as `kept`: the file named
/// after the entry's id is the one kept, the other named as its copy.
fn counted_once(kept: &mut Entry, copy: PathBuf) {
    let named_after_id = |path: &Path| {
        path.file_stem()
            .is_some_and(|s| s.to_string_lossy().starts_with(&kept.meta.id))
    };
    if named_after_id(&copy) && !named_after_id(&kept.path) {
        let other = std::mem::replace(&mut kept.path, copy);
        kept.duplicates.push(other);
    } else {
        kept.duplicates.push(copy);
    }
    kept.duplicates.sort();
}

/// Read and check one history file: every row, every column. The rows of one entry
/// agree on everything but the metric, its detail, unit, source, kind, run and value
/// (they were written at once), every row's `machine` is the JSON of the machine's
/// conditions, and the file ends with a line end: a file cut short (a copy interrupted,
/// a disk that filled up) is corrupt, wherever the cut fell inside a row.
pub(super) fn read_entry(path: &Path) -> Result<Entry, HistoryError> {
    let corrupt = |line: u64, reason: String| HistoryError::Corrupt {
        path: path.to_path_buf(),
        line,
        reason,
    };
    let foreign = |reason: &str| HistoryError::Foreign {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    };
    let bytes = fs::read(path).map_err(io_error("read", path))?;
    let mut reader = csv::Reader::from_reader(bytes.as_slice());
    let headers = match reader.headers() {
        Ok(h) => h.clone(),
        Err(_) => return Err(foreign("its first line is not a CSV header")),
    };
    if headers.get(0) != Some(MARKER) {
        return Err(foreign(&format!("its first column is not `{MARKER}`")));
    }
    let mut entry: Option<(Row, Entry)> = None;
    for record in reader.records() {
        let record = record.map_err(|e| {
            let line = e.position().map_or(0, |p| p.line());
            corrupt(line, e.to_string())
        })?;
        let line = record.position().map_or(0, |p| p.line());
        // A newer schema may have other columns: check the version before the layout.
        if let Some(found) = record.get(0).and_then(|v| v.trim().parse::<u32>().ok()) {
            if found > HISTORY_SCHEMA {
                return Err(HistoryError::NewerSchema {
                    path: path.to_path_buf(),
                    found,
                });
            }
        }
        if headers.iter().ne(COLUMNS.iter().copied())
            && headers.iter().ne(columns_v3())
            && headers.iter().ne(columns_v2())
            && headers.iter().ne(columns_v1())
        {
            return Err(corrupt(
                1,
                format!("expected the columns {}", COLUMNS.join(",")),
            ));
        }
        let row: Row = record
            .deserialize(Some(&headers))
            .map_err(|e| corrupt(line, e.to_string()))?;
        match &mut entry {
            Some((first, e)) => {
                same_entry(first, &row).map_err(|r| corrupt(line, r))?;
                add_row(e, row).map_err(|r| corrupt(line, r))?;
            }
            None => {
                let mut e = first_row_entry(path, &row).map_err(|r| corrupt(line, r))?;
                let first = row.clone();
                add_row(&mut e, row).map_err(|r| corrupt(line, r))?;
                entry = Some((first, e));
            }
        }
    }
    let Some((_, entry)) = entry else {
        return Err(corrupt(1, "no samples".to_string()));
    };
    // The writer ends every row with a line end: without one, the last row was cut
    // (its last column may still read, e.g. a quoted `machine` whose closing quote went).
    if !bytes.ends_with(b"\n") {
        let line = bytes.iter().filter(|&&b| b == b'\n').count() + 1;
        return Err(corrupt(
            line as u64,
            "the file ends inside this row (no line end after it): it was cut short".to_string(),
        ));
    }
    Ok(entry)
}

/// Parse a `machine` column: empty when it was not read, else the JSON of the machine's
/// conditions.
fn machine(column: &str) -> Result<Option<Machine>, String> {
    match column.trim() {
        "" => Ok(None),
        json => serde_json::from_str(json)
            .map(Some)
            .map_err(|e| format!("the machine column is not the JSON of one: {e}")),
    }
}

/// The entry a file's first row opens, or why its machine conditions do not read.
fn first_row_entry(path: &Path, row: &Row) -> Result<Entry, String> {
    Ok(Entry {
        position: 0,
        path: path.to_path_buf(),
        benchmark: row.benchmark.clone(),
        command: row.command.clone(),
        meta: EntryMeta {
            id: row.entry.clone(),
            time: row.time.clone(),
            tool_version: row.tool_version.clone(),
            git_commit: (!row.git_commit.is_empty()).then(|| row.git_commit.clone()),
            host: row.host.clone(),
            machine: machine(&row.machine)?,
        },
        metrics: Vec::new(),
        duplicates: Vec::new(),
    })
}

/// Check that a later row of an entry agrees with its first row on what the whole entry
/// shares (its schema, id, time, benchmark, command, tool version, commit, host and
/// machine conditions), or say which column does not.
fn same_entry(first: &Row, row: &Row) -> Result<(), String> {
    if row.entry != first.entry || row.benchmark != first.benchmark || row.time != first.time {
        return Err("rows of different entries or benchmarks in one file".to_string());
    }
    if row.machine != first.machine {
        // Say first what is wrong with the column itself (torn or not JSON).
        machine(&row.machine)?;
        return Err(
            "its machine conditions differ from the first row's, while an entry's rows \
             were measured on one machine"
                .to_string(),
        );
    }
    let shared = [
        (
            "sbs_history_schema",
            first.schema.to_string(),
            row.schema.to_string(),
        ),
        ("command", first.command.clone(), row.command.clone()),
        (
            "tool_version",
            first.tool_version.clone(),
            row.tool_version.clone(),
        ),
        (
            "git_commit",
            first.git_commit.clone(),
            row.git_commit.clone(),
        ),
        ("host", first.host.clone(), row.host.clone()),
    ];
    match shared.iter().find(|(_, a, b)| a != b) {
        Some((column, a, b)) => Err(format!(
            "its {column} `{b}` differs from the first row's `{a}`, while an entry's rows \
             share it"
        )),
        None => Ok(()),
    }
}

/// Add one row to its entry, or say why it does not belong there.
fn add_row(e: &mut Entry, row: Row) -> Result<(), String> {
    check_value(&row)?;
    if row.detail.is_empty() {
        add_metric_row(e, row)
    } else {
        add_detail_row(e, row)
    }
}

/// The largest magnitude a saved value can have: counts and sizes are read from 64-bit
/// counters, and no run lasts 2^64 nanoseconds (584 years). Past it the gate's sums and
/// ratios overflow to infinity.
fn largest(unit: Unit) -> f64 {
    const TWO_TO_THE_64: f64 = 18_446_744_073_709_551_616.0;
    match unit {
        Unit::Seconds => TWO_TO_THE_64 * 1e-9,
        Unit::Bytes | Unit::Count => TWO_TO_THE_64,
    }
}

/// Refuse a value no measurement of its metric can take: not finite, negative for a
/// quantity that cannot be (a time, a size, a count), or beyond [`largest`]. Judged as
/// it is, such a value turns the gate's change into an infinity and its verdict into
/// nonsense.
fn check_value(row: &Row) -> Result<(), String> {
    let what = if row.detail.is_empty() {
        format!("metric `{}`", row.metric)
    } else {
        format!("detail `{}` of metric `{}`", row.detail, row.metric)
    };
    let value = row.value;
    if !value.is_finite() {
        return Err(format!("value {value} of {what} is not finite"));
    }
    if value < 0.0 && MetricId::parse(&row.metric).is_ok_and(|id| id.never_negative()) {
        return Err(format!(
            "value {value:e} of {what} is negative, which a {} cannot be",
            match row.unit {
                Unit::Seconds => "time",
                Unit::Bytes => "size",
                Unit::Count => "count",
            }
        ));
    }
    let limit = largest(row.unit);
    if value.abs() > limit {
        return Err(format!(
            "value {value:e} of {what} is beyond any measurement (at most {limit:e} {})",
            row.unit.as_str()
        ));
    }
    Ok(())
}

/// A metric's own row: the next run of the metric, whose rows are contiguous.
fn add_metric_row(e: &mut Entry, row: Row) -> Result<(), String> {
    let metric = match e.metrics.last_mut() {
        Some(m) if m.id == row.metric && m.source == row.source && m.details.is_empty() => m,
        _ => {
            if e.metrics
                .iter()
                .any(|m| m.id == row.metric && m.source == row.source)
            {
                return Err(format!(
                    "rows of metric `{}` are not contiguous",
                    row.metric
                ));
            }
            e.metrics.push(SavedMetric {
                id: row.metric.clone(),
                unit: row.unit,
                source: row.source.clone(),
                exact: row.exact,
                samples: Vec::new(),
                failed: Vec::new(),
                details: Vec::new(),
            });
            e.metrics.last_mut().expect("just pushed")
        }
    };
    if row.run != metric.samples.len() || row.unit != metric.unit || row.exact != metric.exact {
        return Err(format!(
            "metric `{}`: expected run {} with the unit and kind of the earlier rows",
            row.metric,
            metric.samples.len()
        ));
    }
    if row.failed {
        metric.failed.push(metric.samples.len());
    }
    metric.samples.push(row.value);
    Ok(())
}

/// A detail row belongs to the metric whose own rows came just before.
fn add_detail_row(e: &mut Entry, row: Row) -> Result<(), String> {
    let Some(metric) = e
        .metrics
        .last_mut()
        .filter(|m| m.id == row.metric && m.source == row.source)
    else {
        return Err(format!(
            "detail `{}` of metric `{}` does not follow the metric's own rows",
            row.detail, row.metric
        ));
    };
    let detail = match metric.details.last_mut() {
        Some(d) if d.0 == row.detail => d,
        _ => {
            if metric.details.iter().any(|d| d.0 == row.detail) {
                return Err(format!(
                    "rows of detail `{}` are not contiguous",
                    row.detail
                ));
            }
            metric.details.push((row.detail.clone(), Vec::new()));
            metric.details.last_mut().expect("just pushed")
        }
    };
    if row.run != detail.1.len() {
        return Err(format!(
            "detail `{}` of metric `{}`: expected run {}",
            row.detail,
            row.metric,
            detail.1.len()
        ));
    }
    detail.1.push(row.value);
    Ok(())
}
