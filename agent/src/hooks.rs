//! The interposed malloc family, the start-up that finds the report file, and the fork
//! handler. Every function here is a thin shim: block trailers are in [`crate::trailer`],
//! counting in `sbs_agent_abi::counters`.
//!
//! Rules kept throughout: nothing here allocates through `malloc` (only the `__libc_*`
//! entry points), nothing uses thread-local storage (a thread's counters are found from
//! its thread pointer), nothing in a hook takes a libc lock (fork handlers and the
//! thread-exit key are registered by the constructor), and nothing can unwind (the panic
//! handler aborts; arithmetic on sizes is checked).

use core::ffi::{c_int, c_void};
use core::ptr::null_mut;
use core::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use core::sync::atomic::{AtomicPtr, AtomicU32, AtomicU8, AtomicUsize};

use sbs_agent_abi::attach::{self, Report};
use sbs_agent_abi::stamp::{Stamp, StampValues};
use sbs_agent_abi::{tree, Origin, Slot};

use crate::sys;
use crate::trailer::{self, Block, EXTRA, MAX_SIZE};
use sbs_agent_abi::counters::{self, ForkCarry, ForkSnapshot, Found};
use sbs_agent_abi::Record;

/// The report slot of this process image, or null (no report file, or all slots taken).
static SLOT: AtomicPtr<Slot> = AtomicPtr::new(null_mut());
/// The mapped report file, or null.
static REPORT: AtomicPtr<Report> = AtomicPtr::new(null_mut());
/// Start-up state: [`UNINIT`], [`RUNNING`] or [`DONE`].
static STATE: AtomicU8 = AtomicU8::new(UNINIT);
const UNINIT: u8 = 0;
const RUNNING: u8 = 1;
const DONE: u8 = 2;
/// The `pthread_key_t` whose destructor folds a thread's record at its end, plus one (0:
/// not created yet).
static EXIT_KEY: AtomicU32 = AtomicU32::new(0);
static PAGE_SIZE: AtomicUsize = AtomicUsize::new(0);
/// The parent's counts from the `pthread_atfork` prepare handler to the child handler.
static FORK: ForkCarry = ForkCarry::new();

#[cfg(not(test))]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    // SAFETY: abort has no preconditions; unwinding out of a hook is never allowed.
    unsafe { sys::abort() }
}

// The hidden, trapping `rust_eh_personality` a no_std preload library needs to load.
#[cfg(not(test))]
sbs_agent_abi::personality_stub!();

/// Where this run's report file is: written by the collector into each run's copy of the
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

/// Run at load time, after libc is initialised.
#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init_at_load;

/// Run at `exit`, after the program's own exit handlers and destructors (a preloaded
/// library's destructors run last).
#[used]
#[link_section = ".fini_array"]
static FINI: extern "C" fn() = leave_tree;

/// Everything that takes a libc lock is done here, never from a hook: a hook can run
/// inside another library's fork handling or under the loader lock, where taking
/// glibc's atfork lock or the loader lock would deadlock.
extern "C" fn init_at_load() {
    page_size();
    let mut key = 0u32;
    // SAFETY: `key` is a live local; the destructor is a plain `extern "C"` function.
    if unsafe { sys::pthread_key_create(&mut key, Some(at_thread_exit)) } == 0 {
        EXIT_KEY.store(key.wrapping_add(1), Release);
    }
    // SAFETY: registering plain `extern "C"` functions without arguments. The handlers do
    // nothing until a report slot is claimed.
    unsafe {
        sys::pthread_atfork(Some(before_fork), None, Some(in_fork_child));
    }
    start(true);
}

/// Find the report file and claim a slot, once. Hooks call this too, because other libraries'
/// constructors may allocate before ours runs; it takes no libc lock, and leaves `errno`
/// as it found it (a hook must not change it when it succeeds). `final_attempt` is set by
/// the constructor: an earlier attempt that fails leaves the state for a later one.
fn start(final_attempt: bool) {
    if STATE
        .compare_exchange(UNINIT, RUNNING, Acquire, Relaxed)
        .is_err()
    {
        return;
    }
    // SAFETY: __errno_location returns this thread's errno.
    let errno = unsafe { *sys::__errno_location() };
    let found = stamp().and_then(attach::find_stamped_report::<sys::Libc>);
    set_errno(errno);
    match found {
        Some(report) => {
            REPORT.store((report as *const Report).cast_mut(), Release);
            claim(Origin::Load, None);
            STATE.store(DONE, Release);
        }
        None if final_attempt => STATE.store(DONE, Release),
        None => STATE.store(UNINIT, Release),
    }
}

