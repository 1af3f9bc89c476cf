//! Updates of a report slot, shared by the preload agent and the in-process harness
//! (`sbs-harness`). Plain Rust over atomics, unit-tested apart from any FFI.
//!
//! Every thread owns a [`Record`] of the slot, found from a key that is unique among the
//! process's live threads (the agent uses the thread pointer). Only its owner writes a
//! record, so counts are plain loads and stores: no bus lock, no cache line shared
//! between cores. Live bytes follow one of these modes per record:
//!
//! - [`SOLO`]: the image's first thread, while it is the only thread that ever
//!   allocated, adds its changes straight to [`Slot::live`] and raises [`Slot::peak`]
//!   with plain stores: exact, and as cheap as the counts. Its key is also in
//!   [`Slot::solo_key`], and on the hot path it counts in the slot's `solo_*` words
//!   beside `live` and `peak`: one comparison finds them, no record lookup.
//! - [`SOLO_IN_TREE`]: the same, in an image that has joined a process tree (see
//!   [`crate::tree`]); the hot path also checks that `live` stays within [`GRANULE`]
//!   bytes of what the image last added to the tree's total ([`Slot::tree`]), and leaves
//!   the publishing to the general path when it does not. Its shortcut key is
//!   [`Slot::tree_key`], which the thread sets itself (see `arm_tree_key`). [`SOLO_NUDGED`]: the same
//!   thread sent to the general path by the image whose end left it alone in the tree,
//!   so that it goes back out of the tree and to [`SOLO`] (see `tree::settle`).
//! - [`BATCHED`]: once a second thread has a record, each thread keeps its net change in
//!   [`Record::pending`] and adds it to [`Slot::shared_live`] (one atomic add, then the
//!   peak check) when it reaches [`GRANULE`] bytes either way, or at once while it is the
//!   only active thread. The published total is then off by less than `GRANULE` per
//!   other active thread (see [`SlotValues::peak_bound`]).
//! - [`DIRECT`]: a thread that has ended (its pending change folded in by [`fold`];
//!   thread-local destructors that run later still count): every change is published at
//!   once. [`SHARED`] is the same for the overflow record, which the threads that find
//!   no free record share, with atomic counts.
//!
//! `live` is kept as a wrapping `u64` and read as `i64`: a forked child can free a block
//! its parent allocated between our fork snapshot and the fork itself, which takes `live`
//! below the snapshot; signed comparison keeps such a dip from looking like a huge peak.

use core::sync::atomic::Ordering::{Relaxed, SeqCst};
use core::sync::atomic::{fence, AtomicU64};

use crate::{in_tree, Origin, Record, Slot, SlotValues, GRANULE, RECORDS, TREE_OUT};

/// Record mode: the image's only thread so far (see the module doc).
pub const SOLO: u64 = 1;
/// Record mode: changes batched up to [`GRANULE`] bytes (0, so a fresh record has it).
pub const BATCHED: u64 = 0;
/// Record mode: the only thread so far of an image in a process tree.
pub const SOLO_IN_TREE: u64 = 2;
/// Record mode: every change published at once.
pub const DIRECT: u64 = 3;
/// Record mode: the overflow record, shared by threads: atomic counts, every change
/// published at once.
pub const SHARED: u64 = 4;
/// Record mode: a [`SOLO_IN_TREE`] thread whose image may be alone in the tree again; it
/// counts as a solo thread, on the general path.
pub const SOLO_NUDGED: u64 = 5;
/// The modes of an image's only thread.
const SOLO_MODES: [u64; 3] = [SOLO, SOLO_IN_TREE, SOLO_NUDGED];
/// Index of the overflow record.
pub const OVERFLOW: usize = RECORDS - 1;

/// Add `v` to a counter only the calling thread writes: a plain load and store.
#[inline(always)]
fn bump_own(counter: &AtomicU64, v: u64) -> u64 {
    let now = counter.load(Relaxed).wrapping_add(v);
    counter.store(now, Relaxed);
    now
}

/// Add `v` to a counter of a record: plain if the caller owns the record, atomic for
/// the shared overflow record.
#[inline(always)]
fn bump(shared: bool, counter: &AtomicU64, v: u64) {
    if shared {
        counter.fetch_add(v, Relaxed);
    } else {
        bump_own(counter, v);
    }
}

/// Where a record came from in [`record_of`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// The thread's record from an earlier call.
    Known,
    /// Claimed for this thread just now, or taken up again after a [`fold`] (the caller
    /// arranges for [`fold`] at the thread's end).
    New,
    /// No record was free: the shared overflow record.
    Overflow,
}

/// A thread's two home records: two multiplicative hashes of its key (the thread
/// pointer) over the 64 non-overflow records (64, so that a hash's top six bits are the
/// index with no reduction; the overflow record is a 65th). The hot path looks at the
/// first, then the second; a thread whose two homes were both taken when it started finds its record by
/// the claim's probe on every call, off the hot path. With one home, 4 threads and the
/// main thread collided about one run in seven (a birthday bound over 63 records),
/// sending a thread to the general path on every call; with two, a thread is left out
/// only if both its homes are taken. (Fields of the thread pointer itself, such as its
/// page number modulo 32, looked better on paper: thread stacks are laid out one after
/// the other. Under the agent they are not: the report file's mapping and other threads'
/// stack caches come between, and the main thread's and the first thread's homes
/// coincided on every run, 1.9x bare CPU with two threads against 1.46x.)
#[inline(always)]
fn homes(key: u64) -> (usize, usize) {
    (first_home(key), second_home(key))
}

#[inline(always)]
fn first_home(key: u64) -> usize {
    (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 58) as usize % OVERFLOW
}

/// A hash of its own rather than other bits of the first one's product, so that the hot
/// path keeps no product alive while it looks at the first home (in `free` that spared
/// a register save).
#[inline(always)]
fn second_home(key: u64) -> usize {
    (key.wrapping_mul(0xc2b2_ae3d_27d4_eb4f) >> 58) as usize % OVERFLOW
}

