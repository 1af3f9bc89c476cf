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
//!
//! Libraries the program loads at run time (`dlopen`; the table marks them with a
//! `LoadedLater`): when one is not loaded at start, the constructor redirects the
//! dynamic loader's `_dl_debug_state` (the debugger's breakpoint function, an empty
//! function at `_r_debug.r_brk`) through a thunk to [`on_loader_change`]. glibc calls it
//! with `_r_debug.r_state == RT_CONSISTENT` once a `dlopen` has mapped its objects, before
//! it relocates them and runs their constructors; the hook walks the loader's list
//! (`_r_debug.r_map`), recognises the table's module by where its dynamic section and
//! program headers lie and by its build id, and patches it as the constructor would: no
//! thread can be running its code yet, whatever other threads do. The hook runs with the
//! loader's lock held, so it calls nothing (no `dl_iterate_phdr`, which takes a lock of
//! its own) and allocates nothing; it maps the table's live region next to the
//! trampolines with `mremap` from the table's mapping, since the descriptor is closed by
//! then. Where the hook cannot be installed (other threads, a shadow stack, seccomp, a
//! loader whose `_dl_debug_state` is not such an empty function), the modules not loaded
//! yet are reported refused and the collector counts with uprobes.

use core::ffi::{c_int, c_void};
use core::sync::atomic::Ordering::{Relaxed, SeqCst};
use core::sync::atomic::{AtomicBool, AtomicU64};

use sbs_agent_abi::inproc::{
    build_id_in_notes, rel32, slot_bytes, status_at, Fixup, FixupKind, LoadedLater, ModuleRecord,
    Refusal, SiteRecord, TableHeader, FIXUP_WORDS, HEADER_WORDS, MODULES_AT, MODULE_WORDS, PAGE,
    SITE_WORDS,
};
use sbs_agent_abi::stamp::{proc_fd_path, Stamp, StampValues, PROC_FD_PATH_MAX};

use crate::plan::{candidates, loader_hook_fits, thunk, within_reach, HOOK_JUMP};
use crate::sys::{self, DlPhdrInfo, LinkMap, Phdr};

/// Modules one table may name.
const MAX_MODULES: usize = 64;
/// `PT_LOAD` segments kept per module.
const MAX_SEGMENTS: usize = 8;

static STARTED: AtomicBool = AtomicBool::new(false);

/// What the loader hook needs, set before the hook is installed: the table (address and
/// length of the part before the live region) and the live region's address in the
/// table's mapping. Zero while there is no hook.
static HOOK_TABLE: AtomicU64 = AtomicU64::new(0);
static HOOK_TABLE_LEN: AtomicU64 = AtomicU64::new(0);
static HOOK_LIVE: AtomicU64 = AtomicU64::new(0);

/// Per module of the table: the load bias of the copy this image patched or refused
/// (0: none mapped). The loader hook patches a module it finds mapped at another bias,
/// and forgets one no longer listed (`dlclose`). Only the hook and the constructor touch
/// it, and the loader calls the hook with its lock held, one thread at a time.
static MAPPED_AT: [AtomicU64; MAX_MODULES] = [const { AtomicU64::new(0) }; MAX_MODULES];

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

/// Patch what the mapped table names, in the modules the loader lists; when modules the
/// program may load at run time are not loaded yet, redirect the loader's
/// `_dl_debug_state` to [`on_loader_change`], which patches them once they are mapped.
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
    let found = &search.found[..search.count];
    let waiting =
        |m: usize| later_of(mapped.table, m).is_some() && !found.iter().any(|f| f.module == m);
    let any_waiting = (0..modules).any(waiting);
    if found.is_empty() && !any_waiting {
        return;
    }
    let allowed = patching_allowed();
    // SAFETY: the modules were just listed by the loader; the constructor.
    unsafe { patch_found(mapped, found, allowed) };
    if !any_waiting {
        return;
    }
    // SAFETY: the constructor, in a process allowed to patch (so with one thread).
    let hooked = allowed.and_then(|()| unsafe { install_hook(mapped) });
    if let Err(why) = hooked {
        for m in (0..modules).filter(|&m| waiting(m)) {
            // SAFETY: status words of a module of the table.
            unsafe { refuse(live, m, why) };
        }
    }
}

