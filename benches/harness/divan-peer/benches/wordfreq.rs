//! The operations of examples/wordfreq-bench under divan, with the same set-up outside
//! the timed part.
use std::collections::HashMap;
use std::sync::OnceLock;

use divan::black_box;
use wordfreq_bench::{count, generate, top};

fn text() -> &'static [String] {
    static TEXT: OnceLock<Vec<String>> = OnceLock::new();
    TEXT.get_or_init(|| generate(200_000))
}

fn counts() -> &'static HashMap<&'static str, usize> {
    static COUNTS: OnceLock<HashMap<&'static str, usize>> = OnceLock::new();
    COUNTS.get_or_init(|| count(text()))
}

#[divan::bench]
fn wordfreq_count() -> usize {
    count(black_box(text())).len()
}

#[divan::bench]
fn wordfreq_top() -> Vec<(usize, String)> {
    top(black_box(counts()), 3)
}

fn main() {
    // Build the inputs before divan starts timing.
    counts();
    divan::main();
}
