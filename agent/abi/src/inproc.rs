//! The contract of in-process invocation counting (`--invocations-engine inproc`): the
//! *site table* the collector writes and the counting library (`agent/inproc`) reads.
//!
//! The collector resolves the sites and builds, per module (the program or one of its
//! shared libraries, identified by its GNU build id), a block of trampoline code encoded
//! for a trampoline at an unknown address `T`, a list of *fixups* (32-bit fields of that
//! code that hold `target - end of instruction` for a target in the module) and the sites
//! (link-time address, the bytes expected there, where the site's stub starts in the
//! code). The library finds each module in memory, checks the bytes, maps the code at a
//! `T` of its choosing with the *live region* (status words and counters, shared with
//! the collector and every process of the run) right after it, applies the fixups and
//! writes a `jmp rel32` to the stub at each site. Everything position-dependent that the
//! library computes is one subtraction ([`rel32`]).
//!
//! Layout of the table file (all fields 64-bit little-endian words):
//!
//! ```text
//! 0                      header (HEADER_WORDS)
//! MODULES_AT             module records (MODULE_WORDS each)
//! ...                    code blocks, fixups (FIXUP_WORDS each), sites (SITE_WORDS each)
//! live_offset (page)     live region: word 0 = images that read the table,
//!                        then STATUS_WORDS per module, then one counter per counted
//!                        site (a patch may count several) at counters_at(modules),
//!                        then the next-block word and the per-thread blocks
//!                        (LiveLayout)
//! ```
//!
//! Per-thread blocks: the hot path of a stub is a plain `inc` of this thread's copy of
//! the counter, in a *block* (one word per counter) that the thread claims on its first
//! counted call; the collector adds the shared counters and every claimed block after the
//! run. Each process image's module area is, from `T`: the code (`code_pages`), the live
//! region (`live_len`), then [`slot_bytes`] of private *slots*, one word per block,
//! marked wipe-on-fork. A thread keeps, in the counting library's initial-exec TLS word
//! (at a fixed offset from `%fs`, applied to the code as a [`FixupKind::ThreadPointer`]),
//! the address of its slot, and the slot holds the address of its block. A forked child
//! finds its slots zeroed by the kernel, so its threads claim fresh blocks instead of
//! sharing their parent's (a raw `fork` or `clone` included: no `pthread_atfork` handler
//! is involved). When the blocks are used up, a stub falls back to a `lock inc` of the
//! shared counter, so the counts stay exact.
//!
//! Everything before `live_offset` is written once by the collector and only read
//! afterwards; only the live region changes during a run.
//!
//! The collector keeps the table's memfd open for the run and stamps the run's copy of
//! the counting library with where it is ([`crate::stamp`]): the library opens it as
//! `/proc/<collector pid>/fd/<n>`, maps it, and closes the descriptor when it is done.

/// First word of the table.
pub const TABLE_MAGIC: u64 = 0x5342_5349_4e50_5243; // "SBSINPRC"
/// Layout version.
pub const TABLE_VERSION: u64 = 3;
/// Page size the layout assumes (x86-64).
pub const PAGE: u64 = 4096;
/// Longest build id kept (SHA-1 ids are 20 bytes; 40 leaves room for others).
pub const MAX_BUILD_ID: usize = 40;
/// Longest patch: the bytes displaced from a site (whole instructions, at least
/// [`JMP_LEN`]).
pub const MAX_PATCH: usize = 16;
/// Bytes of the `jmp rel32` written at a site: the fewest a patch displaces.
pub const JMP_LEN: usize = 5;

/// Words of the header.
pub const HEADER_WORDS: usize = 8;
/// Words of a module record.
pub const MODULE_WORDS: usize = 20;
/// Words of a fixup.
pub const FIXUP_WORDS: usize = 3;
/// Words of a site.
pub const SITE_WORDS: usize = 4;
/// Status words per module in the live region.
pub const STATUS_WORDS: usize = 3;
/// Byte offset of the first module record.
pub const MODULES_AT: usize = HEADER_WORDS * 8;

