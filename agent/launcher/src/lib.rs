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

use core::sync::atomic::{AtomicI32, AtomicPtr, AtomicU64, Ordering};

use request::ReceivedRequest;
use sbs_agent_abi::launcher::{
    Message, Step, DATAGRAM_WORDS, FLAG_LATCHED, MAX_TARGETS, REQUEST_MAGIC, SOCKET_FD,
};

/// Tell the collector on `fd`; if it is gone, nobody needs to know, and the death signal
/// follows.
fn report(fd: i32, message: Message) {
    let _ = sys::write_all(fd, &message.encode());
}

/// The stack of a run parent and of a benchmark's process before its exec: far more
/// than their few frames need; pages never touched cost nothing.
const STACK_BYTES: usize = 64 * 1024;
/// Run parents alive at once, at most (more wait for one to end).
const MAX_RUNS: usize = 256;

/// A run the launcher started: its child (the run parent, or for a direct run the
/// benchmark's process itself), the run parent's stack, and the benchmark's process
/// (written by that process itself, which shares our memory, hence atomics, and shared
/// references only). A direct run also has its report pipe, which the launcher holds
/// until it reaps the process, and its start time.
struct Run {
    parent: AtomicI32,
    stack: AtomicPtr<u8>,
    benchmark: AtomicI32,
    report: AtomicI32,
    start: AtomicU64,
}

/// What a run parent starts from, written at the top of its stack.
struct RunArgs {
    launcher: i32,
    /// The signal mask the benchmark's process restores before its exec.
    sigmask: Option<u64>,
    /// Where the benchmark's process writes its pid.
    benchmark: *const AtomicI32,
    len: usize,
    count: usize,
    fds: [i32; MAX_TARGETS + 1],
}

/// A fresh stack with `value` at its top; returns the mapping and the stack pointer to
/// start from (16-byte aligned, below `value`).
fn stack_with<T>(value: T) -> Option<(*mut u8, *mut u8)> {
    let base = sys::map(STACK_BYTES, -1).ok()?;
    let at = (base as usize + STACK_BYTES - core::mem::size_of::<T>()) & !15;
    // SAFETY: `at` is inside the fresh mapping, 16-byte aligned, with room for a `T`.
    unsafe { core::ptr::write(at as *mut T, value) };
    Some((base, at as *mut u8))
}

