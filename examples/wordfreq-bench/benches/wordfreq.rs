//! The word-frequency example as a harnessed suite: the text is generated in the set-up
//! (not measured), the operations count words and pick the top ones.
//!
//! `cargo bench -p wordfreq-bench` times them; `sbs-profile --bench wordfreq
//! --invocations 'wordfreq_bench::count' --alloc` adds invocations and allocations per
//! operation.
use std::collections::HashMap;

use sbs_harness::{black_box, Suite};
use wordfreq_bench::{count, generate, top};

fn main() {
    let mut suite = Suite::new();
    suite
        .bench("wordfreq/count", |p| generate(p.get("words")))
        .size("words", 200_000)
        .run(|text| count(black_box(text)).len());
    suite
        .bench("wordfreq/top", |p| {
            // Leaked so that the counts can borrow the words for the whole process.
            let text: &'static [String] = Vec::leak(generate(p.get("words")));
            (count(text), p.get::<usize>("k"))
        })
        .param("words", 200_000) // the distinct words, not their number, set its cost
        .param("k", 3)
        .run(|(freq, k): &mut (HashMap<&'static str, usize>, usize)| top(black_box(freq), *k));
    suite.main();
}
