//! The bundled example benchmark: counts word frequencies in a deterministic text of
//! N words (default 200000) and prints the three most frequent words.
//!
//! It exercises what sbs-profile measures: `Vec::push`, many small allocations (one
//! `String` per distinct word), a `HashMap` that grows, a sort, and some CPU time.
use std::collections::HashMap;
use std::hint::black_box;

/// A deterministic stream of words from a fixed vocabulary with a skewed distribution.
fn generate(words: usize) -> Vec<String> {
    const SYLLABLES: [&str; 12] = [
        "ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "xe", "zu", "ba", "do",
    ];
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut out = Vec::with_capacity(words);
    for _ in 0..words {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let r = (state >> 33) as usize;
        // Skew: small ids are much more frequent.
        let id = (r % 4096) * (r % 7 + 1) / 7;
        let mut w = String::new();
        let mut x = id;
        loop {
            w.push_str(SYLLABLES[x % SYLLABLES.len()]);
            x /= SYLLABLES.len();
            if x == 0 {
                break;
            }
        }
        out.push(w);
    }
    out
}

#[inline(never)]
fn count(words: &[String]) -> HashMap<&str, usize> {
    let mut freq = HashMap::new();
    for w in words {
        *freq.entry(w.as_str()).or_insert(0) += 1;
    }
    freq
}

#[inline(never)]
fn top(freq: &HashMap<&str, usize>, k: usize) -> Vec<(usize, String)> {
    let mut all: Vec<(usize, String)> = Vec::new();
    for (w, &n) in freq {
        all.push((n, w.to_string()));
    }
    all.sort_by(|a, b| b.cmp(a));
    all.truncate(k);
    all
}

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