/// The record of the thread with `key` (non-zero, unique among the live threads), found
/// at its home index on the hot path, claimed on the thread's first call.
#[inline(always)]
pub fn record_of(slot: &Slot, key: u64) -> (&Record, Found) {
    if let Some(record) = at_home(slot, key) {
        if record.mode.load(Relaxed) != DIRECT {
            return (record, Found::Known);
        }
    }
    claim_record(slot, key)
}

/// The record of the thread with `key` if it is at one of its homes.
#[inline(always)]
fn at_home(slot: &Slot, key: u64) -> Option<&Record> {
    let record = &slot.records[first_home(key)];
    if record.owner.load(Relaxed) == key {
        return Some(record);
    }
    let record = &slot.records[second_home(key)];
    (record.owner.load(Relaxed) == key).then_some(record)
}

/// A folded record used again: by a new thread to which glibc gave the ended thread's
/// control block (glibc reuses stacks), or by the ended thread itself in a destructor
/// that runs after [`fold`]. Either way it batches again, counts as active, and the
/// caller arranges for another [`fold`]: glibc calls key destructors again (up to
/// four rounds) when one sets a value, and a new thread's end calls it anyway.
#[cold]
fn take_up_again<'a>(slot: &Slot, record: &'a Record) -> (&'a Record, Found) {
    record.mode.store(BATCHED, Relaxed);
    count_active(slot);
    // The image's last thread may have gone solo again (see `solo_once_more`).
    end_solo(slot);
    (record, Found::New)
}

/// One more thread of the image is active. Counted before the new thread looks for a
/// solo thread to end ([`end_solo`]): a thread that goes solo reads the count after its
/// fence, so that one of the two sees the other (see [`become_solo`]).
fn count_active(slot: &Slot) {
    let active = slot.active.fetch_add(1, SeqCst) + 1;
    slot.max_active.fetch_max(active, Relaxed);
}

/// Whether the calling thread, which has a record, is the image's only active thread: no
/// other record is active and no thread counts in the shared overflow record (whose
/// threads are never counted as active, and never end). A thread that never ends (a raw
/// `clone` thread, see `raw_thread.c`) stays active, so its image is never alone again.
fn alone(slot: &Slot) -> bool {
    slot.active.load(SeqCst) <= 1 && slot.records[OVERFLOW].owner.load(Relaxed) != u64::MAX
}

/// The image's first record is the solo one, and so is the record of a thread left alone
/// by the others' ends ([`solo_once_more`]). The hot path trusts the mode alone (no check
/// of [`Slot::active`]), so a second active thread must never leave it solo: either this
/// sees the second thread's count, or the second thread's [`end_solo`] sees this mode
/// (both sides write, then fence, then read: one of them sees the other's write).
///
/// The same handshake with another image that pulls this one into the process tree
/// ([`crate::tree::join`]): it sets [`Slot::tree`], fences, then turns a solo record into
/// [`SOLO_IN_TREE`] ([`solo_in_tree`]). Of the modes others may set, batching wins.
///
/// [`Slot::solo_key`] is written before the fence and cleared by whichever side sees the
/// other, so the hot path's solo shortcut never outlives the solo mode.
fn become_solo(slot: &Slot, record: &Record, key: u64) {
    slot.solo_key.store(key, Relaxed);
    record.mode.store(SOLO, Relaxed);
    recheck_solo(slot, record);
}

/// The second half of the handshake of [`become_solo`] and [`solo_again`], after the
/// key and the mode are written: fence, then give the solo mode up if a second thread or
/// the process tree came meanwhile.
fn recheck_solo(slot: &Slot, record: &Record) {
    fence(SeqCst);
    if !alone(slot) {
        record.mode.store(BATCHED, Relaxed);
        slot.solo_key.store(0, Relaxed);
    } else if in_tree(slot.tree.load(Relaxed)) {
        let _ = record
            .mode
            .compare_exchange(SOLO, SOLO_IN_TREE, Relaxed, Relaxed);
        slot.solo_key.store(0, Relaxed);
    }
}

/// A second thread has a record: the solo record, if any, batches from now on (its
/// `live` word is then only read). With [`solo_in_tree`], the only times a thread writes
/// another's record.
fn end_solo(slot: &Slot) {
    fence(SeqCst);
    slot.solo_key.store(0, Relaxed);
    slot.tree_key.store(0, Relaxed);
    for record in &slot.records[..OVERFLOW] {
        for solo in SOLO_MODES {
            let _ = record
                .mode
                .compare_exchange(solo, BATCHED, Relaxed, Relaxed);
        }
    }
}

/// The image joined a process tree: its solo record, if any, checks its distance from
/// what the tree has of it from now on.
pub(crate) fn solo_in_tree(slot: &Slot) {
    fence(SeqCst);
    slot.solo_key.store(0, Relaxed);
    for record in &slot.records[..OVERFLOW] {
        for solo in [SOLO, SOLO_NUDGED] {
            let _ = record
                .mode
                .compare_exchange(solo, SOLO_IN_TREE, Relaxed, Relaxed);
        }
    }
}

/// The last other image of the tree has ended: send this image's solo thread, if any, to
/// the general path, where it can take the image out of the tree (`tree::settle`).
pub(crate) fn nudge(slot: &Slot) {
    for record in &slot.records[..OVERFLOW] {
        let _ = record
            .mode
            .compare_exchange(SOLO_IN_TREE, SOLO_NUDGED, Relaxed, Relaxed);
    }
    // After the mode, with a fence between: see `arm_tree_key`.
    fence(SeqCst);
    slot.tree_key.store(0, Relaxed);
}

/// The calling thread is the solo thread of an image in a process tree (its record in
/// [`SOLO_IN_TREE`]): name it in [`Slot::tree_key`], so that its next calls take the
/// hot path's shortcut rather than look for its record. Only this thread sets the key,
/// then fences and checks that it is still alone and in that mode; whoever ends either
/// (a second thread's [`end_solo`] after counting itself active, [`nudge`] after the
/// mode) clears the key after a fence of its own. So one of the two sees the other: the
/// key never outlives the mode, as with [`Slot::solo_key`].
fn arm_tree_key(slot: &Slot, record: &Record) {
    let key = record.owner.load(Relaxed);
    if slot.tree_key.load(Relaxed) == key {
        return;
    }
    slot.tree_key.store(key, Relaxed);
    fence(SeqCst);
    if !alone(slot) || record.mode.load(Relaxed) != SOLO_IN_TREE {
        let _ = slot.tree_key.compare_exchange(key, 0, Relaxed, Relaxed);
    }
}

