//! The libc functions the library calls before it patches anything, and raw system calls
//! for what it does while patching. Declared by hand: the library has no dependencies,
//! so that `collector/build.rs` can compile it with a bare `rustc`.
//!
//! Why raw system calls: once a site in libc is patched, a call the library itself makes
//! to that libc function would be counted (`--invocations mprotect`), and before that a
//! libc function the engine leaves to a uprobe (`--invocations pread` with `auto`) would
//! count the library's own call. So the library calls nothing outside itself but
//! `dl_iterate_phdr`, before the first patch; the loader hook (`patch::on_loader_change`)
//! calls nothing at all, and reads the loader's list of objects through `_r_debug`.

use core::ffi::{c_char, c_int, c_void};

pub const PROT_READ: u64 = 1;
pub const PROT_WRITE: u64 = 2;
pub const PROT_EXEC: u64 = 4;
pub const MAP_SHARED: u64 = 0x01;
pub const MAP_PRIVATE: u64 = 0x02;
pub const MAP_ANONYMOUS: u64 = 0x20;
pub const MAP_FIXED_NOREPLACE: u64 = 0x10_0000;
pub const PT_LOAD: u32 = 1;
pub const PT_DYNAMIC: u32 = 2;
pub const PT_NOTE: u32 = 4;
pub const PF_X: u32 = 1;
pub const PF_R: u32 = 4;

const SYS_PREAD64: u64 = 17;
const SYS_CLOSE: u64 = 3;
const SYS_OPENAT: u64 = 257;
const AT_FDCWD: i64 = -100;
const O_RDWR: u64 = 2;
const O_CLOEXEC: u64 = 0o2_000_000;
const SYS_MMAP: u64 = 9;
const SYS_MPROTECT: u64 = 10;
const SYS_MUNMAP: u64 = 11;
const SYS_MADVISE: u64 = 28;
const SYS_MREMAP: u64 = 25;
const MREMAP_MAYMOVE: u64 = 1;
const MREMAP_FIXED: u64 = 2;
/// `madvise` advice: the child of a `fork` sees the range zeroed (Linux 4.14+).
const MADV_WIPEONFORK: u64 = 18;
const SYS_ARCH_PRCTL: u64 = 158;
const SYS_PRCTL: u64 = 157;
const SYS_CLONE: u64 = 56;
const SYS_WAIT4: u64 = 61;
const SYS_EXIT_GROUP: u64 = 231;
const PR_GET_SECCOMP: u64 = 21;
const WALL: u64 = 0x4000_0000;
const EINTR: i64 = 4;
/// `arch_prctl` code that reads which shadow stack features are enabled (Linux 6.6+).
const ARCH_SHSTK_STATUS: u64 = 0x5005;
/// The shadow stack feature bit of that status.
const ARCH_SHSTK_SHSTK: u64 = 1;

/// `Elf64_Phdr`.
#[repr(C)]
pub struct Phdr {
    pub p_type: u32,
    pub p_flags: u32,
    pub p_offset: u64,
    pub p_vaddr: u64,
    pub p_paddr: u64,
    pub p_filesz: u64,
    pub p_memsz: u64,
    pub p_align: u64,
}

/// The start of glibc's `struct dl_phdr_info` (the fields used).
#[repr(C)]
pub struct DlPhdrInfo {
    pub dlpi_addr: u64,
    pub dlpi_name: *const c_char,
    pub dlpi_phdr: *const Phdr,
    pub dlpi_phnum: u16,
}

/// glibc's `struct r_debug` (`<link.h>`), the debugger interface of the dynamic loader.
#[repr(C)]
pub struct RDebug {
    pub r_version: c_int,
    /// The loader's list of loaded objects.
    pub r_map: *const LinkMap,
    /// The address of `_dl_debug_state`, which the loader calls around every change of
    /// the list.
    pub r_brk: u64,
    /// `RT_CONSISTENT` (0), `RT_ADD` (1) or `RT_DELETE` (2).
    pub r_state: c_int,
    pub r_ldbase: u64,
}

/// `r_state` once the list is complete again (after a `dlopen` mapped its objects, before
/// it relocates them; after a `dlclose` unmapped them).
pub const RT_CONSISTENT: c_int = 0;

/// The public start of glibc's `struct link_map`.
#[repr(C)]
pub struct LinkMap {
    /// Load bias.
    pub l_addr: u64,
    pub l_name: *const c_char,
    /// Address of the dynamic section.
    pub l_ld: u64,
    pub l_next: *const LinkMap,
    pub l_prev: *const LinkMap,
}

pub type PhdrCallback = unsafe extern "C" fn(*mut DlPhdrInfo, usize, *mut c_void) -> c_int;

