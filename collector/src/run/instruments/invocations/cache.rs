//! The resolved sites of a command and its patterns, kept between runs of sbs-profile:
//! matching the patterns (demangling every symbol, reading the DWARF of inlined copies,
//! decoding their entries) is most of the fixed cost of `--invocations`, and its result
//! depends only on the files read. A second run of the same patterns on the same program
//! reads the ELF headers and symbol tables again (to find the same libraries the loader
//! would), and takes the sites from the cache when every file is the same one: same
//! path, device, inode, size, modification time and build id (a file without a build id:
//! the same content), and the same separate debug files.
//!
//! A cache may make a run faster, never different: before an entry is used, each of its
//! sites is checked against the file as it is now with the resolver's own rules
//! (`sbs_probes::entries::verify_site`: a function's start, an instruction boundary in
//! it, the file offset the loader maps it from, the bytes kept with it, where a
//! function's calls are counted), its rows must name its sites, and the file must be the
//! user's own (not writable by others, in a directory of mode 0700). Any doubt is a miss.
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
use sbs_probes::program::Program;
use sbs_reports::model::Unit;
use serde::{Deserialize, Serialize};

use super::sites::{PatternRows, Site};
use crate::run::instrument::MetricSpec;

/// Bumped when what is stored changes meaning.
// 4: code without a call line shared by inlined copies is no site of its own; sites
// carry the calls one pass may make (an unrolled loop).
const VERSION: u32 = 9;
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
    /// For a file without a build id, a hash of its content: an in-place rewrite can keep
    /// size, inode and modification time.
    content: Option<u64>,
}

impl FileId {
    fn of(path: &Path, build_id: Option<Vec<u8>>) -> Option<FileId> {
        let m = std::fs::metadata(path).ok()?;
        let content = match build_id {
            Some(_) => None,
            None => {
                let mut h = std::hash::DefaultHasher::new();
                std::fs::read(path).ok()?.hash(&mut h);
                Some(h.finish())
            }
        };
        Some(FileId {
            path: path.to_path_buf(),
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
            build_id,
            content,
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
    /// The bytes at `address` when it was resolved (`sbs_probes::entries::site_bytes`).
    bytes: Vec<u8>,
    calls_per_pass: u64,
    may_continue: bool,
    unbounded: bool,
    call_lines: Vec<String>,
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
    pub fn load(&self, target: &mut Program) -> Option<Resolved> {
        let path = self.file.as_ref()?;
        if !own_private(path) || !path.parent().is_some_and(own_private) {
            return None;
        }
        let text = std::fs::read(path).ok()?;
        let entry: Entry = serde_json::from_slice(&text).ok()?;
        if entry.version != VERSION || entry.key != self.key || entry.files != files(target)? {
            return None;
        }
        let sound = entry.sites.iter().all(|s| {
            target.images.get(s.image).is_some_and(|image| {
                image.path == s.path
                    && sbs_probes::entries::verify_site(
                        image,
                        s.function,
                        s.address,
                        s.uprobe_offset,
                        !s.inside,
                        &s.bytes,
                    )
                    .is_ok()
            })
        });
        let rows_sound = entry
            .rows
            .iter()
            .flat_map(|r| r.rows.iter().flat_map(|(_, sites)| sites))
            .all(|&i| i < entry.sites.len());
        if !sound || !rows_sound {
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
                calls_per_pass: s.calls_per_pass,
                may_continue: s.may_continue,
                unbounded: s.unbounded,
                call_lines: s.call_lines,
            })
            .collect::<Vec<_>>();
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
    pub fn store(&self, target: &mut Program, resolved: &Resolved) {
        let (Some(file), Some(files)) = (&self.file, files(target)) else {
            return;
        };
        let (warnings, sites, rows) = resolved;
        // A site whose bytes cannot be read back could not be checked when loaded.
        let Some(stored) = sites
            .iter()
            .map(|s| {
                let image = target.images.get(s.image)?;
                Some(StoredSite {
                    path: s.path.clone(),
                    image: s.image,
                    uprobe_offset: s.uprobe_offset,
                    address: s.address,
                    function: s.function,
                    inside: s.kind == SiteKind::Inside,
                    what: s.what.clone(),
                    bytes: sbs_probes::entries::site_bytes(image, s.function, s.address)?,
                    calls_per_pass: s.calls_per_pass,
                    may_continue: s.may_continue,
                    unbounded: s.unbounded,
                    call_lines: s.call_lines.clone(),
                })
            })
            .collect::<Option<Vec<_>>>()
        else {
            return;
        };
        let entry = Entry {
            version: VERSION,
            key: self.key.clone(),
            files,
            warnings: warnings.clone(),
            sites: stored,
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
            create_private(dir)?;
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

/// Every file resolution read: the images and the separate debug files whose symbols or
/// DWARF they use (one appearing, going or changing is a miss).
fn files(target: &mut Program) -> Option<Vec<FileId>> {
    let mut out = Vec::new();
    for image in &target.images {
        out.push(FileId::of(&image.path, image.build_id.clone())?);
        if let Some(debug) = &image.debug_file {
            out.push(FileId::of(&debug.path, debug.build_id.clone())?);
        }
    }
    Some(out)
}

/// Whether `path` is ours and nobody else may write it (a directory: nobody else may
/// enter it either).
fn own_private(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let Ok(m) = std::fs::symlink_metadata(path) else {
        return false;
    };
    let others = match m.is_dir() {
        true => 0o077,
        false => 0o022,
    };
    m.uid() == nix::unistd::geteuid().as_raw() && m.permissions().mode() & others == 0
}

/// Create `dir` and its missing parents up to the cache's own folder with mode 0700,
/// whatever the umask, and make an existing one of ours 0700.
fn create_private(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    // `sites` and `sbs-profile` are ours; their parents (`~/.cache`) are not ours to set.
    for d in [Some(dir), dir.parent()].into_iter().flatten() {
        let m = std::fs::symlink_metadata(d)?;
        if m.uid() == nix::unistd::geteuid().as_raw() && m.permissions().mode() & 0o077 != 0 {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700))?;
        }
    }
    Ok(())
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
