//! Fixture: `calls N THREADS` makes a known number of calls to `#[inline(never)]`
//! functions, for invocation counts:
//! - `calls::work`: N times from the main thread, N times from each of THREADS threads
//!   and N times in a forked child: N * (THREADS + 2) in all;
//! - `<calls::Widget as core::fmt::Display>::fmt`: N times (main thread);
//! - `calls::generic_step::<u32>`: N times, `calls::generic_step::<u64>`: 2 * N times;
//! - `calls::work_more`: exactly once.
use std::fmt::{self, Write};
use std::hint::black_box;

#[inline(never)]
fn work(x: u64) -> u64 {
    black_box(x).wrapping_mul(3)
}

#[inline(never)]
fn work_more(x: u64) -> u64 {
    black_box(x).wrapping_add(1)
}

#[inline(never)]
fn generic_step<T: Into<u64>>(x: T) -> u64 {
    black_box(x.into()).wrapping_add(7)
}

struct Widget(u64);

impl fmt::Display for Widget {
    #[inline(never)]
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "w{}", self.0 % 10)
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let threads: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(2);

    let handles: Vec<_> = (0..threads)
        .map(|t| std::thread::spawn(move || (0..n).fold(t, |acc, i| acc ^ work(i))))
        .collect();
    let mut acc = handles
        .into_iter()
        .map(|h| h.join().expect("worker thread"))
        .fold(0, |a, b| a ^ b);
    for i in 0..n {
        acc ^= work(i);
    }
    let mut text = String::new();
    for i in 0..n {
        text.clear();
        write!(text, "{}", Widget(i)).expect("write to a String");
        acc ^= text.len() as u64;
        acc ^= generic_step(i as u32);
        acc ^= generic_step(i) ^ generic_step(i + 1);
    }
    acc ^= work_more(acc);

    // SAFETY: all threads were joined, so the process is single-threaded here; the child
    // only calls `work` and leaves with `_exit`.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let mut c = 0;
        for i in 0..n {
            c ^= work(i);
        }
        black_box(c);
        // SAFETY: ends the child without running the parent's exit handlers twice.
        unsafe { libc::_exit(0) };
    }
    assert!(pid > 0, "fork failed");
    let mut status = 0;
    // SAFETY: waiting for our own child into a live local.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    black_box(acc);
    std::process::exit(libc::WEXITSTATUS(status));
}
