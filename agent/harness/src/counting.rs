//! In-process allocation counting for Rust benchmarks: the path for programs the preload
//! agent cannot see into (a custom `#[global_allocator]` such as jemalloc or mimalloc, a
//! statically linked binary).
//!
//! Wrap the program's allocator and run it under `sbs-profile --alloc --alloc-harness`:
//!
//! ```no_run
//! use std::alloc::System;
//! use sbs_harness::CountingAlloc;
//!
//! #[global_allocator]
//! static GLOBAL: CountingAlloc<System> = CountingAlloc::new(System);
//! # fn main() {}
//! ```
//!
//! The wrapper counts into the same report file, found and claimed by the same code
//! (`sbs_agent_abi::attach`), with the same slot layout and update rules
//! (`sbs_agent_abi::counters`), as the agent: blocks, requested bytes (from the
//! `Layout`, so no block header is needed), resizes, live and peak bytes, per process
//! image, forks included. Outside `sbs-profile` (no report file announced) it only forwards.
//! What it cannot see: allocations that do not go through the Rust global allocator
//! (C libraries calling `malloc`). The collector reports its numbers with source
//! `harness`, never mixed with the agent's.
//!
//! Like `stats_alloc`'s `StatsAlloc`, it is a `GlobalAlloc` wrapper; unlike it, it keeps
//! the peak and reports across process boundaries.

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_char;
use std::ptr::null_mut;
use std::sync::atomic::Ordering::{Acquire, Release};
use std::sync::atomic::{AtomicPtr, AtomicU8};

use sbs_agent_abi::attach::{self, Report};
use sbs_agent_abi::counters::{self, ForkCarry, ForkSnapshot};
use sbs_agent_abi::tree;
use sbs_agent_abi::{
    Origin, Record, Slot, ENV_HARNESS_FD_C, ENV_HARNESS_TOKEN_C, HEADER_SIZE, REPORT_SIZE,
};

/// A `GlobalAlloc` that forwards to `A` and counts into sbs-profile's report file.
#[derive(Debug, Default)]
pub struct CountingAlloc<A> {
    inner: A,
}

impl<A> CountingAlloc<A> {
    /// Wrap `inner`.
    pub const fn new(inner: A) -> Self {
        CountingAlloc { inner }
    }
}

static SLOT: AtomicPtr<Slot> = AtomicPtr::new(null_mut());
static REPORT: AtomicPtr<Report> = AtomicPtr::new(null_mut());
static STATE: AtomicU8 = AtomicU8::new(UNINIT);
const UNINIT: u8 = 0;
const RUNNING: u8 = 1;
const DONE: u8 = 2;
/// The parent's counts from the `pthread_atfork` prepare handler to the child handler.
static FORK: ForkCarry = ForkCarry::new();

/// The calling thread's record: keyed by `pthread_self()`, unique among live threads.
/// (No thread-exit fold here: a thread's batched change stays in its record, where the
/// collector adds it to the live total, and the peak's stated bound covers it.)
fn record(slot: &Slot) -> &Record {
    // SAFETY: pthread_self has no preconditions and cannot fail.
    counters::record_of(slot, unsafe { libc::pthread_self() } as u64).0
}

/// Bring the process tree's total up to date after a count (nothing while this image is
/// alone).
fn sync_tree(slot: &Slot) {
    if let Some(report) = report() {
        tree::sync(&report.header, slot);
    }
}

/// This image's slot, starting on first use (an allocation).
fn slot() -> Option<&'static Slot> {
    if STATE.load(Acquire) != DONE {
        start();
    }
    started_slot()
}

/// This image's slot if counting has started; never starts it. A release uses this: a
/// block freed before the first allocation started counting was not counted either.
fn started_slot() -> Option<&'static Slot> {
    if STATE.load(Acquire) != DONE {
        return None;
    }
    // SAFETY: a non-null SLOT points into the report file's mapping, which is never unmapped.
    unsafe { SLOT.load(Acquire).as_ref() }
}

/// Start counting, once. A thread that allocates while another is starting waits for it
/// (a few system calls), so that every block is counted from the first one on; were it
/// handed out uncounted, its release would be counted and live bytes would drift below
/// zero. Starting never allocates through the global allocator (only libc calls), so
/// the starting thread cannot wait for itself.
fn start() {
    if STATE
        .compare_exchange(UNINIT, RUNNING, Acquire, Acquire)
        .is_err()
    {
        while STATE.load(Acquire) != DONE {
            std::hint::spin_loop();
        }
        return;
    }
    let found = attach::find_report::<Libc>(ENV_HARNESS_FD_C, ENV_HARNESS_TOKEN_C);
    if let Some(report) = found {
        REPORT.store((report as *const Report).cast_mut(), Release);
        claim(Origin::Load, None);
        // SAFETY: registering plain `extern "C"` functions without arguments.
        unsafe { libc::pthread_atfork(Some(before_fork), None, Some(in_fork_child)) };
    }
    STATE.store(DONE, Release);
    if found.is_some() {
        // After DONE: `atexit` may allocate, which now counts instead of waiting for
        // this very start. A forked child inherits the registration.
        // SAFETY: registering a plain `extern "C"` function without arguments.
        unsafe { libc::atexit(leave_tree) };
    }
}

