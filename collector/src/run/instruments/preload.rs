//! The preload libraries we embed (the allocation agent, the in-process counting library)
//! as the child loads them: for each run a copy stamped with where the run's shared file
//! is (`sbs_agent_abi::stamp`), named in the child's `LD_PRELOAD`.
//!
//! Where the copy is: a file that every user can open and only we can change, in a
//! directory of its own (`/dev/shm/sbs-profile.XXXXXX/agent.so`, made with `mkdtemp`, mode
//! 0755, the file 0444), removed again when the run has been read, on an error, and on
//! Ctrl-C, SIGTERM, SIGHUP and SIGQUIT (the runner stops then and drops the instruments).
//! Why a file: the loader prints `ERROR: ld.so: object ... cannot be preloaded` into the
//! stderr of any process that cannot open a path of `LD_PRELOAD`, and the other place,
//! the collector's descriptor `/proc/<collector pid>/fd/<n>`, may only be opened by a
//! process allowed to inspect the collector (the same user, or root): a descendant that
//! switched to another user (`setpriv --reuid`, `runuser`, Python's `subprocess` with
//! `user=`) printed that error. The file loads in every process; one of another user
//! then cannot open the run's shared file (the collector's descriptor, as before), counts
//! nothing, says nothing, and the run's exec check reports its image as not measured. A
//! setuid descendant never loads it: the loader's secure mode silently skips a preload
//! path with a slash.
//!
//! A directory qualifies when every user can reach it (every component searchable by
//! others), nobody else can remove or replace what we put there (each component owned by
//! root or by us, and not writable by others unless sticky), it is not mounted `noexec`
//! (the loader maps the library executable), and its path has no space or colon (which
//! separate `LD_PRELOAD`'s entries). `/dev/shm` first (memory, nothing goes to a disk),
//! then the temporary directory (`TMPDIR`, else `/tmp`). Where none qualifies, or the
//! file cannot be written, the copy goes into a sealed memfd named
//! `/proc/<collector pid>/fd/<n>`, as before: then a descendant of another user gets the
//! loader's message.
//!
//! Nothing else is passed to the child: no descriptor (a program that closes its
//! descriptors before an exec, as Python's `subprocess` does by default, would otherwise
//! leave its child unable to load the library), no other variable (every variable changes
//! what a program that copies its environment allocates and calls). The library opens the
//! run's shared file through the collector's descriptor, maps it and closes the descriptor
//! again.

