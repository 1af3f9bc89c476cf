//! The block trailer: 3 bytes the agent keeps at the end of every block it hands out.
//!
//! The user pointer is glibc's own pointer; the agent asks glibc for [`EXTRA`] bytes more
//! than the program did and keeps, at the *end of the block's usable area* (a place found
//! from the pointer alone), the block's *slack*: how many usable bytes lie past the
//! program's. The requested size (needed for exact live and peak bytes: glibc's usable
//! size over-reports) is the usable size minus the slack.
//!
//! Why the slack and not the size: it is small. glibc's chunk for `n` bytes is `n + 8`
//! rounded up to 16 (at least 32), so the slack of a block `malloc` takes from glibc's
//! heap is at most 24 bytes, and the trailer fits in 3 bytes. That is what a trailer costs in memory: a request whose chunk
//! has fewer spare bytes than the trailer moves to the next chunk size, 16 bytes more.
//! With 3 bytes that is 3 sizes in 16 (`n` = 6, 7 or 8 modulo 16), against 8 in 16 with
//! the 8-byte size word of the first trailer (CPU time of `alloc churn 300000` with every
//! request grown by 8 bytes and nothing else: +3.7%; by 3 bytes: +1.9%;
//! `benches/alloc/grown.py`, BENCHMARKS.md).
//!
//! The trailer lies in the block's *last word*, the little-endian `u64` in its last 8
//! usable bytes (a heap block has at least 24):
//!
//! ```text
//! bits 63..46  check: CHECK (18 bits)
//! bit  45      counted (made while the agent had a report slot)
//! bits 44..40  slack, MIN_SLACK..=SHORT_MAX; or LONG: the slack is in bits 39..0
//! bits 39..0   not the trailer's (the end of the program's bytes when the slack is
//!              less than 8), or the slack when the field says LONG
//! ```
//!
//! A slack of more than [`SHORT_MAX`] bytes (an mmapped block's page rounding, an
//! over-aligned block's leftover) leaves at least 25 bytes free, so the whole word is the
//! trailer's and holds the slack in its low 40 bits (a *long* trailer).
//!
//! The hooks read and write the whole word, at the same 16-byte aligned place as the
//! 8-byte trailer before this one: reading and writing only the last 4 bytes (a `u32` at
//! an address 4 past a multiple of 16) made the two-thread ring 6% slower than the 8-byte
//! trailer on this machine's AMD Zen 5 cores, for fewer instructions; the whole word,
//! 2% (BENCHMARKS.md). Where the word holds the program's bytes, a new block's are
//! undefined (so the hooks write zeros there; `calloc`'s must be zero and stay so) and a
//! resized block's are kept ([`keep_data`]).
//!
//! A word that does not check (a block the agent did not make, or stale memory) is
//! rejected by [`decode`]: user data passes only if 18 bits match and the slack field
//! is valid, about one in 365,000 for random data, and then only that block is
//! miscounted: the pointer given to glibc never depends on the trailer.

/// Bytes the agent asks glibc for beyond the program's: the short trailer's.
pub const EXTRA: usize = 3;
/// Largest requested size the agent tracks. Larger requests (more than a 64-bit Linux
/// process can map) are handed to glibc untracked.
pub const MAX_SIZE: usize = (1 << 47) - 1;
/// Smallest slack a trailer can have: the [`EXTRA`] bytes.
pub const MIN_SLACK: usize = EXTRA;
/// Largest slack of the short trailer: a heap block's largest (`malloc(0)`: a 32-byte
/// chunk, 24 usable bytes).
pub const SHORT_MAX: usize = 24;
/// The slack field of a long trailer.
const LONG: u64 = 31;
/// The check, 18 bits.
const CHECK: u64 = 0x2_d6b5;
const COUNTED: u64 = 1 << 45;
/// The check and counted bits of a counted block's word: the free hot path compares
/// them at once.
const COUNTED_KEY: u64 = (CHECK << 1) | 1;
/// The bits below the trailer's fields.
const LOW: u64 = (1 << 40) - 1;
/// Largest slack a trailer can hold (a long one): 1 TiB. Only a shrink of an mmapped
/// block that glibc could not remap (it then keeps the block as it was) can leave more.
pub const MAX_SLACK: usize = LOW as usize;

/// What a trailer says about its block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    /// Requested size in bytes.
    pub size: usize,
    /// Whether the allocation was counted (made once the agent had a slot).
    pub counted: bool,
}

/// The trailer's fields, in the word's top 3 bytes.
#[inline(always)]
fn fields(field: u64, counted: bool) -> u64 {
    (CHECK << 46) | if counted { COUNTED } else { 0 } | (field << 40)
}

/// The last word of a block with `slack` bytes of slack (at least [`MIN_SLACK`], less
/// than 2^40), its bytes below the trailer zero (see [`keep_data`]).
#[inline(always)]
pub fn encode(slack: usize, counted: bool) -> u64 {
    debug_assert!(slack >= MIN_SLACK && slack as u64 <= LOW);
    if slack <= SHORT_MAX {
        fields(slack as u64, counted)
    } else {
        fields(LONG, counted) | (slack as u64 & LOW)
    }
}