/// Serve requests until the collector closes its end of the socket; returns the exit
/// code. A run that nothing attaches to (no start latch) is a *direct* run: the launcher
/// vforks the benchmark's process itself, on a stack of its own, and sleeps only until
/// its exec; it learns of its end from SIGCHLD (through a signalfd, polled with the
/// socket), reaps it and reports. A latched run gets a run parent: a process that shares
/// the launcher's memory (no page table copied) on a stack of its own, which starts the
/// benchmark's process and waits at the latch with it while the launcher serves other
/// requests; the launcher unmaps its stack once it has reaped it. Direct runs save a
/// process per run (BENCHMARKS.md, "Timing runs at hyperfine's cost"); where the
/// signalfd cannot be made, every run gets a run parent. When the collector is gone
/// (its socket closed, also after a SIGKILL), the process groups of the benchmarks still
/// running are killed: the death signals reach the processes, not what they started in
/// their group.
pub fn serve() -> i32 {
    // The launcher lives as long as the collector's socket, not as long as the collector
    // thread that happened to start it.
    sys::no_death_signal();
    let launcher = sys::getpid();
    // A direct run's process is a vfork of the launcher: the socket must not reach it.
    let _ = sys::set_cloexec(SOCKET_FD, true);
    let (sigfd, sigmask) = match sys::sigchld_fd() {
        Ok((fd, mask)) => (fd, Some(mask)),
        Err(_) => (-1, None),
    };
    // The stack of a direct run's process until its exec (one at a time: we sleep meanwhile).
    let direct_stack = match sigfd {
        -1 => None,
        _ => sys::map(STACK_BYTES, -1).ok(),
    };
    let runs: [Run; MAX_RUNS] = core::array::from_fn(|_| Run {
        parent: AtomicI32::new(0),
        stack: AtomicPtr::new(core::ptr::null_mut()),
        benchmark: AtomicI32::new(0),
        report: AtomicI32::new(-1),
        start: AtomicU64::new(0),
    });
    let ended = |r: sys::Reaped| {
        let Some(run) = runs
            .iter()
            .find(|x| x.parent.load(Ordering::SeqCst) == r.pid)
        else {
            return;
        };
        let report_fd = run.report.load(Ordering::SeqCst);
        if report_fd >= 0 {
            // A direct run's process: its stop is the collector's to handle (see
            // `wait_for`), its end is reported here.
            if let Some(signal) = sys::stopped_by(r.status) {
                report(report_fd, Message::Stopped { signal });
                return;
            }
            let wall_ns = sys::monotonic_ns().saturating_sub(run.start.load(Ordering::SeqCst));
            report(report_fd, exited(r.status, &r.rusage, wall_ns));
            sys::close(report_fd);
            run.report.store(-1, Ordering::SeqCst);
        } else {
            if sys::stopped_by(r.status).is_some() {
                return; // a run parent stopped by hand: it ends when continued
            }
            let stack = run.stack.swap(core::ptr::null_mut(), Ordering::SeqCst);
            // SAFETY: the stack of a run parent that has exited: nobody uses it.
            unsafe { sys::unmap(stack, STACK_BYTES) };
        }
        run.benchmark.store(0, Ordering::SeqCst);
        run.parent.store(0, Ordering::SeqCst);
    };
    loop {
        let (request_ready, _) = sys::poll_two(SOCKET_FD, sigfd);
        if sigfd >= 0 {
            let mut info = [0u8; 128 * 4];
            while sys::read(sigfd, &mut info).is_ok_and(|n| n > 0) {}
        }
        while let Some(r) = sys::wait_any(false) {
            ended(r);
        }
        if !request_ready {
            continue;
        }
        let mut datagram = [0u8; DATAGRAM_WORDS * 8];
        let mut args = RunArgs {
            launcher,
            sigmask,
            benchmark: core::ptr::null(),
            len: 0,
            count: 0,
            fds: [-1; MAX_TARGETS + 1],
        };
        let (n, count) = match sys::recv_with_fds(SOCKET_FD, &mut datagram, &mut args.fds) {
            Ok((0, _)) | Err(_) => {
                for run in runs.iter().filter(|r| r.parent.load(Ordering::SeqCst) != 0) {
                    let pid = run.benchmark.load(Ordering::SeqCst);
                    if pid > 0 {
                        sys::kill_group(pid);
                    }
                }
                return 0;
            }
            Ok(got) => got,
        };
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&datagram[i * 8..i * 8 + 8]);
            u64::from_le_bytes(w)
        };
        args.count = count;
        args.len = word(1) as usize;
        let fds = args.fds;
        let mut keep_report = false;
        if n == datagram.len() && word(0) == REQUEST_MAGIC && count >= 2 {
            // A free slot, waiting for a run to end if need be.
            let slot = loop {
                if let Some(i) = runs
                    .iter()
                    .position(|r| r.parent.load(Ordering::SeqCst) == 0)
                {
                    break Some(i);
                }
                match sys::wait_any(true) {
                    Some(r) => ended(r),
                    None => break None,
                }
            };
            if let Some(slot) = slot {
                args.benchmark = &runs[slot].benchmark;
            }
            match (slot, direct_stack) {
                (Some(slot), Some(stack)) if !latched(fds[0]) => {
                    let run = &runs[slot];
                    // SAFETY: the end of the direct stack, which only the benchmark's process
                    // uses, until its exec, while we sleep.
                    let top = unsafe { stack.add(STACK_BYTES) };
                    if let Ok((pid, start)) = start(
                        launcher,
                        true,
                        &run.benchmark,
                        &fds[..count],
                        args.len,
                        sigmask,
                        top,
                    ) {
                        run.report.store(fds[1], Ordering::SeqCst);
                        run.start.store(start, Ordering::SeqCst);
                        run.parent.store(pid, Ordering::SeqCst);
                        keep_report = true;
                    }
                }
                (Some(slot), _) => {
                    if let Some((base, top)) = stack_with(args) {
                        // SAFETY: `top` is the top of a fresh stack that only the run parent
                        // uses until the launcher reaps it; `run_parent` never returns and
                        // reads only the `RunArgs` above `top` and mappings of its own.
                        match unsafe { sys::spawn_sharing(false, top, run_parent, top as usize) } {
                            Ok(pid) => {
                                runs[slot].stack.store(base, Ordering::SeqCst);
                                runs[slot].parent.store(pid as i32, Ordering::SeqCst);
                            }
                            // The collector sees its report pipe close without a word.
                            // SAFETY: the stack was never used.
                            Err(_) => unsafe { sys::unmap(base, STACK_BYTES) },
                        }
                    }
                }
                (None, _) => {}
            }
        }
        for (i, &fd) in fds[..count].iter().enumerate() {
            if !(keep_report && i == 1) {
                sys::close(fd);
            }
        }
    }
}

