//! The resolved sites of a command and its patterns, kept between runs of sbs-profile:
//! matching the patterns (demangling every symbol, reading the DWARF of inlined copies,
//! decoding their entries) is most of the fixed cost of `--invocations`, and its result
//! depends only on the files read. A second run of the same patterns on the same program
//! reads the ELF headers and symbol tables again (to find the same libraries the loader
//! would), and takes the sites from the cache when every file is the same one: same
//! path, device, inode, size, modification time and build id, and the same separate
//! debug files.
//!
//! Stored in `$XDG_CACHE_HOME/sbs-profile/sites/` (else `~/.cache/...`), one JSON file
//! per key (program, library path, patterns, options, the sbs-profile build), written
//! atomically; a file that cannot be read, or that holds another key or another version,
//! is a miss. Nothing is ever an error: the cache only saves time. A hit refreshes the
//! file's modification time; each store removes the entries unused for [`MAX_AGE`] and,
//! past [`MAX_ENTRIES`], the least recently used ones (entries of older sbs-profile
//! builds are never hit again, so they go this way).

use std::ffi::OsStr;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use sbs_probes::patch::SiteKind;
use sbs_probes::resolve::Target;
use sbs_reports::model::Unit;
use serde::{Deserialize, Serialize};

use super::sites::{PatternRows, Site};
use crate::run::instrument::MetricSpec;

/// Bumped when what is stored changes meaning.
const VERSION: u32 = 2;
/// Entries unused for this long are removed.
const MAX_AGE: std::time::Duration = std::time::Duration::from_secs(30 * 24 * 3600);
/// At most this many entries are kept.
const MAX_ENTRIES: usize = 200;

/// The identity of the running sbs-profile (size and modification time of its
/// executable): another build may resolve the same files differently (a fix in the
/// matching), so its entries are not reused.
fn this_build() -> String {
    std::fs::metadata("/proc/self/exe")
        .map(|m| format!("{}:{}.{}", m.size(), m.mtime(), m.mtime_nsec()))
        .unwrap_or_default()
}

/// The identity of one file read during resolution.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct FileId {
    path: PathBuf,
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
    build_id: Option<Vec<u8>>,
}

