//! Fixture: `work N` runs a deterministic arithmetic loop of exactly N iterations on one
//! thread (no allocation, no hashing, no randomness), so its instruction count is a linear
//! function of N and identical from run to run; `work 1010000` does 1% more work than
//! `work 1000000`.
use std::hint::black_box;

#[inline(never)]
fn step(x: u64, i: u64) -> u64 {
    black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i) ^ (x >> 29))
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let mut x = 1u64;
    for i in 0..n {
        x = step(x, i);
    }
    // Exit status 0 whatever x is; black_box keeps the loop.
    black_box(x);
}
