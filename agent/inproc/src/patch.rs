//! The constructor: read the site table, find its modules in memory, map the trampolines
//! and write the jumps. Every step that touches raw memory is here, each with its
//! `SAFETY` argument; what to write and where was decided by the collector (the table)
//! and by [`crate::plan`].
//!
//! Order of work: first the site table (found through the library's stamp, opened as the
//! collector's descriptor with raw system calls) and the loaded objects
//! (`dl_iterate_phdr`, the one libc call), then the patching, which uses raw system calls
//! only, so that no call the library makes is ever counted; then the table's descriptor
//! is closed again, and the program is left with none of ours. A module is patched all or
//! nothing as far as the checks go (bytes, room, reach are checked before the first
//! write); if `mprotect` fails half way the module is reported refused and the collector
//! fails the run.

use core::ffi::{c_int, c_void};
use core::sync::atomic::Ordering::{Relaxed, SeqCst};
use core::sync::atomic::{AtomicBool, AtomicU64};

use sbs_agent_abi::inproc::{
    build_id_in_notes, rel32, slot_bytes, status_at, Fixup, FixupKind, ModuleRecord, Refusal,
    SiteRecord, TableHeader, FIXUP_WORDS, HEADER_WORDS, MODULES_AT, MODULE_WORDS, PAGE, SITE_WORDS,
};
use sbs_agent_abi::stamp::{proc_fd_path, Stamp, StampValues, PROC_FD_PATH_MAX};

use crate::plan::{candidates, within_reach};
use crate::sys::{self, DlPhdrInfo, Phdr};

/// Modules one table may name.
const MAX_MODULES: usize = 64;
/// `PT_LOAD` segments kept per module.
const MAX_SEGMENTS: usize = 8;

static STARTED: AtomicBool = AtomicBool::new(false);

/// Where this run's site table is: written by the collector into each run's copy of the
/// library (see `sbs_agent_abi::stamp`); all zero in the library as built.
#[used]
static STAMP: Stamp = Stamp::UNSTAMPED;

/// The values of [`STAMP`], if the library was stamped.
fn stamp() -> Option<StampValues> {
    // SAFETY: a plain read of our own static. Volatile because its bytes were changed in
    // the file after compilation: the compiler must not replace the read with the zeros
    // it was compiled with.
    let values = unsafe { core::ptr::read_volatile(core::ptr::addr_of!(STAMP.values)) };
    StampValues::from_bytes(&values)
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    // SAFETY: abort has no preconditions; unwinding out of a constructor is never allowed.
    unsafe { sys::abort() }
}

// The hidden, trapping `rust_eh_personality` a no_std preload library needs to load.
#[cfg(not(test))]
sbs_agent_abi::personality_stub!();

/// Run at load time, before the program's own constructors and `main`.
#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init_at_load;

extern "C" fn init_at_load() {
    if STARTED.swap(true, SeqCst) {
        return;
    }
    // SAFETY: runs once per process image (guarded by STARTED), from the loader's
    // constructor call.
    unsafe { start() };
}

/// A loaded object that the table names.
#[derive(Clone, Copy)]
struct Loaded {
    /// Index of its module record.
    module: usize,
    /// Load bias: memory address = link-time address + bias.
    bias: u64,
    /// Lowest and highest memory address of its `PT_LOAD` segments.
    lo: u64,
    hi: u64,
    /// Its `PT_LOAD` segments: (start, end, flags), memory addresses.
    segments: [(u64, u64, u32); MAX_SEGMENTS],
    segment_count: usize,
}

const NONE: Loaded = Loaded {
    module: usize::MAX,
    bias: 0,
    lo: 0,
    hi: 0,
    segments: [(0, 0, 0); MAX_SEGMENTS],
    segment_count: 0,
};

/// What the `dl_iterate_phdr` callback fills in.
struct Search<'a> {
    table: &'a [u8],
    modules: usize,
    found: [Loaded; MAX_MODULES],
    count: usize,
}

/// The collector's table as this image mapped it.
struct Mapped {
    /// Our descriptor of the table, closed once the patching is done.
    fd: i64,
    header: TableHeader,
    /// The table proper (written before the run, read-only during it).
    table: &'static [u8],
    /// Address of the live region (counts and statuses, updated with atomics).
    live: u64,
}