impl FileId {
    fn of(path: &Path, build_id: Option<Vec<u8>>) -> Option<FileId> {
        let m = std::fs::metadata(path).ok()?;
        Some(FileId {
            path: path.to_path_buf(),
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
            build_id,
        })
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct StoredSite {
    path: PathBuf,
    image: usize,
    uprobe_offset: u64,
    address: u64,
    function: u64,
    inside: bool,
    what: String,
}

#[derive(Debug, Serialize, Deserialize)]
struct StoredRows {
    metric: String,
    rows: Vec<(String, Vec<usize>)>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    version: u32,
    key: String,
    files: Vec<FileId>,
    warnings: Vec<String>,
    sites: Vec<StoredSite>,
    rows: Vec<StoredRows>,
}

/// What resolution produced: warnings, sites, rows.
pub(super) type Resolved = (Vec<String>, Vec<Site>, Vec<PatternRows>);

/// The cache entry of one resolution.
#[derive(Debug)]
pub(super) struct SiteCache {
    file: Option<PathBuf>,
    key: String,
}

impl SiteCache {
    /// The entry for `program` (with `ld_library_path`), `patterns` and the options that
    /// change what resolution gives.
    pub fn new(
        program: &Path,
        ld_library_path: Option<&OsStr>,
        patterns: &[String],
        max_probes: usize,
        detail: bool,
    ) -> SiteCache {
        let key = format!(
            "v{VERSION} {} | {:?} | {:?} | {max_probes} | {detail} | {}",
            program.display(),
            ld_library_path,
            patterns,
            this_build()
        );
        let mut h = std::hash::DefaultHasher::new();
        key.hash(&mut h);
        let file = cache_dir().map(|d| d.join(format!("{:016x}.json", h.finish())));
        SiteCache { file, key }
    }

    /// The cached resolution, if every file `target` is made of is the one it was made
    /// from.
    pub fn load(&self, target: &mut Target) -> Option<Resolved> {
        let path = self.file.as_ref()?;
        let text = std::fs::read(path).ok()?;
        let entry: Entry = serde_json::from_slice(&text).ok()?;
        if entry.version != VERSION || entry.key != self.key || entry.files != files(target)? {
            return None;
        }
        // Used now: pruning keeps it.
        let _ = std::fs::File::options()
            .write(true)
            .open(path)
            .and_then(|f| f.set_modified(std::time::SystemTime::now()));
        let sites = entry
            .sites
            .into_iter()
            .map(|s| Site {
                path: s.path,
                image: s.image,
                uprobe_offset: s.uprobe_offset,
                address: s.address,
                function: s.function,
                kind: if s.inside {
                    SiteKind::Inside
                } else {
                    SiteKind::Entry
                },
                what: s.what,
            })
            .collect::<Vec<_>>();
        if sites.iter().any(|s| s.image >= target.images.len()) {
            return None;
        }
        let rows = entry
            .rows
            .into_iter()
            .map(|r| PatternRows {
                metric: MetricSpec::new(r.metric, Unit::Count, "uprobe", true),
                rows: r.rows,
            })
            .collect();
        Some((entry.warnings, sites, rows))
    }

    /// Keep `resolved` for the next run (errors ignored: the cache only saves time).
    pub fn store(&self, target: &mut Target, resolved: &Resolved) {
        let (Some(file), Some(files)) = (&self.file, files(target)) else {
            return;
        };
        let (warnings, sites, rows) = resolved;
        let entry = Entry {
            version: VERSION,
            key: self.key.clone(),
            files,
            warnings: warnings.clone(),
            sites: sites
                .iter()
                .map(|s| StoredSite {
                    path: s.path.clone(),
                    image: s.image,
                    uprobe_offset: s.uprobe_offset,
                    address: s.address,
                    function: s.function,
                    inside: s.kind == SiteKind::Inside,
                    what: s.what.clone(),
                })
                .collect(),
            rows: rows
                .iter()
                .map(|r| StoredRows {
                    metric: r.metric.id.clone(),
                    rows: r.rows.clone(),
                })
                .collect(),
        };
        let Some(dir) = file.parent() else {
            return;
        };
        let write = || -> std::io::Result<()> {
            std::fs::create_dir_all(dir)?;
            let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
            tmp.write_all(&serde_json::to_vec(&entry).map_err(std::io::Error::other)?)?;
            tmp.persist(file).map_err(|e| e.error)?;
            Ok(())
        };
        if write().is_ok() {
            prune(dir, MAX_AGE, MAX_ENTRIES);
        }
    }
}

/// Remove the entries of `dir` unused for `max_age`, then the least recently used ones
/// past `max_entries` (errors ignored, like every cache error).
fn prune(dir: &Path, max_age: std::time::Duration, max_entries: usize) {
    let Ok(read) = std::fs::read_dir(dir) else {
        return;
    };
    let now = std::time::SystemTime::now();
    let mut kept: Vec<(std::time::SystemTime, PathBuf)> = Vec::new();
    for entry in read.flatten() {
        let path = entry.path();
        if path.extension() != Some(OsStr::new("json")) {
            continue;
        }
        let Ok(used) = entry.metadata().and_then(|m| m.modified()) else {
            continue;
        };
        if now.duration_since(used).is_ok_and(|age| age > max_age) {
            let _ = std::fs::remove_file(&path);
        } else {
            kept.push((used, path));
        }
    }
    if kept.len() > max_entries {
        kept.sort();
        for (_, path) in &kept[..kept.len() - max_entries] {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Every file resolution read: the images and their separate debug files.
fn files(target: &mut Target) -> Option<Vec<FileId>> {
    let mut out = Vec::new();
    for i in 0..target.images.len() {
        let image = &target.images[i];
        out.push(FileId::of(&image.path, image.build_id.clone())?);
        if let Some(debug) = target.debug_file(i) {
            out.push(FileId::of(&debug, None)?);
        }
    }
    Some(out)
}

fn cache_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("sbs-profile").join("sites"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pruning_removes_old_entries_then_the_least_recently_used() {
        let dir = tempfile::tempdir().unwrap();
        let now = std::time::SystemTime::now();
        let day = std::time::Duration::from_secs(24 * 3600);
        let make = |name: &str, age_days: u32| {
            let path = dir.path().join(name);
            std::fs::write(&path, b"{}").unwrap();
            let f = std::fs::File::options().write(true).open(&path).unwrap();
            f.set_modified(now - day * age_days).unwrap();
        };
        make("ancient.json", 40);
        make("old.json", 3);
        make("older.json", 4);
        make("new.json", 0);
        make("not-an-entry.txt", 40);
        prune(dir.path(), day * 30, 2);
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["new.json", "not-an-entry.txt", "old.json"]);
    }
}
