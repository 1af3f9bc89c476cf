//! The interposed malloc family, the start-up that finds the report region, and the fork
//! handler. Every function here is a thin shim: block headers are in [`crate::header`],
//! counting in `sbs_agent_abi::counters`.
//!
//! Rules kept throughout: nothing here allocates through `malloc` (only the `__libc_*`
//! entry points), nothing uses thread-local storage, and nothing can unwind (the panic
//! handler aborts; arithmetic on sizes is checked).

use core::ffi::{c_char, c_int, c_void};
use core::ptr::{self, null_mut};
use core::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use core::sync::atomic::{AtomicPtr, AtomicU64, AtomicU8, AtomicUsize};

use sbs_agent_abi::{
    parse_fd, parse_token, slot_offset, HeaderValues, Origin, RegionHeader, Slot, ENV_REGION_FD_C,
    ENV_REGION_TOKEN_C, HEADER_SIZE as REGION_HEADER_SIZE, REGION_SIZE, SLOT_COUNT,
};

use crate::header::{self, Block, HEADER_SIZE, MAX_OFFSET};
use crate::sys;
use sbs_agent_abi::counters::{self, Access, ForkSnapshot, Target};

/// The report slot of this process image, or null (no region, or all slots taken).
static SLOT: AtomicPtr<Slot> = AtomicPtr::new(null_mut());
/// The mapped report region, or null.
static REGION: AtomicPtr<RegionHeader> = AtomicPtr::new(null_mut());
/// Start-up state: [`UNINIT`], [`RUNNING`] or [`DONE`].
static STATE: AtomicU8 = AtomicU8::new(UNINIT);
const UNINIT: u8 = 0;
const RUNNING: u8 = 1;
const DONE: u8 = 2;
/// glibc's `malloc_usable_size`, found with `dlsym(RTLD_NEXT)` on first use.
static REAL_USABLE_SIZE: AtomicUsize = AtomicUsize::new(0);
static PAGE_SIZE: AtomicUsize = AtomicUsize::new(0);
/// The parent's counts, taken in the `pthread_atfork` prepare handler. A fork copies
/// these (ordinary process memory) into the child, unlike the shared slot.
static FORK_ALLOCS: AtomicU64 = AtomicU64::new(0);
static FORK_BYTES: AtomicU64 = AtomicU64::new(0);
static FORK_LIVE: AtomicU64 = AtomicU64::new(0);
static FORK_PEAK: AtomicU64 = AtomicU64::new(0);

#[cfg(not(test))]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    // SAFETY: abort has no preconditions; unwinding out of a hook is never allowed.
    unsafe { sys::abort() }
}

/// Run at load time, after libc is initialised (environment readable).
#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init_at_load;

extern "C" fn init_at_load() {
    start(true);
}

/// Find the region and claim a slot, once. Hooks call this too, because other libraries'
/// constructors may allocate before ours runs. `final_attempt` is set by the constructor:
/// earlier attempts that find no env var may have run before the environment was set up,
/// so they leave the state for a later attempt.
fn start(final_attempt: bool) {
    if STATE
        .compare_exchange(UNINIT, RUNNING, Acquire, Relaxed)
        .is_err()
    {
        return;
    }
    // SAFETY: runs once (guarded by STATE); only reads the environment and maps the fd.
    let found = unsafe { find_region() };
    match found {
        Some(region) => {
            REGION.store(region, Release);
            claim(Origin::Load, None);
            // SAFETY: registering plain `extern "C"` functions without arguments.
            unsafe {
                sys::pthread_atfork(Some(before_fork), None, Some(in_fork_child));
            }
            STATE.store(DONE, Release);
        }
        None if final_attempt => STATE.store(DONE, Release),
        None => STATE.store(UNINIT, Release),
    }
}

/// Read the env vars, check the region's header and map it.
///
/// # Safety
/// Must not run concurrently with itself (guarded by `STATE`).
unsafe fn find_region() -> Option<*mut RegionHeader> {
    // SAFETY: NUL-terminated names; getenv returns null or a NUL-terminated string.
    let fd = parse_fd(unsafe { env_bytes(ENV_REGION_FD_C)? })?;
    // SAFETY: as above.
    let token = parse_token(unsafe { env_bytes(ENV_REGION_TOKEN_C)? })?;
    let mut raw = [0u8; REGION_HEADER_SIZE];
    // SAFETY: reads at most raw.len() bytes into a stack buffer.
    let got = unsafe { sys::pread(fd, raw.as_mut_ptr().cast(), raw.len(), 0) };
    if got != raw.len() as isize || !HeaderValues::from_bytes(&raw)?.matches(token) {
        return None;
    }
    // SAFETY: a fresh shared mapping of the region; the header check above shows the fd is
    // the collector's region of REGION_SIZE bytes.
    let map = unsafe {
        sys::mmap(
            null_mut(),
            REGION_SIZE,
            sys::PROT_READ | sys::PROT_WRITE,
            sys::MAP_SHARED,
            fd,
            0,
        )
    };
    if map == sys::MAP_FAILED || map.is_null() {
        return None;
    }
    Some(map.cast())
}

