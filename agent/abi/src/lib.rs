//! The contract between the preloaded allocation agent (`sbs-agent`) and the collector.
//!
//! Defined once, used by both sides. The collector creates a *report file*: a memfd of
//! [`REPORT_SIZE`] bytes that starts with a [`ReportHeader`] followed by [`SLOT_COUNT`]
//! [`Slot`]s and a directory of one word per slot ([`Report`]). It keeps the memfd open
//! and stamps the run's copy of the agent library with where it is ([`stamp`]): every
//! process image that loads the agent opens it through the collector's descriptor. (The
//! in-process harness, `--alloc-harness`, gets it at descriptor [`REPORT_FD`], announced
//! by [`ENV_HARNESS_FD`] and [`ENV_HARNESS_TOKEN`].) Every process image that
//! loads the agent (the benchmark, its forked children, every program it execs) claims one
//! slot and keeps its counters *in* that slot, in shared memory. Nothing has to be written
//! at exit, so a process that ends with `_exit`, `abort`, a fatal signal or `exec` still
//! reports; the collector reads the report file after the run. (The agent also marks an
//! image's end, where it can, for the process tree's peak: see [`tree`].)
//!
//! All fields are 64-bit little-endian words (atomics on the agent's side); the collector
//! decodes them from bytes with [`SlotValues::from_bytes`], so it needs no `unsafe`.
#![cfg_attr(not(test), no_std)]
#![cfg_attr(not(test), forbid(unsafe_code))]
// The tests build a report file in ordinary memory, which takes one `unsafe` block.
#![cfg_attr(test, deny(unsafe_code))]

pub mod attach;
pub mod counters;
pub mod inproc;
pub mod launcher;
pub mod qemu;
pub mod stamp;
pub mod tree;

// Not in the preload library (`collector/build.rs` compiles this crate without features):
// its float parsing would pull in a reference to `rust_eh_personality`, which a no_std
// cdylib does not define, and the library would fail to load.
#[cfg(feature = "harness")]
pub mod harness;

/// Defines the `rust_eh_personality` symbol that a preloaded `no_std` library needs: built
/// with panic=abort it never unwinds, but the unwind tables of some code it links still
/// name the symbol. The definition is hidden (never exported, so it cannot interpose the
/// program's own) and traps, since reaching it would be a bug. Expanded in each library
/// (a symbol of this rlib would only be linked where something refers to it).
#[macro_export]
macro_rules! personality_stub {
    () => {
        core::arch::global_asm!(
            ".globl rust_eh_personality",
            ".hidden rust_eh_personality",
            ".type rust_eh_personality, @function",
            "rust_eh_personality:",
            "ud2",
        );
    };
}

use core::mem::{offset_of, size_of};
use core::sync::atomic::AtomicU64;

/// Env var announcing the report file's descriptor number to the in-process harness
/// (`--alloc-harness`). The agent reads no variable (it is stamped), so a program carrying
/// the harness does not also report when it runs under the agent (which would count its
/// allocations twice).
pub const ENV_HARNESS_FD: &str = "SBS_HARNESS_FD";
/// Env var: the report file's token (16 hex digits); the harness ignores a report file
/// whose header does not carry it, so a reused descriptor number is never written to.
pub const ENV_HARNESS_TOKEN: &str = "SBS_HARNESS_TOKEN";
/// [`ENV_HARNESS_FD`], NUL-terminated.
pub const ENV_HARNESS_FD_C: &[u8] = b"SBS_HARNESS_FD\0";
/// [`ENV_HARNESS_TOKEN`], NUL-terminated.
pub const ENV_HARNESS_TOKEN_C: &[u8] = b"SBS_HARNESS_TOKEN\0";

/// Descriptor number the collector gives the report file in the child on the harness
/// path. High, so that programs that use small fixed numbers (`3>file`) do not collide
/// with it.
pub const REPORT_FD: i32 = 1019;

/// First word of the report header.
pub const REPORT_MAGIC: u64 = 0x5342_5341_4c4c_4f43; // "SBSALLOC"
/// Layout version; bumped on any incompatible change.
pub const REPORT_VERSION: u64 = 4;