/// The image has gone out of the tree and `record`'s thread is its only one: solo again,
/// with the hot path's shortcut, unless another image pulled it back in or a second
/// thread appeared meanwhile (the same handshake as [`become_solo`]).
pub(crate) fn solo_again(slot: &Slot, record: &Record) {
    slot.tree_key.store(0, Relaxed);
    slot.solo_key.store(record.owner.load(Relaxed), Relaxed);
    if record
        .mode
        .compare_exchange(SOLO_NUDGED, SOLO, Relaxed, Relaxed)
        .is_err()
    {
        slot.solo_key.store(0, Relaxed);
        return;
    }
    recheck_solo(slot, record);
}

#[cold]
fn claim_record(slot: &Slot, key: u64) -> (&Record, Found) {
    let (first, second) = homes(key);
    // The two homes first, then every record from the first home on.
    let order = [first, second]
        .into_iter()
        .chain((0..OVERFLOW).map(|i| (first + i) % OVERFLOW));
    for index in order {
        let record = &slot.records[index];
        let owner = record.owner.load(Relaxed);
        if owner == key {
            if record.mode.load(Relaxed) == DIRECT {
                return take_up_again(slot, record);
            }
            return (record, Found::Known);
        }
        if owner == 0
            && record
                .owner
                .compare_exchange(0, key, Relaxed, Relaxed)
                .is_ok()
        {
            let before = slot.threads.fetch_add(1, SeqCst);
            count_active(slot);
            if before == 0 {
                become_solo(slot, record, key);
            } else {
                end_solo(slot);
            }
            return (record, Found::New);
        }
    }
    let overflow = &slot.records[OVERFLOW];
    if overflow.owner.swap(u64::MAX, Relaxed) != u64::MAX {
        overflow.mode.store(SHARED, Relaxed);
        slot.threads.fetch_add(1, SeqCst);
        end_solo(slot);
        // The overflow record never batches, so its threads do not widen the bound.
    }
    (overflow, Found::Overflow)
}

/// Live bytes changed by `delta` (wrapping) in `record`'s thread.
#[inline(always)]
fn change_live(slot: &Slot, record: &Record, mut mode: u64, delta: u64) {
    if mode == BATCHED && slot.active.load(Relaxed) <= 1 {
        solo_once_more(slot, record);
        mode = record.mode.load(Relaxed);
    }
    if SOLO_MODES.contains(&mode) {
        if alone(slot) {
            solo_change::<true>(slot, delta);
            if mode == SOLO_IN_TREE {
                arm_tree_key(slot, record);
            }
            return;
        }
        // A second thread is active: from now on `live` is only read, and this thread
        // batches like the others.
        record.mode.store(BATCHED, Relaxed);
    } else if mode == DIRECT || mode == SHARED {
        publish(slot, delta);
        // Orders the add above before the read below: if the add lands after a thread
        // moved `shared_live` into `live`, this sees its `solo_since` (rare: an ended
        // thread's late change).
        fence(SeqCst);
        if slot.solo_since.load(SeqCst) != 0 {
            // A solo thread may be counting in `live` alone by now: its peak checks do
            // not see this change (see `solo_once_more`).
            slot.unseen
                .fetch_add(delta.wrapping_neg().min(delta), Relaxed);
        }
        return;
    }
    let pending = record.pending.load(Relaxed).wrapping_add(delta);
    if within_granule(pending) && slot.active.load(Relaxed) > 1 {
        record.pending.store(pending, Relaxed);
        return;
    }
    record.pending.store(0, Relaxed);
    publish(slot, pending);
}

/// A solo thread's change: `live` and `peak` with plain stores (the peak only if
/// `RAISES`: a change that may increase the total).
#[inline(always)]
fn solo_change<const RAISES: bool>(slot: &Slot, delta: u64) {
    let live = bump_own(&slot.live, delta);
    raise_own_peak::<RAISES>(slot, live);
}

/// The solo thread's `peak` raised to `live` with a plain store (only if `RAISES`: a
/// change that may increase the total; a dip below zero is no peak).
#[inline(always)]
fn raise_own_peak<const RAISES: bool>(slot: &Slot, live: u64) {
    if RAISES && (live as i64) > (slot.peak.load(Relaxed) as i64) {
        slot.peak.store(live, Relaxed);
    }
}

/// The calling thread batches, and every other thread of the image has ended: it goes
/// solo again, with the hot path's shortcut, rather than publishing every change with an
/// atomic add (2.8x bare CPU on a ring after one helper thread had ended, against 1.3x).
///
/// Its pending change is published first; then the handshake of [`become_solo`] (a new
/// thread that comes meanwhile ends the solo mode again); then `shared_live` is moved
/// into `live`, which the solo thread alone writes, so that its peak checks see the whole
/// total. An ended thread can still count after its [`fold`] (destructors that run
/// later): such a change goes to `shared_live`, which the solo thread's checks no longer
/// see, so its size is added to [`Slot::unseen`] and to the stated bound. The caller reads
/// the record's mode afterwards to learn whether the thread is solo now.
#[cold]
#[inline(never)]
fn solo_once_more(slot: &Slot, record: &Record) {
    if !alone(slot) {
        return;
    }
    let pending = record.pending.swap(0, Relaxed);
    if pending != 0 {
        publish(slot, pending);
    }
    // Before the move below, so that an ended thread whose change lands after it sees
    // this and counts the change as unseen.
    slot.solo_since.fetch_add(1, SeqCst);
    become_solo(slot, record, record.owner.load(Relaxed));
    // Two words, so not at once: an image of the process tree that reads this one's
    // published bytes between them (a joiner, `tree::join`) sees `shared` missing. The
    // total is only low, and only until this image's next publication corrects it.
    let shared = slot.shared_live.swap(0, SeqCst);
    slot.live
        .store(slot.live.load(Relaxed).wrapping_add(shared), Relaxed);
}

/// Add `delta` to the shared live total and raise the peak to the new total.
#[inline(never)]
fn publish(slot: &Slot, delta: u64) {
    let shared = slot
        .shared_live
        .fetch_add(delta, Relaxed)
        .wrapping_add(delta);
    raise_peak(slot, slot.live.load(Relaxed).wrapping_add(shared));
}