/// Why a process image could not patch a module (the `reason` status word).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The bytes at a site are not the ones the collector read from the file.
    BytesDiffer = 1,
    /// No free address near the module for the trampoline (or it could not be mapped).
    NoRoom = 2,
    /// A fixup or a site jump does not fit 32 bits from where the trampoline landed.
    OutOfRange = 3,
    /// `mprotect` refused to make the code writable or to restore it.
    Protect = 4,
    /// More modules in the table than the library can hold.
    TooMany = 5,
    /// Other threads were running when the library's constructor ran: patching code
    /// that another thread may be executing is not safe.
    Threads = 6,
    /// The process runs with the x86 shadow stack, on which the trampolines' emulated
    /// calls would fault when the callee returns.
    ShadowStack = 7,
    /// A seccomp filter forbids what patching does: a child forked to try it (make a
    /// page executable, then writable and executable) was killed or refused.
    Seccomp = 8,
    /// The kernel cannot mark the per-thread slots wipe-on-fork (`MADV_WIPEONFORK`,
    /// Linux 4.14+): a forked child would share its parent's counter blocks.
    WipeOnFork = 9,
    /// The module is one the program loads at run time (`dlopen`), and the library
    /// could not redirect the dynamic loader's `_dl_debug_state` to learn when it is
    /// mapped (a loader other than glibc's, or code there it does not know).
    NoLoaderHook = 10,
}

impl Refusal {
    /// The stored word.
    pub const fn code(self) -> u64 {
        self as u64
    }

    /// The refusal for a stored word.
    pub const fn from_code(code: u64) -> Option<Refusal> {
        match code {
            1 => Some(Refusal::BytesDiffer),
            2 => Some(Refusal::NoRoom),
            3 => Some(Refusal::OutOfRange),
            4 => Some(Refusal::Protect),
            5 => Some(Refusal::TooMany),
            6 => Some(Refusal::Threads),
            7 => Some(Refusal::ShadowStack),
            8 => Some(Refusal::Seccomp),
            9 => Some(Refusal::WipeOnFork),
            10 => Some(Refusal::NoLoaderHook),
            _ => None,
        }
    }

    /// For messages.
    pub const fn describe(self) -> &'static str {
        match self {
            Refusal::BytesDiffer => "the code in memory differs from the file at a site (the file changed, or something else patched it)",
            Refusal::NoRoom => "no free address within 2 GiB of the code for the trampolines",
            Refusal::OutOfRange => "the trampolines landed too far from the code",
            Refusal::Protect => "mprotect refused to make the code writable (a W^X policy such as SELinux execmod, or PaX)",
            Refusal::TooMany => "too many modules",
            Refusal::Threads => "threads were already running when the counting library started (a library constructor started them)",
            Refusal::ShadowStack => "the process runs with the x86 shadow stack (CET), which the trampolines' emulated calls would break",
            Refusal::Seccomp => "a seccomp filter forbids making code writable or executable (mprotect with PROT_EXEC, as systemd's MemoryDenyWriteExecute= and sandboxes do)",
            Refusal::WipeOnFork => "the kernel cannot mark memory wipe-on-fork (MADV_WIPEONFORK, Linux 4.14+), which the per-thread counters need",
            Refusal::NoLoaderHook => "it is loaded at run time (dlopen), and the dynamic loader's _dl_debug_state, which tells the counting library when a library is mapped, is not code it knows how to redirect (a loader other than glibc's?)",
        }
    }
}

/// The table header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableHeader {
    /// The run's random token, also in the counting library's stamp (`crate::stamp`).
    pub token: u64,
    /// Number of module records.
    pub modules: u64,
    /// Byte offset of the live region (a multiple of [`PAGE`]).
    pub live_offset: u64,
    /// Bytes of the live region (a multiple of [`PAGE`]).
    pub live_len: u64,
    /// Per-thread counter blocks in the live region (0: the stubs count in the shared
    /// counters only); each image reserves [`slot_bytes`] of slots for them.
    pub blocks: u64,
}

impl TableHeader {
    /// Encode into the first `HEADER_WORDS * 8` bytes of `out`.
    pub fn write(&self, out: &mut [u8]) {
        let words = [
            TABLE_MAGIC,
            TABLE_VERSION,
            self.token,
            self.modules,
            self.live_offset,
            self.live_len,
            self.blocks,
            0,
        ];
        for (i, w) in words.iter().enumerate() {
            put(out, i * 8, *w);
        }
    }