/// Find the table the stamp names, check its token, and map it. `None` when there is
/// none for this image; the descriptor is closed then.
///
/// # Safety
/// Runs in the constructor.
unsafe fn map_table() -> Option<Mapped> {
    let stamp = stamp()?;
    let mut path = [0u8; PROC_FD_PATH_MAX];
    let len = proc_fd_path(stamp.pid, stamp.fd, &mut path);
    let fd = sys::open_rw(&path[..=len])?;
    // SAFETY: the constructor.
    let mapped = unsafe { map_opened(fd, stamp.token) };
    if mapped.is_none() {
        sys::close(fd);
    }
    mapped
}

/// [`map_table`] once the table is open as `fd`.
///
/// # Safety
/// Runs in the constructor.
unsafe fn map_opened(fd: i64, token: u64) -> Option<Mapped> {
    let mut raw = [0u8; HEADER_WORDS * 8];
    if !sys::pread_all(fd, &mut raw) {
        return None;
    }
    let header = TableHeader::read(&raw).filter(|h| h.token == token)?;
    let size = header.live_offset + header.live_len;
    // SAFETY: a fresh shared mapping of the table file; the header check shows the
    // descriptor is the collector's table of this size.
    let map = unsafe {
        sys::mmap(
            0,
            size,
            sys::PROT_READ | sys::PROT_WRITE,
            sys::MAP_SHARED,
            fd,
            0,
        )
    }?;
    // SAFETY: the first live_offset bytes of the mapping are written by the collector
    // before the run and never changed during it; the mapping is never unmapped.
    let table =
        unsafe { core::slice::from_raw_parts(map as *const u8, header.live_offset as usize) };
    let live = map + header.live_offset;
    Some(Mapped {
        fd,
        header,
        table,
        live,
    })
}

/// Read the table and patch what it names.
///
/// # Safety
/// Runs once, in the constructor.
unsafe fn start() {
    // SAFETY: the constructor.
    let Some(mapped) = (unsafe { map_table() }) else {
        return;
    };
    // SAFETY: the constructor.
    unsafe { patch_table(&mapped) };
    // The mappings keep the table; the program gets no descriptor of ours.
    sys::close(mapped.fd);
}

/// Patch what the mapped table names, in the modules the loader lists.
///
/// # Safety
/// Runs once, in the constructor.
unsafe fn patch_table(mapped: &Mapped) {
    let live = mapped.live;
    // SAFETY: word 0 of the live region (8-byte aligned, page-aligned region).
    unsafe { live_word(live, 0) }.fetch_add(1, Relaxed);
    let modules = mapped.header.modules as usize;
    if modules > MAX_MODULES {
        for m in 0..modules.min(1 << 16) {
            // SAFETY: TableHeader::read checked that the status words fit the live region.
            unsafe { refuse(live, m, Refusal::TooMany) };
        }
        return;
    }
    let mut search = Search {
        table: mapped.table,
        modules,
        found: [NONE; MAX_MODULES],
        count: 0,
    };
    // SAFETY: the callback only reads the loader's program headers and the notes they
    // point to; `search` outlives the call.
    unsafe { sys::dl_iterate_phdr(on_object, (&mut search as *mut Search).cast::<c_void>()) };
    // SAFETY: the modules were just listed by the loader; the constructor.
    unsafe { patch_found(mapped, &search.found[..search.count]) };
}

/// Patch each module the loader listed and the table names, and record in the live
/// region whether it was patched or why not.
///
/// # Safety
/// The modules are mapped (the loader just listed them); runs in the constructor.
unsafe fn patch_found(mapped: &Mapped, found: &[Loaded]) {
    let Mapped {
        fd,
        header,
        table,
        live,
    } = mapped;
    // SAFETY: a plain read of a `char` glibc exports for this purpose.
    let single = unsafe { core::ptr::addr_of!(sys::__libc_single_threaded).read() } != 0;
    // Asked once per image, and only when a module of the table is loaded.
    let seccomp = !found.is_empty() && sys::seccomp_forbids_patching();
    for loaded in found {
        let Some(record) = ModuleRecord::read(table, MODULES_AT + loaded.module * MODULE_WORDS * 8)
        else {
            continue;
        };
        let result = if sys::shadow_stack_enabled() {
            Err(Refusal::ShadowStack)
        } else if seccomp {
            Err(Refusal::Seccomp)
        } else if single {
            // SAFETY: the module is mapped (the loader just listed it), the process has
            // one thread, and the record's parts lie inside the table.
            unsafe { patch_module(table, *fd, header, &record, loaded) }
        } else {
            Err(Refusal::Threads)
        };
        match result {
            // SAFETY: status words of a module of the table.
            Ok(()) => unsafe { live_word(*live, status_at(loaded.module)) }.fetch_add(1, Relaxed),
            // SAFETY: as above.
            Err(why) => unsafe { refuse(*live, loaded.module, why) },
        };
    }
}

