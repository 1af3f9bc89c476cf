//! Raw process primitives for the runner: a vfork-style start (of the launcher), exec,
//! and what the child does in between. Most of the collector's unsafe code is here; the
//! rest is two small blocks with their own `SAFETY` notes (taking ownership of
//! descriptors received over the region socket in `region_fds.rs`, and of the memfd the
//! launcher program is written to in `launcher.rs`).
//!
//! Everything the child does between its start and `execve` lives here and uses only
//! async-signal-safe system calls on memory prepared before the start: the collector may
//! have other threads (progress bar, signal handling), so the child must not allocate or
//! take locks. A child of [`spawn_vfork`] even shares the collector's memory until its
//! `execve`: it writes nothing but its own stack.

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

/// What the child does to itself before its exec.
pub struct ChildConfig {
    /// Descriptor for stdin.
    pub stdin: RawFd,
    /// Descriptor for stdout and stderr, or `None` to inherit ours.
    pub output: Option<RawFd>,
    /// `(fd, number in the child)` pairs to install.
    pub pass_fds: Vec<(RawFd, RawFd)>,
}

/// Clear `O_NONBLOCK` on `file`'s open file description (shared with every copy of it).
pub fn set_blocking(file: &impl AsRawFd) -> io::Result<()> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let fd = file.as_raw_fd();
    let flags = OFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GETFL)?);
    fcntl(fd, FcntlArg::F_SETFL(flags.difference(OFlag::O_NONBLOCK)))?;
    Ok(())
}

/// A pipe whose both ends close on exec.
pub fn pipe_cloexec() -> io::Result<(OwnedFd, OwnedFd)> {
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    Ok((r, w))
}

/// Start a child that sets itself up and execs `exec` at once, the way glibc's
/// `posix_spawn` does: `clone(CLONE_VM | CLONE_VFORK)` on a stack of its own, so no page
/// table is copied and the parent resumes once the child has exec'd or failed. Unlike
/// `posix_spawn`, the child can set itself up as [`ChildConfig`] says and tie its life to
/// ours (the parent-death signal). If `execve` fails, the child writes its errno (4 bytes,
/// native endian) to `exec_error` and exits with 127; `exec_error` is close-on-exec, so
/// the parent reads end of file exactly when the exec succeeded.
///
/// The runner starts only the launcher this way (`launcher.rs`): a child that shares our
/// memory until its exec records our resident set as its own peak.
pub fn spawn_vfork(
    exec: &PreparedExec,
    config: &ChildConfig,
    exec_error: &OwnedFd,
) -> io::Result<Pid> {
    let stack = ChildStack::new()?;
    let args = VforkArgs {
        exec,
        config,
        parent: nix::unistd::getpid().as_raw(),
        exec_error: exec_error.as_raw_fd(),
    };
    // No signal handler of ours may run in the child while it shares our memory: block
    // every signal around the clone; the child puts the defaults back before unblocking.
    // SAFETY: sigset_t is a plain C bitmask for which all-zero bytes is a valid value.
    let (mut all, mut old): (libc::sigset_t, libc::sigset_t) = unsafe { std::mem::zeroed() };
    // SAFETY: pointers to live locals; pthread_sigmask changes this thread's mask only.
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
    }
    // SAFETY: the child runs `vfork_child` on its own stack, which stays mapped until
    // clone returns; with CLONE_VFORK that is after the child exec'd or exited, so `args`
    // and what it points to outlive the child's use of them. The child writes only its own
    // stack, its own kernel state, and errno (this thread's, unused until we resume).
    let pid = unsafe {
        libc::clone(
            vfork_child,
            stack.top(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            (&args as *const VforkArgs).cast_mut().cast(),
        )
    };
    let error = io::Error::last_os_error();
    // SAFETY: restores the mask saved above, a live local.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    drop(stack);
    match pid {
        -1 => Err(error),
        pid => Ok(Pid::from_raw(pid)),
    }
}

/// What the child of [`spawn_vfork`] reads, in the parent's frame.
struct VforkArgs<'a> {
    exec: &'a PreparedExec,
    config: &'a ChildConfig,
    parent: libc::pid_t,
    exec_error: RawFd,
}