    /// Decode and check magic and version; `None` if short or foreign.
    pub fn read(bytes: &[u8]) -> Option<TableHeader> {
        if word(bytes, 0)? != TABLE_MAGIC || word(bytes, 8)? != TABLE_VERSION {
            return None;
        }
        let header = TableHeader {
            token: word(bytes, 16)?,
            modules: word(bytes, 24)?,
            live_offset: word(bytes, 32)?,
            live_len: word(bytes, 40)?,
            blocks: word(bytes, 48)?,
        };
        let sane = header.live_offset % PAGE == 0
            && header.blocks <= MAX_BLOCKS
            && header.live_len % PAGE == 0
            && header.live_len > 0
            && counters_at(header.modules) <= header.live_len;
        sane.then_some(header)
    }
}

/// One module: a file whose code the table patches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModuleRecord {
    /// Length of the build id.
    pub build_id_len: u64,
    /// The GNU build id, zero-padded.
    pub build_id: [u8; MAX_BUILD_ID],
    /// Byte offset of the trampoline code in the table.
    pub code_offset: u64,
    /// Bytes of trampoline code.
    pub code_len: u64,
    /// Bytes reserved for the code at `T` (a multiple of [`PAGE`]); the live region is
    /// mapped right after, at `T + code_pages`.
    pub code_pages: u64,
    /// Byte offset of the fixups.
    pub fixups_offset: u64,
    /// Number of fixups.
    pub fixups: u64,
    /// Byte offset of the sites.
    pub sites_offset: u64,
    /// Number of sites.
    pub sites: u64,
}

/// How the library recognises a module the program loads at run time (`dlopen`) rather
/// than at start, among the loader's list of objects (`_r_debug.r_map`: load bias and
/// dynamic section only): an object whose dynamic section lies at `bias + dynamic`, whose
/// program headers (at `bias + phdrs`, `phnum` of them) hold the module's build id.
/// Stored in words 13 to 16 of the module's record (word 13 is 0 for a module loaded at
/// start); kept apart from [`ModuleRecord`] so that neither is copied with `memcpy` in
/// the library, which must call nothing once it has patched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadedLater {
    /// Link-time address of the dynamic section (`PT_DYNAMIC`).
    pub dynamic: u64,
    /// Link-time address of the program headers, inside a `PT_LOAD` segment.
    pub phdrs: u64,
    /// Number of program headers.
    pub phnum: u64,
}

impl LoadedLater {
    /// Byte offset of its words in a module record.
    const AT: usize = 104;

    /// Encode `later` (`None`: loaded at start) into the module record at byte `at`.
    pub fn write(later: Option<LoadedLater>, out: &mut [u8], at: usize) {
        let words = later.map_or([0; 4], |l| [1, l.dynamic, l.phdrs, l.phnum]);
        for (i, w) in words.iter().enumerate() {
            put(out, at + Self::AT + i * 8, *w);
        }
    }

    /// Decode from the module record at byte `at`; `None` for a module loaded at start
    /// (or a record that does not fit).
    pub fn read(bytes: &[u8], at: usize) -> Option<LoadedLater> {
        let w = |i: usize| word(bytes, at + Self::AT + i * 8);
        (w(0)? != 0).then_some(())?;
        Some(LoadedLater {
            dynamic: w(1)?,
            phdrs: w(2)?,
            phnum: w(3)?,
        })
    }
}

impl ModuleRecord {
    /// The build id's bytes.
    pub fn build_id(&self) -> &[u8] {
        &self.build_id[..(self.build_id_len as usize).min(MAX_BUILD_ID)]
    }

    /// Encode at byte `at` of `out`.
    pub fn write(&self, out: &mut [u8], at: usize) {
        put(out, at, self.build_id_len);
        out[at + 8..at + 8 + MAX_BUILD_ID].copy_from_slice(&self.build_id);
        let rest = [
            self.code_offset,
            self.code_len,
            self.code_pages,
            self.fixups_offset,
            self.fixups,
            self.sites_offset,
            self.sites,
        ];
        for (i, w) in rest.iter().enumerate() {
            put(out, at + 48 + i * 8, *w);
        }
    }

