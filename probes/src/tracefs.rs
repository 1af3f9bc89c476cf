//! Uprobe definitions in tracefs (`uprobe_events`), removed when their [`ProbeSet`] is
//! dropped, and clean-up of definitions left behind by a killed sbs-profile.
//!
//! Which definitions are stale: a probe set holds an exclusive `flock` on
//! `/run/sbs-profile/<group>.lock` (`/var/lib/sbs-profile` where there is no `/run`) for
//! as long as it exists. A lock belongs to an open file, not to a pid, so it tells a live
//! owner from a dead one across pid namespaces, where `kill(pid, 0)` cannot: a live
//! sbs-profile on the host is ESRCH to one in a container. Clean-up removes a group only
//! when it can take that lock, or, when the group has no lock file, when the group's name
//! says it was made in this pid namespace and its pid no longer exists here. Anything
//! else is left alone: another run's definitions are never removed on a guess.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

use crate::error::ProbeError;
use crate::sys;

/// Prefix of our tracefs event groups: `sbs_profile_<pid>_<n>_<pid namespace>`.
pub const GROUP_PREFIX: &str = "sbs_profile_";

/// Where the owners' lock files live: `sbs-profile/` under the first of these that is a
/// directory.
const LOCK_PARENTS: [&str; 2] = ["/run", "/var/lib"];

/// The mount point of a tracefs this process mounted, if it did.
static MOUNTED_HERE: OnceLock<PathBuf> = OnceLock::new();

/// A mounted tracefs.
#[derive(Debug, Clone)]
pub struct Tracefs {
    root: PathBuf,
}

impl Tracefs {
    /// Find a mounted tracefs with uprobe support; mount it at `/sys/kernel/tracing` if
    /// none is mounted (needs root).
    pub fn open_or_mount() -> Result<Tracefs, ProbeError> {
        if let Some(t) = Tracefs::find() {
            return Ok(t);
        }
        let target = Path::new("/sys/kernel/tracing");
        if !sys::is_root() {
            return Err(ProbeError::or_permission(
                std::io::Error::from_raw_os_error(libc::EACCES),
                "using tracefs (/sys/kernel/tracing/uprobe_events) to define uprobes",
                |cause| ProbeError::NoTracefs { cause },
            ));
        }
        match sys::mount_tracefs(target) {
            Ok(()) if target.join("uprobe_events").exists() => {
                let _ = MOUNTED_HERE.set(target.to_path_buf());
                Ok(Tracefs {
                    root: target.to_path_buf(),
                })
            }
            Ok(()) => Err(ProbeError::NoTracefs {
                cause: std::io::Error::other(
                    "mounted, but it has no uprobe_events: the kernel lacks CONFIG_UPROBE_EVENTS",
                ),
            }),
            Err(e) => Err(ProbeError::or_permission(
                e,
                "mounting tracefs at /sys/kernel/tracing",
                |source| ProbeError::NoTracefs { cause: source },
            )),
        }
    }

