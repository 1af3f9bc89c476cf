//! Raw process primitives for the runner: fork, the start gate, exec, and what the child
//! does in between. Most of the collector's unsafe code is here; the rest is two small
//! blocks with their own `SAFETY` notes (taking ownership of descriptors received over
//! the region socket in `region_fds.rs`, and the `dup2` of `run_with_agent` in
//! `instruments/alloc.rs`).
//!
//! Everything the child does between `fork` and `execve` lives here and uses only
//! async-signal-safe system calls on memory prepared before the fork: the collector may
//! have other threads (progress bar, signal handling), so the child must not allocate or
//! take locks.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;

use nix::unistd::Pid;

/// A command with argv and envp laid out for `execve`, built before the fork.
pub struct PreparedExec {
    path: CString,
    // Owners of the strings the pointer arrays point into.
    _argv: Vec<CString>,
    _envp: Vec<CString>,
    argv_ptrs: Vec<*const libc::c_char>,
    envp_ptrs: Vec<*const libc::c_char>,
}

fn cstring(s: &OsStr) -> io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{:?} contains a NUL byte", s),
        )
    })
}

impl PreparedExec {
    /// Lay out `path`, `args` (argv[0] included) and `env` for `execve`.
    pub fn new(path: &OsStr, args: &[OsString], env: &[(OsString, OsString)]) -> io::Result<Self> {
        let path = cstring(path)?;
        let argv = args
            .iter()
            .map(|a| cstring(a))
            .collect::<io::Result<Vec<_>>>()?;
        let envp = env
            .iter()
            .map(|(k, v)| {
                let mut kv = k.clone();
                kv.push("=");
                kv.push(v);
                cstring(&kv)
            })
            .collect::<io::Result<Vec<_>>>()?;
        let mut argv_ptrs: Vec<_> = argv.iter().map(|c| c.as_ptr()).collect();
        argv_ptrs.push(std::ptr::null());
        let mut envp_ptrs: Vec<_> = envp.iter().map(|c| c.as_ptr()).collect();
        envp_ptrs.push(std::ptr::null());
        Ok(PreparedExec {
            path,
            _argv: argv,
            _envp: envp,
            argv_ptrs,
            envp_ptrs,
        })
    }
}

/// What the child does to itself before waiting at the gate.
pub struct ChildConfig {
    /// `personality(ADDR_NO_RANDOMIZE)`.
    pub disable_aslr: bool,
    /// CPUs to pin the child to (empty: no pinning).
    pub cpus: Option<nix::sched::CpuSet>,
    /// Descriptor for stdin (normally /dev/null).
    pub stdin: RawFd,
    /// Descriptor for stdout and stderr, or `None` to inherit ours.
    pub output: Option<RawFd>,
    /// `(fd, number in the child)` pairs to install.
    pub pass_fds: Vec<(RawFd, RawFd)>,
}