/// The live region's word at byte `at`.
///
/// # Safety
/// `at + 8` lies inside the live region.
unsafe fn live_word(live: u64, at: usize) -> &'static AtomicU64 {
    // SAFETY: contract; the region is page-aligned and `at` a multiple of 8, and it is
    // shared memory that everyone updates with atomics only.
    unsafe { &*((live + at as u64) as *const AtomicU64) }
}

/// Record that module `m` could not be patched in this image.
///
/// # Safety
/// Module `m`'s status words lie inside the live region.
unsafe fn refuse(live: u64, m: usize, why: Refusal) -> u64 {
    // SAFETY: contract.
    unsafe { live_word(live, status_at(m) + 16) }.store(why.code(), Relaxed);
    // SAFETY: contract.
    unsafe { live_word(live, status_at(m) + 8) }.fetch_add(1, Relaxed)
}

unsafe extern "C" fn on_object(info: *mut DlPhdrInfo, _size: usize, data: *mut c_void) -> c_int {
    // SAFETY: dl_iterate_phdr passes the `Search` given to it and a valid info.
    let (search, info) = unsafe { (&mut *data.cast::<Search>(), &*info) };
    if search.count == MAX_MODULES || info.dlpi_phdr.is_null() {
        return 0;
    }
    // SAFETY: the loader's program headers of this object, dlpi_phnum of them.
    let phdrs = unsafe { core::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
    let bias = info.dlpi_addr;
    let mut loaded = NONE;
    loaded.bias = bias;
    loaded.lo = u64::MAX;
    for p in phdrs.iter().filter(|p| p.p_type == sys::PT_LOAD) {
        let start = bias.wrapping_add(p.p_vaddr);
        let end = start.wrapping_add(p.p_memsz);
        loaded.lo = loaded.lo.min(start);
        loaded.hi = loaded.hi.max(end);
        if loaded.segment_count < MAX_SEGMENTS {
            loaded.segments[loaded.segment_count] = (start, end, p.p_flags);
            loaded.segment_count += 1;
        }
    }
    let Some(id) = phdrs
        .iter()
        .filter(|p| p.p_type == sys::PT_NOTE)
        .find_map(|p| note_build_id(&loaded, bias, p))
    else {
        return 0;
    };
    for m in 0..search.modules {
        let Some(record) = ModuleRecord::read(search.table, MODULES_AT + m * MODULE_WORDS * 8)
        else {
            continue;
        };
        let taken = search.found[..search.count].iter().any(|f| f.module == m);
        if !taken && same(record.build_id(), id) {
            loaded.module = m;
            search.found[search.count] = loaded;
            search.count += 1;
            break;
        }
    }
    0
}

/// The build id in a `PT_NOTE` segment, if the segment lies in loaded memory.
fn note_build_id(loaded: &Loaded, bias: u64, p: &Phdr) -> Option<&'static [u8]> {
    let start = bias.checked_add(p.p_vaddr)?;
    let end = start.checked_add(p.p_memsz)?;
    let mapped = loaded.segments[..loaded.segment_count]
        .iter()
        .any(|&(s, e, flags)| start >= s && end <= e && flags & sys::PF_R != 0);
    if !mapped {
        return None;
    }
    // SAFETY: the notes lie inside a readable PT_LOAD segment of an object the loader
    // has mapped, and loaded objects stay mapped while the constructor runs.
    let notes = unsafe { core::slice::from_raw_parts(start as *const u8, p.p_memsz as usize) };
    build_id_in_notes(notes)
}

/// Byte-wise equality without a call to libc's `memcmp`/`bcmp`.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

impl Loaded {
    /// The executable segment holding `[start, start + len)`, if one does.
    fn code_segment(&self, start: u64, len: u64) -> Option<(u64, u64, u32)> {
        self.segments[..self.segment_count]
            .iter()
            .find(|&&(s, e, flags)| start >= s && start + len <= e && flags & sys::PF_X != 0)
            .copied()
    }
}

