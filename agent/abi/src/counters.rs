//! Updates of a report slot, shared by the preload agent and the in-process harness
//! (`sbs-harness`). Plain Rust over atomics, unit-tested apart from any FFI.
//!
//! `live` is kept as a wrapping `u64` and read as `i64`: a forked child can free a block
//! its parent allocated between our fork snapshot and the fork itself, which takes `live`
//! below the snapshot; signed comparison keeps such a dip from looking like a huge peak.

use core::sync::atomic::AtomicU64;
use core::sync::atomic::Ordering::Relaxed;

use crate::{Origin, Slot, SlotValues, Stripe, STRIPES};

/// How a slot may be updated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Other threads may update the slot at the same time: atomic read-modify-write.
    Shared,
    /// The process has a single thread (glibc's `__libc_single_threaded`), so no one else
    /// can touch the slot: plain loads and stores, without the bus lock that costs most of
    /// the agent's overhead. Still atomics, so there is no data race by construction.
    Exclusive,
}

/// Add `v` to `counter`; returns the new value.
#[inline]
fn add(counter: &AtomicU64, v: u64, access: Access) -> u64 {
    match access {
        Access::Shared => counter.fetch_add(v, Relaxed).wrapping_add(v),
        Access::Exclusive => {
            let now = counter.load(Relaxed).wrapping_add(v);
            counter.store(now, Relaxed);
            now
        }
    }
}

/// Where one update goes: the image's slot (live and peak) and the calling thread's
/// stripe of it (counts), with the access rule for both.
#[derive(Clone, Copy)]
pub struct Target<'a> {
    /// The image's slot.
    pub slot: &'a Slot,
    /// The calling thread's stripe.
    pub stripe: &'a Stripe,
    /// Whether other threads may update at the same time.
    pub access: Access,
}