use std::ffi::{CStr, OsStr, OsString};
use std::fs::{File, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{fcntl, FcntlArg, SealFlag};
use nix::sys::memfd::{memfd_create, MemFdCreateFlag};
use nix::sys::statvfs::{statvfs, FsFlags};
use sbs_agent_abi::stamp::{self, StampValues};

/// One run's copy of a preload library; the file and its directory are removed on drop.
#[derive(Debug)]
pub struct StampedLibrary {
    place: Place,
}

/// Where a run's copy is.
#[derive(Debug)]
enum Place {
    /// `dir/file`, readable by every user.
    Shared { dir: PathBuf, file: PathBuf },
    /// A sealed memfd, named through the collector's descriptor.
    Memfd(File),
}

impl StampedLibrary {
    /// Copy `library`, stamped with our pid, the descriptor of the run's `shared` file and
    /// the run's `token`, into a file every user can read (see the module's comment), or
    /// into a sealed memfd called `name` where no directory qualifies.
    pub fn new(name: &CStr, library: &[u8], shared: &File, token: u64) -> io::Result<Self> {
        let bytes = stamped(library, shared, token)?;
        let file_name = format!("{}.so", name.to_string_lossy().trim_start_matches("sbs-"));
        for dir in candidate_dirs() {
            if let Ok(place) = write_shared(&dir, &file_name, &bytes) {
                return Ok(StampedLibrary { place });
            }
        }
        Ok(StampedLibrary {
            place: Place::Memfd(write_memfd(name, &bytes)?),
        })
    }

    /// The path the child loads the copy by.
    fn path(&self) -> OsString {
        match &self.place {
            Place::Shared { file, .. } => file.clone().into_os_string(),
            Place::Memfd(file) => {
                format!("/proc/{}/fd/{}", std::process::id(), file.as_raw_fd()).into()
            }
        }
    }

    /// The child's `LD_PRELOAD`: this library, then the child's own `existing` one.
    pub fn ld_preload(&self, existing: Option<&OsStr>) -> OsString {
        let mut value = self.path();
        if let Some(existing) = existing.filter(|e| !e.is_empty()) {
            value.push(" ");
            value.push(existing);
        }
        value
    }
}

impl Drop for StampedLibrary {
    fn drop(&mut self) {
        if let Place::Shared { dir, file } = &self.place {
            // Nothing to do about a failure here: the directory is then left behind.
            let _ = std::fs::remove_file(file);
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// A copy of `library` stamped with the run's values.
fn stamped(library: &[u8], shared: &File, token: u64) -> io::Result<Vec<u8>> {
    let mut bytes = library.to_vec();
    let values = StampValues {
        pid: u64::from(std::process::id()),
        fd: shared.as_raw_fd() as u64,
        token,
    };
    if !stamp::write(&mut bytes, values) {
        return Err(io::Error::other(
            "internal error: the embedded library has no single stamp to fill in",
        ));
    }
    Ok(bytes)
}

/// The directories to try, in order (see the module's comment).
fn candidate_dirs() -> Vec<PathBuf> {
    let mut dirs = vec![PathBuf::from("/dev/shm")];
    let tmp = std::env::temp_dir();
    if !dirs.contains(&tmp) {
        dirs.push(tmp);
    }
    dirs
}

/// Why `dir` cannot hold a copy every user loads, if it cannot.
fn unsuitable(dir: &Path) -> Option<String> {
    let dir = match dir.canonicalize() {
        Ok(d) => d,
        Err(e) => return Some(format!("{}: {e}", dir.display())),
    };
    let bytes = dir.as_os_str().as_bytes();
    if bytes
        .iter()
        .any(|b| matches!(b, b' ' | b':' | b'\t' | b'\n'))
    {
        return Some(format!("{}: a space or colon in the path", dir.display()));
    }
    let me = nix::unistd::geteuid().as_raw();
    for component in dir.ancestors() {
        let m = match component.metadata() {
            Ok(m) => m,
            Err(e) => return Some(format!("{}: {e}", component.display())),
        };
        let mode = m.mode();
        if mode & 0o001 == 0 {
            return Some(format!("{}: not searchable by others", component.display()));
        }
        if m.uid() != 0 && m.uid() != me {
            return Some(format!("{}: owned by another user", component.display()));
        }
        if mode & 0o022 != 0 && mode & 0o1000 == 0 {
            return Some(format!(
                "{}: writable by others and not sticky",
                component.display()
            ));
        }
    }
    match statvfs(&dir) {
        Ok(fs) if fs.flags().contains(FsFlags::ST_NOEXEC) => {
            Some(format!("{}: mounted noexec", dir.display()))
        }
        Ok(_) => None,
        Err(e) => Some(format!("{}: {e}", dir.display())),
    }
}

/// Write `bytes` as `name` into a fresh directory under `parent`, readable by every user.
fn write_shared(parent: &Path, name: &str, bytes: &[u8]) -> io::Result<Place> {
    if let Some(why) = unsuitable(parent) {
        return Err(io::Error::other(why));
    }
    let parent = parent.canonicalize()?;
    // mkdtemp: a new directory (never one planted before), mode 0700 until it is ready.
    let dir = nix::unistd::mkdtemp(&parent.join(format!("{}XXXXXX", stamp::SHARED_DIR_PREFIX)))?;
    let file = dir.join(name);
    let place = Place::Shared {
        dir: dir.clone(),
        file: file.clone(),
    };
    match fill(&dir, &file, bytes) {
        Ok(()) => Ok(place),
        Err(e) => {
            // Dropped, it removes what was made.
            drop(StampedLibrary { place });
            Err(e)
        }
    }
}

/// Write `bytes` into the new `file`, mode 0444, and open `dir` to every user.
fn fill(dir: &Path, file: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut out = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o444)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(file)?;
    out.write_all(bytes)?;
    // Whatever the umask: every user reads it, nobody writes it.
    out.set_permissions(Permissions::from_mode(0o444))?;
    drop(out);
    std::fs::set_permissions(dir, Permissions::from_mode(0o755))
}

/// Write `bytes` into a sealed memfd called `name`.
fn write_memfd(name: &CStr, bytes: &[u8]) -> io::Result<File> {
    let mut file: File = memfd_create(
        name,
        MemFdCreateFlag::MFD_CLOEXEC | MemFdCreateFlag::MFD_ALLOW_SEALING,
    )?
    .into();
    file.write_all(bytes)?;
    let seals = SealFlag::F_SEAL_WRITE
        | SealFlag::F_SEAL_SHRINK
        | SealFlag::F_SEAL_GROW
        | SealFlag::F_SEAL_SEAL;
    fcntl(file.as_raw_fd(), FcntlArg::F_ADD_SEALS(seals))?;
    Ok(file)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// `library` carries one stamp, and a run's copy holds the run's values.
    pub(crate) fn check_stamping(library: &[u8]) {
        let shared = File::from(memfd_create(c"shared", MemFdCreateFlag::MFD_CLOEXEC).unwrap());
        assert!(stamp::values_at(library).is_some(), "one stamp");
        assert_eq!(stamp::read(library), None, "not stamped as built");
        let copy = StampedLibrary::new(c"test", library, &shared, 0xabc).unwrap();
        let path = copy.ld_preload(None);
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len(), library.len());
        let values = stamp::read(&bytes).expect("stamped");
        assert_eq!(values.pid, u64::from(std::process::id()));
        assert_eq!(values.fd, shared.as_raw_fd() as u64);
        assert_eq!(values.token, 0xabc);
        let with = copy.ld_preload(Some(OsStr::new("/lib/x.so")));
        assert_eq!(
            with,
            OsString::from(format!("{} /lib/x.so", path.to_string_lossy()))
        );
    }

    /// The copy is a file every user can read and nobody else can change, in a directory
    /// of its own that is gone once the run's copy is dropped; a memfd only where no
    /// directory qualifies.
    #[test]
    fn a_run_s_copy_is_readable_by_all_and_removed_after() {
        let shared = File::from(memfd_create(c"shared", MemFdCreateFlag::MFD_CLOEXEC).unwrap());
        let library = crate::run::instruments::alloc::AGENT_LIBRARY;
        let copy = StampedLibrary::new(c"sbs-alloc-agent", library, &shared, 7).unwrap();
        let path = PathBuf::from(copy.ld_preload(None));
        if candidate_dirs().iter().all(|d| unsuitable(d).is_some()) {
            assert!(path.starts_with("/proc"), "{}", path.display());
            return;
        }
        let dir = path.parent().unwrap().to_path_buf();
        assert_eq!(path.file_name().unwrap(), "alloc-agent.so");
        assert!(dir
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with(stamp::SHARED_DIR_PREFIX));
        let file = std::fs::symlink_metadata(&path).unwrap();
        assert!(file.is_file());
        assert_eq!(file.mode() & 0o7777, 0o444);
        assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o7777, 0o755);
        assert_eq!(file.uid(), nix::unistd::geteuid().as_raw());
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        drop(copy);
        assert!(!dir.exists(), "{} left behind", dir.display());
    }

    /// Directories another user cannot reach, or could change under us, do not qualify.
    #[test]
    fn private_or_open_directories_do_not_qualify() {
        let top = tempfile::tempdir().unwrap();
        let private = top.path().join("private");
        std::fs::create_dir(&private).unwrap();
        std::fs::set_permissions(&private, Permissions::from_mode(0o700)).unwrap();
        let open = top.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, Permissions::from_mode(0o777)).unwrap();
        let spaced = top.path().join("a b");
        std::fs::create_dir(&spaced).unwrap();
        std::fs::set_permissions(top.path(), Permissions::from_mode(0o755)).unwrap();
        let why = |p: &Path| unsuitable(p).unwrap_or_default();
        if unsuitable(top.path()).is_none() {
            assert!(
                why(&private).contains("not searchable by others"),
                "{}",
                why(&private)
            );
            assert!(why(&open).contains("writable by others"), "{}", why(&open));
            assert!(
                why(&spaced).contains("a space or colon"),
                "{}",
                why(&spaced)
            );
        } else {
            eprintln!("skipped in part: {}", why(top.path()));
        }
        assert!(why(Path::new("/nonexistent/dir")).contains("No such file"));
    }

    #[test]
    fn the_agent_library_carries_one_stamp_and_takes_a_run_s_values() {
        check_stamping(crate::run::instruments::alloc::AGENT_LIBRARY);
    }

    /// `library` was linked without the C start files: crtbegin's destructor would call
    /// `__cxa_finalize` at exit, one call more of a function the program may count.
    pub(crate) fn check_no_start_files(library: &[u8]) {
        use object::{Object, ObjectSymbol};
        let file = object::File::parse(library).unwrap();
        let imported: Vec<String> = file
            .dynamic_symbols()
            .filter(|s| s.is_undefined())
            .filter_map(|s| s.name().ok().map(str::to_string))
            .collect();
        for start_file in [
            "__cxa_finalize",
            "__gmon_start__",
            "_ITM_registerTMCloneTable",
        ] {
            assert!(
                !imported.iter().any(|i| i == start_file),
                "{start_file} in {imported:?}"
            );
        }
    }

    #[test]
    fn the_preload_libraries_have_no_start_files() {
        check_no_start_files(crate::run::instruments::alloc::AGENT_LIBRARY);
        check_no_start_files(crate::run::instruments::invocations::inproc_library());
    }
}