/// Bytes of the header (one slot's worth, for alignment).
pub const HEADER_SIZE: usize = 128;
/// Bytes of one slot: its records and its head.
pub const SLOT_SIZE: usize = SLOT_HEAD_SIZE + RECORDS * RECORD_SIZE;
/// Number of slots: process images that can report in one run.
pub const SLOT_COUNT: usize = 8191;
/// Bytes of the directory after the slots: one word per slot (see [`tree`]), side by side
/// so that a new process image looks over every claimed slot in a few pages.
pub const DIRECTORY_SIZE: usize = SLOT_COUNT * 8;
/// Total size of the report file.
pub const REPORT_SIZE: usize = HEADER_SIZE + SLOT_COUNT * SLOT_SIZE + DIRECTORY_SIZE;

/// How a process image came to use its slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The agent was loaded at program start (the benchmark itself or an exec'd program).
    Load,
    /// A child created by `fork` (counts start at the fork; the heap it inherited is in
    /// [`SlotValues::inherited_live`]).
    Fork,
}

impl Origin {
    /// The word stored in [`Slot::origin`].
    pub const fn code(self) -> u64 {
        match self {
            Origin::Load => 1,
            Origin::Fork => 2,
        }
    }

    /// The origin for a stored word.
    pub const fn from_code(code: u64) -> Option<Origin> {
        match code {
            1 => Some(Origin::Load),
            2 => Some(Origin::Fork),
            _ => None,
        }
    }
}

/// Start of the report file.
#[repr(C)]
pub struct ReportHeader {
    /// [`REPORT_MAGIC`].
    pub magic: AtomicU64,
    /// [`REPORT_VERSION`].
    pub version: AtomicU64,
    /// The random token also in the agent library's stamp (or in [`ENV_HARNESS_TOKEN`]).
    pub token: AtomicU64,
    /// Number of slot claims so far (may exceed [`SLOT_COUNT`]: the excess had no slot).
    pub claims: AtomicU64,
    /// Live bytes of the process tree published by its images once a second image joined
    /// (see [`tree`]; wrapping, read signed).
    pub tree_live: AtomicU64,
    /// Highest [`ReportHeader::tree_live`] seen, and the peak of each image that was alone.
    pub tree_peak: AtomicU64,
    /// Images in the tree that have not left.
    pub tree_active: AtomicU64,
    /// Most images in the tree at once: the tree's share of the bound follows from it.
    pub tree_max_active: AtomicU64,
    /// Padding up to [`HEADER_SIZE`].
    pub reserved: [AtomicU64; 8],
}

/// One thread's counters. Each thread of a process owns one record (found from its
/// thread pointer, see [`counters::record_of`]) and is its only writer, so the hot path
/// needs no atomic read-modify-write and no cache line moves between cores. The last
/// record of a slot is the overflow record, shared (with atomic updates) by the threads
/// that found no free record. The collector sums the records.
#[repr(C)]
#[derive(Debug, Default)]
pub struct Record {
    /// The owning thread's key (its thread pointer); 0 while free.
    pub owner: AtomicU64,
    /// Blocks allocated (malloc, calloc, memalign family, and each realloc that returns a
    /// block: DHAT's convention).
    pub allocs: AtomicU64,
    /// Blocks released (free, and the old block of each realloc).
    pub frees: AtomicU64,
    /// `realloc`/`reallocarray` calls that resized a block.
    pub reallocs: AtomicU64,
    /// Sum of requested sizes of the allocated blocks.
    pub bytes: AtomicU64,
    /// This thread's change of live bytes not yet added to [`Slot::shared_live`]
    /// (wrapping, read signed; always less than [`GRANULE`] in magnitude).
    pub pending: AtomicU64,
    /// How this record updates live bytes (see `counters`).
    pub mode: AtomicU64,
    /// Padding up to [`RECORD_SIZE`] (one cache line).
    pub reserved: AtomicU64,
}

