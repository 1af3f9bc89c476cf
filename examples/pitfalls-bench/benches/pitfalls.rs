//! Benchmarks that measure the wrong thing, one pitfall each (AutoJMH's list), next to
//! one that does it right. `sbs-profile --bench pitfalls --instructions valgrind` warns
//! about each of the three, once, and not about `vec/sum`; see docs/harness.md.
//!
//! Build it in release mode (`cargo bench`, or `sbs-profile --bench`): the first pitfall
//! only exists where the optimizer runs.
use pitfalls_bench::{generate, sum};
use sbs_harness::{black_box, Suite};

/// What `vec/sum-constant` reads instead of its state.
static TABLE: [u64; 4096] = {
    let mut t = [0u64; 4096];
    let mut i = 0;
    while i < t.len() {
        t[i] = (i as u64).wrapping_mul(2_654_435_761);
        i += 1;
    }
    t
};

fn main() {
    let mut suite = Suite::new();
    // Right: the input and the result pass through black_box.
    suite
        .bench("vec/sum", |p| generate(p.get("n")))
        .size("n", 10_000)
        .run(|v| sum(black_box(v)));
    // Dead work: the result is discarded, so the optimizer deletes the sum.
    suite
        .bench("vec/sum-unused", |p| generate(p.get("n")))
        .size("n", 10_000)
        .run(|v| {
            sum(v);
        });
    // A constant input: the operation reads a fixed table, whatever `n` says.
    suite
        .bench("vec/sum-constant", |p| generate(p.get("n")))
        .size("n", 10_000)
        .run(|_v| sum(black_box(&TABLE)));
    // State that drifts: the first operation sorts the vector, every later one sorts a
    // sorted vector. A `.reset(...)` that restores the shuffled order is missing.
    suite
        .bench("list/sort", |p| generate(p.get("n")))
        .size("n", 100_000)
        .run(|v| {
            v.sort_unstable();
            v[0]
        });
    suite.main();
}
