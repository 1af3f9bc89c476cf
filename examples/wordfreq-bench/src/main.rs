//! The same work as the harnessed suite, as a whole process, for comparing whole-process
//! timing with the harness (`benches/harness/run.sh`):
//!
//! `wordfreq-bench [WORDS] [gen|count|top]`: generate WORDS words (default 200000), then
//! stop (`gen`), count them (`count`), or count them and print the top 3 (`top`, the
//! default). The time of `count` is then what `count` adds to `gen`.
use std::hint::black_box;

use wordfreq_bench::{count, generate, top};

fn main() {
    let mut args = std::env::args().skip(1);
    let words: usize = match args.next().map(|a| a.parse()) {
        None => 200_000,
        Some(Ok(n)) => n,
        Some(Err(_)) => usage(),
    };
    let stage = args.next().unwrap_or_else(|| "top".into());
    let text = generate(words);
    match stage.as_str() {
        "gen" => {
            black_box(&text);
        }
        "count" => {
            black_box(count(black_box(&text)).len());
        }
        "top" => {
            for (n, w) in top(&count(black_box(&text)), 3) {
                println!("{w} {n}");
            }
        }
        _ => usage(),
    }
}

fn usage() -> ! {
    eprintln!("usage: wordfreq-bench [WORDS] [gen|count|top]");
    std::process::exit(2)
}
