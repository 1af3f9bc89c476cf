//! Fixture: `patched_threads THREADS`: THREADS threads (at least 1) each call 1000
//! distinct functions named `patched_step` (monomorphizations of one generic function)
//! once, and `patched_tiny` 10 times; the program starts no other process. So
//! `--invocations patched_step` counts THREADS * 1000 calls, patched in-process at 1000
//! sites (each patch protects and unprotects code: two of the kernel's mapping records),
//! and `--invocations patched_tiny` THREADS * 10 calls, at a site too short to patch
//! (a lone `ret`), so counted with a uprobe.
use std::hint::black_box;

#[inline(never)]
fn patched_step<const A: u8, const B: u8, const C: u8>(x: u64) -> u64 {
    black_box(x)
        .wrapping_mul(31)
        .wrapping_add(A as u64 * 100 + B as u64 * 10 + C as u64)
}

// One `ret`: shorter than the five bytes a patched jump needs.
std::arch::global_asm!(
    ".text",
    ".globl patched_tiny",
    ".type patched_tiny, @function",
    "patched_tiny:",
    "ret",
    ".size patched_tiny, . - patched_tiny",
);

extern "C" {
    fn patched_tiny();
}

macro_rules! ones {
    ($s:ident, $a:literal, $b:literal) => {
        $s = patched_step::<$a, $b, 0>($s);
        $s = patched_step::<$a, $b, 1>($s);
        $s = patched_step::<$a, $b, 2>($s);
        $s = patched_step::<$a, $b, 3>($s);
        $s = patched_step::<$a, $b, 4>($s);
        $s = patched_step::<$a, $b, 5>($s);
        $s = patched_step::<$a, $b, 6>($s);
        $s = patched_step::<$a, $b, 7>($s);
        $s = patched_step::<$a, $b, 8>($s);
        $s = patched_step::<$a, $b, 9>($s);
    };
}

macro_rules! tens {
    ($s:ident, $a:literal) => {
        ones!($s, $a, 0);
        ones!($s, $a, 1);
        ones!($s, $a, 2);
        ones!($s, $a, 3);
        ones!($s, $a, 4);
        ones!($s, $a, 5);
        ones!($s, $a, 6);
        ones!($s, $a, 7);
        ones!($s, $a, 8);
        ones!($s, $a, 9);
    };
}

/// Every `patched_step` once, and `patched_tiny` 10 times.
fn work(seed: u64) -> u64 {
    let mut s = seed;
    tens!(s, 0);
    tens!(s, 1);
    tens!(s, 2);
    tens!(s, 3);
    tens!(s, 4);
    tens!(s, 5);
    tens!(s, 6);
    tens!(s, 7);
    tens!(s, 8);
    tens!(s, 9);
    for _ in 0..10 {
        // SAFETY: `patched_tiny` only returns.
        unsafe { patched_tiny() };
    }
    s
}

fn main() {
    let threads: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2)
        .max(1);
    let all: Vec<_> = (0..threads)
        .map(|t| std::thread::spawn(move || work(t + 1)))
        .collect();
    let sum = all
        .into_iter()
        .map(|h| h.join().expect("a thread panicked"))
        .fold(0u64, u64::wrapping_add);
    std::process::exit(i32::from(black_box(sum) == 0));
}
