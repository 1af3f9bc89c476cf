//! The live bytes of a whole process tree, for `heap.tree_peak`: the peak of the sum of
//! live bytes over every process image of a run at once, not the sum of each image's own
//! peak.
//!
//! A single process image costs nothing here: it stays [`OUT`] of the tree and keeps its
//! solo hot path; its own peak is the tree's. When a second image that is alive at the
//! same time claims a slot (a forked child, a spawned or exec'd program), both *join* the
//! tree: each slot's [`Slot::tree`] then holds how much of the image's live bytes it has
//! added to [`ReportHeader::tree_live`], and every image brings the total up to date from
//! its general path ([`sync`]): at once while it is the only active image, else when its
//! own unpublished change reaches [`GRANULE`](crate::GRANULE) bytes, as threads do inside
//! an image. An image's solo thread stays solo and exact (mode `SOLO_IN_TREE`): its hot
//! path only checks that it stays within a granule of what the tree has of it, and takes
//! the general path, which publishes, when it does not.
//!
//! An image *leaves* the tree when it ends ([`leave`]: at `exit`, `_exit` and `_Exit` in
//! the preload agent, at `exit` in the harness) or is replaced by `exec` (the new image,
//! which has the same pid, makes the old one leave when it claims its slot). An image
//! left alone in the tree goes back *out* at its next change (`settle`). An image that
//! ends without leaving
//! (a fatal signal, `abort`, an `exec` of a program without the agent) keeps its bytes in
//! the total: the collector sees it still joined and states how far that can lift the
//! figure ([`TreeValues`] and the slots' words).
//!
//! A slot's word [`Slot::tree`] is [`OUT`] (never joined: the only live image when it
//! started and nobody pulled it in since), [`LEFT`], or the bytes published (wrapping,
//! read signed, never one of the two marks: those are below -2^62).

use core::sync::atomic::fence;
use core::sync::atomic::Ordering::{Relaxed, SeqCst};

use crate::counters::OVERFLOW as OVERFLOW_INDEX;
use crate::counters::{nudge, raise, solo_again, solo_in_tree, within_granule, SOLO_NUDGED};
use crate::{Origin, Report, ReportHeader, Slot};

pub use crate::in_tree;
/// [`Slot::tree`]: left the tree (ended, or replaced by `exec`).
pub use crate::TREE_LEFT as LEFT;
/// [`Slot::tree`]: not in the tree.
pub use crate::TREE_OUT as OUT;

/// Live bytes of `slot` that its threads have published (their pending changes are the
/// image's own bound): `live`, written with plain stores by the image's solo thread (if
/// it has one), and `shared_live`, added to atomically by batching threads. Read from
/// another thread or process, a solo thread's last change may show one call late; the
/// image's next publication catches it up.
fn published(slot: &Slot) -> u64 {
    slot.live
        .load(SeqCst)
        .wrapping_add(slot.shared_live.load(SeqCst))
}

/// Join `slot` to the tree if it is [`OUT`]: the tree counts one more active image, and
/// everything the image did before was done alone, so its own peak is a peak of the
/// tree. Its solo thread, if any, checks its distance from the tree's figure from now on
/// (see `counters::become_solo` for the other side of that handshake), and its bytes go
/// into the total.
pub fn join(tree: &ReportHeader, slot: &Slot) {
    if slot.tree.compare_exchange(OUT, 0, SeqCst, SeqCst).is_err() {
        return;
    }
    let active = tree.tree_active.fetch_add(1, SeqCst) + 1;
    tree.tree_max_active.fetch_max(active, Relaxed);
    raise(&tree.tree_peak, slot.peak.load(SeqCst));
    solo_in_tree(slot);
    publish(tree, slot, true);
}

/// Bring the tree's total up to date with `slot` (a joined image; nothing for one that is
/// [`OUT`] or has [`LEFT`]): at once while at most one image is active, else when the
/// unpublished change reaches a granule either way. Called from the general path after
/// every change, and from [`join`].
pub fn sync(tree: &ReportHeader, slot: &Slot) {
    if !in_tree(slot.tree.load(Relaxed)) {
        return;
    }
    publish(tree, slot, false);
    settle(tree, slot);
}