    /// Where this process mounted tracefs, if [`Tracefs::open_or_mount`] had to: the mount
    /// outlives the process, so the user should hear of it.
    pub fn mounted_by_this_process() -> Option<&'static Path> {
        MOUNTED_HERE.get().map(PathBuf::as_path)
    }

    /// A tracefs already mounted, if any.
    pub fn find() -> Option<Tracefs> {
        let mut candidates = vec![PathBuf::from("/sys/kernel/tracing")];
        if let Ok(mounts) = std::fs::read_to_string("/proc/self/mounts") {
            candidates.extend(mounts.lines().filter_map(|l| {
                let mut f = l.split_whitespace();
                let (_, dir, fstype) = (f.next()?, f.next()?, f.next()?);
                (fstype == "tracefs").then(|| PathBuf::from(dir))
            }));
        }
        candidates.push(PathBuf::from("/sys/kernel/debug/tracing"));
        candidates
            .into_iter()
            .find(|d| d.join("uprobe_events").exists())
            .map(|root| Tracefs { root })
    }

    /// The mount point.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn uprobe_events(&self) -> PathBuf {
        self.root.join("uprobe_events")
    }

    fn write_line(&self, line: &str) -> Result<(), ProbeError> {
        let file = self.uprobe_events();
        let what = format!("writing `{line}` to {}", file.display());
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&file)
            .map_err(|e| {
                ProbeError::or_permission(e, what.clone(), |source| ProbeError::Define {
                    definition: line.to_string(),
                    file: file.clone(),
                    cause: source,
                })
            })?;
        f.write_all(format!("{line}\n").as_bytes()).map_err(|e| {
            ProbeError::or_permission(e, what, |source| ProbeError::Define {
                definition: line.to_string(),
                file: file.clone(),
                cause: source,
            })
        })
    }

    /// Our uprobe definitions currently in the kernel: `(group, event)`.
    pub fn our_events(&self) -> Result<Vec<(String, String)>, ProbeError> {
        let file = self.uprobe_events();
        let text = std::fs::read_to_string(&file).map_err(|e| {
            ProbeError::or_permission(e, format!("reading {}", file.display()), |source| {
                ProbeError::read(&file, source)
            })
        })?;
        Ok(text
            .lines()
            .filter_map(|l| {
                let spec = l.split_whitespace().next()?;
                let (_, name) = spec.split_once(':')?;
                let (group, event) = name.split_once('/')?;
                group
                    .starts_with(GROUP_PREFIX)
                    .then(|| (group.to_string(), event.to_string()))
            })
            .collect())
    }

    /// Remove definitions of ours whose sbs-profile process is gone (killed before it
    /// could clean up), as the module documentation describes. Returns how many were
    /// removed.
    pub fn clean_stale(&self) -> Result<usize, ProbeError> {
        let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (group, event) in self.our_events()? {
            groups.entry(group).or_default().push(event);
        }
        let mut removed = 0;
        for (group, events) in &groups {
            let Some(lock) = owner_gone(group) else {
                continue;
            };
            let mut all = true;
            for event in events {
                // Best effort: a definition still in use by a counter cannot be removed.
                if self.write_line(&format!("-:{group}/{event}")).is_ok() {
                    removed += 1;
                } else {
                    all = false;
                }
            }
            if let Some(lock) = lock {
                lock.release(all);
            }
        }
        sweep_lock_files(|group| groups.contains_key(group));
        Ok(removed)
    }
}

/// Delete the lock files that no live owner holds and whose group has no definitions left
/// (`defined` says which have some): those of runs whose definitions were removed by
/// someone else, or whose removal failed for a while.
fn sweep_lock_files(defined: impl Fn(&str) -> bool) {
    let Some(dir) = lock_dir(false) else {
        return;
    };
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(group) = name
            .to_str()
            .and_then(|n| n.strip_suffix(".lock"))
            .filter(|g| g.starts_with(GROUP_PREFIX))
        else {
            continue;
        };
        if defined(group) {
            continue;
        }
        if let Some(lock) = OwnerLock::open_free(&dir, group) {
            lock.release(true);
        }
    }
}

/// The directory of the owners' lock files, created if `create`; `None` when there is
/// none that only root can write (then nobody can plant or swap a lock file in it).
fn lock_dir(create: bool) -> Option<PathBuf> {
    let parent = LOCK_PARENTS
        .iter()
        .map(Path::new)
        .find(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir()))?;
    let dir = parent.join("sbs-profile");
    if create {
        match std::fs::DirBuilder::new().mode(0o755).create(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(_) => return None,
        }
    }
    let meta = std::fs::symlink_metadata(&dir).ok()?;
    (meta.is_dir() && meta.uid() == 0 && meta.mode() & 0o022 == 0).then_some(dir)
}

