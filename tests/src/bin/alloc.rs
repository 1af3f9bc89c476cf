//! Fixture with known allocations, for the allocation agent's tests.
//!
//! `alloc MODE ARGS...`; every block is a `Vec<u8>` of exact capacity, i.e. one `malloc`
//! of exactly that size, and a final 1 MiB block makes the peak deterministic even with
//! threads (DHAT serialises threads, the agent does not; the peak must not depend on it):
//! - `threads T N SIZE`: T threads each allocate and free N blocks of SIZE bytes.
//! - `fork K SIZE`: the process forks; the child allocates K blocks of SIZE and frees them.
//! - `exec T N SIZE`: runs `alloc threads T N SIZE` as a child program and waits.
//! - `exit-now N SIZE`: allocates N blocks, keeps them, and ends with `_exit(0)`.
//! - `stress T N`: T threads allocate, reallocate and free N blocks each, concurrently.
//! - `churn N`: allocation-heavy single-threaded work for benchmarks: a `BTreeMap` of N
//!   formatted keys to byte vectors, then N short-lived strings.
//! - `ring-procs P N`: P forked children each run `ring 1 N` at once; the parent waits.
//! - `fork-then-ring N`: forks a child that exits at once, then runs `ring 1 N` itself.
//! - `ring T N`: the worst case for an allocation hook: T threads each run N rounds of
//!   freeing one block of a 64-slot ring and allocating a new one of 16-79 bytes in its
//!   place (raw `malloc`/`free`, glibc's per-thread cache always hot), concurrently. With
//!   T = 1 the main thread does the work and no thread is created.
//! - `phases T N SERIAL`: T threads each allocate N blocks of 1000 bytes, hold them until
//!   all have (a barrier: the concurrent peak is T x N x 1000 bytes over the base in any
//!   interleaving), and free them. With SERIAL = 1 the main thread then allocates one
//!   block twice that size alone, which makes the serial phase the peak.
//! - `fork-parked T N`: T threads each allocate N blocks of 100 bytes and wait, holding
//!   them, while the main thread forks; the child allocates 50 blocks of 64 bytes, keeps a
//!   3000-byte block and ends with `_exit`; then the threads free and end.
//! - `boxes N`: boxes N values with `Box::new` (and nothing else in a `Box`).
//! - `fork-threads T N`: T threads allocate in a loop while the main thread forks 20
//!   times; each child allocates and exits.
//! - `spawn HOW PROGRAM ARGS...`: runs PROGRAM as a child and waits; HOW is `plain`,
//!   `no-preload` (the child's environment lacks `LD_PRELOAD`) or `closefrom` (the child
//!   closes every descriptor from 3 up before its exec).
use std::hint::black_box;
use std::process::Command;

fn block(size: usize) -> Vec<u8> {
    black_box(Vec::with_capacity(size))
}

fn burst(n: usize, size: usize) {
    for _ in 0..n {
        drop(block(size));
    }
}

fn peak_block() {
    drop(block(1 << 20));
}

fn arg(args: &[String], i: usize) -> usize {
    args.get(i)
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("argument {i} must be a number; see the fixture's doc"))
}

fn threads(t: usize, n: usize, size: usize) {
    let handles: Vec<_> = (0..t)
        .map(|_| std::thread::spawn(move || burst(n, size)))
        .collect();
    for h in handles {
        h.join().expect("thread");
    }
}

/// One thread of `ring`: N rounds of free + malloc over a 64-slot ring. Sizes come from
/// an LCG seeded by the thread's index, so every run makes the same calls.
fn ring(index: usize, n: usize) {
    let mut slots = [std::ptr::null_mut::<libc::c_void>(); 64];
    let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ index as u64;
    for i in 0..n {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let size = 16 + (x >> 58) as usize; // 16..=79
        let at = i % slots.len();
        // SAFETY: each slot is null or a live block from malloc, freed once.
        unsafe {
            libc::free(slots[at]);
            slots[at] = black_box(libc::malloc(size));
        }
    }
    for p in slots {
        // SAFETY: as above.
        unsafe { libc::free(p) };
    }
}

fn wait(pid: libc::pid_t) -> i32 {
    let mut status = 0;
    // SAFETY: waiting for our own child into a live local.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    status
}

