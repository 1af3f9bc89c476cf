//! Fixture: `thread_calls N THREADS [fork]` calls the `#[inline(never)]`
//! `thread_calls::work` from several threads at once, for the cost of a counted call under
//! threads (benches/inproc/run.sh) and for exact counts across threads and forks.
//!
//! - `thread_calls N THREADS`: THREADS threads (at least 1) each call `work` N times, all
//!   at the same time (they start together): N * THREADS calls.
//! - `thread_calls N THREADS fork`: the main thread calls `work` N times, starts the
//!   THREADS threads, and while they run forks twice: a child made by libc's `fork` that
//!   calls `work` N times, then starts a thread that calls it N times; and a child made by
//!   the raw `fork` system call (no `pthread_atfork` handlers run) that calls it N times.
//!   Meanwhile the main thread calls `work` N more times. N * (THREADS + 5) calls in all;
//!   the exit status is non-zero if a child failed.
use std::hint::black_box;
use std::sync::{Arc, Barrier};

#[inline(never)]
fn work(x: u64) -> u64 {
    black_box(x).wrapping_mul(3)
}

/// `work` N times.
fn calls(n: u64, seed: u64) -> u64 {
    (0..n).fold(seed, |acc, i| acc ^ work(i))
}

/// Start `threads` threads that each call `work` N times once they are all ready.
fn start(n: u64, threads: u64) -> Vec<std::thread::JoinHandle<u64>> {
    let ready = Arc::new(Barrier::new(threads as usize));
    (0..threads)
        .map(|t| {
            let ready = Arc::clone(&ready);
            std::thread::spawn(move || {
                ready.wait();
                calls(n, t)
            })
        })
        .collect()
}

/// Wait for child `pid`; whether it exited with status 0.
fn reaped_ok(pid: libc::pid_t) -> bool {
    let mut status = 0;
    // SAFETY: waiting for our own child into a live local.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    r == pid && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
}

/// The `fork` scenario; whether both children succeeded.
fn with_forks(n: u64, threads: u64) -> bool {
    let mut acc = calls(n, 0);
    let handles = start(n, threads);
    // SAFETY: the child only calls `work`, starts and joins one thread, and leaves with
    // `_exit`; glibc's fork handlers make malloc usable in it.
    let child = unsafe { libc::fork() };
    if child == 0 {
        let mut c = calls(n, 1);
        c ^= std::thread::spawn(move || calls(n, 2)).join().unwrap_or(0);
        black_box(c);
        // SAFETY: ends the child without running the parent's exit handlers.
        unsafe { libc::_exit(0) };
    }
    // SAFETY: the raw system call; the child only calls `work` (no libc, no locks) and
    // ends with `exit_group`.
    let raw = unsafe { libc::syscall(libc::SYS_fork) };
    if raw == 0 {
        black_box(calls(n, 3));
        // SAFETY: ends the child at once.
        unsafe { libc::syscall(libc::SYS_exit_group, 0) };
    }
    acc ^= calls(n, 4);
    for h in handles {
        acc ^= h.join().unwrap_or(0);
    }
    black_box(acc);
    child > 0 && raw > 0 && reaped_ok(child) && reaped_ok(raw as libc::pid_t)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let threads: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1).max(1);
    let fork = args.next().is_some_and(|a| a == "fork");
    if fork {
        std::process::exit(if with_forks(n, threads) { 0 } else { 1 });
    }
    let acc = start(n, threads)
        .into_iter()
        .map(|h| h.join().unwrap_or(0))
        .fold(0, |a, b| a ^ b);
    black_box(acc);
}
