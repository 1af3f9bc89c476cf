//! The launcher: a static program of a few pages, with no libc, that the collector starts
//! once and asks to start every measured run's process, so that the benchmark's process is
//! a copy of the launcher and not of the collector, and its `ru_maxrss` is its own. The
//! contract (socket, request, descriptors, messages) and the reason are in
//! `sbs_agent_abi::launcher`.
//!
//! `src/main.rs` is the entry point (`_start`); `collector/build.rs` builds the two into
//! the program and embeds it in `sbs-profile`. [`request`] reads a request; it is plain
//! Rust over bytes, unit-tested.
#![cfg_attr(not(test), no_std)]

pub mod request;
pub mod sys;

use request::Request;
use sbs_agent_abi::launcher::{
    Message, Step, DATAGRAM_WORDS, GATE_FD, MAX_TARGETS, REPORT_FD, REQUEST_MAGIC, SOCKET_FD,
};

/// Tell the collector on `fd`; if it is gone, nobody needs to know, and the death signal
/// follows.
fn report(fd: i32, message: Message) {
    let _ = sys::write_all(fd, &message.encode());
}

/// Serve requests until the collector closes its end of the socket; returns the exit code.
pub fn serve() -> i32 {
    // The launcher lives as long as the collector's socket, not as long as the collector
    // thread that happened to start it.
    sys::no_death_signal();
    let launcher = sys::getpid();
    loop {
        sys::reap_ended();
        let mut datagram = [0u8; DATAGRAM_WORDS * 8];
        let mut fds = [-1i32; MAX_TARGETS + 1];
        let (n, count) = match sys::recv_with_fds(SOCKET_FD, &mut datagram, &mut fds) {
            Ok((0, _)) | Err(_) => return 0,
            Ok(got) => got,
        };
        let fds = &fds[..count];
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&datagram[i * 8..i * 8 + 8]);
            u64::from_le_bytes(w)
        };
        if n == datagram.len() && word(0) == REQUEST_MAGIC && !fds.is_empty() {
            // SAFETY: the launcher has one thread and holds no lock.
            match unsafe { sys::fork() } {
                Ok(0) => {
                    sys::close(SOCKET_FD);
                    sys::exit(run(launcher, fds, word(1) as usize))
                }
                Ok(_) => {}
                // The collector sees its report pipe close without a word.
                Err(_) => {}
            }
        }
        for &fd in fds {
            sys::close(fd);
        }
    }
}

/// The run parent: read the request from its memfd (`fds[0]`, `len` bytes), start the
/// benchmark's process, reap it, report; returns the exit code.
fn run(launcher: i32, fds: &[i32], len: usize) -> i32 {
    // Die with the launcher, which dies with the collector's socket.
    if sys::die_with_parent().is_err() || sys::getppid() != launcher {
        return 125;
    }
    let bytes = match sys::map(len.max(1), fds[0]) {
        // SAFETY: a fresh private mapping of `len` bytes (at least one), ours alone.
        Ok(p) => unsafe { core::slice::from_raw_parts(p, len) },
        Err(_) => return 125,
    };
    let passed = &fds[1..];
    let Some(request) = Request::parse(bytes, passed.len()) else {
        // No report pipe can be trusted in a request that does not parse.
        return 125;
    };
    let Some(report_fd) = request.passed_at(passed, REPORT_FD) else {
        return 125;
    };
    // The argument and environment pointer arrays, NULL-terminated, in a mapping of their
    // own (the run parent links no allocator).
    let slots = request.args + 1 + request.env + 1;
    let table = match sys::map(slots * 8, -1) {
        // SAFETY: a fresh private mapping of `slots` words, ours alone.
        Ok(p) => unsafe { core::slice::from_raw_parts_mut(p.cast::<*const u8>(), slots) },
        Err(errno) => {
            report(
                report_fd,
                Message::LauncherFailed {
                    step: Step::Request,
                    errno,
                },
            );
            return 125;
        }
    };
    let Some(program) = request.strings(bytes, table) else {
        report(
            report_fd,
            Message::LauncherFailed {
                step: Step::Request,
                errno: 22,
            },
        );
        return 125;
    };
    let run_parent = sys::getpid();
    let start = sys::monotonic_ns();
    // SAFETY: the run parent has one thread and holds no lock.
    match unsafe { sys::fork() } {
        Err(errno) => {
            report(
                report_fd,
                Message::LauncherFailed {
                    step: Step::Fork,
                    errno,
                },
            );
            125
        }
        Ok(0) => benchmark(run_parent, &request, passed, program, table),
        Ok(pid) => wait_for(report_fd, pid as i32, run_parent, start),
    }
}

