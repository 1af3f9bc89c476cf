//! The 16-byte header the agent puts in front of every block it hands out.
//!
//! It records the requested size (needed for exact live and peak bytes: glibc's usable
//! size over-reports) and the distance back to the start of the underlying glibc block
//! (16 for ordinary blocks, the alignment for over-aligned ones). The first word carries
//! a check value tied to the size, so a pointer that did not come from the agent (glibc
//! keeps its own chunk header in those 16 bytes) is recognised and passed through.

/// Bytes in front of the user pointer. Keeps malloc's 16-byte alignment.
pub const HEADER_SIZE: usize = 16;
/// Largest distance between the glibc block and the user pointer the header can hold.
pub const MAX_OFFSET: usize = (1 << 31) - 1;

const MAGIC: u32 = 0x5b5a_a11c;
const COUNTED: u64 = 1 << 31;
const OFFSET_MASK: u64 = (1 << 31) - 1;

/// What a header says about its block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    /// Requested size in bytes.
    pub size: usize,
    /// Distance from the glibc block's start to the user pointer.
    pub offset: usize,
    /// Whether the allocation was counted (made once the agent had a slot).
    pub counted: bool,
}

/// The two header words for a block. `offset` must be in `HEADER_SIZE..=MAX_OFFSET`.
pub fn encode(block: Block) -> [u64; 2] {
    debug_assert!(block.offset >= HEADER_SIZE && block.offset <= MAX_OFFSET);
    let check = u64::from(MAGIC ^ (block.size as u32)) << 32;
    let counted = if block.counted { COUNTED } else { 0 };
    [
        check | counted | (block.offset as u64 & OFFSET_MASK),
        block.size as u64,
    ]
}

/// Decode header words; `None` if they were not written by [`encode`].
pub fn decode(words: [u64; 2]) -> Option<Block> {
    let [tag, size] = words;
    let check = (tag >> 32) as u32;
    if check != MAGIC ^ (size as u32) {
        return None;
    }
    let offset = (tag & OFFSET_MASK) as usize;
    if offset < HEADER_SIZE || offset % HEADER_SIZE != 0 {
        return None;
    }
    Some(Block {
        size: usize::try_from(size).ok()?,
        offset,
        counted: tag & COUNTED != 0,
    })
}

/// The words written over a header when its block is freed, so that stale memory never
/// looks like one of ours.
pub const CLEARED: [u64; 2] = [0, 0];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        for &(size, offset, counted) in &[
            (0usize, 16usize, true),
            (1, 16, false),
            (usize::MAX, 16, true),
            (4096, 4096, true),
            (70, 128, false),
            (5, MAX_OFFSET + 1 - 16, true),
        ] {
            let b = Block {
                size,
                offset,
                counted,
            };
            assert_eq!(decode(encode(b)), Some(b), "{b:?}");
        }
    }

    #[test]
    fn rejects_foreign_words() {
        // What glibc leaves in front of a chunk: prev_size (often user data) and size|flags.
        assert_eq!(decode([0, 0x21]), None);
        assert_eq!(decode(CLEARED), None);
        let mut w = encode(Block {
            size: 100,
            offset: 16,
            counted: true,
        });
        w[1] = 101; // size changed: check no longer matches
        assert_eq!(decode(w), None);
        let mut w = encode(Block {
            size: 100,
            offset: 16,
            counted: true,
        });
        w[0] = (w[0] & !OFFSET_MASK) | 8; // offset below the header size
        assert_eq!(decode(w), None);
    }
}