    /// Decode the record at byte `at`; `None` if it does not fit the table or its parts
    /// lie outside `bytes` (the part of the table before the live region).
    pub fn read(bytes: &[u8], at: usize) -> Option<ModuleRecord> {
        let mut build_id = [0u8; MAX_BUILD_ID];
        build_id.copy_from_slice(bytes.get(at + 8..at + 8 + MAX_BUILD_ID)?);
        let w = |i: usize| word(bytes, at + 48 + i * 8);
        let m = ModuleRecord {
            build_id_len: word(bytes, at)?,
            build_id,
            code_offset: w(0)?,
            code_len: w(1)?,
            code_pages: w(2)?,
            fixups_offset: w(3)?,
            fixups: w(4)?,
            sites_offset: w(5)?,
            sites: w(6)?,
        };
        let inside = |offset: u64, len: u64| {
            offset
                .checked_add(len)
                .is_some_and(|end| end <= bytes.len() as u64)
        };
        let ok = m.build_id_len > 0
            && m.build_id_len as usize <= MAX_BUILD_ID
            && m.code_pages % PAGE == 0
            && m.code_len <= m.code_pages
            && inside(m.code_offset, m.code_len)
            && inside(
                m.fixups_offset,
                m.fixups.checked_mul(FIXUP_WORDS as u64 * 8)?,
            )
            && inside(m.sites_offset, m.sites.checked_mul(SITE_WORDS as u64 * 8)?);
        ok.then_some(m)
    }
}

/// What a [`Fixup`]'s field receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FixupKind {
    /// `target - end`: a jump or RIP-relative operand into the module.
    Module = 0,
    /// The offset from `%fs` of the counting library's TLS word (a thread's slot
    /// address): the displacement of a `mov reg, fs:[disp32]` or `mov fs:[disp32], reg`.
    ThreadPointer = 1,
}

/// A 32-bit field of the trampoline code that the library fills in: for
/// [`FixupKind::Module`], `target - end`, where `target` is a link-time address in the
/// module and `end` the end of the instruction in the code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fixup {
    /// Offset of the 4-byte field in the code.
    pub field: u32,
    /// Offset in the code of the end of the instruction holding it.
    pub end: u32,
    /// Link-time address of the target in the module (0 for other kinds).
    pub target: u64,
    /// What the field receives.
    pub kind: FixupKind,
}

impl Fixup {
    /// A fixup of `kind` [`FixupKind::Module`].
    pub const fn module(field: u32, end: u32, target: u64) -> Fixup {
        Fixup {
            field,
            end,
            target,
            kind: FixupKind::Module,
        }
    }

    /// Encode at byte `at` of `out`.
    pub fn write(&self, out: &mut [u8], at: usize) {
        put(out, at, u64::from(self.field) | (u64::from(self.end) << 32));
        put(out, at + 8, self.target);
        put(out, at + 16, self.kind as u64);
    }

    /// Decode the fixup at byte `at`; `None` if short or of an unknown kind.
    pub fn read(bytes: &[u8], at: usize) -> Option<Fixup> {
        let a = word(bytes, at)?;
        let kind = match word(bytes, at + 16)? {
            0 => FixupKind::Module,
            1 => FixupKind::ThreadPointer,
            _ => return None,
        };
        Some(Fixup {
            field: a as u32,
            end: (a >> 32) as u32,
            target: word(bytes, at + 8)?,
            kind,
        })
    }
}

/// One patch: a `jmp` written over a site, to a stub that counts that site and any sites
/// among the instructions it displaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SiteRecord {
    /// Link-time address of the site.
    pub address: u64,
    /// Bytes displaced (5 to [`MAX_PATCH`]): a `jmp rel32`, then `int3` fill.
    pub len: u8,
    /// Offset of the site's stub in the trampoline code.
    pub stub: u32,
    /// The bytes expected at the site (the first `len`).
    pub original: [u8; MAX_PATCH],
}