/// A single-threaded image whose thread was nudged ([`leave`] left it the only image in
/// the tree) goes back out of the tree, to the solo mode and its shortcut; or, if another
/// image is in the tree again by now, back to the solo-in-tree hot path.
///
/// Going out races with an image that starts and joins at the same moment, which must
/// then pull this one in again. So the active count goes from 1 to 0 first (a joiner
/// that already counted itself makes that fail), then the slot's word goes out, and
/// after a fence the count is read again: a joiner that counted itself meanwhile either
/// already saw the word out (and pulled the image in) or will; if the count moved, the
/// image joins again itself, which changes nothing if the joiner was first.
fn settle(tree: &ReportHeader, slot: &Slot) {
    // A nudged thread is the image's only active one (its first, or one left alone by
    // the others' ends); an image with more is not settled.
    if slot.active.load(Relaxed) != 1 {
        return;
    }
    let Some(record) = slot.records[..OVERFLOW_INDEX]
        .iter()
        .find(|r| r.mode.load(Relaxed) == SOLO_NUDGED)
    else {
        return;
    };
    if tree
        .tree_active
        .compare_exchange(1, 0, SeqCst, SeqCst)
        .is_err()
    {
        solo_in_tree(slot);
        return;
    }
    let had = slot.tree.load(SeqCst);
    if !in_tree(had)
        || slot
            .tree
            .compare_exchange(had, OUT, SeqCst, SeqCst)
            .is_err()
    {
        tree.tree_active.fetch_add(1, SeqCst);
        return;
    }
    tree.tree_live.fetch_sub(had, SeqCst);
    fence(SeqCst);
    if tree.tree_active.load(SeqCst) != 0 {
        join(tree, slot);
        return;
    }
    solo_again(slot, record);
}

fn publish(tree: &ReportHeader, slot: &Slot, force: bool) {
    loop {
        let had = slot.tree.load(SeqCst);
        if had == OUT || had == LEFT {
            return;
        }
        let now = published(slot);
        let change = now.wrapping_sub(had);
        if change == 0 || (!force && within_granule(change) && tree.tree_active.load(Relaxed) > 1) {
            return;
        }
        // Successive publications telescope: whatever the interleaving of this image's
        // threads, the total receives exactly the image's last published value.
        if slot.tree.compare_exchange(had, now, SeqCst, SeqCst).is_ok() {
            let total = tree
                .tree_live
                .fetch_add(change, SeqCst)
                .wrapping_add(change);
            raise(&tree.tree_peak, total);
            return;
        }
    }
}

/// A started image's directory entry: its pid and [`STARTED`].
const fn entry(pid: u64) -> u64 {
    (pid << 2) | STARTED
}
/// Directory entry flag: the slot is started (0: not claimed, or still starting).
const STARTED: u64 = 1;
/// Directory entry flag: the image has left the tree.
const GONE: u64 = 2;

/// `slot`'s image has ended (or is being replaced by `exec`): its bytes leave the total.
/// An image that was never in the tree was alone all its life: its peak is a peak of the
/// tree. Leaving twice changes nothing.
pub fn leave(report: &Report, slot: &Slot) {
    if let Some(word) = report.directory.get(slot.index.load(SeqCst) as usize) {
        word.fetch_or(GONE, SeqCst);
    }
    let tree = &report.header;
    loop {
        let had = slot.tree.load(SeqCst);
        if had == LEFT {
            return;
        }
        if slot
            .tree
            .compare_exchange(had, LEFT, SeqCst, SeqCst)
            .is_err()
        {
            continue;
        }
        if had == OUT {
            raise(&tree.tree_peak, slot.peak.load(SeqCst));
        } else {
            tree.tree_live.fetch_sub(had, SeqCst);
            if tree.tree_active.fetch_sub(1, SeqCst) == 2 {
                nudge_the_others(report, slot);
            }
        }
        return;
    }
}