/// Whether a change of `delta` live bytes in a batching `record` stays inside it, with
/// no call and no atomic instruction: its pending change stays under the granule while
/// other threads are active. Returns the new pending change. (A solo thread takes one of
/// the two shortcuts before this; when neither is armed yet, it takes the general path,
/// which arms them.) Writes nothing; [`change_live`] does the same update when this
/// says yes.
#[inline(always)]
fn stays_local(slot: &Slot, record: &Record, delta: u64) -> Option<u64> {
    if record.mode.load(Relaxed) != BATCHED {
        return None;
    }
    let pending = record.pending.load(Relaxed).wrapping_add(delta);
    (within_granule(pending) && slot.active.load(Relaxed) > 1).then_some(pending)
}

/// Whether a change (wrapping, read signed) is less than [`GRANULE`] either way: one add
/// and one unsigned comparison (`-G < x < G` is `x + G - 1` in `0..2G - 1`), two
/// instructions fewer than an absolute value on the hot path.
#[inline(always)]
pub(crate) fn within_granule(change: u64) -> bool {
    change.wrapping_add(GRANULE - 1) < 2 * GRANULE - 1
}

/// The four counts of a thread: its record's, or the slot's `solo_*` words for the solo
/// thread on the hot path (the reader adds both).
struct Tally<'a> {
    allocs: &'a AtomicU64,
    frees: &'a AtomicU64,
    reallocs: &'a AtomicU64,
    bytes: &'a AtomicU64,
}

impl<'a> Tally<'a> {
    #[inline(always)]
    fn of(record: &'a Record) -> Self {
        Tally {
            allocs: &record.allocs,
            frees: &record.frees,
            reallocs: &record.reallocs,
            bytes: &record.bytes,
        }
    }

    #[inline(always)]
    fn solo(slot: &'a Slot) -> Self {
        Tally {
            allocs: &slot.solo_allocs,
            frees: &slot.solo_frees,
            reallocs: &slot.solo_reallocs,
            bytes: &slot.solo_bytes,
        }
    }
}

/// The hot path of [`on_alloc`] for the thread with `key`: counts a block of `size`
/// bytes and returns true when that needs no call (see `stays_local`); otherwise
/// changes nothing and returns false, and the caller takes the general path
/// ([`record_of`], then [`on_alloc`]). Same result as that path in every case it takes.
#[inline(always)]
pub fn alloc_fast(slot: &Slot, key: u64, size: u64) -> bool {
    change_fast::<true>(slot, key, size, |t| {
        bump_own(t.allocs, 1);
        bump_own(t.bytes, size);
    })
}

/// The hot path of [`on_realloc`] for a counted block of `old` bytes resized to `new`,
/// as [`alloc_fast`] is of [`on_alloc`].
#[inline(always)]
pub fn realloc_fast(slot: &Slot, key: u64, old: u64, new: u64) -> bool {
    change_fast::<true>(slot, key, new.wrapping_sub(old), |t| {
        bump_own(t.reallocs, 1);
        bump_own(t.allocs, 1);
        bump_own(t.bytes, new);
        bump_own(t.frees, 1);
    })
}

/// The hot path of [`on_free`], as [`alloc_fast`] is of [`on_alloc`]. A free lowers the
/// live total, so it never raises the peak.
#[inline(always)]
pub fn free_fast(slot: &Slot, key: u64, size: u64) -> bool {
    change_fast::<false>(slot, key, size.wrapping_neg(), |t| {
        bump_own(t.frees, 1);
    })
}

/// The hot paths' common part: when the thread's record takes a live change of `delta`
/// without a call, `count` its counts and make the change (raising the peak if `RAISES`:
/// a change that may increase the total); otherwise change nothing and return false.
#[inline(always)]
fn change_fast<const RAISES: bool>(
    slot: &Slot,
    key: u64,
    delta: u64,
    count: impl FnOnce(Tally),
) -> bool {
    if slot.solo_key.load(Relaxed) == key {
        count(Tally::solo(slot));
        solo_change::<RAISES>(slot, delta);
        return true;
    }
    if slot.tree_key.load(Relaxed) == key {
        return tree_solo_fast::<RAISES>(slot, delta, count);
    }
    let Some(record) = at_home(slot, key) else {
        return false;
    };
    let Some(pending) = stays_local(slot, record, delta) else {
        return false;
    };
    count(Tally::of(record));
    record.pending.store(pending, Relaxed);
    true
}

/// The shortcut of the solo thread of an image in a process tree ([`Slot::tree_key`]):
/// as the solo shortcut, while `live` stays within a granule of what the tree has of the
/// image ([`Slot::tree`]); past that the general path publishes.
#[inline(always)]
fn tree_solo_fast<const RAISES: bool>(slot: &Slot, delta: u64, count: impl FnOnce(Tally)) -> bool {
    let live = slot.live.load(Relaxed).wrapping_add(delta);
    if !within_granule(live.wrapping_sub(slot.tree.load(Relaxed))) {
        return false;
    }
    count(Tally::solo(slot));
    slot.live.store(live, Relaxed);
    raise_own_peak::<RAISES>(slot, live);
    true
}

/// A block of `size` requested bytes was allocated.
#[inline(always)]
pub fn on_alloc(slot: &Slot, record: &Record, size: u64) {
    let mode = record.mode.load(Relaxed);
    let shared = mode == SHARED;
    bump(shared, &record.allocs, 1);
    bump(shared, &record.bytes, size);
    change_live(slot, record, mode, size);
}

/// A counted block of `size` requested bytes was freed.
#[inline(always)]
pub fn on_free(slot: &Slot, record: &Record, size: u64) {
    let mode = record.mode.load(Relaxed);
    bump(mode == SHARED, &record.frees, 1);
    change_live(slot, record, mode, size.wrapping_neg());
}