impl SiteRecord {
    /// Encode at byte `at` of `out`.
    pub fn write(&self, out: &mut [u8], at: usize) {
        put(out, at, self.address);
        put(
            out,
            at + 8,
            u64::from(self.len) | (u64::from(self.stub) << 32),
        );
        out[at + 16..at + 16 + MAX_PATCH].copy_from_slice(&self.original);
    }

    /// Decode the site at byte `at`; `None` if short or its length is impossible.
    pub fn read(bytes: &[u8], at: usize) -> Option<SiteRecord> {
        let b = word(bytes, at + 8)?;
        let mut original = [0u8; MAX_PATCH];
        original.copy_from_slice(bytes.get(at + 16..at + 16 + MAX_PATCH)?);
        let site = SiteRecord {
            address: word(bytes, at)?,
            len: b as u8,
            stub: (b >> 32) as u32,
            original,
        };
        (5..=MAX_PATCH)
            .contains(&(site.len as usize))
            .then_some(site)
    }

    /// The bytes to write at the site when its stub lies at `stub_address` and the site
    /// at `site_address`: `jmp rel32` and `int3` fill. `None` if out of range.
    pub fn patch(&self, site_address: u64, stub_address: u64) -> Option<[u8; MAX_PATCH]> {
        let rel = rel32(site_address.checked_add(5)?, stub_address)?;
        let mut out = [0xccu8; MAX_PATCH];
        out[0] = 0xe9;
        out[1..5].copy_from_slice(&rel.to_le_bytes());
        Some(out)
    }
}

/// `to - from_end` as a 32-bit displacement, if it fits.
pub fn rel32(from_end: u64, to: u64) -> Option<i32> {
    i32::try_from(to.wrapping_sub(from_end) as i64).ok()
}

/// Byte offset, in the live region, of module `index`'s status words.
pub const fn status_at(index: usize) -> usize {
    8 + index * STATUS_WORDS * 8
}

/// Byte offset, in the live region, of the first counter (cache-line aligned).
pub const fn counters_at(modules: u64) -> u64 {
    (8 + modules * STATUS_WORDS as u64 * 8).div_ceil(64) * 64
}

/// Most per-thread blocks a table may have.
pub const MAX_BLOCKS: u64 = 1 << 16;

/// Bytes of private slots (one word per block) an image reserves after a module's live
/// region: whole pages, none without blocks.
pub const fn slot_bytes(blocks: u64) -> u64 {
    pages(blocks * 8)
}

/// Where the parts of the live region lie, for `counters` counters and `blocks`
/// per-thread blocks; what the collector encodes into the stubs and reads after a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveLayout {
    /// Byte offset of the shared counters ([`counters_at`]).
    pub counters_at: u64,
    /// Byte offset of the next-block word: how many blocks were claimed (it may run past
    /// `blocks`: claims beyond that fail).
    pub next_block_at: u64,
    /// Byte offset of block 0.
    pub blocks_at: u64,
    /// Bytes per block (one word per counter, cache-line aligned).
    pub block_bytes: u64,
    /// Number of blocks.
    pub blocks: u64,
    /// Bytes of the live region (whole pages).
    pub len: u64,
}

impl LiveLayout {
    /// The layout for a table of `modules` modules.
    pub const fn new(modules: u64, counters: u64, blocks: u64) -> LiveLayout {
        let counters_at = counters_at(modules);
        let next_block_at = (counters_at + 8 * counters).div_ceil(64) * 64;
        let blocks_at = next_block_at + 64;
        let block_bytes = (8 * counters).div_ceil(64) * 64;
        let end = if blocks == 0 {
            counters_at + 8 * counters
        } else {
            blocks_at + blocks * block_bytes
        };
        let len = if end < PAGE { PAGE } else { pages(end) };
        LiveLayout {
            counters_at,
            next_block_at,
            blocks_at,
            block_bytes,
            blocks,
            len,
        }
    }

    /// Counter `k` of block `b`, as a byte offset in the live region.
    pub const fn block_counter(&self, b: u64, k: u64) -> u64 {
        self.blocks_at + b * self.block_bytes + 8 * k
    }
}

/// `n` rounded up to whole pages.
pub const fn pages(n: u64) -> u64 {
    n.div_ceil(PAGE) * PAGE
}