/// Whether the request in memfd `fd` asks for a start latch (its flags, the second word).
/// A request that cannot be read goes the run parent's way, which reports why.
fn latched(fd: i32) -> bool {
    let mut head = [0u8; 16];
    match sys::pread_start(fd, &mut head) {
        Ok(16) => {
            let mut w = [0u8; 8];
            w.copy_from_slice(&head[8..]);
            u64::from_le_bytes(w) & FLAG_LATCHED != 0
        }
        _ => true,
    }
}

/// The message for a process that ended with wait status `status` and `rusage`.
fn exited(status: i32, rusage: &sys::Rusage, wall_ns: u64) -> Message {
    let us = |sec: i64, usec: i64| (sec as u64) * 1_000_000 + usec as u64;
    Message::Exited {
        status,
        user_us: us(rusage.utime_sec, rusage.utime_usec),
        sys_us: us(rusage.stime_sec, rusage.stime_usec),
        max_rss_kib: rusage.maxrss as u64,
        wall_ns,
    }
}

/// The run parent's entry: its `RunArgs` are at `arg`.
extern "C" fn run_parent(arg: usize) -> ! {
    // SAFETY: `serve` wrote a `RunArgs` at `arg`, on this process's own stack.
    let args = unsafe { &*(arg as *const RunArgs) };
    sys::close(SOCKET_FD);
    // SAFETY: `serve` points it at a slot of its table that stays until it reaps us.
    let slot = unsafe { &*args.benchmark };
    let code = run(
        args.launcher,
        slot,
        &args.fds[..args.count],
        args.len,
        args.sigmask,
    );
    sys::exit(code)
}

/// The mappings a run parent makes, unmapped when it is done with them: it shares the
/// launcher's memory, so what it leaves mapped would stay.
struct Mapping(*mut u8, usize);

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: a mapping of this run parent's, used by nobody once dropped.
        unsafe { sys::unmap(self.0, self.1) };
    }
}

/// What the benchmark's process starts from, on the run parent's stack (which stays put:
/// the run parent sleeps until the exec).
struct BenchArgs<'a> {
    run_parent: i32,
    /// A direct run: its parent is the launcher, announced as no run parent (0), which
    /// the collector must not kill.
    direct: bool,
    /// The report pipe and the latch, as received.
    report: i32,
    latch: Option<i32>,
    /// The launcher's record of the benchmark's pid.
    slot: &'a AtomicI32,
    request: &'a ReceivedRequest,
    passed: &'a [i32],
    program: *const u8,
    table: &'a [*const u8],
    /// The signal mask to restore before the exec (the launcher blocks SIGCHLD).
    sigmask: Option<u64>,
}