/// One process image's counters. Live in shared memory.
///
/// Live bytes are `live + shared_live + the records' pending`. While only one thread has
/// ever allocated in the image, that thread alone writes `live` and `peak` (plain stores,
/// exact); from the second thread on every thread adds its changes to `shared_live` once
/// they reach [`GRANULE`] bytes, or at once while it is the only active thread.
#[repr(C)]
#[derive(Debug)]
pub struct Slot {
    /// Per-thread counters; the last one is the shared overflow record. First, so that
    /// the hot path's record address is the slot's plus the record's offset.
    pub records: [Record; RECORDS],
    /// The solo thread's key while the image has one (see `counters`), else 0: the hot
    /// path checks it first and then counts in the words that follow, on this one cache
    /// line, without looking for the thread's record.
    pub solo_key: AtomicU64,
    /// Blocks the solo thread allocated on the hot path (as [`Record::allocs`]).
    pub solo_allocs: AtomicU64,
    /// Blocks the solo thread released on the hot path (as [`Record::frees`]).
    pub solo_frees: AtomicU64,
    /// Resizes by the solo thread on the hot path (as [`Record::reallocs`]).
    pub solo_reallocs: AtomicU64,
    /// Bytes the solo thread allocated on the hot path (as [`Record::bytes`]).
    pub solo_bytes: AtomicU64,
    /// Live bytes written by the image's first thread while it is the only one (and what
    /// it inherited at a fork); constant from the second thread on.
    pub live: AtomicU64,
    /// Highest live bytes seen (exact while one thread allocates, else see
    /// [`SlotValues::peak_bound`]).
    pub peak: AtomicU64,
    /// Non-zero once the slot is claimed: [`Origin::code`].
    pub origin: AtomicU64,
    /// Process id.
    pub pid: AtomicU64,
    /// Parent process id at claim time.
    pub ppid: AtomicU64,
    /// For a forked child: its parent's allocation count at the fork.
    pub inherited_allocs: AtomicU64,
    /// For a forked child: its parent's requested bytes at the fork.
    pub inherited_bytes: AtomicU64,
    /// For a forked child: live bytes inherited at the fork (included in `live`/`peak`).
    pub inherited_live: AtomicU64,
    /// For a forked child: its parent's `peak` at the fork (DHAT's child output reports
    /// the larger of this and the child's own peak).
    pub inherited_peak: AtomicU64,
    /// Live-byte changes published by the threads (atomic adds), from the second thread on.
    pub shared_live: AtomicU64,
    /// Records claimed so far (threads that allocated or freed).
    pub threads: AtomicU64,
    /// Threads with a record that have not ended.
    pub active: AtomicU64,
    /// Most threads active at once: [`SlotValues::peak_bound`] follows from it.
    pub max_active: AtomicU64,
    /// [`GRANULE`], for the reader.
    pub granule: AtomicU64,
    /// The image's place in the process tree: [`TREE_OUT`], [`TREE_LEFT`], or the live
    /// bytes it has added to [`ReportHeader::tree_live`].
    pub tree: AtomicU64,
    /// The slot's own index (its directory entry).
    pub index: AtomicU64,
    /// How many times a thread went solo again after the others had ended (see
    /// `counters`); 0 if none did.
    pub solo_since: AtomicU64,
    /// Bytes changed by ended threads (destructors that ran after their end was counted)
    /// once a thread had gone solo again: its peak checks may not have seen them, so they
    /// are part of [`SlotValues::peak_bound`].
    pub unseen: AtomicU64,
    /// The solo thread's key while the image is in a process tree and that thread has
    /// checked, after a fence, that it is the only active one (see `counters`), else 0:
    /// the hot path's shortcut in the tree's mode, beside [`Slot::tree`].
    pub tree_key: AtomicU64,
}

impl Default for Slot {
    fn default() -> Self {
        let zero = || AtomicU64::new(0);
        Slot {
            solo_key: zero(),
            solo_allocs: zero(),
            solo_frees: zero(),
            solo_reallocs: zero(),
            solo_bytes: zero(),
            origin: zero(),
            pid: zero(),
            ppid: zero(),
            live: zero(),
            peak: zero(),
            inherited_allocs: zero(),
            inherited_bytes: zero(),
            inherited_live: zero(),
            inherited_peak: zero(),
            shared_live: zero(),
            threads: zero(),
            active: zero(),
            max_active: zero(),
            granule: zero(),
            tree: zero(),
            index: zero(),
            solo_since: zero(),
            unseen: zero(),
            tree_key: zero(),
            records: core::array::from_fn(|_| Record::default()),
        }
    }
}

