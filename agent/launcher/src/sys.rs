//! The system calls the launcher makes, raw (it links no libc, so that its address space,
//! which the benchmark's process starts as a copy of, stays a few pages).

use core::arch::asm;

const SYS_READ: usize = 0;
const SYS_POLL: usize = 7;
const SYS_RT_SIGPROCMASK: usize = 14;
const SYS_PREAD64: usize = 17;
const SYS_SIGNALFD4: usize = 289;
const SIG_BLOCK: usize = 0;
const SIG_SETMASK: usize = 2;
const SFD_NONBLOCK: usize = 0o4000;
const SFD_CLOEXEC: usize = 0o2000000;
const POLLIN: i16 = 1;
const SYS_WRITE: usize = 1;
const SYS_CLOSE: usize = 3;
const SYS_MMAP: usize = 9;
const SYS_MUNMAP: usize = 11;
const SYS_DUP2: usize = 33;
const SYS_RECVMSG: usize = 47;
const SYS_PERSONALITY: usize = 135;
const SYS_SCHED_SETAFFINITY: usize = 203;
const SYS_GETRLIMIT: usize = 97;
const SYS_SETRLIMIT: usize = 160;
const RLIMIT_NOFILE: usize = 7;
const SYS_GETPID: usize = 39;
const SYS_CLONE: usize = 56;
const SYS_EXECVE: usize = 59;
const SYS_WAIT4: usize = 61;
const SYS_KILL: usize = 62;
const SYS_FCNTL: usize = 72;
const SYS_SETPGID: usize = 109;
const SYS_GETPPID: usize = 110;
const SYS_PRCTL: usize = 157;
const SYS_CLOCK_GETTIME: usize = 228;
const SYS_EXIT_GROUP: usize = 231;
const CLOCK_MONOTONIC: usize = 1;

pub const EINTR: i32 = 4;
pub const SIGCHLD: usize = 17;
pub const SIGKILL: usize = 9;
pub const SIGPIPE: usize = 13;
const CLONE_VM: usize = 0x100;
const CLONE_VFORK: usize = 0x4000;
const F_DUPFD_CLOEXEC: usize = 1030;
const F_SETFD: usize = 2;
const FD_CLOEXEC: usize = 1;
const PR_SET_PDEATHSIG: usize = 1;
const WNOHANG: usize = 1;
const WUNTRACED: usize = 2;
const PROT_READ: usize = 1;
const PROT_WRITE: usize = 2;
const MAP_PRIVATE: usize = 2;
const MAP_ANONYMOUS: usize = 0x20;
const SOL_SOCKET: i32 = 1;
const SCM_RIGHTS: i32 = 1;
const MSG_CMSG_CLOEXEC: usize = 0x4000_0000;
const ADDR_NO_RANDOMIZE: usize = 0x0040000;

/// `struct rusage` (x86_64).
#[repr(C)]
#[derive(Default)]
pub struct Rusage {
    pub utime_sec: i64,
    pub utime_usec: i64,
    pub stime_sec: i64,
    pub stime_usec: i64,
    pub maxrss: i64,
    pub rest: [i64; 13],
}

/// A system call result: the value, or the errno.
fn result(r: isize) -> Result<usize, i32> {
    if (-4095..0).contains(&r) {
        Err(-r as i32)
    } else {
        Ok(r as usize)
    }
}