/// The run parent: start the benchmark's process ([`start`]), reap it, report; returns
/// the exit code.
fn run(launcher: i32, slot: &AtomicI32, fds: &[i32], len: usize, sigmask: Option<u64>) -> i32 {
    // Die with the launcher, which dies with the collector's socket.
    if sys::die_with_parent().is_err() || sys::getppid() != launcher {
        return 125;
    }
    let Some(&report_fd) = fds.get(1) else {
        return 125;
    };
    let stack = match sys::map(STACK_BYTES, -1) {
        Ok(p) => Mapping(p, STACK_BYTES),
        Err(errno) => {
            report(
                report_fd,
                Message::LauncherFailed {
                    step: Step::Fork,
                    errno,
                },
            );
            return 125;
        }
    };
    // SAFETY: the end of the fresh mapping above.
    let top = unsafe { stack.0.add(STACK_BYTES) };
    let started = start(sys::getpid(), false, slot, fds, len, sigmask, top);
    drop(stack);
    match started {
        Err(code) => code,
        Ok((pid, start)) => wait_for(report_fd, pid, start),
    }
}

/// Read the request from its memfd (`fds[0]`, `len` bytes) and start the benchmark's
/// process as a vfork of the caller (`runner`: its parent, the run parent or the
/// launcher) on the stack that ends at `stack_top`; returns its pid and the time it was
/// started, or the exit code of a failure (reported on the report pipe where there is
/// one).
fn start(
    runner: i32,
    direct: bool,
    slot: &AtomicI32,
    fds: &[i32],
    len: usize,
    sigmask: Option<u64>,
    stack_top: *mut u8,
) -> Result<(i32, u64), i32> {
    let request_map = match sys::map(len.max(1), fds[0]) {
        Ok(p) => Mapping(p, len.max(1)),
        Err(_) => return Err(125),
    };
    // SAFETY: a private mapping of `len` bytes (at least one), ours alone.
    let bytes = unsafe { core::slice::from_raw_parts(request_map.0, len) };
    // After the request: the report pipe, the latch of a latched run, the targets.
    let Some(&report_fd) = fds.get(1) else {
        return Err(125);
    };
    let Some(request) = ReceivedRequest::parse(bytes, fds.len() - 1) else {
        // A report pipe in a request that does not parse cannot be trusted.
        return Err(125);
    };
    let (latch, passed) = match request.latched {
        true => (Some(fds[2]), &fds[3..]),
        false => (None, &fds[2..]),
    };
    let fail = |step, errno| {
        report(report_fd, Message::LauncherFailed { step, errno });
        Err(125)
    };
    // The argument and environment pointer arrays, NULL-terminated, in a mapping of their
    // own (the launcher links no allocator).
    let slots = request.args + 1 + request.env + 1;
    let table_map = match sys::map(slots * 8, -1) {
        Ok(p) => Mapping(p, slots * 8),
        Err(errno) => return fail(Step::Request, errno),
    };
    // SAFETY: a fresh private mapping of `slots` words, ours alone.
    let table = unsafe { core::slice::from_raw_parts_mut(table_map.0.cast::<*const u8>(), slots) };
    let Some(program) = request.strings(bytes, table) else {
        return fail(Step::Request, 22);
    };
    let bench = BenchArgs {
        run_parent: runner,
        direct,
        report: report_fd,
        latch,
        slot,
        request: &request,
        passed,
        program,
        table,
        sigmask,
    };
    let start = sys::monotonic_ns();
    // SAFETY: the benchmark's process runs on its own stack (the caller's promise) while
    // this process sleeps (vfork) until its exec or exit, so `bench` and what it points
    // to stay put; `benchmark` never returns.
    let spawned = unsafe {
        sys::spawn_sharing(
            true,
            stack_top,
            benchmark,
            &bench as *const BenchArgs as usize,
        )
    };
    match spawned {
        Err(errno) => fail(Step::Fork, errno),
        Ok(pid) => Ok((pid as i32, start)),
    }
}