/// Number of [`Record`]s per slot (the last is the overflow record).
pub const RECORDS: usize = 65;
/// Bytes of one record.
pub const RECORD_SIZE: usize = 64;
/// Bytes of a slot's head (its words after the records).
pub const SLOT_HEAD_SIZE: usize = 192;
/// Live-byte change a thread keeps to itself before adding it to [`Slot::shared_live`]
/// while other threads are active: what makes a concurrent program's peak approximate,
/// by less than this per other active thread.
pub const GRANULE: u64 = 8192;

/// The report file as mapped: its header, its slots, then the directory.
#[repr(C)]
pub struct Report {
    /// The header.
    pub header: ReportHeader,
    /// Every slot.
    pub slots: [Slot; SLOT_COUNT],
    /// One word per slot: which are started, by which pid, and which have left the
    /// process tree (see [`tree::enter`]).
    pub directory: [AtomicU64; SLOT_COUNT],
}

/// [`Slot::tree`]: the image is not in the process tree (see [`tree`]).
pub const TREE_OUT: u64 = 1 << 63;
/// [`Slot::tree`]: the image has left the process tree (ended, or replaced by `exec`).
pub const TREE_LEFT: u64 = TREE_OUT | 1;

/// Whether a [`Slot::tree`] word says the image is in the tree (joined, not left).
pub const fn in_tree(word: u64) -> bool {
    word != TREE_OUT && word != TREE_LEFT
}

const _: () = assert!(size_of::<Report>() == REPORT_SIZE);
const _: () = assert!(offset_of!(Report, slots) == HEADER_SIZE);
const _: () = assert!(size_of::<Record>() == RECORD_SIZE);
const _: () = assert!(size_of::<ReportHeader>() == HEADER_SIZE);
const _: () = assert!(size_of::<Slot>() == SLOT_SIZE);

/// A decoded header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderValues {
    /// See [`ReportHeader::magic`].
    pub magic: u64,
    /// See [`ReportHeader::version`].
    pub version: u64,
    /// See [`ReportHeader::token`].
    pub token: u64,
    /// See [`ReportHeader::claims`].
    pub claims: u64,
    /// The tree's words.
    pub tree: tree::TreeValues,
}

impl HeaderValues {
    /// A fresh header for a report file with this token.
    pub const fn new(token: u64) -> Self {
        HeaderValues {
            magic: REPORT_MAGIC,
            version: REPORT_VERSION,
            token,
            claims: 0,
            tree: tree::TreeValues {
                live: 0,
                peak: 0,
                max_active: 0,
            },
        }
    }

    /// Decode the first [`HEADER_SIZE`] bytes of a report file. `None` if too short.
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        Some(HeaderValues {
            magic: word(bytes, offset_of!(ReportHeader, magic))?,
            version: word(bytes, offset_of!(ReportHeader, version))?,
            token: word(bytes, offset_of!(ReportHeader, token))?,
            claims: word(bytes, offset_of!(ReportHeader, claims))?,
            tree: tree::TreeValues {
                live: word(bytes, offset_of!(ReportHeader, tree_live))?,
                peak: word(bytes, offset_of!(ReportHeader, tree_peak))?,
                max_active: word(bytes, offset_of!(ReportHeader, tree_max_active))?,
            },
        })
    }

    /// Encode as the first [`HEADER_SIZE`] bytes of a report file.
    pub fn to_bytes(&self) -> [u8; HEADER_SIZE] {
        let mut out = [0u8; HEADER_SIZE];
        put(&mut out, offset_of!(ReportHeader, magic), self.magic);
        put(&mut out, offset_of!(ReportHeader, version), self.version);
        put(&mut out, offset_of!(ReportHeader, token), self.token);
        put(&mut out, offset_of!(ReportHeader, claims), self.claims);
        put(
            &mut out,
            offset_of!(ReportHeader, tree_live),
            self.tree.live,
        );
        put(
            &mut out,
            offset_of!(ReportHeader, tree_peak),
            self.tree.peak,
        );
        put(
            &mut out,
            offset_of!(ReportHeader, tree_max_active),
            self.tree.max_active,
        );
        out
    }

    /// Whether this is a report file of our layout carrying `token`.
    pub fn matches(&self, token: u64) -> bool {
        self.magic == REPORT_MAGIC && self.version == REPORT_VERSION && self.token == token
    }
}