/// `slot`'s image left the tree and one image is left in it: nudge the images still
/// alive (that one, and any still starting, for which it changes nothing), so that a
/// single-threaded one goes back out of the tree at its next change ([`settle`]).
fn nudge_the_others(report: &Report, slot: &Slot) {
    let claimed = (report.header.claims.load(SeqCst) as usize).min(report.slots.len());
    for (index, word) in report.directory[..claimed].iter().enumerate() {
        let e = word.load(SeqCst);
        if e & STARTED != 0 && e & GONE == 0 && !core::ptr::eq(&report.slots[index], slot) {
            nudge(&report.slots[index]);
        }
    }
}

/// Place a freshly started slot (`own`, of process `pid`) in the tree. A loaded image
/// first makes the images it replaced by `exec` (same pid, not yet left) leave. Then, if
/// any other image may be alive (claimed and not left, including one still starting),
/// this one joins and pulls every image still [`OUT`] in with it; otherwise it stays
/// out, alone, at no cost.
///
/// The look over the claimed slots reads the directory (one word per slot, side by
/// side), and touches a slot itself only for an image still alive: a run of thousands of
/// short programs would otherwise fault in a page per slot per program.
///
/// Two images that start at once both see each other or one sees the other: each claims
/// (an atomic add on the claim count) and writes its directory entry before it looks, so
/// the later one sees the earlier, at worst as still starting, and joins; the earlier one
/// is then pulled in by it, or joins itself when it looks.
pub fn enter(report: &Report, own: usize, origin: Origin, pid: u64) {
    let tree = &report.header;
    let claimed = (tree.claims.load(SeqCst) as usize).min(report.slots.len());
    if let Some(word) = report.directory.get(own) {
        word.store(entry(pid), SeqCst);
    }
    let mut alone = true;
    for (index, word) in report.directory[..claimed].iter().enumerate() {
        let e = word.load(SeqCst);
        if index == own || e & GONE != 0 {
            continue;
        }
        if e == entry(pid) && origin == Origin::Load {
            leave(report, &report.slots[index]);
            continue;
        }
        alone = false;
    }
    if alone {
        return;
    }
    join(tree, &report.slots[own]);
    for (index, word) in report.directory[..claimed].iter().enumerate() {
        let e = word.load(SeqCst);
        if index != own && e & STARTED != 0 && e & GONE == 0 {
            join(tree, &report.slots[index]);
        }
    }
}

/// The tree's words as the collector reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TreeValues {
    /// See [`ReportHeader::tree_live`].
    pub live: u64,
    /// See [`ReportHeader::tree_peak`].
    pub peak: u64,
    /// See [`ReportHeader::tree_max_active`].
    pub max_active: u64,
}