/// Set or clear `ADDR_NO_RANDOMIZE` in our own personality: it takes effect for the
/// programs our children exec, not for us.
pub fn set_aslr_disabled_for_children(disabled: bool) -> io::Result<()> {
    // SAFETY: personality(0xffffffff) only queries the current persona.
    let current = unsafe { libc::personality(0xffff_ffff) };
    if current == -1 {
        return Err(io::Error::last_os_error());
    }
    let flag = libc::ADDR_NO_RANDOMIZE;
    let wanted = if disabled {
        current | flag
    } else {
        current & !flag
    };
    if wanted != current {
        // SAFETY: sets a persona flag of this process; no memory is involved.
        if unsafe { libc::personality(wanted as libc::c_ulong) } == -1 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// A pipe whose both ends close on exec.
pub fn pipe_cloexec() -> io::Result<(OwnedFd, OwnedFd)> {
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    Ok((r, w))
}

/// Fork a child that sets itself up, blocks until a byte arrives on `gate` if there is
/// one (EOF means "abort": it exits with 126), then execs `exec`. If `execve` fails, the child writes its
/// errno (4 bytes, native endian) to `exec_error` and exits with 127; `exec_error` is
/// close-on-exec, so the parent reads EOF exactly when the exec succeeded.
pub fn fork_gated(
    exec: &PreparedExec,
    config: &ChildConfig,
    gate: Option<&OwnedFd>,
    exec_error: &OwnedFd,
) -> io::Result<Pid> {
    // SAFETY: after fork the child runs only `child_after_fork`, which makes raw,
    // async-signal-safe system calls on memory prepared before the fork and never returns.
    let pid = unsafe { libc::fork() };
    match pid {
        -1 => Err(io::Error::last_os_error()),
        // SAFETY: we are the freshly forked child; see `child_after_fork`'s contract.
        0 => unsafe {
            child_after_fork(
                exec,
                config,
                gate.map(|g| g.as_raw_fd()),
                exec_error.as_raw_fd(),
            )
        },
        pid => Ok(Pid::from_raw(pid)),
    }
}

/// The child side of [`fork_gated`].
///
/// # Safety
/// Must be called only in a child process just returned from `fork`. It must not allocate:
/// it uses only raw system calls on data prepared by the parent.
unsafe fn child_after_fork(
    exec: &PreparedExec,
    config: &ChildConfig,
    gate: Option<RawFd>,
    exec_error: RawFd,
) -> ! {
    // SAFETY: plain system calls on valid descriptors and on pointers into `exec` and
    // `config`, which stay alive because the child never returns.
    unsafe {
        // Own process group, so a timeout or Ctrl-C can kill the whole tree.
        libc::setpgid(0, 0);
        // Rust ignores SIGPIPE in the collector; the benchmark gets the default back.
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        // Die with the collector instead of running unattended.
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        );
        if config.disable_aslr {
            let current = libc::personality(0xffff_ffff);
            if current != -1 {
                libc::personality(
                    (current as libc::c_ulong) | libc::ADDR_NO_RANDOMIZE as libc::c_ulong,
                );
            }
        }
        if let Some(cpus) = &config.cpus {
            if nix::sched::sched_setaffinity(Pid::from_raw(0), cpus).is_err() {
                fail(exec_error, errno());
            }
        }
        if libc::dup2(config.stdin, 0) == -1 {
            fail(exec_error, errno());
        }
        if let Some(out) = config.output {
            if libc::dup2(out, 1) == -1 || libc::dup2(out, 2) == -1 {
                fail(exec_error, errno());
            }
        }
        for &(fd, target) in &config.pass_fds {
            let ok = if fd == target {
                // Same number: just let it survive exec.
                let flags = libc::fcntl(fd, libc::F_GETFD);
                flags != -1 && libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) != -1
            } else {
                // dup2 clears FD_CLOEXEC on the new descriptor.
                libc::dup2(fd, target) != -1
            };
            if !ok {
                fail(exec_error, errno());
            }
        }
        if let Some(gate) = gate {
            let mut byte = 0u8;
            loop {
                let n = libc::read(gate, (&mut byte as *mut u8).cast(), 1);
                if n == 1 {
                    break;
                }
                if n == 0 || errno() != libc::EINTR {
                    // The parent gave up on this run.
                    libc::_exit(126);
                }
            }
            libc::close(gate);
        }
        libc::execve(
            exec.path.as_ptr(),
            exec.argv_ptrs.as_ptr(),
            exec.envp_ptrs.as_ptr(),
        );
        fail(exec_error, errno())
    }
}

fn errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Report `code` to the parent and exit. Child side only.
///
/// # Safety
/// Only for the forked child: it ends the process with `_exit`.
unsafe fn fail(exec_error: RawFd, code: i32) -> ! {
    let bytes = code.to_ne_bytes();
    // SAFETY: writing 4 bytes from a live stack buffer, then exiting without running any
    // of the parent's atexit handlers.
    unsafe {
        libc::write(exec_error, bytes.as_ptr().cast(), bytes.len());
        libc::_exit(127)
    }
}

/// A descriptor that becomes readable when the process exits (`pidfd_open`, Linux 5.3).
pub fn pidfd_open(pid: Pid) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid.as_raw(), 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor to us; nobody else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Resource usage and status of a reaped child.
pub struct Reaped {
    /// Raw wait status.
    pub status: i32,
    /// The child's rusage (it and its reaped descendants).
    pub rusage: libc::rusage,
}

/// `wait4(pid, 0)`, retrying on EINTR.
pub fn wait4(pid: Pid) -> io::Result<Reaped> {
    let mut status = 0;
    // SAFETY: rusage is a plain C struct for which all-zero bytes is a valid value.
    let mut rusage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: valid pointers to live locals; wait4 writes into them.
        let r = unsafe { libc::wait4(pid.as_raw(), &mut status, 0, &mut rusage) };
        if r == pid.as_raw() {
            return Ok(Reaped { status, rusage });
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}