/// A decoded slot: one process image's report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SlotValues {
    /// See [`Slot::origin`]; 0 for an unclaimed slot.
    pub origin: u64,
    /// See [`Slot::pid`].
    pub pid: u64,
    /// See [`Slot::ppid`].
    pub ppid: u64,
    /// Sum of the records' [`Record::allocs`] and [`Slot::solo_allocs`].
    pub allocs: u64,
    /// Sum of the records' [`Record::frees`] and [`Slot::solo_frees`].
    pub frees: u64,
    /// Sum of the records' [`Record::reallocs`] and [`Slot::solo_reallocs`].
    pub reallocs: u64,
    /// Sum of the records' [`Record::bytes`] and [`Slot::solo_bytes`].
    pub bytes: u64,
    /// Live bytes: [`Slot::live`] + [`Slot::shared_live`] + the records' pending changes
    /// (wrapping, read signed).
    pub live: u64,
    /// See [`Slot::peak`].
    pub peak: u64,
    /// See [`Slot::inherited_allocs`].
    pub inherited_allocs: u64,
    /// See [`Slot::inherited_bytes`].
    pub inherited_bytes: u64,
    /// See [`Slot::inherited_live`].
    pub inherited_live: u64,
    /// See [`Slot::inherited_peak`].
    pub inherited_peak: u64,
    /// See [`Slot::threads`].
    pub threads: u64,
    /// See [`Slot::max_active`].
    pub max_active: u64,
    /// See [`Slot::granule`].
    pub granule: u64,
    /// See [`Slot::tree`].
    pub tree: u64,
    /// See [`Slot::solo_since`].
    pub solo_since: u64,
    /// See [`Slot::unseen`].
    pub unseen: u64,
}

