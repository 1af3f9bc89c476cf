//! An application with functions marked `#[sbs_harness::capture]`, for `sbs-profile
//! capture` and `--replay` (tests/tests/capture.rs). Its `main` makes 40 rounds of calls
//! with inputs that differ each round, prints a summary and exits with the code given as
//! its first argument (0 without one).
//!
//! Known answers per call: `words` makes 5 allocations (its vector and 4 strings, one
//! made by each of its 4 calls of `normalize`); `sort_in_place`, `checksum` and
//! `Stats::mean` make none.

use serde::{Deserialize, Serialize};

/// Lower-cased copy of a word: one allocation.
#[inline(never)]
fn normalize(word: &str) -> String {
    word.to_ascii_lowercase()
}

/// The 4 words of `line`, normalized: returns allocated results.
#[sbs_harness::capture]
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::with_capacity(4);
    for w in line.split_whitespace().take(4) {
        out.push(normalize(w));
    }
    out
}

/// Sorts its argument in place.
#[sbs_harness::capture]
pub fn sort_in_place(values: &mut Vec<u32>) {
    values.sort_unstable();
}

/// A pure function of its bytes.
#[sbs_harness::capture]
fn checksum(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in data {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// A value with a method on `&self`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Stats {
    values: Vec<f64>,
}

impl Stats {
    #[sbs_harness::capture(self_type = Stats)]
    fn mean(&self) -> f64 {
        if self.values.is_empty() {
            return 0.0;
        }
        self.values.iter().sum::<f64>() / self.values.len() as f64
    }
}

fn main() {
    let code: i32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(0);
    let mut total = 0u64;
    let mut word_count = 0usize;
    let mut means = 0.0;
    for round in 0..40u32 {
        let line = format!("Alpha{round} BETA{} gamma Delta{}", round * 7, round % 3);
        word_count += words(&line).len();
        let mut v: Vec<u32> = (0..64 + round)
            .map(|i| i.wrapping_mul(2_654_435_761u32) ^ round)
            .collect();
        sort_in_place(&mut v);
        total = total.wrapping_add(u64::from(v[0]));
        let data: Vec<u8> = (0..256 + round * 16).map(|i| (i ^ round) as u8).collect();
        total ^= checksum(&data);
        let stats = Stats {
            values: (0..8 + round).map(f64::from).collect(),
        };
        means += stats.mean();
    }
    println!("capture_app: {word_count} words, checksum {total:016x}, means {means:.1}");
    std::process::exit(code);
}
