//! What a saved entry is: its samples per metric and who, when and where measured them.

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::SystemTime;

use sbs_reports::model::{Machine, Unit};

/// Who, when and where a saved entry was measured.
#[derive(Debug, Clone, PartialEq)]
pub struct EntryMeta {
    /// Unique id, starts with the UTC time so that ids sort by time.
    pub id: String,
    /// UTC time, RFC 3339 with nanoseconds.
    pub time: String,
    /// `sbs-profile` version.
    pub tool_version: String,
    /// `git rev-parse HEAD` of the current directory, if it is in a repository.
    pub git_commit: Option<String>,
    /// Host name.
    pub host: String,
    /// What the machine did during the runs (load, other processes, governor...), where
    /// it was read; `None` in entries saved before history schema 4.
    pub machine: Option<Machine>,
}

impl EntryMeta {
    /// Metadata for an entry measured now, in the current directory.
    pub fn now() -> EntryMeta {
        let now = SystemTime::now();
        let time = humantime::format_rfc3339_nanos(now).to_string();
        EntryMeta {
            id: entry_id(&time),
            time,
            tool_version: env!("CARGO_PKG_VERSION").to_string(),
            git_commit: git_commit(),
            host: host_name(),
            machine: None,
        }
    }

    /// A label for an entry not in the history's order (a baseline): the time to the
    /// millisecond, and the short commit if known.
    pub fn label(&self) -> String {
        let time = match self.time.split_once('.') {
            Some((secs, frac)) => format!("{secs}.{}Z", frac.get(..3).unwrap_or("000")),
            None => self.time.clone(),
        };
        match &self.git_commit {
            Some(c) => format!("{time} @{}", short_commit(c)),
            None => time,
        }
    }
}

/// A commit's first 7 characters, as `git log --oneline` shows it. The file is text anyone
/// may edit: cut by characters, never inside one.
fn short_commit(c: &str) -> String {
    c.chars().take(7).collect()
}

/// `20261121T233645.123456789Z-4242`: sorts by time, unique per process and instant.
fn entry_id(time: &str) -> String {
    let compact: String = time.chars().filter(|c| *c != '-' && *c != ':').collect();
    format!("{compact}-{}", std::process::id())
}

fn git_commit() -> Option<String> {
    let out = Command::new("git")
        .args(["rev-parse", "--verify", "HEAD"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let commit = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !commit.is_empty()).then_some(commit)
}

fn host_name() -> String {
    fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown".to_string())
}

/// One metric of a saved entry.
#[derive(Debug, Clone, PartialEq)]
pub struct SavedMetric {
    /// Metric id, e.g. `alloc.count`.
    pub id: String,
    /// Unit of the samples.
    pub unit: Unit,
    /// The mechanism that measured it.
    pub source: String,
    /// Whether it is an exact count.
    pub exact: bool,
    /// One value per run, in run order.
    pub samples: Vec<f64>,
    /// Indices into `samples` of runs whose child failed (none before schema 3).
    pub failed: Vec<usize>,
    /// Breakdown (label, one value per run), e.g. per probed symbol; empty for entries
    /// saved before schema 2.
    pub details: Vec<(String, Vec<f64>)>,
}

impl SavedMetric {
    /// The samples of the runs whose child did not fail.
    pub fn good_samples(&self) -> Vec<f64> {
        self.samples
            .iter()
            .enumerate()
            .filter(|(i, _)| !self.failed.contains(i))
            .map(|(_, &v)| v)
            .collect()
    }
}

/// A saved entry (or baseline) of one benchmark.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// Where it was read from.
    pub path: PathBuf,
    /// Benchmark name.
    pub benchmark: String,
    /// The command, as saved (for people; not parsed).
    pub command: String,
    /// Metadata.
    pub meta: EntryMeta,
    /// Metrics, in file order.
    pub metrics: Vec<SavedMetric>,
    /// 1 for the benchmark's oldest entry, counting up; 0 for a baseline (not read from
    /// the history's entries).
    pub position: usize,
    /// Other files of the history holding this very entry (a copy under another name),
    /// counted once, as this one.
    pub duplicates: Vec<PathBuf>,
}

impl Entry {
    /// A short label for reports: `#3 @55533dc` (position and short commit), or with no
    /// commit known `#3 2026-11-22 00:31`; a baseline's is its metadata's label.
    pub fn label(&self) -> String {
        if self.position == 0 {
            return self.meta.label();
        }
        match &self.meta.git_commit {
            Some(c) => format!("#{} @{}", self.position, short_commit(c)),
            None => format!(
                "#{} {}",
                self.position,
                self.meta
                    .time
                    .get(..16)
                    .unwrap_or(&self.meta.time)
                    .replace('T', " ")
            ),
        }
    }

    /// Whether `other` is this entry again (a copy of its file): the same session (id,
    /// time, benchmark, command, tool, commit, host, machine) with the same samples.
    pub fn same_entry(&self, other: &Entry) -> bool {
        self.meta == other.meta
            && self.benchmark == other.benchmark
            && self.command == other.command
            && self.metrics == other.metrics
    }

    /// One line per copy of this entry counted once (for a note).
    pub fn duplicate_notes(&self) -> impl Iterator<Item = String> + '_ {
        self.duplicates.iter().map(|copy| {
            format!(
                "{} holds the same saved entry as {} (entry {}): counted once; delete the copy",
                copy.display(),
                self.path.display(),
                self.meta.id
            )
        })
    }

    /// The metric with this id, unit and source (series from different sources or in
    /// different units are never compared).
    pub fn metric(&self, id: &str, unit: Unit, source: &str) -> Option<&SavedMetric> {
        self.metrics
            .iter()
            .find(|m| m.id == id && m.unit == unit && m.source == source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(commit: Option<&str>) -> EntryMeta {
        EntryMeta {
            id: "x".into(),
            time: "2026-11-22T00:31:37.632123456Z".into(),
            tool_version: "0".into(),
            git_commit: commit.map(String::from),
            host: "h".into(),
            machine: None,
        }
    }

    #[test]
    fn label_shortens_the_commit_to_seven_characters() {
        assert_eq!(
            meta(Some("0123456789abcdef")).label(),
            "2026-11-22T00:31:37.632Z @0123456"
        );
        assert_eq!(meta(Some("abc")).label(), "2026-11-22T00:31:37.632Z @abc");
        assert_eq!(meta(None).label(), "2026-11-22T00:31:37.632Z");
    }

    #[test]
    fn label_of_a_multi_byte_commit_cuts_between_characters() {
        // Byte 7 falls inside the first `é` (two bytes each, after `abcdef`).
        let label = meta(Some("abcdeféééé")).label();
        assert_eq!(label, "2026-11-22T00:31:37.632Z @abcdefé");
        assert_eq!(
            meta(Some("日本語のコミット番号です")).label(),
            "2026-11-22T00:31:37.632Z @日本語のコミッ"
        );
    }

    #[test]
    fn an_entry_of_the_history_is_named_by_position_and_commit() {
        let entry = |commit: Option<&str>, position| Entry {
            path: PathBuf::new(),
            benchmark: "b".into(),
            command: "b".into(),
            meta: meta(commit),
            metrics: Vec::new(),
            position,
            duplicates: Vec::new(),
        };
        assert_eq!(entry(Some("55533dc0ffee"), 3).label(), "#3 @55533dc");
        assert_eq!(entry(None, 12).label(), "#12 2026-11-22 00:31");
        // A baseline is not in the history's order.
        assert_eq!(
            entry(Some("55533dc0ffee"), 0).label(),
            "2026-11-22T00:31:37.632Z @55533dc"
        );
    }
}