/// A module's status after a run, decoded from the live region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ModuleStatus {
    /// Process images that patched the module.
    pub patched: u64,
    /// Process images that found the module but could not patch it.
    pub refused: u64,
    /// The last refusal's [`Refusal::code`].
    pub reason: u64,
}

impl ModuleStatus {
    /// Decode module `index`'s status from the live region's bytes.
    pub fn read(live: &[u8], index: usize) -> Option<ModuleStatus> {
        let at = status_at(index);
        Some(ModuleStatus {
            patched: word(live, at)?,
            refused: word(live, at + 8)?,
            reason: word(live, at + 16)?,
        })
    }
}

/// The GNU build id (`NT_GNU_BUILD_ID`) among the notes of one `PT_NOTE` segment.
pub fn build_id_in_notes(mut notes: &[u8]) -> Option<&[u8]> {
    let align4 = |n: usize| n.checked_add(3).map(|n| n & !3);
    while notes.len() >= 12 {
        let u32_at = |at: usize| {
            u32::from_le_bytes([notes[at], notes[at + 1], notes[at + 2], notes[at + 3]]) as usize
        };
        let (namesz, descsz, kind) = (u32_at(0), u32_at(4), u32_at(8));
        let name_end = 12usize.checked_add(namesz)?;
        let desc_at = align4(name_end)?;
        let desc_end = desc_at.checked_add(descsz)?;
        let name = notes.get(12..name_end)?;
        let desc = notes.get(desc_at..desc_end)?;
        if kind == 3 && name == b"GNU\0" {
            return Some(desc);
        }
        notes = notes.get(align4(desc_end)?.min(notes.len())..)?;
    }
    None
}

fn word(bytes: &[u8], at: usize) -> Option<u64> {
    let raw: [u8; 8] = bytes.get(at..at.checked_add(8)?)?.try_into().ok()?;
    Some(u64::from_le_bytes(raw))
}