/// A block was resized to `new` bytes. `old` is the old block's size if it was counted.
/// Counted as DHAT does: the old block is released and a new block allocated, and the
/// live total moves in one step (no transient old+new peak).
pub fn on_realloc(slot: &Slot, record: &Record, old: Option<u64>, new: u64) {
    let mode = record.mode.load(Relaxed);
    let shared = mode == SHARED;
    bump(shared, &record.reallocs, 1);
    bump(shared, &record.allocs, 1);
    bump(shared, &record.bytes, new);
    let delta = match old {
        Some(old) => {
            bump(shared, &record.frees, 1);
            new.wrapping_sub(old)
        }
        None => new,
    };
    change_live(slot, record, mode, delta);
}

/// The thread owning `record` is ending: publish what it kept to itself and publish
/// every later change at once (destructors that run after this one still free memory).
pub fn fold(slot: &Slot, record: &Record) {
    // A later thread with the same key (glibc reuses thread control blocks) is not the
    // solo thread: it finds its record again.
    for key in [&slot.solo_key, &slot.tree_key] {
        let _ = key.compare_exchange(record.owner.load(Relaxed), 0, Relaxed, Relaxed);
    }
    match record.mode.load(Relaxed) {
        DIRECT | SHARED => return,
        SOLO | SOLO_IN_TREE | SOLO_NUDGED => {}
        _ => {
            let pending = record.pending.swap(0, Relaxed);
            if pending != 0 {
                publish(slot, pending);
            }
        }
    }
    record.mode.store(DIRECT, Relaxed);
    slot.active.fetch_sub(1, Relaxed);
}

/// Make `peak` at least `live` (both read as signed).
pub fn raise_peak(slot: &Slot, live: u64) {
    raise(&slot.peak, live);
}

/// Make `word` at least `value` (both read as signed).
pub(crate) fn raise(word: &AtomicU64, value: u64) {
    let mut peak = word.load(Relaxed);
    while (value as i64) > (peak as i64) {
        match word.compare_exchange_weak(peak, value, Relaxed, Relaxed) {
            Ok(_) => return,
            Err(now) => peak = now,
        }
    }
}

/// What a forked child inherits from its parent's slot, taken in the parent just before
/// the fork.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ForkSnapshot {
    /// Parent's allocation count.
    pub allocs: u64,
    /// Parent's requested bytes.
    pub bytes: u64,
    /// Parent's live bytes (with every thread's pending change).
    pub live: u64,
    /// Parent's peak live bytes.
    pub peak: u64,
}

/// The parent's snapshot between a `pthread_atfork` prepare handler and the child
/// handler, in ordinary process memory (which `fork` copies, unlike the shared slot).
/// One `static` of this in the preload agent and one in the harness.
#[derive(Debug, Default)]
pub struct ForkCarry {
    allocs: AtomicU64,
    bytes: AtomicU64,
    live: AtomicU64,
    peak: AtomicU64,
}

impl ForkCarry {
    /// Empty.
    pub const fn new() -> Self {
        ForkCarry {
            allocs: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            live: AtomicU64::new(0),
            peak: AtomicU64::new(0),
        }
    }

    /// Prepare handler: keep `slot`'s snapshot.
    pub fn save(&self, slot: &Slot) {
        let snap = snapshot(slot);
        self.allocs.store(snap.allocs, Relaxed);
        self.bytes.store(snap.bytes, Relaxed);
        self.live.store(snap.live, Relaxed);
        self.peak.store(snap.peak, Relaxed);
    }

    /// Child handler: what was saved.
    pub fn saved(&self) -> ForkSnapshot {
        ForkSnapshot {
            allocs: self.allocs.load(Relaxed),
            bytes: self.bytes.load(Relaxed),
            live: self.live.load(Relaxed),
            peak: self.peak.load(Relaxed),
        }
    }
}

/// Read the snapshot of `slot`.
pub fn snapshot(slot: &Slot) -> ForkSnapshot {
    let v = SlotValues::from_slot(slot);
    ForkSnapshot {
        allocs: v.allocs,
        bytes: v.bytes,
        live: v.live,
        peak: v.peak,
    }
}