impl SlotValues {
    /// Decode one slot from [`SLOT_SIZE`] bytes. `None` if too short.
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        let sum = |field: usize| -> Option<u64> {
            let mut total = 0u64;
            for i in 0..RECORDS {
                let at = offset_of!(Slot, records) + i * RECORD_SIZE + field;
                total = total.wrapping_add(word(bytes, at)?);
            }
            Some(total)
        };
        let live = word(bytes, offset_of!(Slot, live))?
            .wrapping_add(word(bytes, offset_of!(Slot, shared_live))?)
            .wrapping_add(sum(offset_of!(Record, pending))?);
        Some(SlotValues {
            origin: word(bytes, offset_of!(Slot, origin))?,
            pid: word(bytes, offset_of!(Slot, pid))?,
            ppid: word(bytes, offset_of!(Slot, ppid))?,
            allocs: sum(offset_of!(Record, allocs))?
                .wrapping_add(word(bytes, offset_of!(Slot, solo_allocs))?),
            frees: sum(offset_of!(Record, frees))?
                .wrapping_add(word(bytes, offset_of!(Slot, solo_frees))?),
            reallocs: sum(offset_of!(Record, reallocs))?
                .wrapping_add(word(bytes, offset_of!(Slot, solo_reallocs))?),
            bytes: sum(offset_of!(Record, bytes))?
                .wrapping_add(word(bytes, offset_of!(Slot, solo_bytes))?),
            live,
            peak: word(bytes, offset_of!(Slot, peak))?,
            inherited_allocs: word(bytes, offset_of!(Slot, inherited_allocs))?,
            inherited_bytes: word(bytes, offset_of!(Slot, inherited_bytes))?,
            inherited_live: word(bytes, offset_of!(Slot, inherited_live))?,
            inherited_peak: word(bytes, offset_of!(Slot, inherited_peak))?,
            threads: word(bytes, offset_of!(Slot, threads))?,
            max_active: word(bytes, offset_of!(Slot, max_active))?,
            granule: word(bytes, offset_of!(Slot, granule))?,
            tree: word(bytes, offset_of!(Slot, tree))?,
            solo_since: word(bytes, offset_of!(Slot, solo_since))?,
            unseen: word(bytes, offset_of!(Slot, unseen))?,
        })
    }

    /// Read a live slot (the agent's fork snapshot; tests).
    pub fn from_slot(slot: &Slot) -> Self {
        use core::sync::atomic::Ordering::Relaxed;
        let sum = |f: fn(&Record) -> &AtomicU64| {
            slot.records
                .iter()
                .fold(0u64, |t, r| t.wrapping_add(f(r).load(Relaxed)))
        };
        SlotValues {
            origin: slot.origin.load(Relaxed),
            pid: slot.pid.load(Relaxed),
            ppid: slot.ppid.load(Relaxed),
            allocs: sum(|r| &r.allocs).wrapping_add(slot.solo_allocs.load(Relaxed)),
            frees: sum(|r| &r.frees).wrapping_add(slot.solo_frees.load(Relaxed)),
            reallocs: sum(|r| &r.reallocs).wrapping_add(slot.solo_reallocs.load(Relaxed)),
            bytes: sum(|r| &r.bytes).wrapping_add(slot.solo_bytes.load(Relaxed)),
            live: slot
                .live
                .load(Relaxed)
                .wrapping_add(slot.shared_live.load(Relaxed))
                .wrapping_add(sum(|r| &r.pending)),
            peak: slot.peak.load(Relaxed),
            inherited_allocs: slot.inherited_allocs.load(Relaxed),
            inherited_bytes: slot.inherited_bytes.load(Relaxed),
            inherited_live: slot.inherited_live.load(Relaxed),
            inherited_peak: slot.inherited_peak.load(Relaxed),
            threads: slot.threads.load(Relaxed),
            max_active: slot.max_active.load(Relaxed),
            granule: slot.granule.load(Relaxed),
            tree: slot.tree.load(Relaxed),
            solo_since: slot.solo_since.load(Relaxed),
            unseen: slot.unseen.load(Relaxed),
        }
    }

    /// How far [`SlotValues::peak`] may be from the true peak of live bytes, in bytes
    /// (0: exact). A thread keeps less than [`GRANULE`] bytes of change to itself while
    /// other threads are active, so while at most `max_active` threads run at once the
    /// published total is off by less than `(max_active - 1) * granule`; with one thread
    /// at a time every change is published at once, or made by a solo thread. Plus
    /// [`Slot::unseen`]: changes a solo thread's peak checks may have missed.
    pub fn peak_bound(&self) -> u64 {
        self.max_active
            .saturating_sub(1)
            .saturating_mul(self.granule)
            .saturating_add(self.unseen)
    }

    /// How the image came to report; `None` for an unclaimed slot.
    pub fn origin(&self) -> Option<Origin> {
        Origin::from_code(self.origin)
    }
}

/// Byte offset of slot `index` in the report file.
pub const fn slot_offset(index: usize) -> usize {
    HEADER_SIZE + index * SLOT_SIZE
}

fn word(bytes: &[u8], at: usize) -> Option<u64> {
    let raw: [u8; 8] = bytes.get(at..at + 8)?.try_into().ok()?;
    Some(u64::from_le_bytes(raw))
}

fn put(out: &mut [u8], at: usize, value: u64) {
    out[at..at + 8].copy_from_slice(&value.to_le_bytes());
}

/// Parse the token env var's value (16 hex digits at most).
pub fn parse_token(text: &[u8]) -> Option<u64> {
    if text.is_empty() || text.len() > 16 {
        return None;
    }
    let mut value = 0u64;
    for &c in text {
        let digit = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            b'A'..=b'F' => c - b'A' + 10,
            _ => return None,
        };
        value = (value << 4) | u64::from(digit);
    }
    Some(value)
}

