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
//! Stored in `$XDG_CACHE_HOME/sbs-profile/sites/` (else `~/.cache/...`), reached and
//! written as [`super::cache_dir`] says (never through a link, never in another user's
//! or a shared directory: then the run goes without the cache and says so once), one
//! JSON file per key (program, library path, patterns, options, the sbs-profile build),
//! written atomically; a file that cannot be read, or that holds another key or another
//! version, is a miss. Nothing is ever an error: the cache only saves time. A hit
//! refreshes the file's modification time; each store removes the entries unused for
//! [`MAX_AGE`] and, past [`MAX_ENTRIES`], the least recently used ones (entries of older
//! sbs-profile builds are never hit again, so they go this way). Only files sbs-profile
//! wrote are removed: named as it names them (16 hex digits, `.json`) and starting as it
//! starts them ([`FORMAT`]).

use std::ffi::OsStr;
use std::hash::{Hash, Hasher};
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use sbs_probes::patch::SiteKind;
use sbs_probes::program::Program;
use sbs_reports::model::Unit;
use serde::{Deserialize, Serialize};

use super::cache_dir::{self, CacheDir, NotUsed};
use super::sites::{PatternRows, Site};
use crate::run::instrument::MetricSpec;

/// Bumped when what is stored changes meaning.
// 4: code without a call line shared by inlined copies is no site of its own; sites
// carry the calls one pass may make (an unrolled loop). 10: files start with [`FORMAT`].
// 12: landing pads probed apart, tails of merged calls bounded, vector stores per byte.
const VERSION: u32 = 12;
/// The first field of every entry: marks a file as one sbs-profile wrote.
const FORMAT: &str = "sbs-profile invocation sites";
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
    /// [`FORMAT`], first, so that the file starts with it.
    format: String,
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
    /// The cache's base directory (`$XDG_CACHE_HOME`), if known.
    base: Option<PathBuf>,
    /// The entry's file name in `sbs-profile/sites`.
    name: String,
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
        SiteCache {
            base: cache_dir::base(),
            name: format!("{:016x}.json", h.finish()),
            key,
        }
    }

    /// The cached resolution, if every file `target` is made of is the one it was made
    /// from.
    pub fn load(&self, target: &mut Program) -> Option<Resolved> {
        let dir = opened(CacheDir::open(self.base.as_ref()?, false))?;
        let mut file = dir.open_own_file(&self.name)?;
        let mut text = Vec::new();
        file.read_to_end(&mut text).ok()?;
        let entry: Entry = serde_json::from_slice(&text).ok()?;
        if entry.format != FORMAT
            || entry.version != VERSION
            || entry.key != self.key
            || entry.files != files(target)?
        {
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
        let _ = file.set_modified(std::time::SystemTime::now());
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
        let (Some(base), Some(files)) = (&self.base, files(target)) else {
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
            format: FORMAT.to_string(),
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
        let Ok(json) = serde_json::to_vec(&entry) else {
            return;
        };
        let Some(dir) = opened(CacheDir::open(base, true)) else {
            return;
        };
        if dir.write(&self.name, &json).is_ok() {
            prune(&dir, MAX_AGE, MAX_ENTRIES);
        }
    }
}

/// The cache's directory, or none; the first time it is not safe to use, a note says
/// why (once per run: every program resolved meets the same directory).
fn opened(dir: Result<CacheDir, NotUsed>) -> Option<CacheDir> {
    static SAID: AtomicBool = AtomicBool::new(false);
    match dir {
        Ok(dir) => Some(dir),
        Err(NotUsed::Unsafe(why)) => {
            if !SAID.swap(true, Ordering::Relaxed) {
                eprintln!("sbs-profile: note: the invocation site cache was not used: {why}");
            }
            None
        }
        Err(NotUsed::Absent | NotUsed::Io) => None,
    }
}

/// Whether `name` is the name of an entry: 16 hex digits, `.json`.
fn entry_name(name: &str) -> bool {
    name.strip_suffix(".json")
        .is_some_and(|hex| hex.len() == 16 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Whether a file starting with `head` is an entry sbs-profile wrote: one starting with
/// [`FORMAT`], or one of the builds before it (`{"version":N,"key":"vN `).
fn written_by_us(head: &[u8]) -> bool {
    let marked = format!("{{\"format\":{}", serde_json::Value::from(FORMAT));
    if head.starts_with(marked.as_bytes()) {
        return true;
    }
    let Some(rest) = head.strip_prefix(b"{\"version\":") else {
        return false;
    };
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    let (version, rest) = rest.split_at(digits);
    let key = [b",\"key\":\"v", version, b" "].concat();
    digits > 0 && rest.starts_with(&key)
}

/// Remove the entries of `dir` unused for `max_age`, then the least recently used ones
/// past `max_entries`, and temporaries left by a killed writer; only files sbs-profile
/// wrote ([`entry_name`], [`written_by_us`]). Errors are ignored, like every cache error.
fn prune(dir: &CacheDir, max_age: std::time::Duration, max_entries: usize) {
    let now = std::time::SystemTime::now();
    let age = |used: std::time::SystemTime| now.duration_since(used).unwrap_or_default();
    for (used, name) in dir.own_files(cache_dir::is_temporary, written_by_us) {
        if age(used) > cache_dir::STALE_TEMPORARY {
            dir.remove(&name);
        }
    }
    let mut kept = Vec::new();
    for (used, name) in dir.own_files(entry_name, written_by_us) {
        if age(used) > max_age {
            dir.remove(&name);
        } else {
            kept.push((used, name));
        }
    }
    if kept.len() > max_entries {
        kept.sort();
        for (_, name) in &kept[..kept.len() - max_entries] {
            dir.remove(name);
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn set_age(path: &Path, age: std::time::Duration) {
        let f = std::fs::File::options().write(true).open(path).unwrap();
        f.set_modified(std::time::SystemTime::now() - age).unwrap();
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn pruning_removes_old_entries_then_the_least_recently_used_and_only_its_own() {
        let base = tempfile::tempdir().unwrap();
        let dir = CacheDir::open(base.path(), true).unwrap();
        let sites = base.path().join("sbs-profile/sites");
        assert_eq!(
            std::fs::metadata(&sites).unwrap().permissions().mode() & 0o777,
            0o700
        );
        let ours = format!("{{\"format\":\"{FORMAT}\",\"version\":{VERSION}}}");
        let hour = std::time::Duration::from_secs(3600);
        let day = hour * 24;
        let make = |name: &str, content: &str, age| {
            let path = sites.join(name);
            std::fs::write(&path, content).unwrap();
            set_age(&path, age);
        };
        make("000000000000000a.json", &ours, day * 40); // ancient
        make("000000000000000b.json", &ours, day * 3); // old
        make("000000000000000c.json", &ours, day * 4); // older
        make("000000000000000d.json", &ours, std::time::Duration::ZERO); // new
        make(
            "000000000000000e.json",
            r#"{"version":9,"key":"v9 /bin/x | None"#,
            day * 40,
        );
        make(".tmp-0123456789abcdef.json", &ours, hour * 2); // left by a killed writer
        make(".tmp-fedcba9876543210.json", &ours, hour / 2); // being written
                                                             // Not ours: a name it does not make, content it does not write, a link.
        make("not-an-entry.txt", &ours, day * 40);
        make(
            "00000000000000aa.json",
            r#"{"version":9,"key":"other"}"#,
            day * 40,
        );
        make("00000000000000ab.json", "precious", day * 40);
        let victim = base.path().join("victim.json");
        std::fs::write(&victim, &ours).unwrap();
        set_age(&victim, day * 40);
        std::os::unix::fs::symlink(&victim, sites.join("00000000000000ac.json")).unwrap();
        prune(&dir, day * 30, 2);
        assert_eq!(
            names(&sites),
            [
                ".tmp-fedcba9876543210.json",
                "000000000000000b.json",
                "000000000000000d.json",
                "00000000000000aa.json",
                "00000000000000ab.json",
                "00000000000000ac.json",
                "not-an-entry.txt",
            ]
        );
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), ours);
    }

    #[test]
    fn a_cache_directory_through_a_link_or_writable_by_others_is_not_used() {
        let base = tempfile::tempdir().unwrap();
        let victim = tempfile::tempdir().unwrap();
        std::fs::create_dir(base.path().join("sbs-profile")).unwrap();
        let sites = base.path().join("sbs-profile/sites");
        std::os::unix::fs::symlink(victim.path(), &sites).unwrap();
        for create in [false, true] {
            match CacheDir::open(base.path(), create) {
                Err(NotUsed::Unsafe(why)) => assert_eq!(
                    why,
                    format!(
                        "{} is a symbolic link, which sbs-profile never makes: remove it \
                         (sbs-profile makes its own directory)",
                        sites.display()
                    )
                ),
                other => panic!("{other:?}"),
            }
        }
        assert!(names(victim.path()).is_empty());
        // A link at `sbs-profile` too.
        std::fs::remove_file(&sites).unwrap();
        std::fs::remove_dir(base.path().join("sbs-profile")).unwrap();
        std::os::unix::fs::symlink(victim.path(), base.path().join("sbs-profile")).unwrap();
        assert!(matches!(
            CacheDir::open(base.path(), true),
            Err(NotUsed::Unsafe(why)) if why.contains("sbs-profile is a symbolic link")
        ));
        assert!(names(victim.path()).is_empty());
        // A base every user may write.
        let shared = tempfile::tempdir().unwrap();
        std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(matches!(
            CacheDir::open(shared.path(), true),
            Err(NotUsed::Unsafe(why)) if why.contains("may be written by other users")
        ));
        assert!(names(shared.path()).is_empty());
        // What entries are: named and written as sbs-profile writes them.
        assert!(entry_name("0123456789abcdef.json"));
        assert!(!entry_name("0123456789abcdeg.json") && !entry_name("x.json"));
        assert!(written_by_us(br#"{"version":9,"key":"v9 /bin/true"#));
        assert!(!written_by_us(br#"{"version":9,"key":"v8 /bin/true"#));
        assert!(!written_by_us(b"{}"));
    }
}