/// Whether this process may patch at all: no shadow stack, no seccomp filter against it
/// (asked once per image, and only when the table has something for it), one thread.
fn patching_allowed() -> Result<(), Refusal> {
    // SAFETY: a plain read of a `char` glibc exports for this purpose.
    let single = unsafe { core::ptr::addr_of!(sys::__libc_single_threaded).read() } != 0;
    if sys::shadow_stack_enabled() {
        Err(Refusal::ShadowStack)
    } else if sys::seccomp_forbids_patching() {
        Err(Refusal::Seccomp)
    } else if !single {
        Err(Refusal::Threads)
    } else {
        Ok(())
    }
}

/// Patch each module the loader listed and the table names, and record in the live
/// region whether it was patched or why not.
///
/// # Safety
/// The modules are mapped (the loader just listed them); runs in the constructor, and
/// with `allowed` Ok the process has one thread.
unsafe fn patch_found(mapped: &Mapped, found: &[Loaded], allowed: Result<(), Refusal>) {
    let Mapped {
        header,
        table,
        live,
        ..
    } = mapped;
    for loaded in found {
        let Some(record) = ModuleRecord::read(table, MODULES_AT + loaded.module * MODULE_WORDS * 8)
        else {
            continue;
        };
        MAPPED_AT[loaded.module].store(loaded.bias, Relaxed);
        // SAFETY: the module is mapped (the loader just listed it), the process has one
        // thread (allowed), and the record's parts lie inside the table.
        let result =
            allowed.and_then(|()| unsafe { patch_module(table, *live, header, &record, loaded) });
        // SAFETY: status words of a module of the table.
        unsafe { record_result(*live, loaded.module, result) };
    }
}

/// Record in module `m`'s status words that this image patched it, or why not.
///
/// # Safety
/// Module `m`'s status words lie inside the live region.
unsafe fn record_result(live: u64, m: usize, result: Result<(), Refusal>) {
    match result {
        // SAFETY: contract.
        Ok(()) => unsafe { live_word(live, status_at(m)) }.fetch_add(1, Relaxed),
        // SAFETY: contract.
        Err(why) => unsafe { refuse(live, m, why) },
    };
}

/// Redirect the loader's `_dl_debug_state` (`_r_debug.r_brk`) to [`on_loader_change`]:
/// a thunk within reach of it jumps to the hook, wherever this library lies, and a
/// `jmp rel32` over the function's `ret` (and the padding after it) goes to the thunk.
/// The hook's statics are set before the jump is written.
///
/// # Safety
/// Runs in the constructor of a process with one thread; `mapped` stays mapped.
unsafe fn install_hook(mapped: &Mapped) -> Result<(), Refusal> {
    let debug = core::ptr::addr_of!(sys::_r_debug);
    // SAFETY: the loader's own `_r_debug`, which it set up before any constructor ran.
    let brk = unsafe { core::ptr::read_volatile(core::ptr::addr_of!((*debug).r_brk)) };
    if brk == 0 || brk % 16 != 0 {
        return Err(Refusal::NoLoaderHook);
    }
    let mut code = [0u8; 16];
    for (k, b) in code.iter_mut().enumerate() {
        // SAFETY: `_dl_debug_state` is code of the loader, mapped and readable, and the
        // 16 bytes from its 16-aligned start lie on the same page.
        *b = unsafe { core::ptr::read_volatile((brk + k as u64) as *const u8) };
    }
    if !loader_hook_fits(&code, brk) {
        return Err(Refusal::NoLoaderHook);
    }
    let stub = thunk(on_loader_change as *const () as u64);
    // SAFETY: a fresh mapping of ours.
    let t = unsafe { reserve_near(brk, brk + 16, PAGE) }.ok_or(Refusal::NoRoom)?;
    for (k, b) in stub.iter().enumerate() {
        // SAFETY: inside the page just mapped, writable.
        unsafe { core::ptr::write_volatile((t + k as u64) as *mut u8, *b) };
    }
    // SAFETY: our own page, now complete.
    if !unsafe { sys::mprotect(t, PAGE, sys::PROT_READ | sys::PROT_EXEC) } {
        // SAFETY: the page just mapped, unused.
        unsafe { sys::munmap(t, PAGE) };
        return Err(Refusal::Protect);
    }
    let Some(rel) = rel32(brk + HOOK_JUMP as u64, t) else {
        // SAFETY: as above.
        unsafe { sys::munmap(t, PAGE) };
        return Err(Refusal::OutOfRange);
    };
    HOOK_TABLE.store(mapped.table.as_ptr() as u64, Relaxed);
    HOOK_TABLE_LEN.store(mapped.table.len() as u64, Relaxed);
    HOOK_LIVE.store(mapped.live, Relaxed);
    let mut jump = [0u8; HOOK_JUMP];
    jump[0] = 0xe9;
    jump[1..].copy_from_slice(&rel.to_le_bytes());
    let page = brk & !(PAGE - 1);
    // SAFETY: the loader's text page holding `_dl_debug_state`; it stays executable
    // while writable, and the process has one thread, so nothing runs the bytes while
    // they change.
    if !unsafe {
        sys::mprotect(
            page,
            PAGE,
            sys::PROT_READ | sys::PROT_WRITE | sys::PROT_EXEC,
        )
    } {
        return Err(Refusal::Protect);
    }
    for (k, b) in jump.iter().enumerate() {
        // SAFETY: the function's `ret` and the padding after it (checked), writable now.
        unsafe { core::ptr::write_volatile((brk + k as u64) as *mut u8, *b) };
    }
    // SAFETY: back to the loader's text protection.
    if !unsafe { sys::mprotect(page, PAGE, sys::PROT_READ | sys::PROT_EXEC) } {
        return Err(Refusal::Protect);
    }
    Ok(())
}

