//! The bundled example benchmark as a whole process: counts word frequencies in a
//! deterministic text of N words (default 200000) and prints the three most frequent.
//!
//! The work itself (`generate`, `count`, `top`) lives in `examples/wordfreq-bench`, whose
//! harnessed suite measures the same functions per operation. It exercises what
//! sbs-profile measures: `Vec::push`, many small allocations (one `String` per word), a
//! `HashMap` that grows, a sort, and some CPU time.
use std::hint::black_box;

use wordfreq_bench::{count, generate, top};

fn main() {
    let words: usize = match std::env::args().nth(1) {
        None => 200_000,
        Some(a) => match a.parse() {
            Ok(n) => n,
            Err(_) => {
                eprintln!("usage: wordfreq [WORDS]");
                std::process::exit(2);
            }
        },
    };
    let text = generate(words);
    let freq = count(black_box(&text));
    for (n, w) in top(&freq, 3) {
        println!("{w} {n}");
    }
}
