//! Finding the report file and claiming a slot in it: the same steps for the preload
//! agent and for the in-process harness (`sbs-harness`), written once. Each side supplies
//! the few system calls through [`Os`] (the agent declares libc by hand, the harness uses
//! the `libc` crate) and keeps the slot in statics of its own, which its hot path reads.
//! The agent finds the report file through its stamp ([`find_stamped_report`], see
//! [`crate::stamp`]), the harness through the env vars the collector sets for it
//! ([`find_report`]).
//!
//! Nothing here allocates or takes a lock: it runs inside allocation hooks and fork
//! handlers.

use core::sync::atomic::Ordering::SeqCst;

use crate::counters::{self, ForkSnapshot};
use crate::stamp::{proc_fd_path, StampValues, PROC_FD_PATH_MAX};
use crate::tree;
use crate::{parse_fd, parse_token, HeaderValues, Origin, Slot, HEADER_SIZE};

pub use crate::Report;

/// The system calls attaching needs.
pub trait Os {
    /// The first [`HEADER_SIZE`] bytes of descriptor `fd` (`false` on an error or a short
    /// read).
    fn read_header(fd: i32, out: &mut [u8; HEADER_SIZE]) -> bool;
    /// The [`crate::REPORT_SIZE`] bytes of descriptor `fd`, mapped shared and writable for the
    /// rest of the process's life (never unmapped).
    fn map(fd: i32) -> Option<&'static Report>;
    /// This process's pid and its parent's.
    fn pids() -> (u64, u64);
}

/// Reading the environment, for [`find_report`].
pub trait Env {
    /// The value of the env var `name` (NUL-terminated), read without allocating.
    fn env(name: &'static [u8]) -> Option<&'static [u8]>;
}

/// Opening a file by path, for [`find_stamped_report`].
pub trait Open {
    /// Open `path` (NUL-terminated) for reading and writing, close-on-exec; the descriptor,
    /// or `None`.
    fn open_rw(path: &[u8]) -> Option<i32>;
    /// Close descriptor `fd`.
    fn close(fd: i32);
}

/// The report file a stamped library names (see [`crate::stamp`]): opened as
/// `/proc/<collector pid>/fd/<fd>`, mapped if its header carries the stamp's token, and the
/// descriptor closed again (the mapping keeps the file), so the program is left with no
/// descriptor of ours.
pub fn find_stamped_report<O: Os + Open>(stamp: StampValues) -> Option<&'static Report> {
    let mut path = [0u8; PROC_FD_PATH_MAX];
    let len = proc_fd_path(stamp.pid, stamp.fd, &mut path);
    let fd = O::open_rw(&path[..=len])?;
    let mut raw = [0u8; HEADER_SIZE];
    let ours = O::read_header(fd, &mut raw)
        && HeaderValues::from_bytes(&raw).is_some_and(|h| h.matches(stamp.token));
    let report = if ours { O::map(fd) } else { None };
    O::close(fd);
    report
}

/// The report file announced by the env vars `fd_var` and `token_var` (NUL-terminated
/// names), mapped, if its header carries the announced token: a descriptor number reused
/// for something else is never written to.
pub fn find_report<O: Os + Env>(
    fd_var: &'static [u8],
    token_var: &'static [u8],
) -> Option<&'static Report> {
    let fd = parse_fd(O::env(fd_var)?)?;
    let token = parse_token(O::env(token_var)?)?;
    let mut raw = [0u8; HEADER_SIZE];
    if !O::read_header(fd, &mut raw) || !HeaderValues::from_bytes(&raw)?.matches(token) {
        return None;
    }
    O::map(fd)
}

/// Take the next slot of `report` for this process image and fill it: counts from zero,
/// and for a forked child (`inherited`) the live heap it inherited. Then place it in the
/// process tree ([`tree::enter`]). `None` when every slot is taken (the collector reports
/// the excess).
pub fn claim<O: Os>(
    report: &'static Report,
    origin: Origin,
    inherited: Option<ForkSnapshot>,
) -> Option<&'static Slot> {
    let index = report.header.claims.fetch_add(1, SeqCst) as usize;
    let slot = report.slots.get(index)?;
    let (pid, ppid) = O::pids();
    counters::start(slot, origin, pid, ppid, inherited);
    slot.index.store(index as u64, SeqCst);
    tree::enter(report, index, origin, pid);
    Some(slot)
}