impl TreeValues {
    /// Read the words of a live header (tests).
    pub fn from_header(tree: &ReportHeader) -> Self {
        TreeValues {
            live: tree.tree_live.load(Relaxed),
            peak: tree.tree_peak.load(Relaxed),
            max_active: tree.tree_max_active.load(Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::{
        self, alloc_fast, free_fast, on_alloc, on_free, record_of, snapshot, SOLO, SOLO_IN_TREE,
    };
    use crate::{SlotValues, GRANULE};

    /// A report file in ordinary memory (zeroed, as the collector's memfd starts).
    struct Run {
        report: &'static Report,
    }

    impl Run {
        #[allow(unsafe_code)]
        fn new() -> Self {
            let layout = std::alloc::Layout::new::<Report>();
            // SAFETY: a non-zero layout; all-zero bytes are a valid `Report` (atomics).
            let raw = unsafe { std::alloc::alloc_zeroed(layout) };
            assert!(!raw.is_null(), "memory for a report");
            // SAFETY: as above; borrowed only through `report()`, which is tied to `self`.
            let report = unsafe { &*raw.cast::<Report>() };
            Run { report }
        }

        fn report(&self) -> &Report {
            self.report
        }

        fn header(&self) -> &ReportHeader {
            &self.report().header
        }

        fn slots(&self) -> &[Slot] {
            &self.report().slots
        }

        /// What `attach::claim` does, with a given pid and inheritance.
        fn claim(&self, origin: Origin, pid: u64, inherited: Option<usize>) -> &Slot {
            let index = self.header().claims.fetch_add(1, SeqCst) as usize;
            let inherited = inherited.map(|parent| snapshot(&self.slots()[parent]));
            let slot = &self.slots()[index];
            counters::start(slot, origin, pid, 1, inherited);
            slot.index.store(index as u64, SeqCst);
            enter(self.report(), index, origin, pid);
            slot
        }

        /// One allocation or free by thread `key` of `slot`, through the general path and
        /// the tree's sync, as the agent does it.
        fn change(&self, slot: &Slot, key: u64, delta: i64) {
            let record = record_of(slot, key).0;
            if delta >= 0 {
                on_alloc(slot, record, delta as u64);
            } else {
                on_free(slot, record, delta.unsigned_abs());
            }
            sync(self.header(), slot);
        }

        fn tree(&self) -> TreeValues {
            TreeValues::from_header(self.header())
        }
    }

    impl Drop for Run {
        #[allow(unsafe_code)]
        fn drop(&mut self) {
            // SAFETY: allocated in `new` with this layout; nothing borrowed outlives `self`.
            unsafe {
                std::alloc::dealloc(
                    (self.report as *const Report).cast_mut().cast(),
                    std::alloc::Layout::new::<Report>(),
                )
            };
        }
    }

    #[test]
    fn a_lone_image_stays_out_and_keeps_its_hot_path() {
        let run = Run::new();
        let main = run.claim(Origin::Load, 10, None);
        assert_eq!(main.tree.load(SeqCst), OUT);
        run.change(main, 1, 5000);
        assert!(alloc_fast(main, 1, 10), "the solo hot path");
        assert_eq!(run.tree(), TreeValues::default());
        leave(run.report(), main);
        // Alone all its life: its peak is the tree's.
        assert_eq!(run.tree().peak, 5010);
        assert_eq!(main.tree.load(SeqCst), LEFT);
    }

    #[test]
    fn a_fork_pulls_the_parent_in_and_the_tree_peak_is_simultaneous() {
        let run = Run::new();
        let parent = run.claim(Origin::Load, 10, None);
        run.change(parent, 1, 100_000);
        assert_eq!(record_of(parent, 1).0.mode.load(SeqCst), SOLO);
        let child = run.claim(Origin::Fork, 11, Some(0));
        // Both joined: the parent's heap and the child's inherited copy.
        assert_eq!(run.tree().live, 200_000);
        assert_eq!(run.tree().max_active, 2);
        assert_ne!(record_of(parent, 1).0.mode.load(SeqCst), SOLO);
        // Its thread stays solo and exact, on the hot path while within a granule of
        // what the tree has of it.
        assert_eq!(record_of(parent, 1).0.mode.load(SeqCst), SOLO_IN_TREE);
        assert_eq!(
            parent.solo_key.load(SeqCst),
            0,
            "no solo shortcut in a tree"
        );
        // Its first call after the join takes the general path, which arms the tree's
        // shortcut; the next ones take it.
        assert!(!alloc_fast(parent, 1, 10));
        run.change(parent, 1, 10);
        assert_eq!(parent.tree_key.load(SeqCst), 1);
        assert!(alloc_fast(parent, 1, 10));
        assert!(!alloc_fast(parent, 1, GRANULE));
        run.change(parent, 1, -20);
        run.change(child, 1, 300_000);
        run.change(child, 1, -300_000);
        leave(run.report(), child);
        assert_eq!(run.tree().live, 100_000);
        assert_eq!(parent.tree_key.load(SeqCst), 0, "nudged off the shortcut");
        // Left alone, the parent was nudged off its hot path; its next change is
        // published and takes it out of the tree, back to the solo shortcut.
        assert_eq!(record_of(parent, 1).0.mode.load(SeqCst), SOLO_NUDGED);
        run.change(parent, 1, 50_000);
        let tree = run.tree();
        assert_eq!(tree.peak, 500_000);
        assert_eq!(tree.live, 0, "the parent is out of the tree");
        assert_eq!(parent.tree.load(SeqCst), OUT);
        assert_eq!(record_of(parent, 1).0.mode.load(SeqCst), SOLO);
        assert_eq!(parent.solo_key.load(SeqCst), 1);
        assert_eq!(SlotValues::from_slot(parent).live, 150_000);
        // The sum of the two images' own peaks would say 550,000.
        let peaks = SlotValues::from_slot(parent).peak + SlotValues::from_slot(child).peak;
        assert_eq!(peaks, 550_000);
    }

    /// In a tree, the solo hot path where it applies (else the general path and `sync`)
    /// and the general path alone leave the same slots and the same tree, step by step,
    /// and the tree never lags an image by a granule or more.
    #[test]
    fn in_a_tree_the_hot_path_leaves_what_the_general_path_leaves() {
        let (hot, general) = (Run::new(), Run::new());
        for run in [&hot, &general] {
            run.claim(Origin::Load, 10, None);
            run.claim(Origin::Fork, 11, Some(0));
        }
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut live: Vec<(usize, u64)> = Vec::new();
        let mut took_hot = 0;
        for step in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let image = (x % 2) as usize;
            let (h, g) = (&hot.slots()[image], &general.slots()[image]);
            if live.is_empty() || x % 5 < 3 {
                let size = 1 + (x >> 8) % 3000;
                if alloc_fast(h, 1, size) {
                    took_hot += 1;
                } else {
                    hot.change(h, 1, size as i64);
                }
                general.change(g, 1, size as i64);
                live.push((image, size));
            } else {
                let at = (x % live.len() as u64) as usize;
                let (image, size) = live.swap_remove(at);
                let (h, g) = (&hot.slots()[image], &general.slots()[image]);
                if free_fast(h, 1, size) {
                    took_hot += 1;
                } else {
                    hot.change(h, 1, -(size as i64));
                }
                general.change(g, 1, -(size as i64));
            }
            assert_eq!(hot.tree(), general.tree(), "step {step}");
            for (h, g) in hot.slots()[..2].iter().zip(&general.slots()[..2]) {
                assert_eq!(
                    SlotValues::from_slot(h),
                    SlotValues::from_slot(g),
                    "step {step}"
                );
                let lag = SlotValues::from_slot(h)
                    .live
                    .wrapping_sub(h.tree.load(SeqCst));
                assert!((lag as i64).unsigned_abs() < GRANULE, "step {step}");
            }
        }
        assert!(took_hot > 15_000, "the hot path was taken {took_hot} times");
    }

    #[test]
    fn small_changes_wait_for_a_granule_while_two_images_are_active() {
        let run = Run::new();
        let parent = run.claim(Origin::Load, 10, None);
        let child = run.claim(Origin::Fork, 11, Some(0));
        run.change(child, 1, 100);
        assert_eq!(run.tree().live, 0, "kept by the child");
        run.change(child, 1, GRANULE as i64);
        assert_eq!(run.tree().live, 100 + GRANULE);
        run.change(parent, 1, 7);
        assert_eq!(run.tree().live, 100 + GRANULE, "kept by the parent");
        leave(run.report(), child);
        assert_eq!(
            run.tree().live,
            0,
            "the parent's 7 bytes were never published"
        );
        // Alone now: the parent's next change takes it out of the tree, and its own
        // figures (exact all along) are the tree's from then on.
        run.change(parent, 1, 1);
        assert_eq!(parent.tree.load(SeqCst), OUT);
        assert_eq!(SlotValues::from_slot(parent).live, 8);
    }

    #[test]
    fn an_image_out_again_is_pulled_back_in_by_the_next_child() {
        let run = Run::new();
        let parent = run.claim(Origin::Load, 10, None);
        run.change(parent, 1, 20_000);
        let first = run.claim(Origin::Fork, 11, Some(0));
        leave(run.report(), first);
        run.change(parent, 1, 1);
        assert_eq!(parent.tree.load(SeqCst), OUT);
        assert_eq!(run.header().tree_active.load(SeqCst), 0);
        assert!(alloc_fast(parent, 1, 1), "the solo shortcut again");
        let second = run.claim(Origin::Fork, 12, Some(0));
        // Both in the tree: the parent's 20,002 bytes and the second child's copy.
        assert!(in_tree(parent.tree.load(SeqCst)) && in_tree(second.tree.load(SeqCst)));
        assert_eq!(run.tree().live, 2 * 20_002);
        assert_eq!(record_of(parent, 1).0.mode.load(SeqCst), SOLO_IN_TREE);
        assert_eq!(parent.solo_key.load(SeqCst), 0);
        run.change(second, 1, 100_000);
        assert_eq!(run.tree().peak, 2 * 20_002 + 100_000);
    }

    #[test]
    fn an_exec_makes_the_image_it_replaced_leave() {
        let run = Run::new();
        let shell = run.claim(Origin::Load, 10, None);
        run.change(shell, 1, 700);
        let program = run.claim(Origin::Load, 10, None);
        assert_eq!(shell.tree.load(SeqCst), LEFT);
        assert_eq!(program.tree.load(SeqCst), OUT, "alone again: no tree");
        assert_eq!(run.tree().peak, 700);
        // A spawned program (another pid) while the first is alive makes a tree.
        let spawned = run.claim(Origin::Load, 12, None);
        assert!(in_tree(spawned.tree.load(SeqCst)) && in_tree(program.tree.load(SeqCst)));
    }

    #[test]
    fn leaving_takes_the_bytes_out_once() {
        let run = Run::new();
        let parent = run.claim(Origin::Load, 10, None);
        run.change(parent, 1, 20_000);
        let child = run.claim(Origin::Fork, 11, Some(0));
        assert_eq!(run.tree().live, 40_000);
        leave(run.report(), child);
        leave(run.report(), child);
        assert_eq!(run.tree().live, 20_000);
        assert_eq!(run.header().tree_active.load(SeqCst), 1);
        // Changes after leaving (a late destructor) no longer move the tree.
        run.change(child, 1, -20_000);
        assert_eq!(run.tree().live, 20_000);
    }

    #[test]
    fn concurrent_images_and_threads_add_up_exactly() {
        let run = Run::new();
        let main = run.claim(Origin::Load, 10, None);
        run.change(main, 1, 64);
        let children: Vec<&Slot> = (0..3)
            .map(|i| run.claim(Origin::Fork, 20 + i, Some(0)))
            .collect();
        std::thread::scope(|scope| {
            for (i, &slot) in children.iter().enumerate() {
                for t in 0..2u64 {
                    let run = &run;
                    scope.spawn(move || {
                        let key = 100 + t;
                        for step in 0..5_000i64 {
                            run.change(slot, key, 1 + (step + i as i64) % 3000);
                            run.change(slot, key, -(1 + (step + i as i64) % 3000));
                        }
                        counters::fold(slot, record_of(slot, key).0);
                        sync(run.header(), slot);
                    });
                }
            }
        });
        // Every image holds 64 bytes again; what the children have not published yet is
        // less than a granule each.
        assert!(
            run.tree().live.abs_diff(4 * 64) < 3 * GRANULE,
            "{:?}",
            run.tree()
        );
        for &child in &children {
            leave(run.report(), child);
        }
        assert_eq!(run.tree().live, 64);
        let bound = (run.tree().max_active - 1) * GRANULE + 3 * GRANULE;
        assert!(
            run.tree().peak <= 4 * 64 + 6 * 3000 + bound,
            "{:?}",
            run.tree()
        );
    }
}