/// What `_dl_debug_state` now runs: the loader calls it after every change of its list
/// of objects, with its lock held. Once a `dlopen` has mapped its objects (and before it
/// relocates them or runs their constructors: `RT_CONSISTENT`), patch the modules of the
/// table that are newly mapped. Returns as the empty function did.
extern "C" fn on_loader_change() {
    // SAFETY: called by the loader, with its lock held, only after `install_hook` set the
    // statics.
    unsafe { loader_changed() }
}

/// Objects of the loader's list walked at most (a list broken under us ends the walk).
const MAX_OBJECTS: usize = 1 << 16;

/// The work of [`on_loader_change`]. Calls nothing of libc or the loader (it may not
/// take the loader's locks, and a call might be counted), allocates nothing.
///
/// # Safety
/// Called by the loader from `_dl_debug_state`, with its lock held.
unsafe fn loader_changed() {
    let debug = core::ptr::addr_of!(sys::_r_debug);
    // SAFETY: the loader's `_r_debug`, which it updates before calling us.
    let state = unsafe { core::ptr::read_volatile(core::ptr::addr_of!((*debug).r_state)) };
    let (at, len, live) = (
        HOOK_TABLE.load(Relaxed),
        HOOK_TABLE_LEN.load(Relaxed),
        HOOK_LIVE.load(Relaxed),
    );
    if state != sys::RT_CONSISTENT || at == 0 {
        return;
    }
    // SAFETY: the table part of the table's mapping, which is never unmapped.
    let table = unsafe { core::slice::from_raw_parts(at as *const u8, len as usize) };
    let Some(header) = TableHeader::read(table) else {
        return;
    };
    let modules = (header.modules as usize).min(MAX_MODULES);
    // SAFETY: the loader's list, complete (RT_CONSISTENT) and not changing while it
    // holds its lock.
    let head = unsafe { core::ptr::read_volatile(core::ptr::addr_of!((*debug).r_map)) };
    // Forget the copies no longer listed (unloaded by `dlclose`).
    for (m, mapped_at) in MAPPED_AT.iter().enumerate().take(modules) {
        let bias = mapped_at.load(Relaxed);
        let Some(later) = later_of(table, m) else {
            continue;
        };
        // SAFETY: as above.
        let listed = bias != 0
            && unsafe {
                any_object(head, |l| {
                    l.l_addr == bias && l.l_ld == bias.wrapping_add(later.dynamic)
                })
            };
        if !listed {
            mapped_at.store(0, Relaxed);
        }
    }
    // Patch the copies newly mapped.
    let mut l = head;
    for _ in 0..MAX_OBJECTS {
        if l.is_null() {
            break;
        }
        // SAFETY: an entry of the loader's list, which does not change meanwhile.
        let entry = unsafe { &*l };
        // SAFETY: as above; the table and its live region are the hook's.
        unsafe { patch_if_new(table, live, &header, modules, entry) };
        l = entry.l_next;
    }
}