/// The value of env var `name` (NUL-terminated) as bytes.
///
/// # Safety
/// `name` must end with NUL. The returned slice points into the environment.
unsafe fn env_bytes(name: &[u8]) -> Option<&'static [u8]> {
    // SAFETY: the caller passes a NUL-terminated name.
    let value = unsafe { sys::getenv(name.as_ptr().cast::<c_char>()) };
    if value.is_null() {
        return None;
    }
    let mut len = 0usize;
    // SAFETY: getenv's result is NUL-terminated; we stop at the NUL and read no further
    // than 32 bytes (our values are shorter).
    while len < 32 && unsafe { *value.add(len) } != 0 {
        len += 1;
    }
    // SAFETY: `len` bytes from `value` were just read.
    Some(unsafe { core::slice::from_raw_parts(value.cast::<u8>(), len) })
}

/// Take the next slot of the region for this process image.
fn claim(origin: Origin, inherited: Option<ForkSnapshot>) {
    let region = REGION.load(Acquire);
    if region.is_null() {
        return;
    }
    // SAFETY: REGION is a live mapping of REGION_SIZE bytes starting with the header.
    let head = unsafe { &*region };
    let index = head.claims.fetch_add(1, Relaxed) as usize;
    if index >= SLOT_COUNT {
        SLOT.store(null_mut(), Release);
        return;
    }
    // SAFETY: slot_offset(index) + SLOT_SIZE <= REGION_SIZE for index < SLOT_COUNT, and
    // slots are 8-byte aligned (the mapping is page-aligned, offsets multiples of 128).
    let slot = unsafe { region.cast::<u8>().add(slot_offset(index)).cast::<Slot>() };
    // SAFETY: as above; the slot is ours alone (claimed by the atomic increment).
    let slot_ref = unsafe { &*slot };
    // SAFETY: getpid/getppid have no preconditions.
    let (pid, ppid) = unsafe { (sys::getpid(), sys::getppid()) };
    counters::start(slot_ref, origin, pid as u64, ppid as u64, inherited);
    SLOT.store(slot, Release);
}

unsafe extern "C" fn before_fork() {
    if let Some(slot) = current_slot() {
        let snap = counters::snapshot(slot);
        FORK_ALLOCS.store(snap.allocs, Relaxed);
        FORK_BYTES.store(snap.bytes, Relaxed);
        FORK_LIVE.store(snap.live, Relaxed);
        FORK_PEAK.store(snap.peak, Relaxed);
    }
}

unsafe extern "C" fn in_fork_child() {
    if SLOT.load(Acquire).is_null() {
        return;
    }
    claim(
        Origin::Fork,
        Some(ForkSnapshot {
            allocs: FORK_ALLOCS.load(Relaxed),
            bytes: FORK_BYTES.load(Relaxed),
            live: FORK_LIVE.load(Relaxed),
            peak: FORK_PEAK.load(Relaxed),
        }),
    );
}

/// This image's slot, starting the agent if needed.
#[inline]
fn current_slot() -> Option<&'static Slot> {
    if STATE.load(Acquire) != DONE {
        start(false);
    }
    let slot = SLOT.load(Acquire);
    // SAFETY: a non-null SLOT points into the region mapping, which is never unmapped.
    unsafe { slot.as_ref() }
}

/// Whether other threads may update the slot now. glibc clears
/// `__libc_single_threaded` before it creates the process's second thread (and never sets
/// it again), so while it is set only the calling thread can reach the slot.
#[inline]
fn access() -> Access {
    // SAFETY: a plain read of a `char` that glibc exports for exactly this purpose; only
    // this thread could change it (by creating a thread), not during this read.
    if unsafe { core::ptr::addr_of!(sys::__libc_single_threaded).read() } != 0 {
        Access::Exclusive
    } else {
        Access::Shared
    }
}