/// The lock file of `group`, if the group's name can name a file.
fn lock_path(dir: &Path, group: &str) -> Option<PathBuf> {
    let plain = !group.is_empty()
        && group
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_');
    plain.then(|| dir.join(format!("{group}.lock")))
}

/// The exclusive lock a live [`ProbeSet`] holds on its group's lock file.
#[derive(Debug)]
struct OwnerLock {
    file: File,
    path: PathBuf,
}

impl OwnerLock {
    /// Create and lock the lock file of a new group. `None` when that is not possible
    /// (no root-only directory, e.g. without root): the group then has no lock file, which
    /// another namespace's clean-up takes as "owner unknown" and leaves alone.
    fn take(group: &str) -> Option<OwnerLock> {
        let mut path = lock_path(&lock_dir(true)?, group)?;
        // A clean-up may delete a free lock file between its creation and its lock: then
        // the lock is on a file without a name, and it is made again.
        for _ in 0..3 {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&path)
                .ok()?;
            if !file.metadata().is_ok_and(|m| m.is_file()) {
                return None;
            }
            if !sys::try_lock_exclusive(&file).ok()? {
                return None;
            }
            let lock = OwnerLock { file, path };
            if lock.still_named() {
                return Some(lock);
            }
            let OwnerLock { path: again, .. } = lock;
            path = again;
        }
        None
    }

    /// The existing lock file of `group` in `dir`, locked, if nobody holds it (its owner
    /// is gone). `Err` when the file does not exist.
    fn open_free(dir: &Path, group: &str) -> Option<OwnerLock> {
        Self::open_existing(dir, group).ok().flatten()
    }

    /// The existing lock file of `group` in `dir`: `Err` when there is none, `Ok(None)`
    /// when it is held (or is not a plain file), `Ok(Some)` locked by us.
    fn open_existing(dir: &Path, group: &str) -> Result<Option<OwnerLock>, ()> {
        let path = lock_path(dir, group).ok_or(())?;
        let file = match OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
        {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(()),
            Err(_) => return Ok(None),
        };
        if !file.metadata().is_ok_and(|m| m.is_file()) {
            return Ok(None);
        }
        Ok(match sys::try_lock_exclusive(&file) {
            Ok(true) => Some(OwnerLock { file, path }),
            _ => None,
        })
    }

    /// Whether the lock file's name still refers to the file this lock is on.
    fn still_named(&self) -> bool {
        match (self.file.metadata(), std::fs::symlink_metadata(&self.path)) {
            (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
            _ => false,
        }
    }

    /// Let go of the lock; delete the lock file too when `delete` (no definition of the
    /// group is left), unless another file took its name meanwhile.
    fn release(self, delete: bool) {
        if delete && self.still_named() {
            let _ = std::fs::remove_file(&self.path);
        }
        // Closing the file releases the lock.
    }
}

/// Whether the sbs-profile that made `group` is gone: `Some(lock)` with its lock, now
/// ours, or `Some(None)` when it left no lock file and its pid is gone from this pid
/// namespace, where the group's name says it was made. `None`: alive, or unknown.
fn owner_gone(group: &str) -> Option<Option<OwnerLock>> {
    if let Some(dir) = lock_dir(false) {
        if let Ok(found) = OwnerLock::open_existing(&dir, group) {
            return found.map(Some);
        }
    }
    let (pid, namespace) = group_owner(group)?;
    if namespace == 0 || namespace != sys::pid_namespace() {
        return None;
    }
    (!sys::process_exists(pid)).then_some(None)
}

/// The pid and pid namespace a group's name records: `sbs_profile_<pid>_<n>_<namespace>`.
fn group_owner(group: &str) -> Option<(i32, u64)> {
    let mut parts = group.strip_prefix(GROUP_PREFIX)?.split('_');
    let pid = parts.next()?.parse().ok()?;
    parts.next()?.parse::<u32>().ok()?;
    let namespace = parts.next()?.parse().ok()?;
    parts.next().is_none().then_some((pid, namespace))
}

