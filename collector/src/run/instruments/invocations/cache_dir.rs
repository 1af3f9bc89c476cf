//! The site cache's own directory, `BASE/sbs-profile/sites`, reached so that nobody else
//! can steer what sbs-profile writes or removes: `BASE` (`$XDG_CACHE_HOME`, else
//! `~/.cache`) must be the user's and not writable by other users; `sbs-profile` and
//! `sites` are opened one at a time relative to the directory before, never through a
//! symbolic link (sbs-profile makes none), and must be the user's (made 0700, and made
//! 0700 again when looser). Everything after goes through the open directory: a
//! component renamed or replaced meanwhile changes nothing. Files are read without
//! following a link, written as a new file (`O_EXCL`, mode 0600) renamed into place, and
//! removed by name only inside it.

use std::ffi::CStr;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat};
use rustix::io::Errno;

/// Why the cache's directory is not used.
#[derive(Debug)]
pub(super) enum NotUsed {
    /// Not there (and not to be made).
    Absent,
    /// A directory on the way that is not safe to use: said once, as a note.
    Unsafe(String),
    /// Any other error (a read-only file system, no permission): the cache only saves
    /// time, so it is not said.
    Io,
}

impl From<io::Error> for NotUsed {
    fn from(_: io::Error) -> NotUsed {
        NotUsed::Io
    }
}

impl From<Errno> for NotUsed {
    fn from(_: Errno) -> NotUsed {
        NotUsed::Io
    }
}

/// The cache's base directory: `$XDG_CACHE_HOME` when it is an absolute path (the XDG
/// rule), else `$HOME/.cache`.
pub(super) fn base() -> Option<PathBuf> {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|d| d.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
}

fn euid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// Whether group `gid` is the user's own private group (named after the user, no other
/// members): a directory it may write is still the user's alone (a umask of 002 gives
/// `~/.cache` such a mode on systems with such groups).
fn private_group(gid: u32) -> bool {
    use nix::unistd::{Gid, Group, Uid, User};
    let (Ok(Some(user)), Ok(Some(group))) = (
        User::from_uid(Uid::from_raw(euid())),
        Group::from_gid(Gid::from_raw(gid)),
    ) else {
        return false;
    };
    user.gid.as_raw() == gid && group.name == user.name && group.mem.iter().all(|m| *m == user.name)
}

/// What is wrong with a directory at `path` sbs-profile does not make, if anything: it
/// must be the user's and writable by the user alone.
fn not_private(path: &Path, stat: &Stat) -> Option<String> {
    let mode = stat.st_mode & 0o7777;
    if stat.st_uid != euid() {
        return Some(format!(
            "{} belongs to uid {}, not to this user (uid {}): set XDG_CACHE_HOME to a \
             directory of your own",
            path.display(),
            stat.st_uid,
            euid()
        ));
    }
    if mode & 0o002 != 0 || (mode & 0o020 != 0 && !private_group(stat.st_gid)) {
        return Some(format!(
            "{} may be written by other users: make it private (chmod go-w {}) or set \
             XDG_CACHE_HOME to a private directory",
            path.display(),
            path.display()
        ));
    }
    None
}

fn is_dir(stat: &Stat) -> bool {
    FileType::from_raw_mode(stat.st_mode) == FileType::Directory
}

/// The open `sites` directory of the cache.
#[derive(Debug)]
pub(super) struct CacheDir {
    fd: OwnedFd,
    path: PathBuf,
}

