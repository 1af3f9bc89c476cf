//! The word-frequency example written as a divan user writes it: the same routines as
//! `benches/wordfreq.rs` (the sbs-harness suite), run through `sbs-divan`, which this
//! crate's manifest imports under the name `divan`. Nothing here knows sbs-profile.
//!
//! `cargo bench -p wordfreq-bench --bench wordfreq_divan` prints a timing line per
//! benchmark; `sbs-profile --bench wordfreq_divan --alloc` gives every metric per
//! operation, with the same per-operation counts as the sbs-harness suite's
//! `wordfreq/count` and `wordfreq/top` (`tests/tests/divan.rs` checks them).
use divan::counter::ItemsCount;
use divan::{black_box, Bencher};
use wordfreq_bench::{count, generate};

/// The sbs-harness suite's default size.
const WORDS: usize = 200_000;

fn main() {
    divan::main();
}

/// Counting the words of a text made before the routine.
#[divan::bench(name = "count", args = [WORDS], sample_count = 20)]
fn count_words(bencher: Bencher, words: usize) {
    let text = generate(words);
    bencher
        .counter(ItemsCount::new(words))
        .bench_local(|| count(black_box(&text)).len());
}

/// Every way divan offers to time `top` on counts made outside the measurement.
#[divan::bench_group(sample_count = 20)]
mod top {
    use std::collections::HashMap;

    use divan::{black_box, Bencher};
    use wordfreq_bench::{count, generate, top};

    use super::WORDS;

    /// The counts made once, before the routine.
    #[divan::bench]
    fn plain(bencher: Bencher) {
        let text = generate(WORDS);
        let freq = count(&text);
        bencher.bench_local(|| top(black_box(&freq), 3));
    }

    /// Counts made for every iteration, given to the routine by value.
    #[divan::bench]
    fn values(bencher: Bencher) {
        let text = generate(WORDS);
        bencher
            .with_inputs(|| count(&text))
            .bench_local_values(|freq: HashMap<&str, usize>| top(black_box(&freq), 3));
    }

    /// Counts made for every iteration, given to the routine by reference.
    #[divan::bench(sample_size = 2)]
    fn refs(bencher: Bencher) {
        let text = generate(WORDS);
        bencher
            .with_inputs(|| count(&text))
            .bench_refs(|freq| top(black_box(freq), 3));
    }
}
