//! Cold caches or drifting state: two operations whose first call can take longer than the
//! next ones. `sbs-profile --bench drift` warns about `drift/sort` alone: the drift check
//! counts the instructions of the first operations one by one (callgrind), which cold
//! caches do not change and a changed input does; see docs/harness.md.
use pitfalls_bench::sum;
use sbs_harness::{black_box, Suite};

fn main() {
    let mut suite = Suite::new();
    // Sound: nothing is mutated, the result goes through black_box. Its first operation
    // meets cold memory: `vec![0; n]` is mapped lazily (calloc above glibc's mmap
    // threshold), so the first sum takes each page's first fault, 30-40 us against the
    // later 3 us on the machine of docs/harness.md: a step of times that the timing rule
    // alone calls a drift.
    suite
        .bench("drift/sum", |p| vec![0u64; p.get("n")])
        .param("n", 20_000)
        .run(|v| sum(black_box(v)));
    // Drifting: the first operation sorts the shuffled vector in place, every later one a
    // sorted vector; no `.reset(...)`. A few microseconds, under the timing rule's 20 us.
    suite
        .bench("drift/sort", |p| pitfalls_bench::generate(p.get("n")))
        .param("n", 256)
        .run(|v| {
            v.sort_unstable();
            v[0]
        });
    suite.main();
}