/// # Safety
/// The arguments must be what system call `n` expects (valid pointers where it takes any).
unsafe fn syscall4(n: usize, a: usize, b: usize, c: usize, d: usize) -> isize {
    let r: isize;
    // SAFETY: the `syscall` instruction with the x86_64 Linux convention; it clobbers rcx
    // and r11 only. The caller vouches for the arguments.
    unsafe {
        asm!(
            "syscall",
            inlateout("rax") n as isize => r,
            in("rdi") a,
            in("rsi") b,
            in("rdx") c,
            in("r10") d,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    r
}

/// # Safety
/// As [`syscall4`], for a call with six arguments.
unsafe fn syscall6(n: usize, a: [usize; 6]) -> isize {
    let r: isize;
    // SAFETY: as in `syscall4`, with the fifth and sixth arguments in r8 and r9.
    unsafe {
        asm!(
            "syscall",
            inlateout("rax") n as isize => r,
            in("rdi") a[0],
            in("rsi") a[1],
            in("rdx") a[2],
            in("r10") a[3],
            in("r8") a[4],
            in("r9") a[5],
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    r
}

/// `read`, retried on EINTR.
pub fn read(fd: i32, buf: &mut [u8]) -> Result<usize, i32> {
    loop {
        // SAFETY: `buf` is a live, writable buffer of `buf.len()` bytes.
        let r = unsafe {
            syscall4(
                SYS_READ,
                fd as usize,
                buf.as_mut_ptr() as usize,
                buf.len(),
                0,
            )
        };
        match result(r) {
            Err(EINTR) => continue,
            other => return other,
        }
    }
}

/// `write` of all of `buf` (a pipe takes up to 4096 bytes at once), retried on EINTR.
pub fn write_all(fd: i32, buf: &[u8]) -> Result<(), i32> {
    let mut done = 0;
    while done < buf.len() {
        let rest = &buf[done..];
        // SAFETY: `rest` is a live buffer of `rest.len()` bytes.
        let r = unsafe {
            syscall4(
                SYS_WRITE,
                fd as usize,
                rest.as_ptr() as usize,
                rest.len(),
                0,
            )
        };
        match result(r) {
            Ok(n) => done += n,
            Err(EINTR) => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

pub fn close(fd: i32) {
    // SAFETY: closes a descriptor number; no memory is involved.
    unsafe { syscall4(SYS_CLOSE, fd as usize, 0, 0, 0) };
}

/// Mark `fd` close-on-exec, or clear the mark.
pub fn set_cloexec(fd: i32, on: bool) -> Result<usize, i32> {
    // SAFETY: fcntl with integer arguments only.
    result(unsafe { syscall4(SYS_FCNTL, fd as usize, F_SETFD, on as usize * FD_CLOEXEC, 0) })
}

/// A close-on-exec copy of `fd` at the lowest free number from `min` on.
pub fn dup_cloexec(fd: i32, min: i32) -> Result<i32, i32> {
    // SAFETY: fcntl with integer arguments only.
    result(unsafe { syscall4(SYS_FCNTL, fd as usize, F_DUPFD_CLOEXEC, min as usize, 0) })
        .map(|f| f as i32)
}

/// Let this process open descriptor numbers below `count`: raise the soft limit of open
/// files to it if it is lower (up to the hard limit; the program inherits the raised
/// one, as it inherited the collector's when the collector raised its own).
pub fn allow_descriptors(count: u64) -> Result<(), i32> {
    let mut limit = [0u64; 2];
    // SAFETY: a pointer to a live `struct rlimit` (two 64-bit words).
    result(unsafe {
        syscall4(
            SYS_GETRLIMIT,
            RLIMIT_NOFILE,
            limit.as_mut_ptr() as usize,
            0,
            0,
        )
    })?;
    if limit[0] >= count {
        return Ok(());
    }
    limit[0] = count.min(limit[1]);
    // SAFETY: as above; the kernel only reads it.
    result(unsafe { syscall4(SYS_SETRLIMIT, RLIMIT_NOFILE, limit.as_ptr() as usize, 0, 0) })
        .map(|_| ())
}

/// `dup2(from, to)`: `to` becomes a copy of `from`, without close-on-exec.
pub fn dup2(from: i32, to: i32) -> Result<usize, i32> {
    // SAFETY: integer arguments only.
    result(unsafe { syscall4(SYS_DUP2, from as usize, to as usize, 0, 0) })
}

/// A private mapping: of `len` bytes of `fd` from its start, or anonymous with `fd` -1.
pub fn map(len: usize, fd: i32) -> Result<*mut u8, i32> {
    let flags = match fd {
        -1 => MAP_PRIVATE | MAP_ANONYMOUS,
        _ => MAP_PRIVATE,
    };
    // SAFETY: a new mapping where the kernel chooses; no existing memory is touched.
    let r = unsafe {
        syscall6(
            SYS_MMAP,
            [
                0,
                len,
                PROT_READ | PROT_WRITE,
                flags,
                fd as isize as usize,
                0,
            ],
        )
    };
    result(r).map(|a| a as *mut u8)
}

/// # Safety
/// `addr` and `len` must be a mapping made by [`map`] that nothing uses any more.
pub unsafe fn unmap(addr: *mut u8, len: usize) {
    // SAFETY: the caller vouches that the range is ours and unused.
    unsafe { syscall4(SYS_MUNMAP, addr as usize, len, 0, 0) };
}

/// `struct iovec`.
#[repr(C)]
struct Iovec {
    base: *mut u8,
    len: usize,
}

/// `struct msghdr`.
#[repr(C)]
struct Msghdr {
    name: *mut u8,
    namelen: u32,
    iov: *mut Iovec,
    iovlen: usize,
    control: *mut u8,
    controllen: usize,
    flags: i32,
}

/// Room for the control message of [`recv_with_fds`]: a `cmsghdr` (16 bytes) and up to
/// 253 descriptors, rounded up to 8 bytes.
const CONTROL_BYTES: usize = 16 + 253 * 4 + 4;

/// Receive one datagram into `buf` and the descriptors it carries into `fds` (close-on-exec);
/// returns (bytes, descriptors). `Ok((0, 0))` when the peer closed its end.
pub fn recv_with_fds(sock: i32, buf: &mut [u8], fds: &mut [i32]) -> Result<(usize, usize), i32> {
    let mut control = [0u64; CONTROL_BYTES / 8];
    let mut iov = Iovec {
        base: buf.as_mut_ptr(),
        len: buf.len(),
    };
    let mut msg = Msghdr {
        name: core::ptr::null_mut(),
        namelen: 0,
        iov: &mut iov,
        iovlen: 1,
        control: control.as_mut_ptr().cast(),
        controllen: CONTROL_BYTES,
        flags: 0,
    };
    let n = loop {
        // SAFETY: `msg` points to live buffers of the lengths it gives.
        let r = unsafe {
            syscall4(
                SYS_RECVMSG,
                sock as usize,
                &mut msg as *mut Msghdr as usize,
                MSG_CMSG_CLOEXEC,
                0,
            )
        };
        match result(r) {
            Err(EINTR) => continue,
            other => break other?,
        }
    };
    // One control message at most: SCM_RIGHTS. cmsghdr: len (usize), level, type (i32).
    let mut count = 0;
    let len = control[0] as usize;
    let level = control[1] as u32 as i32;
    let kind = (control[1] >> 32) as u32 as i32;
    if msg.controllen >= 16 && len >= 16 && level == SOL_SOCKET && kind == SCM_RIGHTS {
        let words = control.as_ptr().cast::<i32>();
        let received = (len - 16) / 4;
        for i in 0..received {
            // SAFETY: `received` descriptors follow the 16-byte header inside `control`.
            let fd = unsafe { *words.add(4 + i) };
            if count < fds.len() {
                fds[count] = fd;
                count += 1;
            } else {
                close(fd);
            }
        }
    }
    Ok((n, count))
}

/// A child that ended or stopped: its pid, raw wait status and rusage.
pub struct Reaped {
    pub pid: i32,
    pub status: i32,
    pub rusage: Rusage,
}

/// Reap a child that has ended, or see one that stopped (`WUNTRACED`), with its rusage:
/// without waiting unless `block`.
pub fn wait_any(block: bool) -> Option<Reaped> {
    let mut status: i32 = 0;
    let mut rusage = Rusage::default();
    loop {
        // SAFETY: pointers to a live `i32` and a live `Rusage`, laid out as the kernel's.
        let r = unsafe {
            syscall4(
                SYS_WAIT4,
                usize::MAX, // -1: any child
                &mut status as *mut i32 as usize,
                WUNTRACED | if block { 0 } else { WNOHANG },
                &mut rusage as *mut Rusage as usize,
            )
        };
        match result(r) {
            Err(EINTR) => continue,
            Ok(0) | Err(_) => return None,
            Ok(pid) => {
                return Some(Reaped {
                    pid: pid as i32,
                    status,
                    rusage,
                })
            }
        }
    }
}

/// Block SIGCHLD and SIGPIPE and return a non-blocking, close-on-exec signalfd that reads
/// SIGCHLD, with the signal mask as it was before (for the benchmark's process to restore
/// before its exec). SIGPIPE: the launcher reports a direct run's end itself, on a pipe
/// whose reader may be gone (a run the collector gave up on); the write then fails with
/// EPIPE instead of killing the launcher. `Err` (the mask unchanged) where either call
/// fails.
pub fn sigchld_fd() -> Result<(i32, u64), i32> {
    let set: u64 = 1 << (SIGCHLD - 1);
    let blocked: u64 = set | 1 << (SIGPIPE - 1);
    let mut old: u64 = 0;
    // SAFETY: pointers to live 8-byte signal sets, the size the kernel's sigset_t has.
    result(unsafe {
        syscall4(
            SYS_RT_SIGPROCMASK,
            SIG_BLOCK,
            &blocked as *const u64 as usize,
            &mut old as *mut u64 as usize,
            8,
        )
    })?;
    // SAFETY: a pointer to a live 8-byte signal set; -1 asks for a new descriptor.
    match result(unsafe {
        syscall6(
            SYS_SIGNALFD4,
            [
                usize::MAX,
                &set as *const u64 as usize,
                8,
                SFD_NONBLOCK | SFD_CLOEXEC,
                0,
                0,
            ],
        )
    }) {
        Ok(fd) => Ok((fd as i32, old)),
        Err(e) => {
            set_signal_mask(old);
            Err(e)
        }
    }
}

/// Set the signal mask to `mask` (restore what [`sigchld_fd`] changed).
pub fn set_signal_mask(mask: u64) {
    // SAFETY: a pointer to a live 8-byte signal set; the old one is not asked for.
    unsafe {
        syscall4(
            SYS_RT_SIGPROCMASK,
            SIG_SETMASK,
            &mask as *const u64 as usize,
            0,
            8,
        )
    };
}

/// Wait until `a` or `b` (-1: none) is readable; returns which, retried on EINTR.
pub fn poll_two(a: i32, b: i32) -> (bool, bool) {
    #[repr(C)]
    struct PollFd {
        fd: i32,
        events: i16,
        revents: i16,
    }
    let mut fds = [
        PollFd {
            fd: a,
            events: POLLIN,
            revents: 0,
        },
        PollFd {
            fd: b,
            events: POLLIN,
            revents: 0,
        },
    ];
    loop {
        // SAFETY: a pointer to two live `struct pollfd`; a negative fd is skipped.
        let r = unsafe { syscall4(SYS_POLL, fds.as_mut_ptr() as usize, 2, usize::MAX, 0) };
        match result(r) {
            Err(EINTR) => continue,
            // Any event on the socket (data, hang-up, error) is for `recvmsg` to tell.
            Ok(_) => return (fds[0].revents != 0, fds[1].revents != 0),
            Err(_) => return (true, false),
        }
    }
}

/// `pread` of up to `buf.len()` bytes from offset 0.
pub fn pread_start(fd: i32, buf: &mut [u8]) -> Result<usize, i32> {
    // SAFETY: `buf` is a live, writable buffer of `buf.len()` bytes.
    result(unsafe {
        syscall4(
            SYS_PREAD64,
            fd as usize,
            buf.as_mut_ptr() as usize,
            buf.len(),
            0,
        )
    })
}

/// SIGKILL to process group `pgid`.
pub fn kill_group(pgid: i32) {
    // SAFETY: kill with integer arguments only; a negative pid names a process group.
    unsafe { syscall4(SYS_KILL, (-(pgid as isize)) as usize, SIGKILL, 0, 0) };
}

/// Clear the parent-death signal (the launcher ends with its socket instead).
pub fn no_death_signal() {
    // SAFETY: prctl with integer arguments only.
    unsafe { syscall4(SYS_PRCTL, PR_SET_PDEATHSIG, 0, 0, 0) };
}

/// Address-space layout randomisation on or off for the next exec.
pub fn set_aslr(on: bool) {
    // SAFETY: personality with integer arguments only; 0xffffffff reads the current one.
    unsafe {
        let current = syscall4(SYS_PERSONALITY, 0xffff_ffff, 0, 0, 0);
        if current < 0 {
            return;
        }
        let current = current as usize;
        let wanted = match on {
            true => current & !ADDR_NO_RANDOMIZE,
            false => current | ADDR_NO_RANDOMIZE,
        };
        if wanted != current {
            syscall4(SYS_PERSONALITY, wanted, 0, 0, 0);
        }
    }
}

/// Run only on the CPUs set in `mask`.
pub fn set_cpus(mask: &[u64]) -> Result<usize, i32> {
    // SAFETY: a pointer to a live mask of `mask.len() * 8` bytes.
    result(unsafe {
        syscall4(
            SYS_SCHED_SETAFFINITY,
            0,
            mask.len() * 8,
            mask.as_ptr() as usize,
            0,
        )
    })
}

pub fn getpid() -> i32 {
    // SAFETY: no arguments.
    unsafe { syscall4(SYS_GETPID, 0, 0, 0, 0) as i32 }
}

pub fn getppid() -> i32 {
    // SAFETY: no arguments.
    unsafe { syscall4(SYS_GETPPID, 0, 0, 0, 0) as i32 }
}

/// `setpgid(pid, pgid)`; 0 means the caller.
pub fn setpgid(pid: i32, pgid: i32) -> Result<usize, i32> {
    // SAFETY: integer arguments only.
    result(unsafe { syscall4(SYS_SETPGID, pid as usize, pgid as usize, 0, 0) })
}

/// SIGKILL when the parent dies.
pub fn die_with_parent() -> Result<usize, i32> {
    // SAFETY: prctl with integer arguments only.
    result(unsafe { syscall4(SYS_PRCTL, PR_SET_PDEATHSIG, SIGKILL, 0, 0) })
}

/// Start a process that shares all memory with the caller (`CLONE_VM`, like a thread,
/// but with a pid, descriptors and signal state of its own) and runs `entry(arg)` on
/// `stack_top`. With `vfork`, the caller sleeps until the child has exec'd or exited
/// (`CLONE_VFORK`). No page table is copied, which is what makes it cheaper than fork:
/// about 35 us against 86 us for a fork, exit and wait on this project's VMs.
///
/// # Safety
/// `stack_top` must be the 16-byte aligned top of a mapping that nothing else uses until
/// the child has exited or exec'd; `entry` must never return; what `entry` reads through
/// `arg` must stay valid while it reads it; and the child must touch no memory the
/// caller uses meanwhile but its stack and what `arg` gives it.
pub unsafe fn spawn_sharing(
    vfork: bool,
    stack_top: *mut u8,
    entry: extern "C" fn(usize) -> !,
    arg: usize,
) -> Result<usize, i32> {
    let flags = CLONE_VM | SIGCHLD | if vfork { CLONE_VFORK } else { 0 };
    let r: isize;
    // SAFETY: clone with a new stack. In the parent the syscall returns the child's pid
    // (or an error) and the jump skips the child's part. The child starts on `stack_top`
    // with the parent's registers, so it finds `entry` in r12 and `arg` in r13, and calls
    // it with a properly aligned stack; `entry` never returns. The caller vouches for the
    // stack, `entry` and `arg`.
    unsafe {
        asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "xor ebp, ebp",
            "mov rdi, r13",
            "call r12",
            "ud2",
            "2:",
            inlateout("rax") SYS_CLONE as isize => r,
            in("rdi") flags,
            in("rsi") stack_top,
            in("rdx") 0usize,
            in("r10") 0usize,
            in("r8") 0usize,
            in("r12") entry,
            in("r13") arg,
            lateout("rcx") _,
            lateout("r11") _,
        );
    }
    result(r)
}

/// `execve`; returns only on failure, with the errno.
///
/// # Safety
/// `path` must be NUL-terminated, `argv` and `envp` NULL-terminated arrays of such strings.
pub unsafe fn execve(path: *const u8, argv: *const *const u8, envp: *const *const u8) -> i32 {
    // SAFETY: the caller vouches for the three pointers.
    let r = unsafe { syscall4(SYS_EXECVE, path as usize, argv as usize, envp as usize, 0) };
    -(r as i32)
}

/// `wait4(pid, &status, WUNTRACED, &rusage)`, retried on EINTR: the raw status of the
/// child's end, or of its stop (see [`stopped_by`]).
pub fn wait4(pid: i32, rusage: &mut Rusage) -> Result<i32, i32> {
    let mut status: i32 = 0;
    loop {
        // SAFETY: pointers to a live `i32` and a live `Rusage`, laid out as the kernel's.
        let r = unsafe {
            syscall4(
                SYS_WAIT4,
                pid as usize,
                &mut status as *mut i32 as usize,
                WUNTRACED,
                rusage as *mut Rusage as usize,
            )
        };
        match result(r) {
            Ok(_) => return Ok(status),
            Err(EINTR) => continue,
            Err(e) => return Err(e),
        }
    }
}

/// The signal that stopped the child, if the wait status `status` is a stop's
/// (`WIFSTOPPED`, `WSTOPSIG`).
pub fn stopped_by(status: i32) -> Option<i32> {
    (status & 0xff == 0x7f).then_some((status >> 8) & 0xff)
}

/// `CLOCK_MONOTONIC` in nanoseconds (the clock `std::time::Instant` reads).
pub fn monotonic_ns() -> u64 {
    let mut ts = [0i64; 2];
    // SAFETY: a pointer to a live `struct timespec` (two 64-bit words on x86_64).
    unsafe {
        syscall4(
            SYS_CLOCK_GETTIME,
            CLOCK_MONOTONIC,
            ts.as_mut_ptr() as usize,
            0,
            0,
        )
    };
    (ts[0] as u64) * 1_000_000_000 + ts[1] as u64
}

/// End the process.
pub fn exit(code: i32) -> ! {
    loop {
        // SAFETY: exit_group takes an integer and does not return.
        unsafe { syscall4(SYS_EXIT_GROUP, code as usize, 0, 0, 0) };
    }
}
