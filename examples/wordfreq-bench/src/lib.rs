//! Word frequencies: the code under test of the example suite in `benches/wordfreq.rs`.
//!
//! Also the work of the whole-process example `tests/src/bin/wordfreq.rs`, split here into a
//! set-up ([`generate`]: not measured) and operations ([`count`], [`top`]).
use std::collections::HashMap;

/// A deterministic stream of `words` words from a fixed vocabulary, skewed so that small
/// word ids are much more frequent.
pub fn generate(words: usize) -> Vec<String> {
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

/// How often each word occurs.
#[inline(never)]
pub fn count(words: &[String]) -> HashMap<&str, usize> {
    let mut freq = HashMap::new();
    for w in words {
        *freq.entry(w.as_str()).or_insert(0) += 1;
    }
    freq
}

/// The `k` most frequent words, most frequent first.
#[inline(never)]
pub fn top(freq: &HashMap<&str, usize>, k: usize) -> Vec<(usize, String)> {
    let mut all: Vec<(usize, String)> = Vec::new();
    for (w, &n) in freq {
        all.push((n, w.to_string()));
    }
    all.sort_by(|a, b| b.cmp(a));
    all.truncate(k);
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_add_up() {
        let text = generate(1000);
        let freq = count(&text);
        assert_eq!(freq.values().sum::<usize>(), 1000);
        let best = top(&freq, 3);
        assert_eq!(best.len(), 3);
        assert!(best[0].0 >= best[1].0 && best[1].0 >= best[2].0);
    }
}