/// Take the next slot of the report file for this process image.
fn claim(origin: Origin, inherited: Option<ForkSnapshot>) {
    let Some(report) = report() else {
        return;
    };
    let slot = attach::claim::<sys::Libc>(report, origin, inherited);
    SLOT.store(
        slot.map_or(null_mut(), |s| (s as *const Slot).cast_mut()),
        Release,
    );
}

unsafe extern "C" fn before_fork() {
    if let Some(slot) = current_slot() {
        FORK.save(slot);
    }
}

unsafe extern "C" fn in_fork_child() {
    if SLOT.load(Acquire).is_null() {
        return;
    }
    claim(Origin::Fork, Some(FORK.saved()));
}

/// The process tree's words, once the report file is mapped.
fn report() -> Option<&'static Report> {
    // SAFETY: a non-null REPORT is the report file's mapping, never unmapped.
    unsafe { REPORT.load(Acquire).as_ref() }
}

/// Bring the process tree's total up to date with this image's change (nothing while the
/// image is alone: see `tree`). Called after every count on the general path.
fn sync_tree(slot: &Slot) {
    if let Some(report) = report() {
        tree::sync(&report.header, slot);
    }
}

/// This image is ending (`exit`, `_exit`, `_Exit`): its heap leaves the process tree's
/// total.
extern "C" fn leave_tree() {
    // SAFETY: a non-null SLOT points into the report file's mapping, never unmapped.
    let slot = unsafe { SLOT.load(Acquire).as_ref() };
    if let (Some(report), Some(slot)) = (report(), slot) {
        attach::leave_at_end::<sys::Libc>(report, slot);
    }
}

/// `_exit` ends the process without running `exit`'s handlers, so the tree is left here.
///
/// # Safety
/// The C `_exit` contract.
#[no_mangle]
pub unsafe extern "C" fn _exit(status: c_int) -> ! {
    leave_tree();
    loop {
        // SAFETY: exit_group ends every thread of the process; it does not return.
        unsafe { sys::syscall(sys::SYS_EXIT_GROUP, status) };
    }
}

/// The same as [`_exit`] (C99's name).
///
/// # Safety
/// The C `_Exit` contract.
#[no_mangle]
pub unsafe extern "C" fn _Exit(status: c_int) -> ! {
    // SAFETY: the same contract.
    unsafe { _exit(status) }
}

/// This image's slot, starting the agent if needed.
#[inline]
fn current_slot() -> Option<&'static Slot> {
    if STATE.load(Acquire) != DONE {
        start(false);
    }
    let slot = SLOT.load(Acquire);
    // SAFETY: a non-null SLOT points into the report file's mapping, which is never unmapped.
    unsafe { slot.as_ref() }
}