/// `word` with the bytes below the trailer taken from `old`, for a block whose bytes
/// must be kept: what to write where the program's last bytes may be. A long trailer
/// (slack above [`SHORT_MAX`]) takes the whole word.
#[inline(always)]
pub fn keep_data(word: u64, old: u64) -> u64 {
    if (word >> 40) & 0x1f == LONG {
        word
    } else {
        (word & !LOW) | (old & LOW)
    }
}

/// `old` with the trailer's fields cleared (the bytes below them kept), so that stale
/// memory never looks like a trailer.
#[inline(always)]
pub fn cleared(old: u64) -> u64 {
    old & LOW
}

/// The slack and the counted bit of a block's last word; `None` if it was not written
/// by [`encode`].
#[inline(always)]
pub fn decode(word: u64) -> Option<(usize, bool)> {
    if word >> 46 != CHECK {
        return None;
    }
    let counted = word & COUNTED != 0;
    let slack = match (word >> 40) & 0x1f {
        LONG => usize::try_from(word & LOW)
            .ok()
            .filter(|&s| s > SHORT_MAX)?,
        field => Some(field as usize).filter(|s| (MIN_SLACK..=SHORT_MAX).contains(s))?,
    };
    Some((slack, counted))
}

/// The slack of a counted block with a short trailer, for the free hot path: the
/// word's top 3 bytes are the check, the counted bit and the slack field, in that order,
/// so one range comparison checks all three. `None` for everything else (the general
/// path decides).
#[inline(always)]
pub fn counted_short_slack(word: u64) -> Option<usize> {
    let slack = (word >> 40).wrapping_sub(COUNTED_KEY << 5);
    (slack.wrapping_sub(MIN_SLACK as u64) <= (SHORT_MAX - MIN_SLACK) as u64)
        .then_some(slack as usize)
}

/// How many of the block's last usable bytes the trailer of a block with `slack` bytes
/// of slack takes: the program may use the rest (`malloc_usable_size`).
pub fn len(slack: usize) -> usize {
    if slack <= SHORT_MAX {
        EXTRA
    } else {
        8
    }
}

/// glibc's chunk flag for a block served by its own `mmap`.
const IS_MMAPPED: usize = 0x2;
/// glibc's three flag bits in the chunk size word.
const FLAG_BITS: usize = 0x7;

/// Usable bytes of a glibc (ptmalloc, x86_64 without memory tagging) block from its chunk
/// size word, the word just in front of the pointer. What glibc 2.26-2.40's
/// `malloc_usable_size` computes for a block in use: the chunk size minus the 16-byte
/// chunk header, plus the next chunk's `prev_size` word (which the block may use while it
/// is in use), unless the chunk was mmapped (nothing follows it). 0 for a word no block
/// in use can have.
#[inline(always)]
pub fn usable_size(size_word: usize) -> usize {
    let chunk = size_word & !FLAG_BITS;
    // 8 bytes of chunk header to take off, 16 for an mmapped chunk.
    let overhead = 8 + ((size_word & IS_MMAPPED) << 2);
    chunk.saturating_sub(overhead)
}

/// Where the last word of a block from glibc's heap (not mmapped) lies, counted from the
/// pointer: `usable_size(size_word) - 8`, in fewer instructions, for the hooks' hot path.
/// `None` for an mmapped chunk or a word no block in use can have (smaller than glibc's
/// smallest chunk, 32 bytes: so the usable size is at least 24, no short trailer's slack
/// is larger, and the hot path subtracts it without a check). The general path, with
/// [`usable_size`], takes those.
#[inline(always)]
pub fn heap_word_offset(size_word: usize) -> Option<usize> {
    let chunk = size_word & !FLAG_BITS;
    // The chunk header (8) and the word (8) come off.
    (size_word & IS_MMAPPED == 0 && chunk >= 32).then(|| chunk - 16)
}