/// The child side of [`spawn_vfork`]: signal defaults back, signals unblocked, then the
/// same set-up and exec as a forked child. Never returns.
extern "C" fn vfork_child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` points to the `VforkArgs` of `spawn_vfork`, alive while the parent
    // waits for us. We share the parent's memory: everything below is a raw system call
    // on our own stack or kernel state, nothing allocates or takes a lock, and
    // `child_after_fork` ends in execve or _exit.
    unsafe {
        let args = &*arg.cast::<VforkArgs>();
        // Our copy of the handler table still names the collector's handlers (signal-hook,
        // std's stack-overflow handler), which must not run on shared memory. exec would
        // reset them too, but only after the window in which a signal could arrive.
        for sig in 1..=64 {
            let mut action: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut action) == 0
                && action.sa_sigaction != libc::SIG_DFL
                && action.sa_sigaction != libc::SIG_IGN
            {
                let mut default: libc::sigaction = std::mem::zeroed();
                default.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(sig, &default, std::ptr::null_mut());
            }
        }
        // The benchmark starts with nothing blocked, as std's spawn would give it.
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        child_after_fork(args.exec, args.config, args.parent, args.exec_error)
    }
}

/// The stack a [`spawn_vfork`] child runs on, with an inaccessible guard page below it.
struct ChildStack {
    base: *mut libc::c_void,
    len: usize,
}

impl ChildStack {
    /// Room enough for the child's few frames; pages never touched cost nothing.
    const SIZE: usize = 256 * 1024;
    const GUARD: usize = 4096;

    fn new() -> io::Result<ChildStack> {
        let len = Self::SIZE + Self::GUARD;
        // SAFETY: a fresh anonymous private mapping; no existing memory is involved.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let stack = ChildStack { base, len };
        // The stack grows down: an overflow faults on the guard instead of writing below.
        // SAFETY: the first page of the mapping made above.
        if unsafe { libc::mprotect(base, Self::GUARD, libc::PROT_NONE) } == -1 {
            return Err(io::Error::last_os_error());
        }
        Ok(stack)
    }

    /// The initial stack pointer: the end of the mapping (page-aligned, so 16-aligned).
    fn top(&self) -> *mut libc::c_void {
        // SAFETY: one past the end of the mapping, which is where a stack starts.
        unsafe { self.base.cast::<u8>().add(self.len).cast() }
    }
}

impl Drop for ChildStack {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, used by no one once the child has exec'd or
        // exited (CLONE_VFORK returns only then).
        unsafe { libc::munmap(self.base, self.len) };
    }
}

/// The child side of [`spawn_vfork`], after its signal set-up.
///
/// # Safety
/// Must be called only in a child process just started by [`spawn_vfork`]. It must not
/// allocate: it uses only raw system calls on data prepared by the parent.
unsafe fn child_after_fork(
    exec: &PreparedExec,
    config: &ChildConfig,
    parent: libc::pid_t,
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
        if die_with_parent(parent).is_err() {
            fail(exec_error, errno());
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
        libc::execve(
            exec.path.as_ptr(),
            exec.argv_ptrs.as_ptr(),
            exec.envp_ptrs.as_ptr(),
        );
        fail(exec_error, errno())
    }
}

/// Tie the calling process's life to its parent's: the kernel sends it SIGKILL when the
/// parent (the thread that started it: the collector runs its children from its main
/// thread) dies. A parent that died before this call sends nothing, so the parent the
/// child was started by (`parent`, taken before the fork) must still be its parent
/// afterwards; if not, this fails with `ESRCH` and the caller must exit.
///
/// For a child between `fork` and `execve`: two system calls, no allocation. The setting
/// survives `execve`, except into a set-user-ID or file-capability program.
pub fn die_with_parent(parent: libc::pid_t) -> io::Result<()> {
    // SAFETY: prctl with integer arguments only; it changes a setting of this process.
    let r = unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    if r == -1 {
        return Err(io::Error::last_os_error());
    }
    if nix::unistd::getppid().as_raw() != parent {
        return Err(io::Error::from_raw_os_error(libc::ESRCH));
    }
    Ok(())
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

/// Reap the child `pid` (`waitpid`), retrying on EINTR.
pub fn reap(pid: Pid) -> io::Result<()> {
    loop {
        match nix::sys::wait::waitpid(pid, None) {
            Ok(_) => return Ok(()),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}