/// At `exit`: this image's heap leaves the process tree's total (see
/// `sbs_agent_abi::tree`). An image that ends with `_exit` or a signal does not leave,
/// and the tree peak's stated bound includes its last bytes.
extern "C" fn leave_tree() {
    if let (Some(slot), Some(report)) = (started_slot(), report()) {
        attach::leave_at_end::<Libc>(report, slot);
    }
}

/// The mapped report file, once found.
fn report() -> Option<&'static Report> {
    // SAFETY: a non-null REPORT is the report file's mapping, never unmapped.
    unsafe { REPORT.load(Acquire).as_ref() }
}

/// The system calls of attaching to the report file, through the `libc` crate.
struct Libc;

impl attach::Env for Libc {
    /// Read at the first allocation, not by a constructor (an `.init_array` entry in this
    /// rlib is linked only if something else in its object file is): a Rust program's
    /// first allocation comes before any thread it starts (starting one allocates) and
    /// before any `setenv` of its own (`std::env::set_var` allocates its C strings first),
    /// so no other thread can be changing the environment while it is read.
    fn env(name: &'static [u8]) -> Option<&'static [u8]> {
        // SAFETY: `name` is NUL-terminated (the abi's *_C constants).
        let value = unsafe { libc::getenv(name.as_ptr().cast::<c_char>()) };
        if value.is_null() {
            return None;
        }
        // SAFETY: getenv's result is a NUL-terminated string in the environment.
        Some(unsafe { std::ffi::CStr::from_ptr(value) }.to_bytes())
    }
}

impl attach::Os for Libc {
    fn read_header(fd: i32, out: &mut [u8; HEADER_SIZE]) -> bool {
        // SAFETY: reads at most out.len() bytes into the caller's buffer.
        let got = unsafe { libc::pread(fd, out.as_mut_ptr().cast(), out.len(), 0) };
        got == out.len() as isize
    }

    fn map(fd: i32) -> Option<&'static Report> {
        // SAFETY: a fresh shared mapping of the collector's report file (the caller checked
        // its header).
        let map = unsafe {
            libc::mmap(
                null_mut(),
                REPORT_SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if map == libc::MAP_FAILED || map.is_null() {
            return None;
        }
        // SAFETY: REPORT_SIZE bytes, page-aligned, shared, never unmapped; every bit
        // pattern is a valid `Report` (atomics only).
        Some(unsafe { &*map.cast::<Report>() })
    }

    fn pids() -> (u64, u64) {
        // SAFETY: getpid/getppid have no preconditions.
        let (pid, ppid) = unsafe { (libc::getpid(), libc::getppid()) };
        (pid as u64, ppid as u64)
    }
}

/// Take the next slot of the report file for this process image.
fn claim(origin: Origin, inherited: Option<ForkSnapshot>) {
    // SAFETY: a non-null REPORT is the report file's mapping, never unmapped.
    let Some(report) = (unsafe { REPORT.load(Acquire).as_ref() }) else {
        return;
    };
    let slot = attach::claim::<Libc>(report, origin, inherited);
    SLOT.store(
        slot.map_or(null_mut(), |s| (s as *const Slot).cast_mut()),
        Release,
    );
}

extern "C" fn before_fork() {
    // SAFETY: a non-null SLOT points into the live mapping.
    if let Some(slot) = unsafe { SLOT.load(Acquire).as_ref() } {
        FORK.save(slot);
    }
}

extern "C" fn in_fork_child() {
    if SLOT.load(Acquire).is_null() {
        return;
    }
    claim(Origin::Fork, Some(FORK.saved()));
}

// SAFETY: every method forwards to `A` with the caller's arguments unchanged and only
// adds counting, which neither allocates nor touches the blocks.
unsafe impl<A: GlobalAlloc> GlobalAlloc for CountingAlloc<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is passed on.
        let p = unsafe { self.inner.alloc(layout) };
        if !p.is_null() {
            if let Some(slot) = slot() {
                counters::on_alloc(slot, record(slot), layout.size() as u64);
                sync_tree(slot);
            }
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is passed on.
        let p = unsafe { self.inner.alloc_zeroed(layout) };
        if !p.is_null() {
            if let Some(slot) = slot() {
                counters::on_alloc(slot, record(slot), layout.size() as u64);
                sync_tree(slot);
            }
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract is passed on.
        unsafe { self.inner.dealloc(ptr, layout) };
        if let Some(slot) = started_slot() {
            counters::on_free(slot, record(slot), layout.size() as u64);
            sync_tree(slot);
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract is passed on.
        let p = unsafe { self.inner.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if let Some(slot) = slot() {
                counters::on_realloc(
                    slot,
                    record(slot),
                    Some(layout.size() as u64),
                    new_size as u64,
                );
                sync_tree(slot);
            }
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::alloc::System;

    #[test]
    fn forwards_without_a_report_file() {
        let a = CountingAlloc::new(System);
        let layout = Layout::from_size_align(64, 8).unwrap();
        // SAFETY: a valid non-zero layout; the block is freed with the same layout.
        unsafe {
            let p = a.alloc(layout);
            assert!(!p.is_null());
            let q = a.realloc(p, layout, 128);
            assert!(!q.is_null());
            a.dealloc(q, Layout::from_size_align(128, 8).unwrap());
        }
        // The test process has no report file: nothing was claimed.
        assert!(SLOT.load(Acquire).is_null());
    }
}