/// One place to probe, as given to [`ProbeSet::define`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeTarget {
    /// The probed file.
    pub path: PathBuf,
    /// The file offset of the probed instruction.
    pub offset: u64,
    /// What it counts, for messages: `` `calls::work` ``, `` an inlined copy of `push` in
    /// `fill` ``.
    pub what: String,
}

/// One uprobe defined by a [`ProbeSet`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DefinedProbe {
    /// `group/event`.
    pub event: String,
    /// The tracepoint id to open a perf counter on.
    pub id: u64,
    /// The probed file.
    pub path: PathBuf,
    /// The file offset probed.
    pub offset: u64,
    /// What it counts, for messages (see [`ProbeTarget::what`]).
    pub what: String,
}

/// A set of uprobe definitions under one event group of ours, removed on drop.
#[derive(Debug)]
pub struct ProbeSet {
    tracefs: Tracefs,
    group: String,
    probes: Vec<DefinedProbe>,
    /// Held while the set exists: what tells other runs that its definitions are live.
    lock: Option<OwnerLock>,
    /// A removal failed: the definitions left behind are stale once the lock is released.
    left_behind: bool,
}

static NEXT_GROUP: AtomicU32 = AtomicU32::new(0);

impl ProbeSet {
    /// Define one uprobe per target. The offsets must be instruction boundaries inside
    /// executable segments ([`crate::elf::Function::offset`], [`crate::entries`]): the
    /// kernel itself does not validate them.
    ///
    /// `stop` is asked before each definition; when it says yes, the definitions made so
    /// far are removed and [`ProbeError::Interrupted`] is returned (hundreds of probes take
    /// a while to define).
    pub fn define(
        tracefs: &Tracefs,
        targets: &[ProbeTarget],
        stop: &dyn Fn() -> bool,
    ) -> Result<ProbeSet, ProbeError> {
        let group = format!(
            "{GROUP_PREFIX}{}_{}_{}",
            std::process::id(),
            NEXT_GROUP.fetch_add(1, Ordering::Relaxed),
            sys::pid_namespace()
        );
        // Locked before the first definition exists, so no clean-up can take it as stale.
        let lock = OwnerLock::take(&group);
        let mut set = ProbeSet {
            tracefs: tracefs.clone(),
            group,
            probes: Vec::with_capacity(targets.len()),
            lock,
            left_behind: false,
        };
        for (i, target) in targets.iter().enumerate() {
            if stop() {
                return Err(ProbeError::Interrupted {
                    defined: i,
                    total: targets.len(),
                });
            }
            let shown = target.path.to_string_lossy();
            if shown.chars().any(char::is_whitespace) {
                return Err(ProbeError::UnprobeablePath {
                    path: target.path.clone(),
                });
            }
            let event = format!("{}/p{i}", set.group);
            set.tracefs
                .write_line(&format!("p:{event} {shown}:{:#x}", target.offset))?;
            // Registered before reading the id so that drop removes it on any error.
            set.probes.push(DefinedProbe {
                event: event.clone(),
                id: 0,
                path: target.path.clone(),
                offset: target.offset,
                what: target.what.clone(),
            });
            let id_file = set.tracefs.root.join("events").join(&event).join("id");
            let id =
                std::fs::read_to_string(&id_file).map_err(|e| ProbeError::read(&id_file, e))?;
            let id = id.trim().parse::<u64>().map_err(|e| {
                ProbeError::read(
                    &id_file,
                    std::io::Error::new(std::io::ErrorKind::InvalidData, e),
                )
            })?;
            if let Some(p) = set.probes.last_mut() {
                p.id = id;
            }
        }
        Ok(set)
    }

    /// The tracefs event group of this set.
    pub fn group(&self) -> &str {
        &self.group
    }

