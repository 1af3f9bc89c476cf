//! The 8-byte trailer the agent writes in the last 8 bytes of every block it hands out.
//!
//! The user pointer is glibc's own pointer; the agent asks glibc for 8 bytes more than
//! the program did and keeps the requested size (needed for exact live and peak bytes:
//! glibc's usable size over-reports) at the *end of the block's usable area*, a place
//! found from the pointer alone. For the sizes Rust asks for (multiples of 16) glibc's
//! rounding already leaves these 8 bytes spare, so the trailer usually costs no memory.
//!
//! One little-endian word:
//!
//! ```text
//! bits 63..48  check: MAGIC ^ size's low 16 bits
//! bit  47      counted (made while the agent had a report slot)
//! bits 46..0   requested size in bytes     (47 bits: more than a 64-bit Linux process
//!                                           can map, so every real block fits)
//! ```
//!
//! A word that does not check (a block the agent did not make, or stale memory) is
//! rejected by [`decode`]. A false match (user data that happens to check, about one in
//! 65,536 for random data) only miscounts that block: the pointer given to glibc never
//! depends on the trailer.

/// Bytes the agent adds to every block.
pub const TRAILER_SIZE: usize = 8;
/// Largest requested size a trailer can hold. Larger requests are handed out untracked.
pub const MAX_SIZE: usize = (1 << 47) - 1;

const MAGIC: u64 = 0x5b5a;
const COUNTED: u64 = 1 << 47;
const SIZE_MASK: u64 = (1 << 47) - 1;

/// What a trailer says about its block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    /// Requested size in bytes.
    pub size: usize,
    /// Whether the allocation was counted (made once the agent had a slot).
    pub counted: bool,
}

/// The trailer word for a block. `block.size` must be at most [`MAX_SIZE`].
#[inline(always)]
pub fn encode(block: Block) -> u64 {
    debug_assert!(block.size <= MAX_SIZE);
    let size = block.size as u64 & SIZE_MASK;
    let counted = if block.counted { COUNTED } else { 0 };
    ((MAGIC ^ (size & 0xffff)) << 48) | counted | size
}

/// Decode a trailer word; `None` if it was not written by [`encode`].
#[inline(always)]
pub fn decode(word: u64) -> Option<Block> {
    let size = word & SIZE_MASK;
    if word >> 48 != MAGIC ^ (size & 0xffff) {
        return None;
    }
    Some(Block {
        size: usize::try_from(size).ok()?,
        counted: word & COUNTED != 0,
    })
}

/// The word written over a trailer when its block is freed or resized, so that stale
/// memory never looks like one of ours.
pub const CLEARED: u64 = 0;

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

/// Where the trailer of a block from glibc's heap (not mmapped) lies, counted from the
/// pointer: `usable_size(size_word) - TRAILER_SIZE`, in fewer instructions, for the hooks'
/// hot path. `None` for an mmapped chunk or a word no block in use can have (the general
/// path, with [`usable_size`], takes those).
#[inline(always)]
pub fn heap_trailer_offset(size_word: usize) -> Option<usize> {
    if size_word & IS_MMAPPED != 0 {
        return None;
    }
    // The smallest chunk is 32 bytes; the chunk header (8) and the trailer (8) come off.
    (size_word & !FLAG_BITS).checked_sub(8 + TRAILER_SIZE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        for &(size, counted) in &[
            (0usize, true),
            (0, false),
            (1, false),
            (24, true),
            (4096, true),
            (1 << 16, false),
            (0xffff, true),
            (1 << 32, true),
            (MAX_SIZE, true),
            (MAX_SIZE, false),
        ] {
            let b = Block { size, counted };
            assert_eq!(decode(encode(b)), Some(b), "{b:?}");
        }
    }

    #[test]
    fn rejects_foreign_words() {
        assert_eq!(decode(CLEARED), None);
        assert_eq!(decode(u64::MAX), None);
        // Typical user data at the end of a block: a pointer, a small integer, ASCII.
        assert_eq!(decode(0x0000_7f12_3456_7890), None);
        assert_eq!(decode(42), None);
        assert_eq!(decode(u64::from_le_bytes(*b"abcdefgh")), None);
        let w = encode(Block {
            size: 100,
            counted: true,
        });
        assert_eq!(decode(w + 1), None, "size changed: check no longer matches");
        assert_eq!(decode(w ^ (1 << 63)), None, "check changed");
    }

    #[test]
    fn few_random_words_check() {
        // A simple LCG over 1M words: about 1M / 65536 = 15 expected to match.
        let mut x = 0x1234_5678_9abc_def0u64;
        let mut hits = 0;
        for _ in 0..1_000_000 {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            hits += usize::from(decode(x).is_some());
        }
        assert!(hits < 60, "{hits} of 1M random words decode");
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
    fn the_hot_paths_trailer_offset_is_the_general_ones() {
        for chunk in (32..100_000usize).step_by(16) {
            for flags in 0..8 {
                let word = chunk | flags;
                let expected = (flags & IS_MMAPPED == 0).then(|| usable_size(word) - TRAILER_SIZE);
                assert_eq!(heap_trailer_offset(word), expected, "{word:#x}");
            }
        }
        assert_eq!(heap_trailer_offset(0), None);
        assert_eq!(heap_trailer_offset(0x1), None);
    }
}