fn put(out: &mut [u8], at: usize, value: u64) {
    out[at..at + 8].copy_from_slice(&value.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_damage_is_refused() {
        let mut table = [0u8; 4096];
        let h = TableHeader {
            token: 7,
            modules: 1,
            live_offset: 4096,
            live_len: 4096,
            blocks: 3,
        };
        h.write(&mut table);
        assert_eq!(TableHeader::read(&table), Some(h));
        let mut bad = table;
        bad[8] = 9; // version
        assert_eq!(TableHeader::read(&bad), None);

        let mut id = [0u8; MAX_BUILD_ID];
        id[..3].copy_from_slice(&[1, 2, 3]);
        let m = ModuleRecord {
            build_id_len: 3,
            build_id: id,
            code_offset: 1024,
            code_len: 100,
            code_pages: 4096,
            fixups_offset: 1200,
            fixups: 2,
            sites_offset: 1300,
            sites: 3,
        };
        m.write(&mut table, MODULES_AT);
        assert_eq!(ModuleRecord::read(&table, MODULES_AT), Some(m));
        assert_eq!(LoadedLater::read(&table, MODULES_AT), None);
        let later = LoadedLater {
            dynamic: 0x3de8,
            phdrs: 0x40,
            phnum: 11,
        };
        LoadedLater::write(Some(later), &mut table, MODULES_AT);
        assert_eq!(LoadedLater::read(&table, MODULES_AT), Some(later));
        assert_eq!(ModuleRecord::read(&table, MODULES_AT), Some(m));
        LoadedLater::write(None, &mut table, MODULES_AT);
        assert_eq!(LoadedLater::read(&table, MODULES_AT), None);
        assert_eq!(m.build_id(), &[1, 2, 3]);
        // Parts outside the table are refused.
        assert_eq!(ModuleRecord::read(&table[..1300], MODULES_AT), None);

        let f = Fixup::module(17, 21, 0x1234_5678_9abc);
        f.write(&mut table, 1200);
        assert_eq!(Fixup::read(&table, 1200), Some(f));
        let tp = Fixup {
            kind: FixupKind::ThreadPointer,
            ..f
        };
        tp.write(&mut table, 1200);
        assert_eq!(Fixup::read(&table, 1200), Some(tp));
        table[1216] = 9;
        assert_eq!(Fixup::read(&table, 1200), None);
        f.write(&mut table, 1200);

        let s = SiteRecord {
            address: 0x1130,
            len: 6,
            stub: 40,
            original: [
                0x55, 0x48, 0x89, 0xe5, 0x41, 0x57, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
            ],
        };
        s.write(&mut table, 1300);
        assert_eq!(SiteRecord::read(&table, 1300), Some(s));
        let mut short = s;
        short.len = 4;
        short.write(&mut table, 1300);
        assert_eq!(SiteRecord::read(&table, 1300), None);
    }

    #[test]
    fn site_jumps_are_relative_to_the_end_of_the_jump() {
        let s = SiteRecord {
            address: 0,
            len: 7,
            stub: 0,
            original: [0; MAX_PATCH],
        };
        let p = s.patch(0x1000, 0x2000).unwrap();
        assert_eq!(p[0], 0xe9);
        assert_eq!(
            i32::from_le_bytes(p[1..5].try_into().unwrap()),
            0x2000 - 0x1005
        );
        assert_eq!(p[5..7], [0xcc, 0xcc]);
        // Backwards, and out of range.
        let p = s.patch(0x7fff_0000_0000, 0x7fff_0000_0000 - 0x100).unwrap();
        assert_eq!(i32::from_le_bytes(p[1..5].try_into().unwrap()), -0x105);
        assert!(s.patch(0x1000, 0x1000 + (1 << 31) + 5).is_none());
        assert_eq!(rel32(10, 10 + i32::MAX as u64), Some(i32::MAX));
        assert_eq!(rel32(10 + (1 << 31), 10), Some(i32::MIN));
        assert_eq!(rel32(11 + (1 << 31), 10), None);
    }

    #[test]
    fn build_id_is_found_among_notes() {
        let mut notes = Vec::new();
        // An ABI tag note first (type 1, "GNU", 16 bytes), then the build id.
        for (kind, desc) in [(1u32, vec![0u8; 16]), (3u32, vec![0xab, 0xcd, 0xef])] {
            notes.extend_from_slice(&4u32.to_le_bytes());
            notes.extend_from_slice(&(desc.len() as u32).to_le_bytes());
            notes.extend_from_slice(&kind.to_le_bytes());
            notes.extend_from_slice(b"GNU\0");
            notes.extend_from_slice(&desc);
            while notes.len() % 4 != 0 {
                notes.push(0);
            }
        }
        assert_eq!(build_id_in_notes(&notes), Some(&[0xab, 0xcd, 0xef][..]));
        assert_eq!(build_id_in_notes(&notes[..20]), None);
        assert_eq!(build_id_in_notes(&[]), None);
    }

    #[test]
    fn live_region_layout() {
        assert_eq!(status_at(0), 8);
        assert_eq!(counters_at(1), 64);
        assert_eq!(counters_at(3), 128);
        assert_eq!(pages(1), 4096);
        assert_eq!(pages(4096), 4096);
        let l = LiveLayout::new(1, 3, 4);
        assert_eq!(
            (l.counters_at, l.next_block_at, l.blocks_at),
            (64, 128, 192)
        );
        assert_eq!((l.block_bytes, l.len), (64, 4096));
        assert_eq!(l.block_counter(2, 1), 192 + 128 + 8);
        let big = LiveLayout::new(1, 1000, 256);
        assert_eq!(big.block_bytes, 8000);
        assert_eq!(big.len, pages(big.blocks_at + 256 * 8000));
        assert_eq!(LiveLayout::new(1, 1000, 0).len, pages(64 + 8000));
        assert_eq!(
            (slot_bytes(0), slot_bytes(1), slot_bytes(513)),
            (0, 4096, 8192)
        );
        let mut live = [0u8; 64];
        put(&mut live, status_at(1), 2);
        put(&mut live, status_at(1) + 16, Refusal::NoRoom.code());
        let s = ModuleStatus::read(&live, 1).unwrap();
        assert_eq!((s.patched, s.refused), (2, 0));
        assert_eq!(Refusal::from_code(s.reason), Some(Refusal::NoRoom));
    }
}
