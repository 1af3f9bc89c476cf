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

/// Bytes of the jump written over the dynamic loader's `_dl_debug_state`.
pub const HOOK_JUMP: usize = 5;

/// Whether the 16 bytes at the dynamic loader's `_dl_debug_state` (at address `at`) are
/// an empty function that a 5-byte jump can replace: `endbr64; ret` (the whole function),
/// or a `ret` at a 16-byte boundary followed by nothing but padding (`nop`s of any
/// length, `int3`) up to the next boundary, where the next function may start. Nothing
/// runs or enters the padding, so the jump may cover it.
pub fn loader_hook_fits(code: &[u8; 16], at: u64) -> bool {
    if code[..5] == [0xf3, 0x0f, 0x1e, 0xfa, 0xc3] {
        return true;
    }
    if code[0] != 0xc3 || at % 16 != 0 {
        return false;
    }
    let mut k = 1;
    while k < code.len() {
        match padding_len(&code[k..]) {
            Some(n) => k += n,
            None => return false,
        }
    }
    k == code.len()
}

/// Length of the padding instruction at the start of `code` (`nop`, `int3`, or a long
/// `nop` `[66|2e]* 0f 1f /0`), if it is one and lies wholly inside `code`.
fn padding_len(code: &[u8]) -> Option<usize> {
    match code.first()? {
        0x90 | 0xcc => return Some(1),
        _ => {}
    }
    let prefixes = code.iter().take_while(|&&b| b == 0x66 || b == 0x2e).count();
    let rest = code.get(prefixes..)?;
    if rest.len() < 3 || rest[0] != 0x0f || rest[1] != 0x1f || (rest[2] >> 3) & 7 != 0 {
        return None;
    }
    let (md, rm) = (rest[2] >> 6, rest[2] & 7);
    let sib = usize::from(md != 3 && rm == 4);
    let disp = match md {
        1 => 1,
        2 => 4,
        0 if rm == 5 => 4,
        _ => 0,
    };
    let len = prefixes + 3 + sib + disp;
    (len <= code.len()).then_some(len)
}

/// The hook's thunk, placed within a `jmp rel32` of the loader: `jmp [rip+0]` and the
/// absolute address of the hook (which may lie anywhere).
pub fn thunk(hook: u64) -> [u8; 14] {
    let mut out = [0u8; 14];
    out[..6].copy_from_slice(&[0xff, 0x25, 0, 0, 0, 0]);
    out[6..].copy_from_slice(&hook.to_le_bytes());
    out
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
    fn the_loader_s_empty_function_is_recognised() {
        // Debian 12's ld.so 2.36: `ret`, then gas's padding to the next 16 bytes.
        let glibc = [
            0xc3, 0x66, 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0, 0x0f, 0x1f, 0x40, 0,
        ];
        assert!(loader_hook_fits(&glibc, 0x7f00_0000_2060));
        // Not at a function boundary: the padding might be someone's code.
        assert!(!loader_hook_fits(&glibc, 0x7f00_0000_2061));
        let mut cet = [0xccu8; 16];
        cet[..5].copy_from_slice(&[0xf3, 0x0f, 0x1e, 0xfa, 0xc3]);
        assert!(loader_hook_fits(&cet, 0x1003));
        let mut nops = [0x90u8; 16];
        nops[0] = 0xc3;
        assert!(loader_hook_fits(&nops, 0x2000));
        // A function that does something, or code where padding should be.
        let mut busy = nops;
        busy[0] = 0x55;
        assert!(!loader_hook_fits(&busy, 0x2000));
        let mut next = nops;
        next[3] = 0x55;
        assert!(!loader_hook_fits(&next, 0x2000));
        // A long nop running past the boundary.
        let mut long = nops;
        long[13..].copy_from_slice(&[0x0f, 0x1f, 0x80]);
        assert!(!loader_hook_fits(&long, 0x2000));
    }

    #[test]
    fn the_thunk_jumps_through_the_address_after_it() {
        let t = thunk(0x1122_3344_5566_7788);
        assert_eq!(t[..6], [0xff, 0x25, 0, 0, 0, 0]);
        assert_eq!(
            u64::from_le_bytes(t[6..].try_into().unwrap()),
            0x1122_3344_5566_7788
        );
    }

    #[test]
    fn reach_is_two_gib_over_both() {
        assert!(within_reach(0, 4096, 0x1000_0000, 0x2000_0000));
        assert!(!within_reach(0, 4096, 0x1000_0000, 0x8000_0000));
        assert!(!within_reach(0x9000_0000, 4096, 0x1000_0000, 0x2000_0000));
    }
}