/// Site `i` of `record`.
fn site(table: &[u8], record: &ModuleRecord, i: u64) -> Option<SiteRecord> {
    SiteRecord::read(
        table,
        (record.sites_offset + i * SITE_WORDS as u64 * 8) as usize,
    )
}

/// Patch one module: check its sites, make room for the trampolines near it, write them,
/// then the jumps to them. Nothing in the module is written before everything else was
/// checked and written.
///
/// # Safety
/// `loaded` describes a mapped object, the process has a single thread, and `record`
/// was read from `table`.
unsafe fn patch_module(
    table: &[u8],
    fd: i64,
    header: &TableHeader,
    record: &ModuleRecord,
    loaded: &Loaded,
) -> Result<(), Refusal> {
    // SAFETY: the caller's contract.
    unsafe { check_sites(table, record, loaded) }?;
    let size = record.code_pages + header.live_len + slot_bytes(header.blocks);
    // SAFETY: as above.
    let t = unsafe { reserve_near(loaded, size) }.ok_or(Refusal::NoRoom)?;
    // SAFETY: [t, t + size) is the mapping just made, unused; on failure it is undone.
    let written = unsafe { fill_area(table, fd, header, record, loaded, t) };
    if let Err(refusal) = written {
        // SAFETY: the mapping just made; nothing refers to it yet.
        unsafe { sys::munmap(t, size) };
        return Err(refusal);
    }
    // SAFETY: the trampolines are complete and executable; the caller's contract.
    unsafe { write_jumps(table, record, loaded, t) }
}

/// Every site lies in the module's code and holds the bytes the collector read.
///
/// # Safety
/// `loaded` describes a mapped object.
unsafe fn check_sites(table: &[u8], record: &ModuleRecord, loaded: &Loaded) -> Result<(), Refusal> {
    for i in 0..record.sites {
        let s = site(table, record, i).ok_or(Refusal::BytesDiffer)?;
        let at = loaded.bias.wrapping_add(s.address);
        if loaded.code_segment(at, s.len as u64).is_none() {
            return Err(Refusal::BytesDiffer);
        }
        for k in 0..s.len as u64 {
            // SAFETY: inside an executable (so mapped, readable) segment of the module.
            let b = unsafe { core::ptr::read_volatile((at + k) as *const u8) };
            if b != s.original[k as usize] {
                return Err(Refusal::BytesDiffer);
            }
        }
    }
    Ok(())
}

/// `size` bytes of fresh anonymous memory within a rel32 jump of every byte of the
/// module, or `None`.
///
/// # Safety
/// `loaded` describes a mapped object.
unsafe fn reserve_near(loaded: &Loaded, size: u64) -> Option<u64> {
    for cand in candidates(loaded.lo, loaded.hi, size) {
        if !within_reach(cand, size, loaded.lo, loaded.hi) {
            continue;
        }
        // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping.
        let got = unsafe {
            sys::mmap(
                cand,
                size,
                sys::PROT_READ | sys::PROT_WRITE,
                sys::MAP_PRIVATE | sys::MAP_ANONYMOUS | sys::MAP_FIXED_NOREPLACE,
                -1,
                0,
            )
        };
        match got {
            Some(a) if a == cand => return Some(a),
            // An old kernel took the flag as a hint and mapped elsewhere.
            // SAFETY: the mapping just made, unused.
            Some(a) => unsafe { sys::munmap(a, size) },
            None => {}
        }
    }
    None
}