/// Where this thread's update goes. A single-threaded process always uses stripe 0 and
/// skips asking for its thread identity.
#[inline]
fn target(slot: &Slot) -> Target<'_> {
    let access = access();
    let stripe = match access {
        Access::Exclusive => &slot.stripes[0],
        // SAFETY: pthread_self has no preconditions and cannot fail.
        Access::Shared => counters::stripe_of(slot, unsafe { sys::pthread_self() }),
    };
    Target {
        slot,
        stripe,
        access,
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

/// Header of a user pointer, if the agent made it.
///
/// # Safety
/// `user` must be non-null and come from a glibc allocation function or from the agent:
/// both keep at least 16 readable, 8-aligned bytes in front of the pointer.
unsafe fn block_of(user: *mut c_void) -> Option<Block> {
    // SAFETY: see the function's contract.
    let words = unsafe { ptr::read(user.cast::<[u64; 2]>().sub(1)) };
    header::decode(words)
}

/// Write the header of a new block and count it.
///
/// # Safety
/// `real` is null or a glibc block of at least `offset + size` bytes, aligned so that
/// `real + offset` is 16-aligned; `offset` is in `HEADER_SIZE..=MAX_OFFSET`.
unsafe fn finish(
    real: *mut c_void,
    offset: usize,
    size: usize,
    realloc_of: Option<Block>,
) -> *mut c_void {
    if real.is_null() {
        return null_mut();
    }
    // SAFETY: the block holds offset + size bytes.
    let user = unsafe { real.cast::<u8>().add(offset) };
    let slot = current_slot();
    let words = header::encode(Block {
        size,
        offset,
        counted: slot.is_some(),
    });
    // SAFETY: offset >= 16, so the header lies inside the block; user is 16-aligned.
    unsafe { ptr::write(user.cast::<[u64; 2]>().sub(1), words) };
    if let Some(slot) = slot {
        match realloc_of {
            None => counters::on_alloc(target(slot), size as u64),
            Some(old) => counters::on_realloc(
                target(slot),
                old.counted.then_some(old.size as u64),
                size as u64,
            ),
        }
    }
    user.cast()
}

/// A block of `size` bytes with malloc's alignment, or null with errno set.
fn plain(size: usize) -> *mut c_void {
    let Some(total) = size.checked_add(HEADER_SIZE) else {
        set_errno(sys::ENOMEM);
        return null_mut();
    };
    // SAFETY: forwarding to glibc.
    let real = unsafe { sys::__libc_malloc(total) };
    // SAFETY: real is null or a 16-aligned block of total bytes.
    unsafe { finish(real, HEADER_SIZE, size, None) }
}

/// A block of `size` bytes aligned to `align` (a power of two), or null.
fn aligned(align: usize, size: usize) -> *mut c_void {
    if align <= HEADER_SIZE {
        return plain(size);
    }
    if align > MAX_OFFSET {
        // Too far apart for the header: hand it out untracked (free passes it through).
        // SAFETY: forwarding to glibc.
        return unsafe { sys::__libc_memalign(align, size) };
    }
    let Some(total) = size.checked_add(align) else {
        set_errno(sys::ENOMEM);
        return null_mut();
    };
    // SAFETY: forwarding to glibc.
    let real = unsafe { sys::__libc_memalign(align, total) };
    // SAFETY: real is null or an `align`-aligned block of size + align bytes; align >= 32.
    unsafe { finish(real, align, size, None) }
}

/// Release a block the agent made (its header already decoded).
///
/// # Safety
/// `user` carries the header `block`.
unsafe fn release(user: *mut c_void, block: Block) {
    if block.counted {
        if let Some(slot) = current_slot() {
            counters::on_free(target(slot), block.size as u64);
        }
    }
    // SAFETY: the header lies in the block (contract); clearing it means stale memory never
    // looks like one of our blocks.
    unsafe { ptr::write(user.cast::<[u64; 2]>().sub(1), header::CLEARED) };
    // SAFETY: user - offset is the start of the glibc block.
    unsafe { sys::__libc_free(user.cast::<u8>().sub(block.offset).cast()) };
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
    let Some(total) = count
        .checked_mul(size)
        .and_then(|n| n.checked_add(HEADER_SIZE))
    else {
        set_errno(sys::ENOMEM);
        return null_mut();
    };
    // SAFETY: forwarding to glibc; one zeroed block of total bytes.
    let real = unsafe { sys::__libc_calloc(1, total) };
    // SAFETY: real is null or a 16-aligned block of total bytes.
    unsafe { finish(real, HEADER_SIZE, total - HEADER_SIZE, None) }
}

/// # Safety
/// The C `free` contract: `ptr` is null or a live block from this allocator.
#[no_mangle]
pub unsafe extern "C" fn free(ptr: *mut c_void) {
    if ptr.is_null() {
        return;
    }
    // SAFETY: ptr is a live allocation (contract).
    match unsafe { block_of(ptr) } {
        // SAFETY: the header says it is ours.
        Some(block) => unsafe { release(ptr, block) },
        // SAFETY: not ours (made before interposition or by glibc itself): glibc's.
        None => unsafe { sys::__libc_free(ptr) },
    }
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
    // SAFETY: ptr is a live block (contract).
    let Some(old) = (unsafe { block_of(ptr) }) else {
        // SAFETY: not ours: glibc's own block, left to glibc.
        return unsafe { sys::__libc_realloc(ptr, size) };
    };
    let Some(total) = size.checked_add(HEADER_SIZE) else {
        set_errno(sys::ENOMEM);
        return null_mut();
    };
    if old.offset == HEADER_SIZE {
        // SAFETY: ptr - 16 is the glibc block's start.
        let real = unsafe { ptr.cast::<u8>().sub(HEADER_SIZE) };
        // SAFETY: forwarding to glibc; on failure the old block is untouched.
        let new_real = unsafe { sys::__libc_realloc(real.cast(), total) };
        // SAFETY: null or a 16-aligned block of total bytes; its header bytes are the old
        // header, overwritten now.
        return unsafe { finish(new_real, HEADER_SIZE, size, Some(old)) };
    }
    // An over-aligned block: a new plain block, copy, release the old one uncounted.
    // SAFETY: forwarding to glibc.
    let new_real = unsafe { sys::__libc_malloc(total) };
    if new_real.is_null() {
        return null_mut();
    }
    // SAFETY: both blocks hold at least min(old.size, size) bytes and do not overlap.
    unsafe {
        ptr::copy_nonoverlapping(
            ptr.cast::<u8>(),
            new_real.cast::<u8>().add(HEADER_SIZE),
            old.size.min(size),
        );
    }
    // SAFETY: clear and free the old block without counting (the realloc counts it).
    unsafe {
        ptr::write(ptr.cast::<[u64; 2]>().sub(1), header::CLEARED);
        sys::__libc_free(ptr.cast::<u8>().sub(old.offset).cast());
    }
    // SAFETY: a 16-aligned block of total bytes.
    unsafe { finish(new_real, HEADER_SIZE, size, Some(old)) }
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

/// glibc's rule for `memalign`/`aligned_alloc`: a non-power-of-two alignment is rounded up.
fn round_align(align: usize) -> Option<usize> {
    align.max(1).checked_next_power_of_two()
}

/// # Safety
/// The C `memalign` contract.
#[no_mangle]
pub unsafe extern "C" fn memalign(align: usize, size: usize) -> *mut c_void {
    match round_align(align) {
        Some(align) => aligned(align, size),
        None => {
            set_errno(sys::EINVAL);
            null_mut()
        }
    }
}

/// # Safety
/// The C `aligned_alloc` contract.
#[no_mangle]
pub unsafe extern "C" fn aligned_alloc(align: usize, size: usize) -> *mut c_void {
    // SAFETY: glibc 2.36 treats aligned_alloc as memalign.
    unsafe { memalign(align, size) }
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
/// The C `pvalloc` contract. Counted with the size asked for; the block is rounded up to
/// whole pages as glibc does.
#[no_mangle]
pub unsafe extern "C" fn pvalloc(size: usize) -> *mut c_void {
    let page = page_size();
    let Some(rounded) = size.max(1).checked_next_multiple_of(page) else {
        set_errno(sys::ENOMEM);
        return null_mut();
    };
    let Some(total) = rounded.checked_add(page) else {
        set_errno(sys::ENOMEM);
        return null_mut();
    };
    // SAFETY: forwarding to glibc.
    let real = unsafe { sys::__libc_memalign(page, total) };
    // SAFETY: null or a page-aligned block of rounded + page bytes.
    unsafe { finish(real, page, size, None) }
}

/// glibc's own `malloc_usable_size`, looked up once.
fn real_usable_size() -> Option<unsafe extern "C" fn(*mut c_void) -> usize> {
    let mut found = REAL_USABLE_SIZE.load(Relaxed);
    if found == 0 {
        // SAFETY: dlsym with a NUL-terminated name; RTLD_NEXT finds libc's definition.
        found = unsafe { sys::dlsym(sys::RTLD_NEXT, c"malloc_usable_size".as_ptr()) } as usize;
        REAL_USABLE_SIZE.store(found, Relaxed);
    }
    if found == 0 {
        return None;
    }
    // SAFETY: dlsym returned the address of glibc's malloc_usable_size, of this type.
    Some(unsafe {
        core::mem::transmute::<usize, unsafe extern "C" fn(*mut c_void) -> usize>(found)
    })
}

/// # Safety
/// The C `malloc_usable_size` contract: `ptr` is null or a live block.
#[no_mangle]
pub unsafe extern "C" fn malloc_usable_size(ptr: *mut c_void) -> usize {
    if ptr.is_null() {
        return 0;
    }
    let Some(real_usable) = real_usable_size() else {
        return 0;
    };
    // SAFETY: ptr is a live block (contract).
    match unsafe { block_of(ptr) } {
        Some(block) => {
            // SAFETY: ptr - offset is the glibc block's start.
            let usable = unsafe { real_usable(ptr.cast::<u8>().sub(block.offset).cast()) };
            usable.saturating_sub(block.offset)
        }
        // SAFETY: a glibc block.
        None => unsafe { real_usable(ptr) },
    }
}