#[link(name = "c")]
extern "C" {
    pub fn dl_iterate_phdr(callback: PhdrCallback, data: *mut c_void) -> c_int;
    pub fn abort() -> !;
    /// Non-zero while the process has a single thread (glibc 2.32+).
    pub static __libc_single_threaded: c_char;
    /// The dynamic loader's debugger interface (exported by `ld.so`, reached through
    /// libc's linker script).
    pub static _r_debug: RDebug;
}

/// A raw system call with up to six arguments; returns the kernel's value (negative
/// errno on failure).
///
/// # Safety
/// The call's own contract (which memory it may change).
unsafe fn syscall6(n: u64, a: [u64; 6]) -> i64 {
    let ret: i64;
    // SAFETY: the x86-64 Linux system call convention: number in rax, arguments in rdi,
    // rsi, rdx, r10, r8, r9; rcx and r11 are clobbered; no stack is used.
    unsafe {
        core::arch::asm!(
            "syscall",
            inlateout("rax") n as i64 => ret,
            in("rdi") a[0],
            in("rsi") a[1],
            in("rdx") a[2],
            in("r10") a[3],
            in("r8") a[4],
            in("r9") a[5],
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

/// `openat(AT_FDCWD, path, O_RDWR | O_CLOEXEC)`; the descriptor, or `None`. `path` must end
/// with a NUL.
pub fn open_rw(path: &[u8]) -> Option<i64> {
    if path.last() != Some(&0) {
        return None;
    }
    // SAFETY: `path` is NUL-terminated (checked); openat only reads it.
    let fd = unsafe {
        syscall6(
            SYS_OPENAT,
            [
                AT_FDCWD as u64,
                path.as_ptr() as u64,
                O_RDWR | O_CLOEXEC,
                0,
                0,
                0,
            ],
        )
    };
    (fd >= 0).then_some(fd)
}

/// `pread` into `buf` from offset 0; whether it filled `buf`.
pub fn pread_all(fd: i64, buf: &mut [u8]) -> bool {
    // SAFETY: the kernel writes at most buf.len() bytes into the caller's buffer.
    let got = unsafe {
        syscall6(
            SYS_PREAD64,
            [
                fd as u64,
                buf.as_mut_ptr() as u64,
                buf.len() as u64,
                0,
                0,
                0,
            ],
        )
    };
    got == buf.len() as i64
}

/// `close`.
pub fn close(fd: i64) {
    // SAFETY: closing a descriptor has no memory effects; the caller owns `fd`.
    unsafe { syscall6(SYS_CLOSE, [fd as u64, 0, 0, 0, 0, 0]) };
}

/// `mmap`; the address, or `None`.
///
/// # Safety
/// With `MAP_FIXED`, `addr..addr+len` must be memory the caller owns.
pub unsafe fn mmap(addr: u64, len: u64, prot: u64, flags: u64, fd: i64, off: u64) -> Option<u64> {
    // SAFETY: contract.
    let r = unsafe { syscall6(SYS_MMAP, [addr, len, prot, flags, fd as u64, off]) };
    (r >= 0).then_some(r as u64)
}

/// `mprotect`.
///
/// # Safety
/// The pages must not hold code or data that the new protection would break while it
/// is in force.
pub unsafe fn mprotect(addr: u64, len: u64, prot: u64) -> bool {
    // SAFETY: contract.
    unsafe { syscall6(SYS_MPROTECT, [addr, len, prot, 0, 0, 0]) == 0 }
}

/// `munmap`.
///
/// # Safety
/// The caller owns the mapping and nothing uses it any more.
pub unsafe fn munmap(addr: u64, len: u64) {
    // SAFETY: contract.
    unsafe { syscall6(SYS_MUNMAP, [addr, len, 0, 0, 0, 0]) };
}

/// `mremap(from, 0, len, MREMAP_MAYMOVE | MREMAP_FIXED, to)`: map the pages of the
/// *shared* mapping at `from` a second time, at `to` (replacing what is there); whether
/// that worked.
///
/// # Safety
/// `[to, to + len)` is memory the caller owns and nothing uses; `from` starts a shared
/// mapping at least `len` long.
pub unsafe fn map_again(from: u64, len: u64, to: u64) -> bool {
    // SAFETY: contract; an old size of 0 duplicates a shared mapping and leaves it be.
    let r = unsafe {
        syscall6(
            SYS_MREMAP,
            [from, 0, len, MREMAP_MAYMOVE | MREMAP_FIXED, to, 0],
        )
    };
    r == to as i64
}

/// `madvise(addr, len, MADV_WIPEONFORK)`: whether the kernel took it.
///
/// # Safety
/// The range is private anonymous memory of the caller's, whose contents a forked child
/// may lose.
pub unsafe fn wipe_on_fork(addr: u64, len: u64) -> bool {
    // SAFETY: contract; madvise changes no memory of this process.
    unsafe { syscall6(SYS_MADVISE, [addr, len, MADV_WIPEONFORK, 0, 0, 0]) == 0 }
}

// The library's one TLS word, initial-exec: a thread's slot address (see
// `sbs_agent_abi::inproc`), zero in a new thread. A preloaded library is loaded at start,
// so its TLS is in the static block, at one offset from `%fs` for every thread; the stubs
// read and write it as `fs:[offset]`. Defined in assembly because stable Rust has no
// `#[thread_local]` without std; nothing in Rust touches it.
core::arch::global_asm!(
    ".pushsection .tbss,\"awT\",@nobits",
    ".p2align 3",
    ".type sbs_inproc_slot,@object",
    ".size sbs_inproc_slot,8",
    "sbs_inproc_slot:",
    ".zero 8",
    ".popsection",
);

/// The offset of the TLS word from the thread pointer (`%fs`), as the loader relocated
/// it (negative: static TLS lies below the thread pointer on x86-64).
pub fn tls_word_offset() -> i64 {
    let offset: i64;
    // SAFETY: reads the GOT entry the linker made for the initial-exec access to our
    // own TLS symbol (R_X86_64_TPOFF64, filled in by the loader before constructors run).
    unsafe {
        core::arch::asm!(
            "mov {}, qword ptr [rip + sbs_inproc_slot@GOTTPOFF]",
            out(reg) offset,
            options(nostack, readonly, pure, preserves_flags),
        );
    }
    offset
}

/// Whether this thread runs with the x86 user shadow stack (CET), on which a `ret` must
/// match a real `call`. Kernels without the feature answer `EINVAL`: no.
pub fn shadow_stack_enabled() -> bool {
    let mut features: u64 = 0;
    // SAFETY: ARCH_SHSTK_STATUS writes one u64 at the address given, a live local.
    let r = unsafe {
        syscall6(
            SYS_ARCH_PRCTL,
            [
                ARCH_SHSTK_STATUS,
                &mut features as *mut u64 as u64,
                0,
                0,
                0,
                0,
            ],
        )
    };
    r == 0 && features & ARCH_SHSTK_SHSTK != 0
}

/// Whether a seccomp filter forbids what patching does. Without a filter (the usual case,
/// one `prctl`) no. With one, which a benchmark inherits from a sandbox, a container or
/// systemd's `MemoryDenyWriteExecute=`, nothing says what it allows short of trying, and a
/// filter may kill the caller: so a forked child tries (a page made executable, then
/// writable and executable, as the patching does) and this process only watches how it
/// ends. A child that cannot be started or waited for counts as forbidden.
pub fn seccomp_forbids_patching() -> bool {
    // SAFETY: PR_GET_SECCOMP reads the calling thread's mode and writes no memory.
    let mode = unsafe { syscall6(SYS_PRCTL, [PR_GET_SECCOMP, 0, 0, 0, 0, 0]) };
    if mode <= 0 {
        // 0: no filter; an error: a kernel without seccomp.
        return false;
    }
    // SAFETY: clone without flags is fork() with no exit signal: the child gets a copy of
    // this address space and its own stack copy; it runs `try_patching_moves` (system
    // calls on a page of its own) and exits without returning. No exit signal means the
    // program receives no SIGCHLD and an ignored SIGCHLD does not reap it before us.
    let pid = unsafe { syscall6(SYS_CLONE, [0, 0, 0, 0, 0, 0]) };
    if pid == 0 {
        let code = u64::from(!try_patching_moves());
        // SAFETY: ends the child, which holds nothing that needs cleaning up.
        unsafe { syscall6(SYS_EXIT_GROUP, [code, 0, 0, 0, 0, 0]) };
        // SAFETY: exit_group does not return.
        unsafe { core::hint::unreachable_unchecked() }
    }
    if pid < 0 {
        return true;
    }
    let mut status: i32 = -1;
    loop {
        // SAFETY: wait4 writes the child's status into a live local.
        let r = unsafe {
            syscall6(
                SYS_WAIT4,
                [pid as u64, &mut status as *mut i32 as u64, WALL, 0, 0, 0],
            )
        };
        match r {
            r if r == -EINTR => continue,
            r if r == pid => return status != 0,
            _ => return true,
        }
    }
}

/// In the probing child: what patching asks of `mprotect`, on a fresh page.
fn try_patching_moves() -> bool {
    // SAFETY: a fresh anonymous page of the child's own, unmapped by its exit.
    let Some(page) = (unsafe {
        mmap(
            0,
            4096,
            PROT_READ | PROT_WRITE,
            MAP_PRIVATE | MAP_ANONYMOUS,
            -1,
            0,
        )
    }) else {
        return false;
    };
    // SAFETY: the page just mapped, which nothing else uses.
    unsafe {
        mprotect(page, 4096, PROT_READ | PROT_EXEC)
            && mprotect(page, 4096, PROT_READ | PROT_WRITE | PROT_EXEC)
    }
}
