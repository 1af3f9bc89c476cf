//! Where the trampolines of a module go: plain arithmetic, unit-tested apart from the
//! system calls.

/// Distance between trampoline candidates.
pub const STEP: u64 = 1 << 20;
/// How far from the module candidates are tried (every relative field must stay within
/// ±2 GiB of the module's code; this leaves room for the module itself).
pub const REACH: u64 = 1 << 30;

/// Candidate addresses for an area of `size` bytes next to a module that occupies
/// `[lo, hi)` in memory, nearest first: below the module first (above a program lies its
/// `brk` heap, which a mapping there would stop from growing), then above it.
pub fn candidates(lo: u64, hi: u64, size: u64) -> impl Iterator<Item = u64> {
    let below = (1..=REACH / STEP).filter_map(move |k| {
        lo.checked_sub(size)?
            .checked_sub(k * STEP)
            .map(|a| a & !(STEP - 1))
            .filter(|&a| a >= STEP)
    });
    let above = (1..=REACH / STEP).filter_map(move |k| {
        let a = hi.checked_add(k * STEP)? & !(STEP - 1);
        // Stay in the lower half of the address space (user space on x86-64).
        (a.checked_add(size)? < 1 << 47).then_some(a)
    });
    below.chain(above)
}

/// Whether every byte of an area at `[start, start + size)` lies within ±2 GiB of every
/// byte of `[lo, hi)`, so that any 32-bit relative field between them fits.
pub fn within_reach(start: u64, size: u64, lo: u64, hi: u64) -> bool {
    let end = start.saturating_add(size);
    let span = end.max(hi) - start.min(lo);
    span < (1 << 31)
}

/// The `mprotect` protection (`PROT_READ` 1, `PROT_WRITE` 2, `PROT_EXEC` 4) of a
/// segment with ELF flags `flags` (`PF_X` 1, `PF_W` 2, `PF_R` 4).
pub fn protection(flags: u32) -> u64 {
    let mut prot = 0;
    if flags & 4 != 0 {
        prot |= 1;
    }
    if flags & 2 != 0 {
        prot |= 2;
    }
    if flags & 1 != 0 {
        prot |= 4;
    }
    prot
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_flags_become_protections() {
        assert_eq!(protection(4 | 1), 1 | 4); // R-X
        assert_eq!(protection(4 | 2), 1 | 2); // RW-
        assert_eq!(protection(4), 1);
    }

    #[test]
    fn candidates_start_below_the_module_and_stay_in_reach() {
        let (lo, hi) = (0x5555_5555_4000, 0x5555_5560_0000);
        let size = 3 * 4096;
        let all: Vec<u64> = candidates(lo, hi, size).collect();
        assert!(all[0] + size <= lo && all[0] % STEP == 0, "{:x}", all[0]);
        assert!(all.iter().all(|&a| within_reach(a, size, lo, hi)));
        assert!(all.iter().any(|&a| a > hi));
        // Nothing below address 0 or at the bottom page.
        assert!(candidates(0x40_0000, 0x50_0000, size).all(|a| a >= STEP));
    }

    #[test]
    fn reach_is_two_gib_over_both() {
        assert!(within_reach(0, 4096, 0x1000_0000, 0x2000_0000));
        assert!(!within_reach(0, 4096, 0x1000_0000, 0x8000_0000));
        assert!(!within_reach(0x9000_0000, 4096, 0x1000_0000, 0x2000_0000));
    }
}