/// The calling thread's record in `slot`. Its key is the thread pointer: one instruction,
/// unique among live threads, and right for threads glibc did not create. A thread's
/// first call arranges for [`at_thread_exit`] to fold the record when the thread ends.
#[inline(always)]
fn record(slot: &'static Slot) -> &'static Record {
    let (record, found) = counters::record_of(slot, sys::thread_pointer());
    if found == Found::New {
        let key = EXIT_KEY.load(Acquire);
        if key != 0 {
            // SAFETY: a key created by the constructor. For the first 32 keys of a
            // process glibc stores the value in the thread descriptor without allocating;
            // beyond that it may allocate, which re-enters malloc and finds this record
            // already claimed.
            unsafe { sys::pthread_setspecific(key - 1, (record as *const Record).cast()) };
        }
    }
    record
}

/// The `pthread_key_t` destructor: the thread is ending (returned from its start
/// function or called `pthread_exit`). Its record publishes what it kept to itself.
/// A forked child's thread carries its parent's value; only a record of this image's
/// slot, owned by this thread, is folded.
unsafe extern "C" fn at_thread_exit(value: *mut c_void) {
    let Some(slot) = current_slot() else {
        return;
    };
    let here = sys::thread_pointer();
    if let Some(record) = slot
        .records
        .iter()
        .find(|r| core::ptr::eq(*r, value.cast::<Record>()) && r.owner.load(Relaxed) == here)
    {
        counters::fold(slot, record);
        sync_tree(slot);
    }
}

fn set_errno(code: c_int) {
    // SAFETY: __errno_location returns this thread's errno.
    unsafe { *sys::__errno_location() = code };
}

fn page_size() -> usize {
    let cached = PAGE_SIZE.load(Relaxed);
    if cached != 0 {
        return cached;
    }
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { sys::sysconf(sys::SC_PAGESIZE) };
    let size = if size > 0 { size as usize } else { 4096 };
    PAGE_SIZE.store(size, Relaxed);
    size
}

/// Usable bytes of a live glibc block: what glibc's `malloc_usable_size` returns,
/// computed inline from the chunk size word in front of the pointer (see
/// [`trailer::usable_size`] for the layout this assumes). 0 if the word is impossible for
/// a block in use.
///
/// # Safety
/// `ptr` is non-null and a live block of glibc's allocator (every block the agent hands
/// out is one): glibc keeps its 8-byte, 8-aligned chunk size word just in front of it.
#[inline(always)]
unsafe fn usable_size(ptr: *mut c_void) -> usize {
    // SAFETY: see the function's contract.
    let word = unsafe { ptr.cast::<usize>().sub(1).read() };
    trailer::usable_size(word)
}

/// The last word of a block with `usable` usable bytes: its last 8, where the trailer
/// lies (see [`trailer`]).
///
/// # Safety
/// `ptr` is a live block with at least 8 usable bytes.
#[inline(always)]
unsafe fn last_word(ptr: *mut c_void, usable: usize) -> *mut u64 {
    // SAFETY: usable >= 8 (contract): the 8 bytes lie inside the block.
    unsafe { ptr.cast::<u8>().add(usable - 8) }.cast()
}

/// The trailer of a live block and its usable size, if the agent made the block.
///
/// # Safety
/// As for [`usable_size`].
#[inline(always)]
unsafe fn block_of(ptr: *mut c_void) -> Option<(Block, usize)> {
    // SAFETY: contract.
    let usable = unsafe { usable_size(ptr) };
    if usable < 8 {
        return None;
    }
    // SAFETY: usable >= 8; the block's alignment is not assumed.
    let (slack, counted) = trailer::decode(unsafe { last_word(ptr, usable).read_unaligned() })?;
    let size = usable.checked_sub(slack)?;
    Some((Block { size, counted }, usable))
}

/// Write the trailer of a block with `usable` usable bytes, `slack` of them past the
/// program's. `keeps_data`: the block holds the program's data (a resize), so the
/// program's bytes in the last word are kept; a new block's are undefined (`calloc`'s are
/// zero, and stay so).
///
/// # Safety
/// `ptr` is a live block with `usable` usable bytes, `EXTRA <= slack <= usable`,
/// `usable >= 8`.
#[inline(always)]
unsafe fn write_trailer(
    ptr: *mut c_void,
    usable: usize,
    slack: usize,
    counted: bool,
    keeps_data: bool,
) {
    // SAFETY: usable >= 8 (contract).
    let at = unsafe { last_word(ptr, usable) };
    let mut word = trailer::encode(slack, counted);
    if keeps_data {
        // SAFETY: as above.
        word = trailer::keep_data(word, unsafe { at.read_unaligned() });
    }
    // SAFETY: as above.
    unsafe { at.write_unaligned(word) };
}

/// Clear the trailer of a block with `usable` usable bytes found by [`block_of`], so that
/// stale memory never looks like one of ours; the program's bytes are kept.
///
/// # Safety
/// As for [`last_word`].
#[inline(always)]
unsafe fn clear_trailer(ptr: *mut c_void, usable: usize) {
    // SAFETY: contract.
    let at = unsafe { last_word(ptr, usable) };
    // SAFETY: as above.
    unsafe { at.write_unaligned(trailer::cleared(at.read_unaligned())) };
}

/// Write the trailer of a new block and count it, on the hot path: a block the calling
/// thread can count without a call ([`counters::alloc_fast`]). Everything else (no slot
/// yet, a thread's first call, a granule crossed, a null or odd block) goes to
/// [`finish_general`] as a tail call, so that the hook itself saves no registers: the
/// pushes and pops of a function that might call were a fifth of the hook's instructions.
///
/// # Safety
/// As for [`finish_general`].
#[inline(always)]
unsafe fn finish(ptr: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: the same contract.
    unsafe {
        finish_with(ptr, size, None, |slot, key| {
            counters::alloc_fast(slot, key, size as u64)
        })
    }
}

/// [`finish`] for a resize of the block whose trailer was `old`.
///
/// # Safety
/// As for [`finish_general`].
#[inline(always)]
unsafe fn finish_resize(ptr: *mut c_void, size: usize, old: Block) -> *mut c_void {
    // SAFETY: the same contract.
    unsafe {
        finish_with(ptr, size, Some(old), |slot, key| {
            old.counted && counters::realloc_fast(slot, key, old.size as u64, size as u64)
        })
    }
}

/// The hot path of [`finish`] and [`finish_resize`]: `count` (given the slot and the
/// thread's key) counts without a call or says it cannot.
///
/// # Safety
/// As for [`finish_general`].
#[inline(always)]
unsafe fn finish_with(
    ptr: *mut c_void,
    size: usize,
    realloc_of: Option<Block>,
    count: impl FnOnce(&'static Slot, u64) -> bool,
) -> *mut c_void {
    if !ptr.is_null() {
        // SAFETY: a live glibc block (contract): its chunk size word is in front of it.
        let word = unsafe { ptr.cast::<usize>().sub(1).read() };
        // SAFETY: a non-null SLOT points into the report file's mapping, never unmapped.
        let slot = unsafe { SLOT.load(Acquire).as_ref() };
        let fit = trailer::heap_short_fit(word, size);
        if let (Some(slot), Some((offset, slack))) = (slot, fit) {
            if count(slot, sys::thread_pointer()) {
                // SAFETY: usable = offset + 8 >= 8 and slack = usable - size >= 3: the
                // trailer's bytes are after the program's.
                unsafe { write_trailer(ptr, offset + 8, slack, true, realloc_of.is_some()) };
                return ptr;
            }
        }
    }
    // SAFETY: the same contract.
    unsafe { finish_general(ptr, size, realloc_of) }
}

/// Write the trailer of a new block and count it, in every case. `realloc_of` is the old
/// block's trailer for a resize.
///
/// # Safety
/// `ptr` is null or a live glibc block that was asked for at least `size + EXTRA`
/// bytes, with `size <= MAX_SIZE`.
#[cold]
#[inline(never)]
unsafe fn finish_general(ptr: *mut c_void, size: usize, realloc_of: Option<Block>) -> *mut c_void {
    if ptr.is_null() {
        return null_mut();
    }
    // SAFETY: a live glibc block (contract).
    let usable = unsafe { usable_size(ptr) };
    if usable < (size + EXTRA).max(8) || usable - size > trailer::MAX_SLACK {
        // Not what glibc's layout promises (or more slack than a trailer holds): hand the
        // block out untracked rather than write over the program's bytes. A resized
        // block's old size leaves the live total, as its free would have.
        if let (Some(old), Some(slot)) = (realloc_of.filter(|old| old.counted), current_slot()) {
            counters::on_free(slot, record(slot), old.size as u64);
            sync_tree(slot);
        }
        return ptr;
    }
    let slot = current_slot();
    // SAFETY: a live block with `usable` usable bytes, usable >= size + 3 and >= 8.
    unsafe {
        write_trailer(
            ptr,
            usable,
            usable - size,
            slot.is_some(),
            realloc_of.is_some(),
        )
    };
    if let Some(slot) = slot {
        let record = record(slot);
        match realloc_of {
            None => counters::on_alloc(slot, record, size as u64),
            Some(old) => counters::on_realloc(
                slot,
                record,
                old.counted.then_some(old.size as u64),
                size as u64,
            ),
        }
        sync_tree(slot);
    }
    ptr
}

/// A block of `size` bytes with malloc's alignment, or null with errno set.
#[inline(always)]
fn plain(size: usize) -> *mut c_void {
    if size > MAX_SIZE {
        // Too large for a trailer (and for any real address space): glibc's answer,
        // untracked.
        // SAFETY: forwarding to glibc.
        return unsafe { sys::__libc_malloc(size) };
    }
    // SAFETY: forwarding to glibc; no overflow (size <= MAX_SIZE).
    let ptr = unsafe { sys::__libc_malloc(size + EXTRA) };
    // SAFETY: null or a glibc block of size + 3 bytes.
    unsafe { finish(ptr, size) }
}

/// A block of `size` bytes aligned to `align`, or null with errno set. glibc's
/// `memalign` rules: an alignment up to 16 is malloc's, a non-power of two is rounded up,
/// one above half the address space is `EINVAL`.
fn aligned(align: usize, size: usize) -> *mut c_void {
    if size > MAX_SIZE {
        // SAFETY: forwarding to glibc (untracked, as in `plain`).
        return unsafe { sys::__libc_memalign(align, size) };
    }
    // SAFETY: forwarding to glibc; no overflow (size <= MAX_SIZE).
    let ptr = unsafe { sys::__libc_memalign(align, size + EXTRA) };
    // SAFETY: null or a glibc block of size + 3 bytes.
    unsafe { finish(ptr, size) }
}

/// # Safety
/// The C `malloc` contract.
#[no_mangle]
pub unsafe extern "C" fn malloc(size: usize) -> *mut c_void {
    plain(size)
}

/// # Safety
/// The C `calloc` contract.
#[no_mangle]
pub unsafe extern "C" fn calloc(count: usize, size: usize) -> *mut c_void {
    let Some(total) = count.checked_mul(size) else {
        set_errno(sys::ENOMEM);
        return null_mut();
    };
    if total > MAX_SIZE {
        // SAFETY: forwarding to glibc (untracked, as in `plain`).
        return unsafe { sys::__libc_calloc(1, total) };
    }
    // SAFETY: forwarding to glibc; one zeroed block (total <= MAX_SIZE: no overflow).
    let ptr = unsafe { sys::__libc_calloc(1, total + EXTRA) };
    // SAFETY: null or a glibc block of total + 3 bytes.
    unsafe { finish(ptr, total) }
}

/// # Safety
/// The C `free` contract: `ptr` is null or a live block from this allocator.
#[no_mangle]
pub unsafe extern "C" fn free(ptr: *mut c_void) {
    if ptr.is_null() {
        return;
    }
    // SAFETY: ptr is a live block (contract), so a glibc block with its chunk size word in
    // front of it.
    let word = unsafe { ptr.cast::<usize>().sub(1).read() };
    let Some(offset) = trailer::heap_word_offset(word) else {
        // An mmapped chunk (or an odd word): the general path, as a tail call (see
        // `finish`).
        // SAFETY: the same contract.
        return unsafe { free_general(ptr) };
    };
    // SAFETY: offset = usable - 8: 8 bytes inside the block; its alignment is not assumed.
    let at = unsafe { ptr.cast::<u8>().add(offset).cast::<u64>() };
    // SAFETY: as above.
    let word = unsafe { at.read_unaligned() };
    // SAFETY: a non-null SLOT points into the report file's mapping, never unmapped.
    let slot = unsafe { SLOT.load(Acquire).as_ref() };
    // Every other case (a long trailer, an uncounted or foreign block, no slot, a
    // thread's first call, a granule crossed) takes the general path, as a tail call.
    let Some(slack) = trailer::counted_short_slack(word) else {
        // SAFETY: the same contract.
        return unsafe { free_general(ptr) };
    };
    let Some(slot) = slot else {
        // SAFETY: the same contract.
        return unsafe { free_general(ptr) };
    };
    // usable = offset + 8 >= 24 >= any short trailer's slack: no overflow.
    let size = offset + 8 - slack;
    if !counters::free_fast(slot, sys::thread_pointer(), size as u64) {
        // SAFETY: the same contract.
        return unsafe { free_general(ptr) };
    }
    // SAFETY: the last word lies inside the block, which the program gives up: cleared,
    // stale memory never looks like one of our blocks.
    unsafe { at.write_unaligned(0) };
    // SAFETY: the program's pointer is glibc's pointer: the trailer never decides what is
    // freed.
    unsafe { sys::__libc_free(ptr) };
}

/// `free` in every case: an uncounted block, no slot, a thread's first call, a granule
/// crossed.
///
/// # Safety
/// The C `free` contract, `ptr` not null.
#[cold]
#[inline(never)]
unsafe fn free_general(ptr: *mut c_void) {
    // SAFETY: ptr is a live block (contract), so a glibc block.
    if let Some((block, usable)) = unsafe { block_of(ptr) } {
        if block.counted {
            if let Some(slot) = current_slot() {
                counters::on_free(slot, record(slot), block.size as u64);
                sync_tree(slot);
            }
        }
        // SAFETY: the block has `usable` usable bytes; cleared, stale memory never looks
        // like one of our blocks.
        unsafe { clear_trailer(ptr, usable) };
    }
    // SAFETY: ours or not, the program's pointer is glibc's pointer: the trailer never
    // decides what is freed.
    unsafe { sys::__libc_free(ptr) };
}

/// # Safety
/// The C `realloc` contract.
#[no_mangle]
pub unsafe extern "C" fn realloc(ptr: *mut c_void, size: usize) -> *mut c_void {
    if ptr.is_null() {
        return plain(size);
    }
    if size == 0 {
        // glibc frees and returns null (REALLOC_ZERO_BYTES_FREES); DHAT counts a free.
        // SAFETY: ptr is a live block (contract).
        unsafe { free(ptr) };
        return null_mut();
    }
    // SAFETY: ptr is a live block (contract), so a glibc block.
    let Some((old, usable)) = (unsafe { block_of(ptr) }) else {
        // SAFETY: not ours: glibc's own block, left to glibc.
        return unsafe { sys::__libc_realloc(ptr, size) };
    };
    if size > MAX_SIZE {
        set_errno(sys::ENOMEM);
        return null_mut();
    }
    // The old trailer ends up inside the grown block, or in memory glibc takes back:
    // cleared first, so that it never looks like one of ours.
    // SAFETY: the live block has `usable` usable bytes.
    unsafe { clear_trailer(ptr, usable) };
    // SAFETY: forwarding to glibc; no overflow (size <= MAX_SIZE).
    let new = unsafe { sys::__libc_realloc(ptr, size + EXTRA) };
    if new.is_null() {
        // glibc left the old block as it was (errno is set): so is its trailer.
        // SAFETY: the old block is still live, with its usable size and its data.
        unsafe { write_trailer(ptr, usable, usable - old.size, old.counted, true) };
        return null_mut();
    }
    // SAFETY: a glibc block of size + 3 bytes; the trailer goes at its new usable end.
    unsafe { finish_resize(new, size, old) }
}

/// # Safety
/// The C `reallocarray` contract.
#[no_mangle]
pub unsafe extern "C" fn reallocarray(ptr: *mut c_void, count: usize, size: usize) -> *mut c_void {
    match count.checked_mul(size) {
        // SAFETY: same contract as realloc.
        Some(total) => unsafe { realloc(ptr, total) },
        None => {
            set_errno(sys::ENOMEM);
            null_mut()
        }
    }
}

/// # Safety
/// The C `memalign` contract.
#[no_mangle]
pub unsafe extern "C" fn memalign(align: usize, size: usize) -> *mut c_void {
    aligned(align, size)
}

/// # Safety
/// The C `aligned_alloc` contract.
#[no_mangle]
pub unsafe extern "C" fn aligned_alloc(align: usize, size: usize) -> *mut c_void {
    // glibc 2.36 treats aligned_alloc as memalign.
    aligned(align, size)
}

/// # Safety
/// The C `posix_memalign` contract: `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn posix_memalign(out: *mut *mut c_void, align: usize, size: usize) -> c_int {
    if !align.is_power_of_two() || align % core::mem::size_of::<*mut c_void>() != 0 {
        return sys::EINVAL;
    }
    let block = aligned(align, size);
    if block.is_null() {
        return sys::ENOMEM;
    }
    // SAFETY: `out` is writable (contract).
    unsafe { *out = block };
    0
}

/// # Safety
/// The C `valloc` contract.
#[no_mangle]
pub unsafe extern "C" fn valloc(size: usize) -> *mut c_void {
    aligned(page_size(), size)
}

/// # Safety
/// The C `pvalloc` contract. Counted with the size asked for; the program may use the
/// size rounded up to whole pages, as glibc gives it, and the trailer goes after that.
#[no_mangle]
pub unsafe extern "C" fn pvalloc(size: usize) -> *mut c_void {
    let page = page_size();
    let Some(rounded) = size
        .max(1)
        .checked_next_multiple_of(page)
        .filter(|&r| r <= MAX_SIZE)
    else {
        set_errno(sys::ENOMEM);
        return null_mut();
    };
    // SAFETY: forwarding to glibc; no overflow (rounded <= MAX_SIZE).
    let ptr = unsafe { sys::__libc_memalign(page, rounded + EXTRA) };
    // SAFETY: null or a glibc block of rounded + 3 >= size + 3 bytes.
    unsafe { finish(ptr, size) }
}

/// # Safety
/// The C `malloc_usable_size` contract: `ptr` is null or a live block.
#[no_mangle]
pub unsafe extern "C" fn malloc_usable_size(ptr: *mut c_void) -> usize {
    if ptr.is_null() {
        return 0;
    }
    // SAFETY: ptr is a live block (contract), so a glibc block.
    if let Some((block, usable)) = unsafe { block_of(ptr) } {
        // The program may use everything up to the trailer.
        return usable - trailer::len(usable - block.size);
    }
    // Not ours: glibc's block, whose usable size glibc computes from the same chunk word
    // (no `dlsym` for glibc's own function, which could take the loader lock in a hook).
    // SAFETY: a live glibc block (contract).
    unsafe { usable_size(ptr) }
}