/// Fill a freshly claimed slot. `inherited` is `Some` for a forked child: its counts start
/// at zero, its live heap (and so its peak) at what it inherited, as DHAT does.
pub fn start(slot: &Slot, origin: Origin, pid: u64, ppid: u64, inherited: Option<ForkSnapshot>) {
    let inherited = inherited.unwrap_or_default();
    slot.pid.store(pid, Relaxed);
    slot.ppid.store(ppid, Relaxed);
    for record in &slot.records {
        record.owner.store(0, Relaxed);
        record.allocs.store(0, Relaxed);
        record.frees.store(0, Relaxed);
        record.reallocs.store(0, Relaxed);
        record.bytes.store(0, Relaxed);
        record.pending.store(0, Relaxed);
        record.mode.store(BATCHED, Relaxed);
    }
    slot.solo_key.store(0, Relaxed);
    slot.tree_key.store(0, Relaxed);
    for word in [
        &slot.solo_allocs,
        &slot.solo_frees,
        &slot.solo_reallocs,
        &slot.solo_bytes,
    ] {
        word.store(0, Relaxed);
    }
    slot.live.store(inherited.live, Relaxed);
    slot.peak.store(inherited.live, Relaxed);
    slot.shared_live.store(0, Relaxed);
    slot.solo_since.store(0, Relaxed);
    slot.unseen.store(0, Relaxed);
    slot.threads.store(0, Relaxed);
    slot.active.store(0, Relaxed);
    slot.max_active.store(0, Relaxed);
    slot.granule.store(GRANULE, Relaxed);
    slot.inherited_allocs.store(inherited.allocs, Relaxed);
    slot.inherited_bytes.store(inherited.bytes, Relaxed);
    slot.inherited_live.store(inherited.live, Relaxed);
    slot.inherited_peak.store(inherited.peak, Relaxed);
    slot.tree.store(TREE_OUT, SeqCst);
    slot.origin.store(origin.code(), SeqCst);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new_slot() -> Slot {
        let s = Slot::default();
        start(&s, Origin::Load, 10, 1, None);
        s
    }

    fn values(slot: &Slot) -> SlotValues {
        SlotValues::from_slot(slot)
    }

    fn rec(slot: &Slot, key: u64) -> &Record {
        record_of(slot, key).0
    }

    #[test]
    fn within_a_granule_is_the_absolute_value_below_it() {
        for x in [
            0i64,
            1,
            -1,
            8191,
            -8191,
            8192,
            -8192,
            8193,
            -8193,
            i64::MAX,
            i64::MIN,
        ] {
            assert_eq!(within_granule(x as u64), x.unsigned_abs() < GRANULE, "{x}");
        }
    }

    #[test]
    fn malloc_free_and_realloc_follow_dhat() {
        let s = new_slot();
        let r = rec(&s, 1);
        on_alloc(&s, r, 10); // malloc(10)
        on_realloc(&s, r, Some(10), 5000); // realloc to 5000: peak 5000, not 5010
        on_free(&s, r, 5000);
        on_alloc(&s, r, 33);
        let v = values(&s);
        assert_eq!((v.allocs, v.frees, v.reallocs), (3, 2, 1));
        assert_eq!(v.bytes, 10 + 5000 + 33);
        assert_eq!(v.peak, 5000);
        assert_eq!(v.live, 33);
        assert_eq!(v.pid, 10);
        assert_eq!(v.origin(), Some(Origin::Load));
        assert_eq!((v.threads, v.peak_bound()), (1, 0));
        assert_eq!(r.mode.load(Relaxed), SOLO);
    }

    #[test]
    fn shrinking_realloc_lowers_live() {
        let s = new_slot();
        let r = rec(&s, 1);
        on_alloc(&s, r, 5000);
        on_realloc(&s, r, Some(5000), 10);
        assert_eq!(values(&s).live, 10);
        assert_eq!(values(&s).peak, 5000);
        on_realloc(&s, r, None, 7); // resize of a block made before the agent started
        assert_eq!(values(&s).live, 17);
        assert_eq!(values(&s).frees, 1);
    }

    #[test]
    fn fork_child_starts_from_inherited_heap() {
        let parent = new_slot();
        let p = rec(&parent, 1);
        on_alloc(&parent, p, 100);
        on_alloc(&parent, p, 200);
        let snap = snapshot(&parent);
        let child = Slot::default();
        start(&child, Origin::Fork, 11, 10, Some(snap));
        let c = rec(&child, 1);
        on_alloc(&child, c, 1000);
        on_free(&child, c, 1000);
        on_free(&child, c, 100);
        on_alloc(&child, c, 7);
        let v = values(&child);
        // The same numbers DHAT gives for this child: total = inherited + own.
        assert_eq!(v.inherited_allocs + v.allocs, 4);
        assert_eq!(v.inherited_bytes + v.bytes, 1307);
        assert_eq!(v.peak, 1300);
        assert_eq!(v.inherited_peak, 300);
        assert_eq!(v.live, 207);
        assert_eq!(v.origin(), Some(Origin::Fork));
    }

    #[test]
    fn a_fork_snapshot_includes_what_threads_kept_to_themselves() {
        let s = new_slot();
        let (a, b) = (rec(&s, 1), rec(&s, 2));
        on_alloc(&s, a, 100);
        on_alloc(&s, b, 300); // batched: pending in b's record
        assert_eq!(b.pending.load(Relaxed), 300);
        assert_eq!(snapshot(&s).live, 400);
    }

    #[test]
    fn a_fork_carry_gives_back_the_snapshot() {
        let s = new_slot();
        on_alloc(&s, rec(&s, 1), 100);
        let carry = ForkCarry::new();
        carry.save(&s);
        assert_eq!(carry.saved(), snapshot(&s));
        assert_eq!(carry.saved().live, 100);
    }

    #[test]
    fn a_dip_below_zero_is_not_a_peak() {
        let s = new_slot();
        let r = rec(&s, 1);
        on_free(&s, r, 64); // a block inherited but not in the snapshot
        assert_eq!(values(&s).live as i64, -64);
        on_alloc(&s, r, 16);
        assert_eq!(s.peak.load(Relaxed), 0);
    }

    #[test]
    fn each_thread_gets_its_own_record_and_the_last_ones_share_the_overflow() {
        let s = new_slot();
        let mut seen = std::collections::HashSet::new();
        for key in 1..=OVERFLOW as u64 {
            let (r, found) = record_of(&s, key << 21);
            assert_eq!(found, Found::New);
            assert!(
                seen.insert(r as *const Record),
                "two threads share a record"
            );
            let (again, how) = record_of(&s, key << 21);
            assert!(core::ptr::eq(again, r) && how == Found::Known);
        }
        let (extra, found) = record_of(&s, 1 << 60);
        assert_eq!(found, Found::Overflow);
        assert!(core::ptr::eq(extra, &s.records[OVERFLOW]));
        assert_eq!(record_of(&s, 2 << 60).1, Found::Overflow);
        on_alloc(&s, extra, 5);
        assert_eq!(extra.mode.load(Relaxed), SHARED);
        assert_eq!(values(&s).live, 5);
        assert_eq!(values(&s).threads, OVERFLOW as u64 + 1);
    }

    #[test]
    fn the_solo_thread_is_exact_and_batches_once_a_second_thread_appears() {
        let s = new_slot();
        let a = rec(&s, 1);
        on_alloc(&s, a, 1000);
        on_free(&s, a, 1000);
        assert_eq!((s.live.load(Relaxed), s.peak.load(Relaxed)), (0, 1000));
        let b = rec(&s, 2);
        on_alloc(&s, b, 100);
        on_alloc(&s, a, 50);
        assert_eq!(a.mode.load(Relaxed), BATCHED);
        // Both kept their small changes to themselves; the total is still exact.
        assert_eq!(s.shared_live.load(Relaxed), 0);
        assert_eq!(values(&s).live, 150);
        // A change of a granule is published, with a peak check.
        on_alloc(&s, b, GRANULE);
        assert_eq!(b.pending.load(Relaxed), 0);
        assert_eq!(s.peak.load(Relaxed), 100 + GRANULE);
        assert_eq!(values(&s).max_active, 2);
        assert_eq!(values(&s).peak_bound(), GRANULE);
    }

    #[test]
    fn a_second_thread_ends_the_solo_mode_before_the_first_calls_again() {
        let s = new_slot();
        let a = rec(&s, 1);
        assert_eq!(a.mode.load(Relaxed), SOLO);
        // The solo thread counts beside `live` on the hot path, not in its record.
        assert_eq!(s.solo_key.load(Relaxed), 1);
        assert!(alloc_fast(&s, 1, 10));
        assert_eq!(
            (s.solo_allocs.load(Relaxed), a.allocs.load(Relaxed)),
            (1, 0)
        );
        let _b = rec(&s, 2);
        // The hot path trusts the mode alone, so the claim itself must switch it, and
        // end the solo shortcut.
        assert_eq!(a.mode.load(Relaxed), BATCHED);
        assert_eq!(s.solo_key.load(Relaxed), 0);
        assert!(alloc_fast(&s, 1, 10));
        assert_eq!(
            (s.solo_allocs.load(Relaxed), a.allocs.load(Relaxed)),
            (1, 1)
        );
        assert_eq!(values(&s).allocs, 2);
        assert!(
            !alloc_fast(&s, 1, GRANULE),
            "a granule is published, off the hot path"
        );
    }

    #[test]
    fn a_solo_thread_that_ends_leaves_no_shortcut_behind() {
        let s = new_slot();
        let a = rec(&s, 1);
        assert_eq!(s.solo_key.load(Relaxed), 1);
        fold(&s, a);
        assert_eq!(s.solo_key.load(Relaxed), 0);
        // A new thread with the same key (a reused thread control block) finds the
        // record again, through the general path.
        assert!(!alloc_fast(&s, 1, 10));
        assert_eq!(record_of(&s, 1).1, Found::New);
    }

    #[test]
    fn a_thread_whose_first_home_is_taken_finds_its_record_at_the_second() {
        let s = new_slot();
        // Keys whose first homes coincide (and whose second homes differ).
        let first = |k: u64| homes(k).0;
        let a = 0x7f3a_1c00_06c0u64;
        let b = (1..1_000_000u64)
            .map(|i| a + i * 4096)
            .find(|&k| first(k) == first(a) && homes(k).1 != first(a))
            .expect("two keys with one first home");
        rec(&s, a);
        rec(&s, b);
        assert!(alloc_fast(&s, a, 1) && alloc_fast(&s, b, 1));
        assert!(core::ptr::eq(
            at_home(&s, b).unwrap(),
            &s.records[homes(b).1]
        ));
    }

    /// The same operations through the hot path where it applies (else the general path)
    /// and through the general path alone leave the same slot, step by step.
    #[test]
    fn the_hot_path_leaves_what_the_general_path_leaves() {
        let (hot, general) = (new_slot(), new_slot());
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut live: Vec<(u64, u64)> = Vec::new();
        let mut took_hot = 0;
        for step in 0..20_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // One thread for the first half (solo), then three (batched), with thread
            // pointers 8 MiB and a guard page apart, as glibc lays them out.
            let thread = if step < 10_000 { 1 } else { 1 + x % 3 };
            let key = thread * 2049 * 4096;
            if !live.is_empty() && x % 7 == 0 {
                // A resize of a live block.
                let at = (x % live.len() as u64) as usize;
                let (old, new) = (live[at].1, (x >> 20) % 5000);
                if realloc_fast(&hot, key, old, new) {
                    took_hot += 1;
                } else {
                    on_realloc(&hot, rec(&hot, key), Some(old), new);
                }
                on_realloc(&general, rec(&general, key), Some(old), new);
                live[at].1 = new;
            } else if live.is_empty() || x % 5 < 3 {
                let size = x % 3000;
                if alloc_fast(&hot, key, size) {
                    took_hot += 1;
                } else {
                    on_alloc(&hot, rec(&hot, key), size);
                }
                on_alloc(&general, rec(&general, key), size);
                live.push((key, size));
            } else {
                let (_, size) = live.swap_remove((x % live.len() as u64) as usize);
                if free_fast(&hot, key, size) {
                    took_hot += 1;
                } else {
                    on_free(&hot, rec(&hot, key), size);
                }
                on_free(&general, rec(&general, key), size);
            }
            assert_eq!(values(&hot), values(&general), "step {step}");
            for (h, g) in hot.records.iter().zip(&general.records) {
                assert_eq!(h.pending.load(Relaxed), g.pending.load(Relaxed));
                assert_eq!(h.mode.load(Relaxed), g.mode.load(Relaxed));
            }
        }
        assert!(took_hot > 15_000, "the hot path was taken {took_hot} times");
    }

    #[test]
    fn a_thread_that_ends_folds_and_the_last_active_one_publishes_at_once() {
        let s = new_slot();
        let (a, b) = (rec(&s, 1), rec(&s, 2));
        on_alloc(&s, a, 10);
        on_alloc(&s, b, 700);
        fold(&s, b);
        assert_eq!(s.shared_live.load(Relaxed), 700);
        assert_eq!(b.mode.load(Relaxed), DIRECT);
        // A destructor that frees after the fold still counts, at once.
        on_free(&s, b, 700);
        assert_eq!(s.shared_live.load(Relaxed), 0);
        // `a` is the only active thread now: every change is published, the peak exact.
        on_alloc(&s, a, 2000);
        assert_eq!(a.pending.load(Relaxed), 0);
        assert_eq!(s.peak.load(Relaxed), 2010);
        assert_eq!(values(&s).live, 2010);
        fold(&s, b); // a second fold changes nothing
        assert_eq!(s.active.load(Relaxed), 1);
        // A new thread with the ended one's key (a reused thread control block) batches
        // again and is active.
        let (again, found) = record_of(&s, 2);
        assert!(core::ptr::eq(again, b) && found == Found::New);
        assert_eq!(b.mode.load(Relaxed), BATCHED);
        assert_eq!(s.active.load(Relaxed), 2);
        assert_eq!(record_of(&s, 2).1, Found::Known);
        fold(&s, b);
        assert_eq!(s.active.load(Relaxed), 1);
    }

    #[test]
    fn the_last_active_thread_goes_solo_again_with_the_shortcut() {
        let s = new_slot();
        let (a, b) = (rec(&s, 1), rec(&s, 2));
        on_alloc(&s, a, 10);
        on_alloc(&s, b, 700);
        assert_eq!(
            (a.mode.load(Relaxed), s.solo_key.load(Relaxed)),
            (BATCHED, 0)
        );
        fold(&s, b);
        // `a`'s next change finds it alone: its pending change is published, the shared
        // total moves into `live`, and its key is the solo one again.
        assert!(!alloc_fast(&s, 1, 5), "alone: not on the batching hot path");
        on_alloc(&s, a, 5);
        assert_eq!(a.mode.load(Relaxed), SOLO);
        assert_eq!(s.solo_key.load(Relaxed), 1);
        assert_eq!(s.shared_live.load(Relaxed), 0);
        assert_eq!(s.live.load(Relaxed), 715);
        assert_eq!(s.solo_since.load(Relaxed), 1);
        // The hot path's shortcut, with an exact peak.
        assert!(alloc_fast(&s, 1, 2000));
        assert!(free_fast(&s, 1, 2000));
        let v = values(&s);
        assert_eq!((v.allocs, v.frees, v.live, v.peak), (4, 1, 715, 2715));
        assert_eq!(
            v.peak_bound(),
            GRANULE,
            "the concurrent phase's bound stays"
        );
        // A destructor of the ended thread frees after all: the solo thread's checks do
        // not see it, so it widens the bound.
        on_free(&s, b, 700);
        assert_eq!(values(&s).live, 15);
        assert_eq!(values(&s).peak_bound(), GRANULE + 700);
        // A new thread ends the solo mode again.
        let c = rec(&s, 3);
        assert_eq!(
            (a.mode.load(Relaxed), s.solo_key.load(Relaxed)),
            (BATCHED, 0)
        );
        assert!(alloc_fast(&s, 1, 1), "batching with another active thread");
        assert_eq!(a.pending.load(Relaxed), 1);
        on_alloc(&s, c, 30);
        assert_eq!(values(&s).allocs, 6);
    }

    #[test]
    fn the_tree_shortcut_is_armed_by_its_thread_and_ended_by_a_second_one_or_a_fold() {
        let s = new_slot();
        let a = rec(&s, 1);
        // The image joins a process tree (nothing of it published yet).
        s.tree.store(0, SeqCst);
        solo_in_tree(&s);
        assert_eq!(
            (a.mode.load(Relaxed), s.solo_key.load(Relaxed)),
            (SOLO_IN_TREE, 0)
        );
        assert!(!alloc_fast(&s, 1, 10), "not armed yet: the general path");
        on_alloc(&s, a, 10);
        assert_eq!(s.tree_key.load(Relaxed), 1);
        assert!(alloc_fast(&s, 1, 10));
        assert!(free_fast(&s, 1, 5));
        assert!(
            !alloc_fast(&s, 1, GRANULE),
            "a granule from what the tree has of the image"
        );
        let v = values(&s);
        assert_eq!((v.allocs, v.frees, v.live, v.peak), (2, 1, 15, 20));
        // A second thread ends it, as it ends the solo shortcut.
        let b = rec(&s, 2);
        assert_eq!(
            (a.mode.load(Relaxed), s.tree_key.load(Relaxed)),
            (BATCHED, 0)
        );
        fold(&s, b);
        // Alone again, in the tree: solo in the tree's mode, armed again, and a fold
        // clears the key.
        on_alloc(&s, a, 1);
        assert_eq!(a.mode.load(Relaxed), SOLO_IN_TREE);
        assert_eq!(s.tree_key.load(Relaxed), 1);
        fold(&s, a);
        assert_eq!(s.tree_key.load(Relaxed), 0);
    }

    #[test]
    fn a_thread_reusing_an_ended_ones_record_ends_the_solo_mode() {
        let s = new_slot();
        let (a, b) = (rec(&s, 1), rec(&s, 2));
        on_alloc(&s, b, 1);
        fold(&s, b);
        on_alloc(&s, a, 1);
        assert_eq!(s.solo_key.load(Relaxed), 1);
        // glibc gives the ended thread's control block to a new thread.
        assert_eq!(record_of(&s, 2).1, Found::New);
        assert_eq!(
            (a.mode.load(Relaxed), s.solo_key.load(Relaxed)),
            (BATCHED, 0)
        );
        assert_eq!(s.active.load(Relaxed), 2);
    }

    #[test]
    fn no_thread_goes_solo_again_while_the_overflow_record_is_in_use() {
        let s = new_slot();
        let a = rec(&s, 1);
        for key in 2..=RECORDS as u64 {
            let (_, found) = record_of(&s, key << 40);
            if found == Found::Overflow {
                break;
            }
        }
        assert_eq!(s.records[OVERFLOW].owner.load(Relaxed), u64::MAX);
        for r in &s.records[..OVERFLOW] {
            if !core::ptr::eq(r, a) && r.owner.load(Relaxed) != 0 {
                fold(&s, r);
            }
        }
        assert_eq!(s.active.load(Relaxed), 1);
        on_alloc(&s, a, 10);
        assert_eq!(
            (a.mode.load(Relaxed), s.solo_key.load(Relaxed)),
            (BATCHED, 0)
        );
        assert_eq!(values(&s).live, 10);
    }

    #[test]
    fn concurrent_threads_count_exactly_and_the_peak_stays_within_its_bound() {
        let s = new_slot();
        // The main thread allocates first, as in a real program.
        on_alloc(&s, rec(&s, 1), 1);
        const T: u64 = 4;
        std::thread::scope(|scope| {
            for t in 0..T {
                let s = &s;
                scope.spawn(move || {
                    let r = rec(s, 100 + t);
                    let mut held = Vec::new();
                    for i in 0..20_000u64 {
                        let size = 1 + (i + t) % 64;
                        on_alloc(s, r, size);
                        held.push(size);
                        if held.len() == 64 {
                            for size in held.drain(..) {
                                on_free(s, r, size);
                            }
                        }
                    }
                    for size in held {
                        on_free(s, r, size);
                    }
                    fold(s, r);
                });
            }
        });
        let v = values(&s);
        assert_eq!(v.allocs, 1 + T * 20_000);
        assert_eq!(v.frees, T * 20_000);
        assert_eq!(v.live, 1);
        // Each thread holds at most 64 blocks of at most 64 bytes.
        assert!(v.peak <= 1 + T * 64 * 64 + v.peak_bound(), "{v:?}");
        assert!(v.max_active >= 2);
    }
}
