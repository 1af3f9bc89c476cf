//! The launcher: a static program of a few pages, with no libc, that the collector's
//! runner execs first for every measured run; it forks the benchmark's process, holds it
//! at the start gate, and reaps it. The contract (descriptors, arguments, messages) is
//! `sbs_agent_abi::launcher`, which also says why it exists: the benchmark's process is a
//! copy of the launcher, not of the collector, so its `ru_maxrss` is its own.
//!
//! `src/main.rs` is the entry point (`_start`); `collector/build.rs` builds the two into
//! the program and embeds it in `sbs-profile`.
#![cfg_attr(not(test), no_std)]

pub mod sys;

use sbs_agent_abi::launcher::{Message, Step, GATE_FD, MODE_GATED, REPORT_FD};

/// Tell the collector; if it is gone, nobody needs to know, and the death signal follows.
fn report(message: Message) {
    let _ = sys::write_all(REPORT_FD, &message.encode());
}

/// What the process started from `argv` and `envp` (the launcher's own, as the kernel
/// laid them out) does; returns the launcher's exit code.
///
/// # Safety
/// `argv` and `envp` must be the NULL-terminated arrays of NUL-terminated strings the
/// kernel passed to the program, and the program must have one thread.
pub unsafe fn launch(argv: *const *const u8, envp: *const *const u8) -> i32 {
    // argv: [launcher, MODE, PROGRAM, ARGV0, ARGV1...].
    // SAFETY: `argv` is NULL-terminated, so reading up to the first NULL stays inside.
    let (gated, program, bench_argv) = unsafe {
        let mut n = 0;
        while n < 4 && !(*argv.add(n)).is_null() {
            n += 1;
        }
        if n < 4 {
            report(Message::LauncherFailed {
                step: Step::Arguments,
                errno: 22,
            });
            return 125;
        }
        (is(*argv.add(1), MODE_GATED), *argv.add(2), argv.add(3))
    };
    let launcher = sys::getpid();
    let start = sys::monotonic_ns();
    // SAFETY: the launcher has one thread and holds no lock.
    match unsafe { sys::fork() } {
        Err(errno) => {
            report(Message::LauncherFailed {
                step: Step::Fork,
                errno,
            });
            125
        }
        // SAFETY: the pointers are the kernel's, as the caller vouches.
        Ok(0) => unsafe { benchmark(launcher, gated, program, bench_argv, envp) },
        Ok(pid) => wait_for(pid as i32, gated, start),
    }
}

/// Whether the NUL-terminated string `s` is `text`.
///
/// # Safety
/// `s` must point to a NUL-terminated string.
unsafe fn is(s: *const u8, text: &str) -> bool {
    let text = text.as_bytes();
    for (i, &b) in text.iter().enumerate() {
        // SAFETY: we stop at the first mismatch, so a NUL ends the reading in bounds.
        if unsafe { *s.add(i) } != b {
            return false;
        }
    }
    // SAFETY: every byte before was a match, so not NUL, and this one is in bounds.
    unsafe { *s.add(text.len()) == 0 }
}

/// The launcher's side once the benchmark's process exists.
fn wait_for(pid: i32, gated: bool, start: u64) -> i32 {
    // Also from this side, so that no kill of the group can come before the child's own.
    let _ = sys::setpgid(pid, pid);
    if gated {
        sys::close(GATE_FD);
    }
    report(Message::Started { pid });
    let mut rusage = sys::Rusage::default();
    match sys::wait4(pid, &mut rusage) {
        Ok(status) => {
            let wall_ns = sys::monotonic_ns().saturating_sub(start);
            let us = |sec: i64, usec: i64| (sec as u64) * 1_000_000 + usec as u64;
            report(Message::Exited {
                status,
                user_us: us(rusage.utime_sec, rusage.utime_usec),
                sys_us: us(rusage.stime_sec, rusage.stime_usec),
                max_rss_kib: rusage.maxrss as u64,
                wall_ns,
            });
            0
        }
        Err(errno) => {
            report(Message::LauncherFailed {
                step: Step::Wait,
                errno,
            });
            125
        }
    }
}

/// The benchmark's process before its exec: its own process group, a death tie to the
/// launcher, the gate if `gated`, the exec.
///
/// # Safety
/// As [`launch`]: `program`, `argv` and `envp` are the kernel's strings.
unsafe fn benchmark(
    launcher: i32,
    gated: bool,
    program: *const u8,
    argv: *const *const u8,
    envp: *const *const u8,
) -> ! {
    // Own process group, so that a timeout or Ctrl-C kills the benchmark's whole tree.
    let _ = sys::setpgid(0, 0);
    // Die with the launcher, which dies with the collector; a launcher that died before
    // this call sent nothing, so check that it is still the parent.
    if sys::die_with_parent().is_err() || sys::getppid() != launcher {
        sys::exit(126);
    }
    // The benchmark inherits neither the report pipe nor the gate.
    sys::set_cloexec(REPORT_FD);
    if gated {
        let mut byte = [0u8; 1];
        if sys::read(GATE_FD, &mut byte) != Ok(1) {
            // End of file: the collector gave up on this run.
            sys::exit(126);
        }
        sys::close(GATE_FD);
    }
    // SAFETY: the caller vouches for the pointers.
    let errno = unsafe { sys::execve(program, argv, envp) };
    report(Message::ExecFailed { errno });
    sys::exit(127)
}