fn spawn(args: &[String]) {
    use std::os::unix::process::CommandExt;
    let [how, program, rest @ ..] = args else {
        panic!("usage: alloc spawn plain|no-preload|closefrom PROGRAM ARGS...");
    };
    let mut child = Command::new(program);
    child.args(rest);
    match how.as_str() {
        "plain" => {}
        "no-preload" => {
            child.env_remove("LD_PRELOAD");
        }
        "closefrom" => {
            // SAFETY: the closure runs in the forked child before exec and makes one
            // async-signal-safe system call. It also closes std's exec-error pipe, so a
            // failed exec shows as exit status 127 from the child rather than an error here.
            unsafe {
                child.pre_exec(|| {
                    libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
                    Ok(())
                });
            }
        }
        other => panic!("unknown spawn mode {other}: plain, no-preload or closefrom"),
    }
    let status = child.status().expect("run the child program");
    assert!(status.success(), "child program failed: {status}");
}

// One arm per mode, each a few lines next to its known counts: read best as one dispatch.
fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("threads") => threads(arg(&args, 2), arg(&args, 3), arg(&args, 4)),
        Some("fork") => {
            let (k, size) = (arg(&args, 2), arg(&args, 3));
            let kept = block(100);
            // SAFETY: single-threaded here; the child only allocates and exits.
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                burst(k, size);
                drop(kept); // frees a block allocated before the fork
                std::process::exit(0);
            }
            assert_eq!(wait(pid), 0, "fork child failed");
            drop(kept);
        }
        Some("exec") => {
            let status = Command::new(&args[0])
                .args(["threads", &args[2], &args[3], &args[4]])
                .status()
                .expect("run the child program");
            assert!(status.success(), "child program failed: {status}");
        }
        Some("exit-now") => {
            let (n, size) = (arg(&args, 2), arg(&args, 3));
            let kept: Vec<Vec<u8>> = (0..n).map(|_| block(size)).collect();
            black_box(&kept);
            // SAFETY: ends the process at once, without destructors or atexit handlers.
            unsafe { libc::_exit(0) };
        }
        Some("stress") => {
            let (t, n) = (arg(&args, 2), arg(&args, 3));
            let handles: Vec<_> = (0..t)
                .map(|i| {
                    std::thread::spawn(move || {
                        let mut keep = Vec::new();
                        for j in 0..n {
                            let mut v: Vec<u8> = block(1 + (i + j) % 200);
                            v.reserve_exact(300); // a realloc
                            keep.push(v);
                            if keep.len() > 64 {
                                keep.clear();
                            }
                        }
                    })
                })
                .collect();
            for h in handles {
                h.join().expect("thread");
            }
        }
        Some("ring") => {
            let (t, n) = (arg(&args, 2), arg(&args, 3));
            if t == 1 {
                // A single-threaded program: no second thread at all.
                ring(0, n);
            } else {
                std::thread::scope(|s| {
                for i in 0..t {
                        s.spawn(move || ring(i, n));
                    }
                });
            }
        }
        Some("fork-then-ring") => {
            // A child that ends at once, then `ring 1 N` in the parent: a program that
            // spawned one helper before its work.
            let n = arg(&args, 2);
            // SAFETY: fork in a single-threaded program; the child only exits.
            match unsafe { libc::fork() } {
                0 => std::process::exit(0),
                pid if pid > 0 => assert_eq!(wait(pid), 0, "the child failed"),
                _ => panic!("fork failed"),
            }
            ring(0, n);
        }
        Some("thread-then-ring") => {
            // A thread that allocates once and ends, then `ring 1 N` in the main thread: a
            // program whose helper threads have finished before its main work.
            let n = arg(&args, 2);
            std::thread::spawn(|| drop(black_box(block(100))))
                .join()
                .expect("thread");
            ring(0, n);
        }
        Some("waves") => {
            // W waves: two threads run the ring while the main thread runs it too, then
            // the main thread runs it alone (solo again once the two have ended). Every
            // block is freed; the counts depend on W and N only.
            let (waves, n) = (arg(&args, 2), arg(&args, 3));
            for wave in 0..waves {
                std::thread::scope(|s| {
                    let one = s.spawn(move || ring(3 * wave + 1, n));
                    let two = s.spawn(move || ring(3 * wave + 2, n));
                    ring(3 * wave, n);
                    // Joined, so ended (their destructors ran) before the solo phase.
                    one.join().expect("thread");
                    two.join().expect("thread");
                });
                ring(3 * wave, n);
            }
        }
        Some("worker-ring") => {
            // `ring 1 N` in one spawned thread while the main thread waits in `join`: the
            // shape of a test harness or a program with one busy worker.
            let n = arg(&args, 2);
            std::thread::spawn(move || ring(0, n))
                .join()
                .expect("thread");
        }
        Some("ring-procs") => {
            // P forked children each run `ring 1 N` at once while the parent waits: the
            // agent's process-tree mode.
            let (p, n) = (arg(&args, 2), arg(&args, 3));
            let children: Vec<libc::pid_t> = (0..p)
                .map(|i| {
                    // SAFETY: fork in a single-threaded program; the child only runs
                    // `ring` and exits.
                    match unsafe { libc::fork() } {
                        0 => {
                            ring(i, n);
                            std::process::exit(0)
                        }
                        pid if pid > 0 => pid,
                        _ => panic!("fork failed"),
                    }
                })
                .collect();
            for pid in children {
                assert_eq!(wait(pid), 0, "a ring child failed");
            }
        }
        Some("phases") => {
            let (t, n, serial) = (arg(&args, 2), arg(&args, 3), arg(&args, 4));
            let all_hold = std::sync::Barrier::new(t);
            std::thread::scope(|s| {
                let workers: Vec<_> = (0..t)
                    .map(|_| {
                        s.spawn(|| {
                            let mut held = Vec::with_capacity(n);
                            for _ in 0..n {
                                held.push(block(1000));
                            }
                            all_hold.wait();
                            drop(black_box(held));
                        })
                    })
                    .collect();
                // Joined, not only waited for by the scope: a joined thread has ended
                // (its thread-local destructors ran), so the live bytes at exit do not
                // depend on how far the threads got.
                for w in workers {
                    w.join().expect("thread");
                }
            });
            if serial == 1 {
                drop(block(2 * t * n * 1000));
            }
        }
        Some("fork-parked") => {
            let (t, n) = (arg(&args, 2), arg(&args, 3));
            let (ready, go) = (std::sync::Barrier::new(t + 1), std::sync::Barrier::new(t + 1));
            std::thread::scope(|s| {
                let workers: Vec<_> = (0..t)
                    .map(|_| {
                        s.spawn(|| {
                            let mut held = Vec::with_capacity(n);
                            for _ in 0..n {
                                held.push(block(100));
                            }
                            ready.wait();
                            go.wait();
                            drop(black_box(held));
                        })
                    })
                    .collect();
                ready.wait();
                // SAFETY: the other threads are parked on a barrier; the child only
                // allocates through malloc (fork-safe in glibc) and ends with _exit.
                let pid = unsafe { libc::fork() };
                if pid == 0 {
                    burst(50, 64);
                    let kept = block(3000);
                    black_box(&kept);
                    // SAFETY: ends the child at once, keeping its blocks.
                    unsafe { libc::_exit(0) };
                }
                assert_eq!(wait(pid), 0, "fork child failed");
                go.wait();
                for w in workers {
                    w.join().expect("thread");
                }
            });
        }
        Some("boxes") => {
            let n = arg(&args, 2);
            let mut kept: Vec<Box<u64>> = Vec::with_capacity(n);
            for i in 0..n {
                kept.push(Box::new(black_box(i as u64)));
            }
            black_box(&kept);
        }
        Some("churn") => {
            let n = arg(&args, 2);
            let mut map = std::collections::BTreeMap::new();
            for i in 0..n {
                map.insert(format!("key-{i}"), vec![0u8; i % 100]);
            }
            black_box(map.values().map(Vec::len).sum::<usize>());
            drop(map);
            let mut strings = Vec::new();
            for i in 0..n {
                strings.push(i.to_string());
                if strings.len() > 1000 {
                    strings.clear();
                }
            }
            black_box(strings);
        }
        Some("fork-threads") => {
            let (t, n) = (arg(&args, 2), arg(&args, 3));
            let handles: Vec<_> = (0..t)
                .map(|_| std::thread::spawn(move || burst(n, 48)))
                .collect();
            for _ in 0..20 {
                // SAFETY: the child only allocates through malloc (fork-safe in glibc,
                // which resets its arena locks in the child) and exits.
                let pid = unsafe { libc::fork() };
                if pid == 0 {
                    burst(100, 64);
                    // SAFETY: ends the child without running the parent's exit handlers.
                    unsafe { libc::_exit(0) };
                }
                assert_eq!(wait(pid), 0, "fork child failed");
            }
            for h in handles {
                h.join().expect("thread");
            }
        }
        Some("spawn") => spawn(&args[2..]),
        _ => panic!(
            "usage: alloc threads|fork|exec|exit-now|stress|ring|phases|fork-parked|boxes|churn|fork-threads|spawn ARGS..."
        ),
    }
    peak_block();
}