impl CacheDir {
    /// Open `base/sbs-profile/sites` as the module says; with `create`, make what is
    /// missing (`base` with its parents, then the two directories, mode 0700).
    pub fn open(base: &Path, create: bool) -> Result<CacheDir, NotUsed> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        // The base is the user's choice: a link to it is followed.
        let base_fd = match rustix::fs::open(base, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) if create => {
                use std::os::unix::fs::DirBuilderExt;
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(base)?;
                rustix::fs::open(base, flags, Mode::empty())?
            }
            Err(Errno::NOENT) => return Err(NotUsed::Absent),
            Err(e) => return Err(e.into()),
        };
        if let Some(why) = not_private(base, &rustix::fs::fstat(&base_fd)?) {
            return Err(NotUsed::Unsafe(why));
        }
        let mut dir = CacheDir {
            fd: base_fd,
            path: base.to_path_buf(),
        };
        for name in ["sbs-profile", "sites"] {
            dir = dir.own_subdirectory(name, create)?;
        }
        Ok(dir)
    }

    /// The directory `name` in this one, never through a link, the user's and 0700.
    fn own_subdirectory(&self, name: &str, create: bool) -> Result<CacheDir, NotUsed> {
        let path = self.path.join(name);
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let mut made = false;
        let fd = loop {
            match rustix::fs::openat(&self.fd, name, flags, Mode::empty()) {
                Ok(fd) => break fd,
                Err(Errno::NOENT) if create && !made => {
                    match rustix::fs::mkdirat(&self.fd, name, Mode::from_raw_mode(0o700)) {
                        Ok(()) | Err(Errno::EXIST) => made = true,
                        Err(e) => return Err(e.into()),
                    }
                }
                Err(Errno::NOENT) => return Err(NotUsed::Absent),
                Err(Errno::LOOP | Errno::NOTDIR) => {
                    let what = match rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
                        Ok(s) if FileType::from_raw_mode(s.st_mode) == FileType::Symlink => {
                            "is a symbolic link, which sbs-profile never makes: remove it \
                             (sbs-profile makes its own directory)"
                        }
                        _ => "is not a directory: move it away",
                    };
                    return Err(NotUsed::Unsafe(format!("{} {what}", path.display())));
                }
                Err(e) => return Err(e.into()),
            }
        };
        let stat = rustix::fs::fstat(&fd)?;
        if !is_dir(&stat) || stat.st_uid != euid() {
            // Another user's directory, made there before sbs-profile: not written to.
            return Err(NotUsed::Unsafe(not_private(&path, &stat).unwrap_or_else(
                || format!("{} is not a directory: move it away", path.display()),
            )));
        }
        if stat.st_mode & 0o077 != 0 {
            rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o700))?;
        }
        Ok(CacheDir { fd, path })
    }

    /// Open file `name` to read it, if it is a regular file of the user's that nobody
    /// else may write, with no other name (a file written here is renamed into place:
    /// a hard link is somebody else's doing).
    pub fn open_own_file(&self, name: &str) -> Option<File> {
        let own = |stat: &Stat| {
            FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile
                && stat.st_uid == euid()
                && stat.st_mode & 0o022 == 0
                && stat.st_nlink == 1
        };
        // Nothing but a regular file is opened (a device could act on an open).
        let before = rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW).ok()?;
        if !own(&before) {
            return None;
        }
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.fd, name, flags, Mode::empty()).ok()?;
        own(&rustix::fs::fstat(&fd).ok()?).then(|| File::from(fd))
    }

    /// Write `name` with `content` atomically: a new file (`O_EXCL`, never through a
    /// link, mode 0600) named as [`is_temporary`] says, renamed into place.
    pub fn write(&self, name: &str, content: &[u8]) -> io::Result<()> {
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let (tmp, fd) = (0u32..)
            .take(16)
            .find_map(|attempt| {
                let tmp = temporary_name(attempt);
                match rustix::fs::openat(&self.fd, &tmp, flags, Mode::from_raw_mode(0o600)) {
                    Err(Errno::EXIST) => None,
                    other => Some(other.map(|fd| (tmp, fd))),
                }
            })
            .unwrap_or(Err(Errno::EXIST))?;
        let written = File::from(fd)
            .write_all(content)
            .and_then(|()| Ok(rustix::fs::renameat(&self.fd, &tmp, &self.fd, name)?));
        if written.is_err() {
            let _ = rustix::fs::unlinkat(&self.fd, &tmp, AtFlags::empty());
        }
        written
    }

    /// The files of the directory that sbs-profile wrote: a name `wrote_name` accepts, a
    /// regular file of the user's whose content starts as `wrote_content` says, with its
    /// modification time.
    pub fn own_files(
        &self,
        wrote_name: impl Fn(&str) -> bool,
        wrote_content: impl Fn(&[u8]) -> bool,
    ) -> Vec<(SystemTime, String)> {
        let Ok(listing) = rustix::fs::Dir::read_from(&self.fd) else {
            return Vec::new();
        };
        let mut found = Vec::new();
        for entry in listing.flatten() {
            let Some(name) = utf8(entry.file_name()).filter(|n| wrote_name(n)) else {
                continue;
            };
            let Some(mut file) = self.open_own_file(name) else {
                continue;
            };
            let mut head = Vec::new();
            let read = (&mut file).take(HEAD).read_to_end(&mut head);
            let modified = file.metadata().and_then(|m| m.modified());
            if let (Ok(_), Ok(modified)) = (read, modified) {
                if wrote_content(&head) {
                    found.push((modified, name.to_string()));
                }
            }
        }
        found
    }

    /// Remove file `name` of the directory (by name, inside it only).
    pub fn remove(&self, name: &str) {
        let _ = rustix::fs::unlinkat(&self.fd, name, AtFlags::empty());
    }
}

/// How many bytes of a file [`CacheDir::own_files`] gives to judge its content.
pub(super) const HEAD: u64 = 128;

fn utf8(name: &CStr) -> Option<&str> {
    name.to_str().ok()
}

/// A temporary's name: `.tmp-` and 16 hex digits (pid, time, attempt), `.json`.
fn temporary_name(attempt: u32) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    (std::process::id(), SystemTime::now(), attempt).hash(&mut h);
    format!(".tmp-{:016x}.json", h.finish())
}

/// Whether `name` is one [`temporary_name`] makes.
pub(super) fn is_temporary(name: &str) -> bool {
    name.strip_prefix(".tmp-")
        .and_then(|n| n.strip_suffix(".json"))
        .is_some_and(|hex| hex.len() == 16 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// A temporary older than this was left by a writer that was killed.
pub(super) const STALE_TEMPORARY: Duration = Duration::from_secs(3600);