/// Fill the area at `t`: the table's live region after the code pages, the per-thread
/// slots after it marked wipe-on-fork, the module's trampoline code with its fixups
/// (relative to the module, or this library's TLS offset), a check that every site's
/// jump reaches its trampoline, and the code pages made executable.
///
/// # Safety
/// `[t, t + record.code_pages + header.live_len + slot_bytes(header.blocks))` is a fresh
/// private anonymous writable mapping of ours.
unsafe fn fill_area(
    table: &[u8],
    fd: i64,
    header: &TableHeader,
    record: &ModuleRecord,
    loaded: &Loaded,
    t: u64,
) -> Result<(), Refusal> {
    // SAFETY: replaces our own anonymous pages with the table's live region.
    let live = unsafe {
        sys::mmap(
            t + record.code_pages,
            header.live_len,
            sys::PROT_READ | sys::PROT_WRITE,
            sys::MAP_SHARED | sys::MAP_FIXED,
            fd,
            header.live_offset,
        )
    };
    if live != Some(t + record.code_pages) {
        return Err(Refusal::NoRoom);
    }
    let slots = t + record.code_pages + header.live_len;
    // SAFETY: the slots are our own fresh private anonymous pages; a forked child must
    // find them zeroed, so that its threads claim blocks of their own.
    if header.blocks > 0 && !unsafe { sys::wipe_on_fork(slots, slot_bytes(header.blocks)) } {
        return Err(Refusal::WipeOnFork);
    }
    for k in 0..record.code_len {
        let b = table[(record.code_offset + k) as usize];
        // SAFETY: inside our writable code pages (code_len <= code_pages).
        unsafe { core::ptr::write_volatile((t + k) as *mut u8, b) };
    }
    for i in 0..record.fixups {
        let at = (record.fixups_offset + i * FIXUP_WORDS as u64 * 8) as usize;
        let f = Fixup::read(table, at)
            .filter(|f| f.field as u64 + 4 <= record.code_len)
            .ok_or(Refusal::OutOfRange)?;
        let v = match f.kind {
            FixupKind::Module => rel32(t + f.end as u64, loaded.bias.wrapping_add(f.target)),
            FixupKind::ThreadPointer => i32::try_from(sys::tls_word_offset()).ok(),
        }
        .ok_or(Refusal::OutOfRange)?;
        for (k, b) in v.to_le_bytes().iter().enumerate() {
            // SAFETY: the 4-byte field lies inside the code (checked above).
            unsafe { core::ptr::write_volatile((t + f.field as u64 + k as u64) as *mut u8, *b) };
        }
    }
    for i in 0..record.sites {
        let s = site(table, record, i).ok_or(Refusal::BytesDiffer)?;
        if s.stub as u64 >= record.code_len
            || s.patch(loaded.bias.wrapping_add(s.address), t + s.stub as u64)
                .is_none()
        {
            return Err(Refusal::OutOfRange);
        }
    }
    // SAFETY: our own code pages, now complete.
    if !unsafe { sys::mprotect(t, record.code_pages, sys::PROT_READ | sys::PROT_EXEC) } {
        return Err(Refusal::Protect);
    }
    Ok(())
}

/// The jumps from each site to its trampoline at `t`. From here on the trampolines are
/// in use: never unmapped.
///
/// # Safety
/// `loaded` describes a mapped object whose sites were checked ([`check_sites`]), the
/// trampolines at `t` are complete and executable ([`fill_area`]), and the process has a
/// single thread.
unsafe fn write_jumps(
    table: &[u8],
    record: &ModuleRecord,
    loaded: &Loaded,
    t: u64,
) -> Result<(), Refusal> {
    for i in 0..record.sites {
        let s = site(table, record, i).ok_or(Refusal::BytesDiffer)?;
        let at = loaded.bias.wrapping_add(s.address);
        let (_, _, flags) = loaded
            .code_segment(at, s.len as u64)
            .ok_or(Refusal::BytesDiffer)?;
        let bytes = s.patch(at, t + s.stub as u64).ok_or(Refusal::OutOfRange)?;
        let first = at & !(PAGE - 1);
        let len = (at + s.len as u64 - first).div_ceil(PAGE) * PAGE;
        // SAFETY: pages of the module's executable segment; they stay executable while
        // writable (our own code, e.g. libc's, may run from them), and the process has
        // one thread, so nothing executes the bytes while they change.
        if !unsafe {
            sys::mprotect(
                first,
                len,
                sys::PROT_READ | sys::PROT_WRITE | sys::PROT_EXEC,
            )
        } {
            return Err(Refusal::Protect);
        }
        for k in 0..s.len as u64 {
            // SAFETY: the site's bytes, writable now; checked to be the collector's
            // original bytes, which no branch enters except at the site (collector).
            unsafe { core::ptr::write_volatile((at + k) as *mut u8, bytes[k as usize]) };
        }
        let prot = crate::plan::protection(flags);
        // SAFETY: back to the segment's own protection.
        if !unsafe { sys::mprotect(first, len, prot) } {
            return Err(Refusal::Protect);
        }
    }
    Ok(())
}