/// Parse a descriptor number (decimal, non-negative, fits an `i32`).
pub fn parse_fd(text: &[u8]) -> Option<i32> {
    if text.is_empty() || text.len() > 9 {
        return None;
    }
    let mut value = 0i32;
    for &c in text {
        if !c.is_ascii_digit() {
            return None;
        }
        value = value * 10 + i32::from(c - b'0');
    }
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips() {
        let h = HeaderValues {
            claims: 7,
            ..HeaderValues::new(0xdead_beef_0123_4567)
        };
        let back = HeaderValues::from_bytes(&h.to_bytes()).unwrap();
        assert_eq!(back, h);
        assert!(back.matches(0xdead_beef_0123_4567));
        assert!(!back.matches(1));
    }

    #[test]
    fn slot_fields_decode_from_their_offsets() {
        let mut bytes = [0u8; SLOT_SIZE];
        put(&mut bytes, offset_of!(Slot, pid), 42);
        put(&mut bytes, offset_of!(Slot, peak), 1 << 40);
        put(&mut bytes, offset_of!(Slot, origin), Origin::Fork.code());
        let s = SlotValues::from_bytes(&bytes).unwrap();
        assert_eq!(s.pid, 42);
        assert_eq!(s.peak, 1 << 40);
        assert_eq!(s.origin(), Some(Origin::Fork));
        assert_eq!(s.allocs, 0);
        assert!(SlotValues::from_bytes(&bytes[..SLOT_SIZE - 40]).is_none());
        assert!(SlotValues::from_bytes(&bytes[..SLOT_HEAD_SIZE]).is_none());
    }

    #[test]
    fn parses_env_values() {
        assert_eq!(parse_token(b"00000000000000ff"), Some(255));
        assert_eq!(parse_token(b"DEADbeef"), Some(0xdead_beef));
        assert_eq!(parse_token(b"xyz"), None);
        assert_eq!(parse_token(b""), None);
        assert_eq!(parse_token(b"00000000000000000"), None);
        assert_eq!(parse_fd(b"1019"), Some(1019));
        assert_eq!(parse_fd(b"-1"), None);
        assert_eq!(parse_fd(b""), None);
        assert_eq!(parse_fd(b"9999999999"), None);
    }

    #[test]
    fn report_layout_is_what_the_agent_maps() {
        assert_eq!(slot_offset(0), HEADER_SIZE);
        assert_eq!(slot_offset(SLOT_COUNT) + DIRECTORY_SIZE, REPORT_SIZE);
        assert_eq!(offset_of!(Slot, records), 0);
        // Slots and records start on cache lines (the report file is mapped page-aligned).
        assert_eq!(slot_offset(1) % 64, 0);
        assert_eq!(SLOT_SIZE % 64, 0);
    }

    #[test]
    fn records_are_summed_from_bytes_and_from_a_live_slot() {
        use core::sync::atomic::Ordering::Relaxed;
        let slot = Slot::default();
        slot.records[0].allocs.store(3, Relaxed);
        slot.records[RECORDS - 1].allocs.store(4, Relaxed);
        slot.records[7].bytes.store(100, Relaxed);
        slot.records[7].pending.store(5u64.wrapping_neg(), Relaxed);
        slot.live.store(9, Relaxed);
        slot.shared_live.store(10, Relaxed);
        let mut bytes = [0u8; SLOT_SIZE];
        put(&mut bytes, offset_of!(Slot, live), 9);
        put(&mut bytes, offset_of!(Slot, shared_live), 10);
        let rec = |i: usize, field: usize| offset_of!(Slot, records) + i * RECORD_SIZE + field;
        put(&mut bytes, rec(0, offset_of!(Record, allocs)), 3);
        put(&mut bytes, rec(RECORDS - 1, offset_of!(Record, allocs)), 4);
        put(&mut bytes, rec(7, offset_of!(Record, bytes)), 100);
        put(
            &mut bytes,
            rec(7, offset_of!(Record, pending)),
            5u64.wrapping_neg(),
        );
        let decoded = SlotValues::from_bytes(&bytes).unwrap();
        assert_eq!(decoded, SlotValues::from_slot(&slot));
        assert_eq!((decoded.allocs, decoded.bytes, decoded.live), (7, 100, 14));
    }

    #[test]
    fn the_peak_bound_grows_with_concurrent_threads() {
        let one = SlotValues {
            max_active: 1,
            granule: GRANULE,
            ..SlotValues::default()
        };
        assert_eq!(one.peak_bound(), 0);
        let four = SlotValues {
            max_active: 4,
            ..one
        };
        assert_eq!(four.peak_bound(), 3 * GRANULE);
        assert_eq!(SlotValues::default().peak_bound(), 0);
    }
}
