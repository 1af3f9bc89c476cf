//! Updates of a report slot. Plain Rust over atomics, so it is unit-tested (also under
//! Miri) apart from the FFI shims.
//!
//! `live` is kept as a wrapping `u64` and read as `i64`: a forked child can free a block
//! its parent allocated between our fork snapshot and the fork itself, which takes `live`
//! below the snapshot; signed comparison keeps such a dip from looking like a huge peak.

use core::sync::atomic::AtomicU64;
use core::sync::atomic::Ordering::Relaxed;

use sbs_agent_abi::{Origin, Slot};

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

/// A block of `size` requested bytes was allocated.
#[inline]
pub fn on_alloc(slot: &Slot, size: u64, access: Access) {
    add(&slot.allocs, 1, access);
    add(&slot.bytes, size, access);
    let live = add(&slot.live, size, access);
    raise_peak(slot, live, access);
}

/// A counted block of `size` requested bytes was freed.
#[inline]
pub fn on_free(slot: &Slot, size: u64, access: Access) {
    add(&slot.frees, 1, access);
    add(&slot.live, size.wrapping_neg(), access);
}

/// A block was resized to `new` bytes. `old` is the old block's size if it was counted.
/// Counted as DHAT does: the old block is released and a new block allocated, and the
/// live total moves in one step (no transient old+new peak).
pub fn on_realloc(slot: &Slot, old: Option<u64>, new: u64, access: Access) {
    add(&slot.reallocs, 1, access);
    add(&slot.allocs, 1, access);
    add(&slot.bytes, new, access);
    let delta = match old {
        Some(old) => {
            add(&slot.frees, 1, access);
            new.wrapping_sub(old)
        }
        None => new,
    };
    let live = add(&slot.live, delta, access);
    raise_peak(slot, live, access);
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
    ForkSnapshot {
        allocs: slot.allocs.load(Relaxed),
        bytes: slot.bytes.load(Relaxed),
        live: slot.live.load(Relaxed),
        peak: slot.peak.load(Relaxed),
    }
}

/// Fill a freshly claimed slot. `inherited` is `Some` for a forked child: its counts start
/// at zero, its live heap (and so its peak) at what it inherited, as DHAT does.
pub fn start(slot: &Slot, origin: Origin, pid: u64, ppid: u64, inherited: Option<ForkSnapshot>) {
    let inherited = inherited.unwrap_or_default();
    slot.pid.store(pid, Relaxed);
    slot.ppid.store(ppid, Relaxed);
    slot.allocs.store(0, Relaxed);
    slot.frees.store(0, Relaxed);
    slot.reallocs.store(0, Relaxed);
    slot.bytes.store(0, Relaxed);
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
    use sbs_agent_abi::{SlotValues, SLOT_SIZE};

    fn new_slot() -> Slot {
        Slot {
            origin: AtomicU64::new(0),
            pid: AtomicU64::new(0),
            ppid: AtomicU64::new(0),
            allocs: AtomicU64::new(0),
            frees: AtomicU64::new(0),
            reallocs: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            live: AtomicU64::new(0),
            peak: AtomicU64::new(0),
            inherited_allocs: AtomicU64::new(0),
            inherited_bytes: AtomicU64::new(0),
            inherited_live: AtomicU64::new(0),
            inherited_peak: AtomicU64::new(0),
            reserved: Default::default(),
        }
    }

    fn values(slot: &Slot) -> SlotValues {
        // Encode through the byte layout the collector decodes.
        let mut bytes = [0u8; SLOT_SIZE];
        let words = [
            &slot.origin,
            &slot.pid,
            &slot.ppid,
            &slot.allocs,
            &slot.frees,
            &slot.reallocs,
            &slot.bytes,
            &slot.live,
            &slot.peak,
            &slot.inherited_allocs,
            &slot.inherited_bytes,
            &slot.inherited_live,
            &slot.inherited_peak,
        ];
        for (i, w) in words.iter().enumerate() {
            bytes[i * 8..i * 8 + 8].copy_from_slice(&w.load(Relaxed).to_le_bytes());
        }
        SlotValues::from_bytes(&bytes).unwrap()
    }

    #[test]
    fn malloc_free_and_realloc_follow_dhat() {
        let s = new_slot();
        start(&s, Origin::Load, 10, 1, None);
        on_alloc(&s, 10, S); // malloc(10)
        on_realloc(&s, Some(10), 5000, S); // realloc to 5000: peak 5000, not 5010
        on_free(&s, 5000, S);
        on_alloc(&s, 33, S);
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
        on_alloc(&s, 5000, S);
        on_realloc(&s, Some(5000), 10, S);
        assert_eq!(s.live.load(Relaxed), 10);
        assert_eq!(s.peak.load(Relaxed), 5000);
        on_realloc(&s, None, 7, S); // resize of a block made before the agent started
        assert_eq!(s.live.load(Relaxed), 17);
        assert_eq!(s.frees.load(Relaxed), 1);
    }

    #[test]
    fn fork_child_starts_from_inherited_heap() {
        let parent = new_slot();
        on_alloc(&parent, 100, S);
        on_alloc(&parent, 200, S);
        let snap = snapshot(&parent);
        let child = new_slot();
        start(&child, Origin::Fork, 11, 10, Some(snap));
        on_alloc(&child, 1000, S);
        on_free(&child, 1000, S);
        on_free(&child, 100, S);
        on_alloc(&child, 7, S);
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
        on_free(&s, 64, S); // a block inherited but not in the snapshot
        assert_eq!(s.live.load(Relaxed) as i64, -64);
        on_alloc(&s, 16, S);
        assert_eq!(s.peak.load(Relaxed), 0);
    }

    #[test]
    fn exclusive_access_counts_the_same() {
        let (a, b) = (new_slot(), new_slot());
        for (slot, access) in [(&a, Access::Shared), (&b, Access::Exclusive)] {
            on_alloc(slot, 10, access);
            on_realloc(slot, Some(10), 5000, access);
            on_free(slot, 5000, access);
            on_alloc(slot, 33, access);
            on_realloc(slot, None, 7, access);
        }
        assert_eq!(values(&a), values(&b));
        assert_eq!(values(&b).peak, 5000);
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
                        on_alloc(s, size, S);
                        on_free(s, size, S);
                    }
                });
            }
        });
        assert_eq!(s.allocs.load(Relaxed), 40_000);
        assert_eq!(s.frees.load(Relaxed), 40_000);
        assert_eq!(s.live.load(Relaxed), 0);
        assert!(s.peak.load(Relaxed) <= 4 * 64);
    }
}