/// The stripe of `slot` for a thread whose identity (e.g. `pthread_self()`) is `thread`.
/// Thread descriptors lie far apart (at the top of each thread's stack), so their page
/// numbers, mixed, spread over the stripes.
#[inline]
pub fn stripe_of(slot: &Slot, thread: usize) -> &Stripe {
    let mixed = ((thread >> 12) as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    &slot.stripes[(mixed >> 60) as usize % STRIPES]
}

/// A block of `size` requested bytes was allocated.
#[inline]
pub fn on_alloc(t: Target, size: u64) {
    add(&t.stripe.allocs, 1, t.access);
    add(&t.stripe.bytes, size, t.access);
    let live = add(&t.slot.live, size, t.access);
    raise_peak(t.slot, live, t.access);
}

/// A counted block of `size` requested bytes was freed.
#[inline]
pub fn on_free(t: Target, size: u64) {
    add(&t.stripe.frees, 1, t.access);
    add(&t.slot.live, size.wrapping_neg(), t.access);
}

/// A block was resized to `new` bytes. `old` is the old block's size if it was counted.
/// Counted as DHAT does: the old block is released and a new block allocated, and the
/// live total moves in one step (no transient old+new peak).
pub fn on_realloc(t: Target, old: Option<u64>, new: u64) {
    add(&t.stripe.reallocs, 1, t.access);
    add(&t.stripe.allocs, 1, t.access);
    add(&t.stripe.bytes, new, t.access);
    let delta = match old {
        Some(old) => {
            add(&t.stripe.frees, 1, t.access);
            new.wrapping_sub(old)
        }
        None => new,
    };
    let live = add(&t.slot.live, delta, t.access);
    raise_peak(t.slot, live, t.access);
}

/// Make `peak` at least `live` (both read as signed).
#[inline]
pub fn raise_peak(slot: &Slot, live: u64, access: Access) {
    let mut peak = slot.peak.load(Relaxed);
    while (live as i64) > (peak as i64) {
        if access == Access::Exclusive {
            slot.peak.store(live, Relaxed);
            return;
        }
        match slot
            .peak
            .compare_exchange_weak(peak, live, Relaxed, Relaxed)
        {
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
    /// Parent's live bytes.
    pub live: u64,
    /// Parent's peak live bytes.
    pub peak: u64,
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
    for stripe in &slot.stripes {
        stripe.allocs.store(0, Relaxed);
        stripe.frees.store(0, Relaxed);
        stripe.reallocs.store(0, Relaxed);
        stripe.bytes.store(0, Relaxed);
    }
    slot.live.store(inherited.live, Relaxed);
    slot.peak.store(inherited.live, Relaxed);
    slot.inherited_allocs.store(inherited.allocs, Relaxed);
    slot.inherited_bytes.store(inherited.bytes, Relaxed);
    slot.inherited_live.store(inherited.live, Relaxed);
    slot.inherited_peak.store(inherited.peak, Relaxed);
    slot.origin.store(origin.code(), Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;
    const S: Access = Access::Shared;

    fn new_slot() -> Slot {
        Slot::default()
    }

    fn values(slot: &Slot) -> SlotValues {
        SlotValues::from_slot(slot)
    }

    fn at(slot: &Slot, access: Access) -> Target<'_> {
        Target {
            slot,
            stripe: &slot.stripes[0],
            access,
        }
    }

    #[test]
    fn malloc_free_and_realloc_follow_dhat() {
        let s = new_slot();
        start(&s, Origin::Load, 10, 1, None);
        on_alloc(at(&s, S), 10); // malloc(10)
        on_realloc(at(&s, S), Some(10), 5000); // realloc to 5000: peak 5000, not 5010
        on_free(at(&s, S), 5000);
        on_alloc(at(&s, S), 33);
        let v = values(&s);
        assert_eq!((v.allocs, v.frees, v.reallocs), (3, 2, 1));
        assert_eq!(v.bytes, 10 + 5000 + 33);
        assert_eq!(v.peak, 5000);
        assert_eq!(v.live, 33);
        assert_eq!(v.pid, 10);
        assert_eq!(v.origin(), Some(Origin::Load));
    }

    #[test]
    fn shrinking_realloc_lowers_live() {
        let s = new_slot();
        on_alloc(at(&s, S), 5000);
        on_realloc(at(&s, S), Some(5000), 10);
        assert_eq!(s.live.load(Relaxed), 10);
        assert_eq!(s.peak.load(Relaxed), 5000);
        on_realloc(at(&s, S), None, 7); // resize of a block made before the agent started
        assert_eq!(s.live.load(Relaxed), 17);
        assert_eq!(values(&s).frees, 1);
    }

    #[test]
    fn fork_child_starts_from_inherited_heap() {
        let parent = new_slot();
        on_alloc(at(&parent, S), 100);
        on_alloc(at(&parent, S), 200);
        let snap = snapshot(&parent);
        let child = new_slot();
        start(&child, Origin::Fork, 11, 10, Some(snap));
        on_alloc(at(&child, S), 1000);
        on_free(at(&child, S), 1000);
        on_free(at(&child, S), 100);
        on_alloc(at(&child, S), 7);
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
    fn a_dip_below_zero_is_not_a_peak() {
        let s = new_slot();
        on_free(at(&s, S), 64); // a block inherited but not in the snapshot
        assert_eq!(s.live.load(Relaxed) as i64, -64);
        on_alloc(at(&s, S), 16);
        assert_eq!(s.peak.load(Relaxed), 0);
    }

    #[test]
    fn exclusive_access_counts_the_same() {
        let (a, b) = (new_slot(), new_slot());
        for (slot, access) in [(&a, Access::Shared), (&b, Access::Exclusive)] {
            on_alloc(at(slot, access), 10);
            on_realloc(at(slot, access), Some(10), 5000);
            on_free(at(slot, access), 5000);
            on_alloc(at(slot, access), 33);
            on_realloc(at(slot, access), None, 7);
        }
        assert_eq!(values(&a), values(&b));
        assert_eq!(values(&b).peak, 5000);
    }

    #[test]
    fn thread_identities_spread_over_the_stripes() {
        let s = new_slot();
        // Thread descriptors 8 MiB + a guard page apart, as glibc lays out stacks.
        let used: std::collections::HashSet<*const Stripe> = (0..16usize)
            .map(|i| stripe_of(&s, 0x7f00_0000_0000 + i * (8 << 20) + i * 4096) as *const _)
            .collect();
        assert!(used.len() >= 8, "only {} stripes used", used.len());
    }

    #[test]
    fn concurrent_updates_are_exact() {
        let s = new_slot();
        std::thread::scope(|scope| {
            for t in 0..4u64 {
                let s = &s;
                scope.spawn(move || {
                    for i in 0..10_000u64 {
                        let size = 1 + (i + t) % 64;
                        // Threads 0 and 2 share a stripe, 1 and 3 another.
                        let t = Target {
                            slot: s,
                            stripe: &s.stripes[t as usize % 2],
                            access: S,
                        };
                        on_alloc(t, size);
                        on_free(t, size);
                    }
                });
            }
        });
        assert_eq!(values(&s).allocs, 40_000);
        assert_eq!(values(&s).frees, 40_000);
        assert_eq!(s.live.load(Relaxed), 0);
        assert!(s.peak.load(Relaxed) <= 4 * 64);
    }
}
