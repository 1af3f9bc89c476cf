//! The launcher's entry point: `_start` without a C runtime. Built by
//! `collector/build.rs` only (not a cargo target): a static, position-dependent program
//! with no libc, so that it maps a few pages and nothing else.
#![no_std]
#![no_main]

// The stack pointer is 16-byte aligned at the entry; the call makes the usual frame.
core::arch::global_asm!(
    ".globl _start",
    "_start:",
    "xor ebp, ebp",
    "and rsp, -16",
    "call {entry}",
    "ud2",
    entry = sym entry,
);

/// Called by `_start`; the launcher reads nothing from its arguments or environment.
extern "C" fn entry() -> ! {
    sbs_launcher::sys::exit(sbs_launcher::serve())
}

// Some of core's unwind tables name it; built with panic=abort, nothing calls it.
sbs_agent_abi::personality_stub!();

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    sbs_launcher::sys::exit(125)
}

// The code above copies message buffers; without libc, these are the routines the
// compiler may call for that.

/// # Safety
/// As C's `memcpy`.
#[no_mangle]
unsafe extern "C" fn memcpy(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    // SAFETY: `rep movsb` copies rcx bytes from rsi to rdi; the caller vouches for both
    // ranges, and the direction flag is clear by the ABI.
    unsafe {
        core::arch::asm!("rep movsb", inout("rcx") n => _, inout("rdi") dst => _,
            inout("rsi") src => _, options(nostack, preserves_flags));
    }
    dst
}

/// # Safety
/// As C's `memset`.
#[no_mangle]
unsafe extern "C" fn memset(dst: *mut u8, c: i32, n: usize) -> *mut u8 {
    // SAFETY: `rep stosb` stores al into rcx bytes from rdi; the caller vouches for the
    // range, and the direction flag is clear by the ABI.
    unsafe {
        core::arch::asm!("rep stosb", inout("rcx") n => _, inout("rdi") dst => _,
            in("al") c as u8, options(nostack, preserves_flags));
    }
    dst
}

/// # Safety
/// As C's `memcmp`.
#[no_mangle]
unsafe extern "C" fn memcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    let mut i = 0;
    while i < n {
        // SAFETY: both ranges are `n` bytes long, as the caller vouches.
        let (x, y) = unsafe { (core::ptr::read_volatile(a.add(i)), core::ptr::read_volatile(b.add(i))) };
        if x != y {
            return x as i32 - y as i32;
        }
        i += 1;
    }
    0
}

/// # Safety
/// As C's `bcmp`.
#[no_mangle]
unsafe extern "C" fn bcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    // SAFETY: the same contract as memcmp.
    unsafe { memcmp(a, b, n) }
}