/// Patch the module of the table that the loader's object `l` is, if it is one the
/// program loads at run time and not patched at this bias yet.
///
/// # Safety
/// `l` is an entry of the loader's list, complete (`RT_CONSISTENT`), with the loader's
/// lock held; `table` and `live` are the mapped table's.
unsafe fn patch_if_new(table: &[u8], live: u64, header: &TableHeader, modules: usize, l: &LinkMap) {
    if l.l_addr == 0 || l.l_ld == 0 {
        return;
    }
    for (m, mapped_at) in MAPPED_AT.iter().enumerate().take(modules) {
        let Some(r) = ModuleRecord::read(table, MODULES_AT + m * MODULE_WORDS * 8) else {
            continue;
        };
        let Some(later) = later_of(table, m) else {
            continue;
        };
        if mapped_at.load(Relaxed) != 0 || l.l_ld != l.l_addr.wrapping_add(later.dynamic) {
            continue;
        }
        // All zero (a copy of `NONE` would be a call of `memcpy`); `object_at` fills it.
        let mut loaded = Loaded {
            module: 0,
            bias: 0,
            lo: 0,
            hi: 0,
            segments: [(0, 0, 0); MAX_SEGMENTS],
            segment_count: 0,
        };
        // SAFETY: an object of the loader's list whose dynamic section lies where the
        // module's does, so its program headers where the module's do: mapped, in its
        // first segment (a shared object with a non-zero load bias).
        let Some(id) = (unsafe { object_at(l.l_addr, later, &mut loaded) }) else {
            continue;
        };
        if !same(r.build_id(), id) {
            continue;
        }
        loaded.module = m;
        mapped_at.store(l.l_addr, Relaxed);
        // SAFETY: the module was just mapped and is not relocated yet: no thread can run
        // its code (other threads may run, but not it), and the record's parts lie
        // inside the table.
        let result = unsafe { patch_module(table, live, header, &r, &loaded) };
        // SAFETY: status words of a module of the table.
        unsafe { record_result(live, m, result) };
        return;
    }
}

/// Whether `pred` holds for an object of the loader's list from `head`.
///
/// # Safety
/// `head` starts the loader's list, which does not change meanwhile.
unsafe fn any_object(head: *const LinkMap, mut pred: impl FnMut(&LinkMap) -> bool) -> bool {
    let mut l = head;
    for _ in 0..MAX_OBJECTS {
        if l.is_null() {
            return false;
        }
        // SAFETY: contract: an entry of the list.
        let entry = unsafe { &*l };
        if pred(entry) {
            return true;
        }
        l = entry.l_next;
    }
    false
}

/// Module `m`'s [`LoadedLater`], for a module the program loads at run time.
fn later_of(table: &[u8], m: usize) -> Option<LoadedLater> {
    LoadedLater::read(table, MODULES_AT + m * MODULE_WORDS * 8)
}

/// Describe in `loaded` the object at load bias `bias` whose program headers lie as
/// `later` says, and return its build id.
///
/// # Safety
/// `bias + later.phdrs` holds `later.phnum` mapped program headers.
unsafe fn object_at(bias: u64, later: LoadedLater, loaded: &mut Loaded) -> Option<&'static [u8]> {
    let at = bias.checked_add(later.phdrs)?;
    if at % 8 != 0 || later.phnum == 0 || later.phnum > 256 {
        return None;
    }
    // SAFETY: contract.
    let phdrs = unsafe { core::slice::from_raw_parts(at as *const Phdr, later.phnum as usize) };
    let dynamic_listed = phdrs
        .iter()
        .any(|p| p.p_type == sys::PT_DYNAMIC && p.p_vaddr == later.dynamic);
    if !dynamic_listed {
        return None;
    }
    object_of(bias, phdrs, loaded)
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
    let count = search.count;
    let (found, rest) = search.found.split_at_mut(count);
    let loaded = &mut rest[0];
    let Some(id) = object_of(info.dlpi_addr, phdrs, loaded) else {
        return 0;
    };
    for m in 0..search.modules {
        let Some(record) = ModuleRecord::read(search.table, MODULES_AT + m * MODULE_WORDS * 8)
        else {
            continue;
        };
        let taken = found.iter().any(|f| f.module == m);
        if !taken && same(record.build_id(), id) {
            loaded.module = m;
            search.count += 1;
            break;
        }
    }
    0
}

