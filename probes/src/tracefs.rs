//! Uprobe definitions in tracefs (`uprobe_events`), removed when their [`ProbeSet`] is
//! dropped, and clean-up of definitions left behind by a killed sbs-profile.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::error::ProbeError;
use crate::sys;

/// Prefix of our tracefs event groups: `sbs_profile_<pid>_<n>`.
pub const GROUP_PREFIX: &str = "sbs_profile_";

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
            Ok(()) if target.join("uprobe_events").exists() => Ok(Tracefs {
                root: target.to_path_buf(),
            }),
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
    /// could clean up). Returns how many were removed.
    pub fn clean_stale(&self) -> Result<usize, ProbeError> {
        let mut removed = 0;
        for (group, event) in self.our_events()? {
            let owner = group
                .strip_prefix(GROUP_PREFIX)
                .and_then(|rest| rest.split('_').next())
                .and_then(|pid| pid.parse::<i32>().ok());
            if owner.is_some_and(sys::process_exists) {
                continue;
            }
            // Best effort: a definition still in use by a counter cannot be removed.
            if self.write_line(&format!("-:{group}/{event}")).is_ok() {
                removed += 1;
            }
        }
        Ok(removed)
    }
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
            "{GROUP_PREFIX}{}_{}",
            std::process::id(),
            NEXT_GROUP.fetch_add(1, Ordering::Relaxed)
        );
        let mut set = ProbeSet {
            tracefs: tracefs.clone(),
            group,
            probes: Vec::with_capacity(targets.len()),
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
        first_err.map_or(Ok(()), Err)
    }
}

impl Drop for ProbeSet {
    fn drop(&mut self) {
        let _ = self.remove();
    }
}
