//! Writing the history: a new entry file per saved run, never replacing one, and named
//! baselines replaced atomically under a lock.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};
use sbs_reports::model::{BenchmarkResult, Machine};

use super::read::read_entry;
use super::{io_error, EntryMeta, History, HistoryError, Row, HISTORY_SCHEMA};

impl History {
    /// Once a run's report is final: save each of `benchmarks` as the store saves
    /// ([`Saving`](super::Saving)), a new entry then the baseline, measured on `machine`. Returns the
    /// files written (none when nothing is saved).
    pub fn save_run(
        &self,
        benchmarks: &[BenchmarkResult],
        machine: Option<Machine>,
    ) -> Result<Vec<PathBuf>, HistoryError> {
        if !self.saving.any() {
            return Ok(Vec::new());
        }
        let meta = EntryMeta {
            machine,
            ..EntryMeta::now()
        };
        let mut written = Vec::new();
        for bench in benchmarks {
            if self.saving.entries {
                written.push(self.save(bench, &meta)?);
            }
            if let Some(name) = &self.saving.baseline {
                written.push(self.save_baseline(name, bench, &meta)?);
            }
        }
        Ok(written)
    }

    /// Save `result` as a new history entry; returns the file written. Never replaces a
    /// file: the entry id gets a counter suffix if its name is taken.
    pub fn save(
        &self,
        result: &BenchmarkResult,
        meta: &EntryMeta,
    ) -> Result<PathBuf, HistoryError> {
        let rows = rows(result, meta)?;
        let dir = self.entries_dir(&result.name);
        create_dir(&dir)?;
        for attempt in 0u32.. {
            let name = if attempt == 0 {
                format!("{}.csv", meta.id)
            } else {
                format!("{}-{attempt}.csv", meta.id)
            };
            let path = dir.join(name);
            let tmp = write_temp(&dir, &rows)?;
            match tmp.persist_noclobber(&path) {
                Ok(_) => {
                    sync_dir(&dir)?;
                    return Ok(path);
                }
                Err(e) if e.error.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(io_error("rename a temporary file to", &path)(e.error)),
            }
        }
        unreachable!("the attempt counter is unbounded")
    }

    /// Save `result` as baseline `name`, replacing the previous one atomically. Refuses to
    /// replace a file that is not a valid history file of the same benchmark.
    pub fn save_baseline(
        &self,
        name: &str,
        result: &BenchmarkResult,
        meta: &EntryMeta,
    ) -> Result<PathBuf, HistoryError> {
        let path = self.baseline_path(name, &result.name)?;
        let rows = rows(result, meta)?;
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        create_dir(&dir)?;
        let lock_path = dir.join(".lock");
        let lock_file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io_error("open the lock file", &lock_path))?;
        let _lock = Flock::lock(lock_file, FlockArg::LockExclusive)
            .map_err(|(_, errno)| io_error("lock", &lock_path)(errno.into()))?;
        if path.exists() {
            // Only ever replace our own, readable file of the same benchmark.
            let old = read_entry(&path)?;
            if old.benchmark != result.name {
                return Err(HistoryError::Foreign {
                    path,
                    reason: format!("it holds benchmark `{}`", old.benchmark),
                });
            }
        }
        let tmp = write_temp(&dir, &rows)?;
        tmp.persist(&path)
            .map_err(|e| io_error("rename a temporary file to", &path)(e.error))?;
        sync_dir(&dir)?;
        Ok(path)
    }
}

fn rows(result: &BenchmarkResult, meta: &EntryMeta) -> Result<Vec<Row>, HistoryError> {
    let command = shell_words(&result.command);
    // Serialising plain numbers, strings and options cannot fail; if it did, the entry
    // is still worth saving without its conditions.
    let machine = meta
        .machine
        .as_ref()
        .and_then(|m| serde_json::to_string(m).ok())
        .unwrap_or_default();
    // Each metric's own rows, then its details' rows, label by label.
    let rows: Vec<Row> = result
        .metrics
        .iter()
        .flat_map(|m| {
            let own = std::iter::once(("", &m.samples));
            let details = m.details.iter().map(|d| (d.label.as_str(), &d.samples));
            own.chain(details).flat_map(move |(detail, samples)| {
                samples
                    .iter()
                    .enumerate()
                    .map(move |(run, &value)| (m, detail, run, value))
            })
        })
        .map(|(m, detail, run, value)| Row {
            schema: HISTORY_SCHEMA,
            entry: meta.id.clone(),
            time: meta.time.clone(),
            benchmark: result.name.clone(),
            command: command.clone(),
            tool_version: meta.tool_version.clone(),
            git_commit: meta.git_commit.clone().unwrap_or_default(),
            host: meta.host.clone(),
            metric: m.id.clone(),
            detail: detail.to_string(),
            unit: m.unit,
            source: m.source.clone(),
            exact: m.exact,
            run,
            value,
            failed: m.failed_runs.contains(&run),
            machine: machine.clone(),
        })
        .collect();
    if rows.is_empty() {
        return Err(HistoryError::Empty(result.name.clone()));
    }
    Ok(rows)
}

/// The command as a person would type it (arguments with special characters quoted).
fn shell_words(command: &[String]) -> String {
    command
        .iter()
        .map(|arg| {
            let plain = !arg.is_empty()
                && arg
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
            if plain {
                arg.clone()
            } else {
                format!("'{}'", arg.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn create_dir(dir: &Path) -> Result<(), HistoryError> {
    fs::create_dir_all(dir).map_err(io_error("create directory", dir))
}

/// Write `rows` to a synced hidden temporary file in `dir` (removed again if dropped).
fn write_temp(dir: &Path, rows: &[Row]) -> Result<tempfile::NamedTempFile, HistoryError> {
    let mut tmp = tempfile::Builder::new()
        .prefix(".tmp-")
        .suffix(".csv")
        .tempfile_in(dir)
        .map_err(io_error("create a temporary file in", dir))?;
    let path = tmp.path().to_path_buf();
    {
        let mut writer = csv::Writer::from_writer(io::BufWriter::new(tmp.as_file_mut()));
        for row in rows {
            writer.serialize(row).map_err(|e| csv_io(e, &path))?;
        }
        let mut inner = writer
            .into_inner()
            .map_err(|e| io_error("write", &path)(e.into_error()))?;
        inner.flush().map_err(io_error("write", &path))?;
    }
    tmp.as_file().sync_all().map_err(io_error("sync", &path))?;
    Ok(tmp)
}

fn csv_io(e: csv::Error, path: &Path) -> HistoryError {
    let source = match e.into_kind() {
        csv::ErrorKind::Io(io) => io,
        other => io::Error::other(format!("{other:?}")),
    };
    io_error("write", path)(source)
}

fn sync_dir(dir: &Path) -> Result<(), HistoryError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_error("sync directory", dir))
}