/// For the malloc hot path: where the last word of a new heap block of `size` requested
/// bytes lies and the block's slack, when the short trailer fits; `None` sends the block
/// to the general path (mmapped, a long trailer, or no room).
#[inline(always)]
pub fn heap_short_fit(size_word: usize, size: usize) -> Option<(usize, usize)> {
    let at = heap_word_offset(size_word)?;
    let slack = (at + 8).wrapping_sub(size);
    (slack.wrapping_sub(MIN_SLACK) <= SHORT_MAX - MIN_SLACK).then_some((at, slack))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_trailers_round_trip_and_keep_the_programs_bytes_apart() {
        let data = 0x12_3456_789a_u64;
        for slack in MIN_SLACK..=SHORT_MAX {
            for counted in [false, true] {
                let word = keep_data(encode(slack, counted), 0xffff_ff00_0000_0000 | data);
                assert_eq!(word & LOW, data, "the program's bytes are kept");
                assert_eq!(decode(word), Some((slack, counted)));
                assert_eq!(decode(encode(slack, counted)), Some((slack, counted)));
                assert_eq!(
                    counted_short_slack(word),
                    counted.then_some(slack),
                    "{slack} {counted}"
                );
                assert_eq!(cleared(word), data);
                assert_eq!(decode(cleared(word)), None);
            }
        }
    }

    #[test]
    fn long_trailers_round_trip_and_take_the_whole_word() {
        for &slack in &[25usize, 47, 4096 + 17, 65_536 + 40, (1 << 40) - 1] {
            for counted in [false, true] {
                let word = encode(slack, counted);
                assert_eq!(keep_data(word, u64::MAX), word);
                assert_eq!(decode(word), Some((slack, counted)));
                assert_eq!(counted_short_slack(word), None, "the hot path leaves it");
                assert_eq!(decode(cleared(word)), None);
            }
        }
        // A long field with a slack a short trailer would have is no trailer of ours.
        assert_eq!(decode(fields(LONG, true) | 24), None);
    }

    #[test]
    fn rejects_foreign_words() {
        assert_eq!(decode(0), None);
        assert_eq!(decode(u64::MAX), None);
        // Typical user data at the end of a block: a pointer, a small integer, ASCII.
        assert_eq!(decode(0x0000_7f12_3456_7890), None);
        assert_eq!(decode(42), None);
        assert_eq!(decode(u64::from_le_bytes(*b"abcdefgh")), None);
        let word = encode(10, true);
        assert_eq!(decode(word ^ (1 << 63)), None, "check changed");
        for field in [0u64, 1, 2, 25, 30] {
            assert_eq!(decode(fields(field, true)), None, "slack field {field}");
        }
    }

    #[test]
    fn few_random_words_check() {
        // A simple LCG over 4M words: about 4M * 2^-18 * 23/32 = 11 expected to match.
        let mut x = 0x1234_5678_9abc_def0u64;
        let mut hits = 0;
        for _ in 0..4_000_000 {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            hits += usize::from(decode(x).is_some());
        }
        assert!(hits < 40, "{hits} of 4M random words decode");
    }

    #[test]
    fn a_heap_blocks_slack_fits_the_short_trailer() {
        // Every request the agent makes (n + 3) lands in a chunk whose slack over n is
        // MIN_SLACK..=SHORT_MAX: glibc's rounding (n + 3 + 8 up to 16, at least 32).
        for n in 0..100_000usize {
            let chunk = (n + EXTRA + 8).next_multiple_of(16).max(32);
            let slack = usable_size(chunk | 1) - n;
            assert!((MIN_SLACK..=SHORT_MAX).contains(&slack), "{n}: {slack}");
            assert_eq!(heap_short_fit(chunk | 1, n), Some((chunk - 16, slack)));
        }
    }

    #[test]
    fn usable_size_follows_glibc() {
        // malloc(24): a 32-byte chunk, PREV_INUSE set: 24 usable bytes.
        assert_eq!(usable_size(0x21), 24);
        // A 48-byte chunk from a thread arena (NON_MAIN_ARENA | PREV_INUSE).
        assert_eq!(usable_size(0x35), 40);
        // An mmapped chunk of 132 KiB: 16 bytes of chunk header, nothing after it.
        assert_eq!(usable_size(0x21000 | IS_MMAPPED), 0x21000 - 16);
        // Nothing a block in use can have.
        assert_eq!(usable_size(0), 0);
        assert_eq!(usable_size(0x1), 0);
        assert_eq!(usable_size(0x8 | IS_MMAPPED), 0);
    }

    #[test]
    fn the_hot_paths_word_offset_is_the_general_ones() {
        for chunk in (32..100_000usize).step_by(16) {
            for flags in 0..8 {
                let word = chunk | flags;
                let expected = (flags & IS_MMAPPED == 0).then(|| usable_size(word) - 8);
                assert!(expected.is_none_or(|at| at + 8 >= SHORT_MAX));
                assert_eq!(heap_word_offset(word), expected, "{word:#x}");
                for size in [
                    0,
                    chunk.saturating_sub(40),
                    chunk - 20,
                    chunk - 12,
                    chunk - 11,
                    chunk,
                ] {
                    let slack = usable_size(word).wrapping_sub(size);
                    let fits = flags & IS_MMAPPED == 0 && (MIN_SLACK..=SHORT_MAX).contains(&slack);
                    assert_eq!(
                        heap_short_fit(word, size),
                        fits.then(|| (usable_size(word) - 8, slack)),
                        "{word:#x} {size}"
                    );
                }
            }
        }
        assert_eq!(heap_word_offset(0), None);
        assert_eq!(heap_word_offset(0x1), None);
        assert_eq!(heap_word_offset(0x11), None, "smaller than any chunk");
    }
}
