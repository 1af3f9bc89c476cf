//! The system calls the launcher makes, raw (it links no libc, so that its address space,
//! which the benchmark's process starts as a copy of, stays a few pages).

use core::arch::asm;

const SYS_READ: usize = 0;
const SYS_WRITE: usize = 1;
const SYS_CLOSE: usize = 3;
const SYS_GETPID: usize = 39;
const SYS_CLONE: usize = 56;
const SYS_EXECVE: usize = 59;
const SYS_WAIT4: usize = 61;
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
const F_SETFD: usize = 2;
const FD_CLOEXEC: usize = 1;
const PR_SET_PDEATHSIG: usize = 1;

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

/// Mark `fd` close-on-exec.
pub fn set_cloexec(fd: i32) {
    // SAFETY: fcntl with integer arguments only.
    unsafe { syscall4(SYS_FCNTL, fd as usize, F_SETFD, FD_CLOEXEC, 0) };
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

/// `fork`: `Ok(0)` in the child, `Ok(pid)` in the parent.
///
/// # Safety
/// The child runs on a copy of the parent's memory: this is sound for a program with one
/// thread and no locks, which the launcher is.
pub unsafe fn fork() -> Result<usize, i32> {
    // SAFETY: clone with only an exit signal is fork; the child returns here with its own
    // copy of the stack (no new stack is given).
    result(unsafe { syscall4(SYS_CLONE, SIGCHLD, 0, 0, 0) })
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

/// `wait4(pid, &status, 0, &rusage)`, retried on EINTR.
pub fn wait4(pid: i32, rusage: &mut Rusage) -> Result<i32, i32> {
    let mut status: i32 = 0;
    loop {
        // SAFETY: pointers to a live `i32` and a live `Rusage`, laid out as the kernel's.
        let r = unsafe {
            syscall4(
                SYS_WAIT4,
                pid as usize,
                &mut status as *mut i32 as usize,
                0,
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
