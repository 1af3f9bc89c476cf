//! Valgrind client requests: the harness switches callgrind's event collection on just
//! before each operation and off just after it (`CALLGRIND_TOGGLE_COLLECT`), and asks
//! whether it runs under valgrind at all (`RUNNING_ON_VALGRIND`).
//!
//! Why no crate: `valgrind-requests` and `crabgrind` generate their bindings at build time
//! from valgrind's C headers (bindgen and a C compiler; a build fails or silently turns
//! the requests into no-ops where the headers are missing), and `partial-callgrind` is a
//! single unmaintained 0.1 release. The two requests needed here are one instruction
//! sequence, written below for x86-64 Linux after `valgrind.h` (3.19); on every other
//! architecture they are no-ops, so `counter.instructions/op` is not available there.
//!
//! Outside valgrind the sequence is four rotations of `rdi` by 128 bits in all (it is left
//! unchanged) and an `xchg rbx, rbx`: it does nothing and the default value comes back.

/// `VG_USERREQ__RUNNING_ON_VALGRIND` (core request).
const RUNNING_ON_VALGRIND: u64 = 0x1001;
/// `VG_USERREQ_TOOL_BASE('C', 'T')`: the first of callgrind's requests.
const CALLGRIND_BASE: u64 = ((b'C' as u64) << 24) | ((b'T' as u64) << 16);
/// `VG_USERREQ__DUMP_STATS`: writes callgrind's counts since the last dump to a dump file
/// of their own (`OUT-FILE.N`) and zeroes them.
const DUMP_STATS: u64 = CALLGRIND_BASE;
/// `VG_USERREQ__TOGGLE_COLLECT`: flips whether callgrind collects events (of the calling
/// thread). Cheap: unlike `START/STOP_INSTRUMENTATION` it discards no translation.
const TOGGLE_COLLECT: u64 = CALLGRIND_BASE + 2;

/// Issue client request `request` with no arguments; `default` is returned when not
/// running under valgrind.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
#[inline(always)]
fn client_request(default: u64, request: u64) -> u64 {
    let args: [u64; 6] = [request, 0, 0, 0, 0, 0];
    let result: u64;
    // SAFETY: the sequence is valgrind's "special instruction preamble" followed by the
    // client-request marker `xchg rbx, rbx` (valgrind.h, PLAT_amd64_linux). Natively it
    // changes no register but the flags (rdi is rotated by 3+13+61+51 = 128 bits, back
    // to its value; it is still declared clobbered) and reads no memory. Under valgrind,
    // the tool reads the six words at `rax` (a live local array) and writes its answer
    // to `rdx`. The block may read memory (the default `asm!` assumptions, no `nomem`),
    // and clobbers the flags (no `preserves_flags`).
    unsafe {
        std::arch::asm!(
            "rol rdi, 3",
            "rol rdi, 13",
            "rol rdi, 61",
            "rol rdi, 51",
            "xchg rbx, rbx",
            inout("rdx") default => result,
            in("rax") args.as_ptr(),
            inout("rdi") 0u64 => _,
            options(nostack),
        );
    }
    result
}

/// Not x86-64 Linux: client requests are not issued, the default comes back.
#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
#[inline(always)]
fn client_request(default: u64, _request: u64) -> u64 {
    default
}

/// Whether this process runs under valgrind (the number of nested valgrinds; 0 natively
/// and on architectures without client requests here).
pub(crate) fn running_on_valgrind() -> u64 {
    client_request(0, RUNNING_ON_VALGRIND)
}

/// Flip callgrind's event collection for the calling thread. A no-op outside callgrind.
#[inline(always)]
pub(crate) fn toggle_collect() {
    client_request(0, TOGGLE_COLLECT);
}

/// Dump callgrind's counts since the last dump (a file of their own) and zero them. A
/// no-op outside callgrind.
#[inline(always)]
pub(crate) fn dump_stats() {
    client_request(0, DUMP_STATS);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_codes_match_the_headers() {
        // callgrind.h 3.19: VG_USERREQ__DUMP_STATS = VG_USERREQ_TOOL_BASE('C','T') and
        // TOGGLE_COLLECT two after it.
        assert_eq!(CALLGRIND_BASE, 0x4354_0000);
        assert_eq!(TOGGLE_COLLECT, 1_129_578_498);
        assert_eq!(DUMP_STATS, 0x4354_0000);
    }

    #[test]
    fn requests_are_harmless_outside_valgrind() {
        // The unit tests do not run under valgrind (if they do, the answer is non-zero and
        // the toggle flips a callgrind state nobody reads).
        let n = running_on_valgrind();
        toggle_collect();
        toggle_collect();
        assert_eq!(running_on_valgrind(), n);
    }
}