/// This image is ending: its heap leaves the process tree's total ([`tree::leave`]), if
/// `slot` is this process's own: a `vfork` child shares its parent's statics (and so the
/// parent's slot) but not its pid.
pub fn leave_at_end<O: Os>(report: &Report, slot: &Slot) {
    if slot.pid.load(SeqCst) == O::pids().0 {
        tree::leave(report, slot);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{REPORT_MAGIC, REPORT_VERSION, SLOT_COUNT};
    use std::sync::OnceLock;

    /// A report file in ordinary memory, announced as descriptor 7 with token `abc`.
    struct Fake;

    #[allow(unsafe_code)]
    fn report() -> &'static Report {
        static REPORT: OnceLock<&'static Report> = OnceLock::new();
        REPORT.get_or_init(|| {
            // A zeroed Report is valid (atomics and integers): built on the heap, leaked.
            let layout = std::alloc::Layout::new::<Report>();
            // SAFETY: a non-zero layout; all-zero bytes are a valid `Report`.
            let report: &'static Report = unsafe { &*std::alloc::alloc_zeroed(layout).cast() };
            report.header.magic.store(REPORT_MAGIC, SeqCst);
            report.header.version.store(REPORT_VERSION, SeqCst);
            report.header.token.store(0xabc, SeqCst);
            report
        })
    }

    impl Env for Fake {
        fn env(name: &'static [u8]) -> Option<&'static [u8]> {
            match name {
                b"FD\0" => Some(b"7"),
                b"TOKEN\0" => Some(b"abc"),
                b"WRONG_TOKEN\0" => Some(b"abd"),
                _ => None,
            }
        }
    }

    impl Os for Fake {
        fn read_header(fd: i32, out: &mut [u8; HEADER_SIZE]) -> bool {
            let h = &report().header;
            for (i, word) in [&h.magic, &h.version, &h.token, &h.claims]
                .iter()
                .enumerate()
            {
                out[i * 8..i * 8 + 8].copy_from_slice(&word.load(SeqCst).to_le_bytes());
            }
            fd == 7
        }
        fn map(fd: i32) -> Option<&'static Report> {
            (fd == 7).then(report)
        }
        fn pids() -> (u64, u64) {
            (42, 41)
        }
    }

    /// The collector is pid 40 and keeps the report file at its descriptor 9.
    impl Open for Fake {
        fn open_rw(path: &[u8]) -> Option<i32> {
            (path == b"/proc/40/fd/9\0").then_some(7)
        }
        fn close(fd: i32) {
            assert_eq!(fd, 7, "only what was opened is closed");
        }
    }

    #[test]
    fn a_stamped_report_is_found_through_the_collectors_descriptor_and_its_token() {
        let stamp = |pid, fd, token| StampValues { pid, fd, token };
        assert!(find_stamped_report::<Fake>(stamp(40, 9, 0xabc)).is_some());
        assert!(find_stamped_report::<Fake>(stamp(40, 9, 0xabd)).is_none());
        assert!(find_stamped_report::<Fake>(stamp(40, 8, 0xabc)).is_none());
        assert!(find_stamped_report::<Fake>(stamp(41, 9, 0xabc)).is_none());
    }

    #[test]
    fn a_report_is_found_only_with_its_token_and_slots_are_claimed_in_turn() {
        assert!(find_report::<Fake>(b"FD\0", b"WRONG_TOKEN\0").is_none());
        assert!(find_report::<Fake>(b"NONE\0", b"TOKEN\0").is_none());
        let report = find_report::<Fake>(b"FD\0", b"TOKEN\0").expect("found");
        let first = claim::<Fake>(report, Origin::Load, None).expect("a slot");
        let second = claim::<Fake>(report, Origin::Fork, None).expect("a slot");
        assert!(core::ptr::eq(first, &report.slots[0]));
        assert!(core::ptr::eq(second, &report.slots[1]));
        assert_eq!(first.pid.load(SeqCst), 42);
        assert_eq!(second.ppid.load(SeqCst), 41);
        // Past the last slot: none, and the claim count says how many wanted one.
        report.header.claims.store(SLOT_COUNT as u64, SeqCst);
        assert!(claim::<Fake>(report, Origin::Load, None).is_none());
        assert_eq!(report.header.claims.load(SeqCst), SLOT_COUNT as u64 + 1);
    }
}
