//! The few raw system calls this crate needs, each checked through one errno helper.

use std::ffi::CString;
use std::io;
use std::path::Path;

/// Turn a `-1` return value into the thread's errno.
fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Whether `path` carries the extended attribute `name` (`getxattr` with no buffer).
pub fn has_xattr(path: &Path, name: &std::ffi::CStr) -> io::Result<bool> {
    use std::os::unix::ffi::OsStrExt;
    let path = CString::new(path.as_os_str().as_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // SAFETY: two NUL-terminated strings that outlive the call; a null buffer of size 0
    // asks only for the attribute's size.
    let ret = unsafe { libc::getxattr(path.as_ptr(), name.as_ptr(), std::ptr::null_mut(), 0) };
    if ret >= 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::ENODATA) | Some(libc::ENOTSUP) => Ok(false),
        _ => Err(e),
    }
}

/// `mount -t tracefs nodev <target>`.
pub fn mount_tracefs(target: &Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let target = CString::new(target.as_os_str().as_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let source = c"nodev";
    let fstype = c"tracefs";
    // SAFETY: all three pointers are NUL-terminated strings that outlive the call;
    // a null `data` is allowed for tracefs.
    let ret = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    check(ret).map(|_| ())
}

/// Whether a process with this pid exists in this process's pid namespace (`kill(pid, 0)`;
/// EPERM means it exists). A pid from another namespace means nothing here: a live
/// process there can be absent (ESRCH) or another process here.
pub fn process_exists(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 performs only the existence and permission checks.
    let ret = unsafe { libc::kill(pid, 0) };
    match check(ret) {
        Ok(_) => true,
        Err(e) => e.raw_os_error() == Some(libc::EPERM),
    }
}

/// Take an exclusive `flock` on `file` without waiting: `Ok(false)` when another open
/// file description holds a lock on it (its owner is alive).
pub fn try_lock_exclusive(file: &std::fs::File) -> io::Result<bool> {
    use std::os::fd::AsRawFd;
    // SAFETY: the descriptor is open for as long as `file` is borrowed; flock only acts on
    // the open file description, never on memory.
    let ret = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    match check(ret) {
        Ok(_) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::EWOULDBLOCK) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The inode of this process's pid namespace (`/proc/self/ns/pid` reads `pid:[N]`), which
/// tells namespaces apart for as long as they live; 0 when unknown.
pub fn pid_namespace() -> u64 {
    std::fs::read_link("/proc/self/ns/pid")
        .ok()
        .and_then(|l| {
            let l = l.to_string_lossy().into_owned();
            l.strip_prefix("pid:[")?.strip_suffix(']')?.parse().ok()
        })
        .unwrap_or(0)
}

/// A read-only, executable, private mapping of a whole file, unmapped on drop.
#[derive(Debug)]
pub struct FileMapping {
    addr: *mut libc::c_void,
    len: usize,
}

impl FileMapping {
    /// Map `path` the way the dynamic loader maps code (`PROT_READ | PROT_EXEC`,
    /// `MAP_PRIVATE`). Nothing in it ever runs; it only makes the file's code part of this
    /// process's address space.
    pub fn map_exec(path: &Path) -> io::Result<FileMapping> {
        use std::os::fd::AsRawFd;
        let file = std::fs::File::open(path)?;
        let len = usize::try_from(file.metadata()?.len())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty file"));
        }
        // SAFETY: a new mapping chosen by the kernel (null hint), of an open descriptor, at
        // offset 0; it aliases no Rust object and is only ever unmapped by Drop.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_EXEC,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(FileMapping { addr, len })
    }
}

impl Drop for FileMapping {
    fn drop(&mut self) {
        // SAFETY: `addr` and `len` are exactly what mmap returned and was given; nothing
        // borrows the mapping (it is never read through a Rust reference).
        unsafe { libc::munmap(self.addr, self.len) };
    }
}

/// Whether this process runs as root (effective uid 0).
pub fn is_root() -> bool {
    effective_ids().0 == 0
}

/// This process's effective user and group ids.
pub fn effective_ids() -> (u32, u32) {
    // SAFETY: geteuid and getegid have no preconditions and cannot fail.
    unsafe { (libc::geteuid(), libc::getegid()) }
}

/// Raise the soft limit of open files to at least `wanted` (bounded by the hard limit).
/// Returns the soft limit in effect afterwards.
pub fn raise_nofile_limit(wanted: u64) -> io::Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid, writable rlimit struct.
    check(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) })?;
    if lim.rlim_cur >= wanted {
        return Ok(lim.rlim_cur);
    }
    lim.rlim_cur = wanted.min(lim.rlim_max);
    // SAFETY: `lim` is a valid rlimit struct with cur <= max.
    check(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) })?;
    Ok(lim.rlim_cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_exists() {
        assert!(process_exists(std::process::id() as i32));
        assert!(!process_exists(0));
        assert!(!process_exists(-5));
    }

    #[test]
    fn a_second_lock_on_a_locked_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        let a = std::fs::File::create(&path).unwrap();
        let b = std::fs::File::open(&path).unwrap();
        assert!(try_lock_exclusive(&a).unwrap());
        assert!(
            !try_lock_exclusive(&b).unwrap(),
            "held by another description"
        );
        drop(a);
        assert!(
            try_lock_exclusive(&b).unwrap(),
            "free once its holder closed it"
        );
    }

    #[test]
    fn pid_namespace_is_known() {
        assert_ne!(pid_namespace(), 0);
    }

    #[test]
    fn nofile_limit_is_at_least_current() {
        let now = raise_nofile_limit(64).unwrap();
        assert!(now >= 64);
    }
}