    /// The probes, in the order of the targets given to [`ProbeSet::define`].
    pub fn probes(&self) -> &[DefinedProbe] {
        &self.probes
    }

    /// Remove every definition now; errors name the definitions left behind.
    /// Counters opened on these probes must be closed first (else EBUSY).
    pub fn remove(&mut self) -> Result<(), ProbeError> {
        let mut first_err = None;
        for p in self.probes.drain(..).rev() {
            if let Err(e) = self.tracefs.write_line(&format!("-:{}", p.event)) {
                first_err.get_or_insert(e);
            }
        }
        self.left_behind |= first_err.is_some();
        first_err.map_or(Ok(()), Err)
    }
}

impl Drop for ProbeSet {
    fn drop(&mut self) {
        let _ = self.remove();
        if let Some(lock) = self.lock.take() {
            lock.release(!self.left_behind);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_names_record_their_owner() {
        assert_eq!(
            group_owner("sbs_profile_123_4_4026531836"),
            Some((123, 4026531836))
        );
        // Names of older versions, or of anything else, name no owner.
        assert_eq!(group_owner("sbs_profile_123_4"), None);
        assert_eq!(group_owner("sbs_profile_123_4_5_6"), None);
        assert_eq!(group_owner("sbs_profile_x_4_5"), None);
    }

    #[test]
    fn lock_paths_are_plain_names_only() {
        let dir = Path::new("/run/sbs-profile");
        assert_eq!(
            lock_path(dir, "sbs_profile_1_0_7"),
            Some(dir.join("sbs_profile_1_0_7.lock"))
        );
        assert_eq!(lock_path(dir, "../etc/x"), None);
        assert_eq!(lock_path(dir, ""), None);
    }

    #[test]
    fn free_lock_files_without_definitions_are_swept() {
        if !sys::is_root() {
            sbs_skip::skip!(sbs_skip::Need::Root, "the lock directory needs root");
            return;
        }
        let dir = lock_dir(true).expect("a root-only lock directory");
        // Names no sbs-profile uses: a pid no process can have, this test's pid as `n`.
        let free = format!("{GROUP_PREFIX}{}_{}_1", i32::MAX, std::process::id());
        let held = format!("{GROUP_PREFIX}{}_{}_2", i32::MAX, std::process::id());
        let defined = format!("{GROUP_PREFIX}{}_{}_3", i32::MAX, std::process::id());
        for g in [&free, &held, &defined] {
            std::fs::write(dir.join(format!("{g}.lock")), "").unwrap();
        }
        let holder = OwnerLock::take(&held).expect("lock");
        sweep_lock_files(|g| g == defined);
        assert!(
            !dir.join(format!("{free}.lock")).exists(),
            "a free one goes"
        );
        assert!(
            dir.join(format!("{held}.lock")).exists(),
            "a held one stays"
        );
        assert!(
            dir.join(format!("{defined}.lock")).exists(),
            "one with definitions stays"
        );
        holder.release(true);
        let _ = std::fs::remove_file(dir.join(format!("{defined}.lock")));
        assert!(!dir.join(format!("{held}.lock")).exists());
    }

    #[test]
    fn a_dead_owner_in_another_namespace_is_not_judged_by_its_pid() {
        // No lock file, and a namespace that is not ours: unknown, so left alone, even
        // though no process has this pid here.
        let group = format!("{GROUP_PREFIX}{}_0_1", i32::MAX);
        assert!(owner_gone(&group).is_none());
        // The same in this namespace: gone.
        let here = format!("{GROUP_PREFIX}{}_0_{}", i32::MAX, sys::pid_namespace());
        assert!(matches!(owner_gone(&here), Some(None)));
        // A live pid of this namespace (ours): alive.
        let me = format!(
            "{GROUP_PREFIX}{}_0_{}",
            std::process::id(),
            sys::pid_namespace()
        );
        assert!(owner_gone(&me).is_none());
    }
}