/// The run parent's side once the benchmark's process exists.
fn wait_for(report_fd: i32, pid: i32, run_parent: i32, start: u64) -> i32 {
    // Also from this side, so that no kill of the group can come before the child's own.
    let _ = sys::setpgid(pid, pid);
    report(report_fd, Message::Started { pid, run_parent });
    let mut rusage = sys::Rusage::default();
    match sys::wait4(pid, &mut rusage) {
        Ok(status) => {
            let wall_ns = sys::monotonic_ns().saturating_sub(start);
            let us = |sec: i64, usec: i64| (sec as u64) * 1_000_000 + usec as u64;
            report(
                report_fd,
                Message::Exited {
                    status,
                    user_us: us(rusage.utime_sec, rusage.utime_usec),
                    sys_us: us(rusage.stime_sec, rusage.stime_usec),
                    max_rss_kib: rusage.maxrss as u64,
                    wall_ns,
                },
            );
            0
        }
        Err(errno) => {
            report(
                report_fd,
                Message::LauncherFailed {
                    step: Step::Wait,
                    errno,
                },
            );
            125
        }
    }
}

/// The benchmark's process before its exec: its own process group, a death tie to the
/// run parent, ASLR and CPUs as asked, its descriptors at their numbers, the gate if the
/// run is gated, the exec of `program` with the arguments and environment in `table`.
fn benchmark(
    run_parent: i32,
    request: &Request,
    passed: &[i32],
    program: *const u8,
    table: &[*const u8],
) -> ! {
    // Own process group, so that a timeout or Ctrl-C kills the benchmark's whole tree.
    let _ = sys::setpgid(0, 0);
    if sys::die_with_parent().is_err() || sys::getppid() != run_parent {
        sys::exit(126);
    }
    // Every descriptor at its number first: from then on the report pipe is REPORT_FD.
    let mut fds = [-1i32; MAX_TARGETS];
    let fds = &mut fds[..passed.len()];
    fds.copy_from_slice(passed);
    let fail = |step, errno| -> ! {
        // Open only once installed: no received descriptor sits that high.
        if sys::is_open(REPORT_FD) {
            report(REPORT_FD, Message::LauncherFailed { step, errno });
        }
        sys::exit(127)
    };
    if let Err(errno) = install(fds, request) {
        fail(Step::Setup, errno);
    }
    // The benchmark inherits neither the report pipe nor the gate.
    let _ = sys::set_cloexec(REPORT_FD, true);
    sys::set_aslr(!request.no_aslr);
    if request.cpus {
        if let Err(errno) = sys::set_cpus(&request.cpu_mask) {
            fail(Step::Setup, errno);
        }
    }
    if request.gated {
        let mut byte = [0u8; 1];
        if sys::read(GATE_FD, &mut byte) != Ok(1) {
            // End of file: the collector gave up on this run.
            sys::exit(126);
        }
        sys::close(GATE_FD);
    }
    let (args, env) = table.split_at(request.args + 1);
    // SAFETY: `program` and every pointer in `args` and `env` point to NUL-terminated
    // strings inside the request's mapping, and both arrays end with a NULL.
    let errno = unsafe { sys::execve(program, args.as_ptr(), env.as_ptr()) };
    report(REPORT_FD, Message::ExecFailed { errno });
    sys::exit(127)
}

/// Put the received descriptors `fds` at the request's target numbers. A received
/// descriptor may sit at a number another one is meant for: it is moved away first.
fn install(fds: &mut [i32], request: &Request) -> Result<(), i32> {
    for i in 0..fds.len() {
        let target = request.target(i);
        for later in fds.iter_mut().skip(i + 1) {
            if *later == target {
                *later = sys::dup_cloexec(*later)?;
            }
        }
        if fds[i] == target {
            sys::set_cloexec(target, false)?;
        } else {
            sys::dup2(fds[i], target)?;
        }
    }
    Ok(())
}