/// Describe in `loaded` (filled in place: a copy of it would be a call of libc's
/// `memcpy`) the object with load bias `bias` and program headers `phdrs`: its segments;
/// and return its build id (`None` without one).
fn object_of(bias: u64, phdrs: &[Phdr], loaded: &mut Loaded) -> Option<&'static [u8]> {
    loaded.module = usize::MAX;
    loaded.bias = bias;
    loaded.lo = u64::MAX;
    loaded.hi = 0;
    loaded.segment_count = 0;
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
    phdrs
        .iter()
        .filter(|p| p.p_type == sys::PT_NOTE)
        .find_map(|p| note_build_id(loaded, bias, p))
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
/// `loaded` describes a mapped object whose code no thread runs meanwhile (the process
/// has a single thread, or the object is not relocated yet), `record` was read from
/// `table`, and `live` is the table's live region in the table's shared mapping.
unsafe fn patch_module(
    table: &[u8],
    live: u64,
    header: &TableHeader,
    record: &ModuleRecord,
    loaded: &Loaded,
) -> Result<(), Refusal> {
    // SAFETY: the caller's contract.
    unsafe { check_sites(table, record, loaded) }?;
    let size = record.code_pages + header.live_len + slot_bytes(header.blocks);
    // SAFETY: as above.
    let t = unsafe { reserve_near(loaded.lo, loaded.hi, size) }.ok_or(Refusal::NoRoom)?;
    // SAFETY: [t, t + size) is the mapping just made, unused; on failure it is undone.
    let written = unsafe { fill_area(table, live, header, record, loaded, t) };
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

/// `size` bytes of fresh anonymous memory within a rel32 jump of every byte of
/// `[lo, hi)`, or `None`.
///
/// # Safety
/// None beyond the system call's: the mapping never replaces another.
unsafe fn reserve_near(lo: u64, hi: u64, size: u64) -> Option<u64> {
    for cand in candidates(lo, hi, size) {
        if !within_reach(cand, size, lo, hi) {
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
/// private anonymous writable mapping of ours; `live` is the table's live region in the
/// table's shared mapping (`header.live_len` bytes).
unsafe fn fill_area(
    table: &[u8],
    live: u64,
    header: &TableHeader,
    record: &ModuleRecord,
    loaded: &Loaded,
    t: u64,
) -> Result<(), Refusal> {
    // SAFETY: replaces our own anonymous pages with the same pages as the table's live
    // region (no descriptor needed: the loader hook runs after it was closed).
    if !unsafe { sys::map_again(live, header.live_len, t + record.code_pages) } {
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
/// Each code segment that holds sites is made writable once, for all of its sites, and
/// given its own protection back after the last: every `mprotect` of code writes a
/// mapping record into the rings of perf events that watch the process (the collector's
/// exec watch), and one pair per site filled them on programs with thousands of sites.
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
    let mut open = None;
    // SAFETY: contract.
    let written = unsafe { write_each_jump(table, record, loaded, t, &mut open) };
    let restored = match open {
        // SAFETY: back to the segment's own protection.
        Some((first, end, prot)) => unsafe { sys::mprotect(first, end - first, prot) },
        None => true,
    };
    written?;
    if restored {
        Ok(())
    } else {
        Err(Refusal::Protect)
    }
}

/// [`write_jumps`]'s loop; `open` is the segment it left writable (first page, end of
/// its last page, its own protection), which the caller protects again.
///
/// # Safety
/// As [`write_jumps`].
unsafe fn write_each_jump(
    table: &[u8],
    record: &ModuleRecord,
    loaded: &Loaded,
    t: u64,
    open: &mut Option<(u64, u64, u64)>,
) -> Result<(), Refusal> {
    for i in 0..record.sites {
        let s = site(table, record, i).ok_or(Refusal::BytesDiffer)?;
        let at = loaded.bias.wrapping_add(s.address);
        let (start, end, flags) = loaded
            .code_segment(at, s.len as u64)
            .ok_or(Refusal::BytesDiffer)?;
        let bytes = s.patch(at, t + s.stub as u64).ok_or(Refusal::OutOfRange)?;
        let first = start & !(PAGE - 1);
        let last = end.div_ceil(PAGE) * PAGE;
        if open.is_none_or(|(f, _, _)| f != first) {
            if let Some((f, e, prot)) = open.take() {
                // SAFETY: back to that segment's own protection.
                if !unsafe { sys::mprotect(f, e - f, prot) } {
                    return Err(Refusal::Protect);
                }
            }
            // SAFETY: the pages of the module's executable segment; they stay executable
            // while writable (our own code, e.g. libc's, may run from them), and the
            // process has one thread, so nothing executes the bytes while they change.
            if !unsafe {
                sys::mprotect(
                    first,
                    last - first,
                    sys::PROT_READ | sys::PROT_WRITE | sys::PROT_EXEC,
                )
            } {
                return Err(Refusal::Protect);
            }
            *open = Some((first, last, crate::plan::protection(flags)));
        }
        for k in 0..s.len as u64 {
            // SAFETY: the site's bytes, writable now; checked to be the collector's
            // original bytes, which no branch enters except at the site (collector).
            unsafe { core::ptr::write_volatile((at + k) as *mut u8, bytes[k as usize]) };
        }
    }
    Ok(())
}
