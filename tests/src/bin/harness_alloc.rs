//! Fixture for the in-process path (`--alloc-harness`): its global allocator is
//! `sbs_harness::CountingAlloc` around an allocator that is either glibc's (`System`) or,
//! from the start of `main` on, a private bump allocator over one `mmap`ed arena that
//! never calls malloc (what jemalloc or mimalloc look like to the preload agent).
//! - `blocks N SIZE`: N blocks of SIZE bytes through `System`, then a 1 MiB block.
//! - `private N SIZE`: the same through the private allocator.
//! - `fork N SIZE`: keeps N bytes, forks a child that allocates and frees SIZE bytes and
//!   exits, waits for it, then allocates and frees SIZE / 2 bytes. The tree's peak: the
//!   runtime's own blocks twice (parent and child), 2 N, and SIZE.
use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use sbs_harness::CountingAlloc;

#[global_allocator]
static GLOBAL: CountingAlloc<Switch> = CountingAlloc::new(Switch);

static PRIVATE: AtomicBool = AtomicBool::new(false);
static ARENA: AtomicUsize = AtomicUsize::new(0);
static NEXT: AtomicUsize = AtomicUsize::new(0);
const ARENA_SIZE: usize = 1 << 30;

struct Switch;

fn in_arena(ptr: *mut u8) -> bool {
    let base = ARENA.load(Ordering::Relaxed);
    base != 0 && (ptr as usize) >= base && (ptr as usize) < base + ARENA_SIZE
}

fn bump(layout: Layout) -> *mut u8 {
    let base = ARENA.load(Ordering::Relaxed);
    let mut at = NEXT.load(Ordering::Relaxed);
    loop {
        let start = (base + at).next_multiple_of(layout.align()) - base;
        let end = start + layout.size();
        if end > ARENA_SIZE {
            return std::ptr::null_mut();
        }
        match NEXT.compare_exchange(at, end, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return (base + start) as *mut u8,
            Err(now) => at = now,
        }
    }
}

// SAFETY: blocks come from System or from the arena (never handed out twice); each is
// released by the allocator that made it (arena blocks are never reused).
unsafe impl GlobalAlloc for Switch {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if PRIVATE.load(Ordering::Relaxed) {
            bump(layout)
        } else {
            // SAFETY: the caller's contract.
            unsafe { System.alloc(layout) }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if !in_arena(ptr) {
            // SAFETY: not an arena block, so System made it.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if !in_arena(ptr) && !PRIVATE.load(Ordering::Relaxed) {
            // SAFETY: the caller's contract; System made the block.
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        let Ok(new_layout) = Layout::from_size_align(new_size, layout.align()) else {
            return std::ptr::null_mut();
        };
        // SAFETY: a valid layout.
        let new = unsafe { self.alloc(new_layout) };
        if !new.is_null() {
            // SAFETY: both blocks hold at least min(old, new) bytes and are distinct.
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
        }
        new
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(2).and_then(|a| a.parse().ok()).expect("N");
    let size: usize = args.get(3).and_then(|a| a.parse().ok()).expect("SIZE");
    if args.get(1).map(String::as_str) == Some("fork") {
        let kept = black_box(vec![1u8; n]);
        // SAFETY: fork in a single-threaded program; the child allocates and exits.
        match unsafe { libc::fork() } {
            0 => {
                drop(black_box(vec![2u8; size]));
                std::process::exit(0);
            }
            pid if pid > 0 => {
                let mut status = 0;
                // SAFETY: waiting for our own child into a live local.
                unsafe { libc::waitpid(pid, &mut status, 0) };
                assert_eq!(status, 0, "the child failed");
            }
            _ => panic!("fork failed"),
        }
        drop(black_box(vec![3u8; size / 2]));
        drop(kept);
        return;
    }
    if args.get(1).map(String::as_str) == Some("private") {
        // SAFETY: an anonymous private mapping; its address is published before use.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                ARENA_SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED, "mmap the arena");
        ARENA.store(base as usize, Ordering::Relaxed);
        PRIVATE.store(true, Ordering::Relaxed);
    }
    for _ in 0..n {
        drop(black_box(Vec::<u8>::with_capacity(size)));
    }
    drop(black_box(Vec::<u8>::with_capacity(1 << 20)));
}