/// The run parent's side once the benchmark's process has exec'd (or failed). A stop
/// is reported and waited through: the process is in a process group of its own, which
/// the terminal treats as a background job, so reading the terminal (or writing to it
/// under `stty tostop`) stops it, and nobody else would ever say so.
fn wait_for(report_fd: i32, pid: i32, start: u64) -> i32 {
    let mut rusage = sys::Rusage::default();
    let mut waited = sys::wait4(pid, &mut rusage);
    while let Some(signal) = waited.ok().and_then(sys::stopped_by) {
        report(report_fd, Message::Stopped { signal });
        waited = sys::wait4(pid, &mut rusage);
    }
    match waited {
        Ok(status) => {
            let wall_ns = sys::monotonic_ns().saturating_sub(start);
            report(report_fd, exited(status, &rusage, wall_ns));
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

/// The benchmark's process before its exec: the signal mask the launcher found, its own
/// process group, a death tie to its parent (the run parent, or the launcher for a direct
/// run), its descriptors at their numbers, ASLR and CPUs as asked, the report of
/// its start, the latch if the run is latched, the exec. It shares the run parent's (and the
/// launcher's) memory until the exec: it writes only its own stack.
extern "C" fn benchmark(arg: usize) -> ! {
    // SAFETY: `run` passed its `BenchArgs`, which stay put while it sleeps.
    let BenchArgs {
        run_parent,
        direct,
        report: received_report,
        latch: received_latch,
        slot,
        request,
        passed,
        program,
        table,
        sigmask,
    } = unsafe { &*(arg as *const BenchArgs) };
    if let Some(mask) = sigmask {
        sys::set_signal_mask(*mask);
    }
    // Own process group, so that a timeout or Ctrl-C kills the benchmark's whole tree;
    // the launcher kills it too if the collector dies.
    let _ = sys::setpgid(0, 0);
    slot.store(sys::getpid(), Ordering::SeqCst);
    if sys::die_with_parent().is_err() || sys::getppid() != *run_parent {
        sys::exit(126);
    }
    // The report pipe and the latch above every target number, close-on-exec: installing
    // the targets cannot clobber them, and the program inherits neither.
    let above = request.highest_target() + 1;
    let _ = sys::allow_descriptors(above as u64 + 2);
    let report_fd = match sys::dup_cloexec(*received_report, above) {
        Ok(fd) => fd,
        Err(errno) => {
            report(
                *received_report,
                Message::LauncherFailed {
                    step: Step::Setup,
                    errno,
                },
            );
            sys::exit(127)
        }
    };
    let fail = |step, errno| -> ! {
        report(report_fd, Message::LauncherFailed { step, errno });
        sys::exit(127)
    };
    let latch_fd = match received_latch.map(|g| sys::dup_cloexec(g, above)) {
        Some(Err(errno)) => fail(Step::Setup, errno),
        Some(Ok(fd)) => Some(fd),
        None => None,
    };
    let mut fds = [-1i32; MAX_TARGETS];
    let fds = &mut fds[..passed.len()];
    fds.copy_from_slice(passed);
    if let Err(errno) = install(fds, request) {
        fail(Step::Setup, errno);
    }
    // In its own process group already, so that no kill of the group can miss it.
    report(
        report_fd,
        Message::Started {
            pid: sys::getpid(),
            run_parent: if *direct { 0 } else { *run_parent },
        },
    );
    sys::set_aslr(!request.no_aslr);
    if request.cpus {
        if let Err(errno) = sys::set_cpus(&request.cpu_mask) {
            fail(Step::Setup, errno);
        }
    }
    if let Some(latch) = latch_fd {
        let mut byte = [0u8; 1];
        if sys::read(latch, &mut byte) != Ok(1) {
            // End of file: the collector gave up on this run.
            sys::exit(126);
        }
        sys::close(latch);
    }
    let (args, env) = table.split_at(request.args + 1);
    // SAFETY: `program` and every pointer in `args` and `env` point to NUL-terminated
    // strings inside the request's mapping, and both arrays end with a NULL.
    let errno = unsafe { sys::execve(*program, args.as_ptr(), env.as_ptr()) };
    report(report_fd, Message::ExecFailed { errno });
    sys::exit(127)
}

/// Put the received descriptors `fds` at the request's target numbers. A received
/// descriptor may sit at a number another one is meant for: it is moved away first.
fn install(fds: &mut [i32], request: &ReceivedRequest) -> Result<(), i32> {
    for i in 0..fds.len() {
        let target = request.target(i);
        for later in fds.iter_mut().skip(i + 1) {
            if *later == target {
                *later = sys::dup_cloexec(*later, 0)?;
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
