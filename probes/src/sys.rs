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

/// Whether a process with this pid exists (`kill(pid, 0)`; EPERM means it exists).
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

/// Whether this process runs as root (effective uid 0).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
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
    fn nofile_limit_is_at_least_current() {
        let now = raise_nofile_limit(64).unwrap();
        assert!(now >= 64);
    }
}
