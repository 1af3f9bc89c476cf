//! A small spelling corrector: reads words (one text per argument, or a built-in text),
//! replaces each word not in its dictionary by the closest dictionary word (strsim's
//! Damerau-Levenshtein distance) and prints the corrected text. Its two hot functions are
//! marked `#[sbs_harness::capture]` (docs/capture.md).

use serde::{Deserialize, Serialize};

/// The words the corrector knows.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Dictionary {
    words: Vec<String>,
}

impl Dictionary {
    fn new(text: &str) -> Dictionary {
        let mut words: Vec<String> = text.split_whitespace().map(str::to_lowercase).collect();
        words.sort_unstable();
        words.dedup();
        Dictionary { words }
    }

    /// The dictionary word closest to `word` (itself when it is known).
    #[sbs_harness::capture(self_type = Dictionary)]
    fn correct(&self, word: &str) -> String {
        if self
            .words
            .binary_search_by(|w| w.as_str().cmp(word))
            .is_ok()
        {
            return word.to_string();
        }
        self.words
            .iter()
            .min_by_key(|w| strsim::damerau_levenshtein(w, word))
            .cloned()
            .unwrap_or_else(|| word.to_string())
    }
}

/// The words of a text, lower-cased.
#[sbs_harness::capture]
fn tokenize(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

const KNOWN: &str = "the quick brown fox jumps over lazy dog a benchmark measures what \
    an application does when it runs its own calls with real inputs and every metric";

const TEXT: &str = "Teh quikc brown fox jumsp ovre the lazzy dgo. A bencmark measurs \
    waht an aplication does whne it runs its onw calls wiht reel inputs and evry metrik.";

fn main() {
    let dictionary = Dictionary::new(KNOWN);
    let texts: Vec<String> = std::env::args().skip(1).collect();
    let texts = if texts.is_empty() {
        vec![TEXT.to_string()]
    } else {
        texts
    };
    for text in &texts {
        let corrected: Vec<String> = tokenize(text)
            .iter()
            .map(|w| dictionary.correct(w))
            .collect();
        println!("{}", corrected.join(" "));
    }
}
