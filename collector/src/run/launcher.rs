//! The launcher: the small static program (`agent/launcher`) every measured child starts
//! through, embedded in `sbs-profile`. The runner execs it with the benchmark's command
//! and environment; it forks the benchmark's process, which waits at the start gate when
//! an instrument attaches to it, and reports its pid, a failed exec, and its exit status,
//! rusage and wall time on a pipe (`sbs_agent_abi::launcher`).
//!
//! Why: a process's `ru_maxrss` covers the address space it had before its `execve`, and
//! a child forked or vforked from the collector has the collector's. The benchmark's
//! process is a copy of the launcher instead, whose address space is a few pages, so
//! `rss.peak` is the benchmark's own whatever the collector holds (checked against
//! `/usr/bin/time -v` in `tests/tests/runner.rs`).

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::OnceLock;

pub use sbs_agent_abi::launcher::{
    Message, GATE_FD, MESSAGE_BYTES, MODE_AT_ONCE, MODE_GATED, REPORT_FD,
};

/// The launcher program.
static PROGRAM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/sbs_launcher_bin"));

/// The launcher written once per collector: a read-only descriptor of it and the path
/// a child execs it by.
struct Installed {
    _file: File,
    path: OsString,
}

static INSTALLED: OnceLock<Result<Installed, String>> = OnceLock::new();

/// The path to exec the launcher by, valid while the collector lives.
pub fn path() -> io::Result<OsString> {
    match INSTALLED.get_or_init(|| install().map_err(|e| e.to_string())) {
        Ok(i) => Ok(i.path.clone()),
        Err(e) => Err(io::Error::other(format!(
            "cannot install the launcher program that starts each run: {e}"
        ))),
    }
}

/// Write the program into a memfd and keep a read-only descriptor of it: a file open for
/// writing cannot be exec'd (ETXTBSY). `/proc/<our pid>/fd/N` names it for the child,
/// whatever descriptor numbers the child itself rearranges.
fn install() -> io::Result<Installed> {
    let mut writable = memfd()?;
    writable.write_all(PROGRAM)?;
    let own = format!("/proc/self/fd/{}", writable.as_raw_fd());
    let file = File::open(own)?;
    drop(writable);
    let path = format!("/proc/{}/fd/{}", std::process::id(), file.as_raw_fd()).into();
    Ok(Installed { _file: file, path })
}

/// A close-on-exec memfd that may be exec'd: `MFD_EXEC` where the kernel knows the flag
/// (6.3+, where `vm.memfd_noexec` may otherwise forbid it), none on older kernels.
fn memfd() -> io::Result<File> {
    // `MFD_EXEC` (linux/memfd.h); the libc crate does not define it yet.
    const MFD_EXEC: libc::c_uint = 0x0010;
    let name = c"sbs-launcher";
    let mut flags = libc::MFD_CLOEXEC | MFD_EXEC;
    loop {
        // SAFETY: memfd_create with a NUL-terminated name and flags; it returns a new
        // descriptor or -1.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), flags) };
        if fd >= 0 {
            // SAFETY: the kernel just returned this descriptor; nobody else owns it.
            return Ok(unsafe { File::from_raw_fd(fd) });
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EINVAL) && flags & MFD_EXEC != 0 {
            flags &= !MFD_EXEC;
            continue;
        }
        return Err(e);
    }
}

/// Read the next message from the launcher's pipe; `None` at end of file (the launcher
/// and the benchmark's process are gone, or the benchmark exec'd and the launcher died).
pub fn read_message(pipe: &mut File) -> io::Result<Option<Message>> {
    let mut bytes = [0u8; MESSAGE_BYTES];
    let mut got = 0;
    while got < MESSAGE_BYTES {
        match pipe.read(&mut bytes[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    match (got == MESSAGE_BYTES)
        .then(|| Message::decode(&bytes))
        .flatten()
    {
        Some(m) => Ok(Some(m)),
        None => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "the launcher sent a malformed message",
        )),
    }
}
