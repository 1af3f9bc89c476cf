//! The few libc functions the agent calls. Declared by hand: the agent has no
//! dependencies, so that `collector/build.rs` can compile it with a bare `rustc`.
//!
//! glibc exports its allocator under `__libc_*` names as well; calling those reaches the
//! real allocator without `dlsym` and without recursing into our own `malloc`.

use core::ffi::{c_int, c_long, c_void};

pub const PROT_READ: c_int = 1;
pub const PROT_WRITE: c_int = 2;
pub const MAP_SHARED: c_int = 1;
pub const MAP_FAILED: *mut c_void = !0usize as *mut c_void;
pub const SC_PAGESIZE: c_int = 30;
pub const ENOMEM: c_int = 12;
pub const EINVAL: c_int = 22;
#[cfg(target_arch = "x86_64")]
pub const SYS_EXIT_GROUP: c_long = 231;
#[cfg(target_arch = "aarch64")]
pub const SYS_EXIT_GROUP: c_long = 94;
#[cfg(target_arch = "x86_64")]
const SYS_OPENAT: c_long = 257;
#[cfg(target_arch = "aarch64")]
const SYS_OPENAT: c_long = 56;
#[cfg(target_arch = "x86_64")]
const SYS_CLOSE: c_long = 3;
#[cfg(target_arch = "aarch64")]
const SYS_CLOSE: c_long = 57;
const AT_FDCWD: c_long = -100;
const O_RDWR: c_long = 2;
const O_CLOEXEC: c_long = 0o2_000_000;

pub type AtforkHandler = Option<unsafe extern "C" fn()>;
pub type KeyDestructor = Option<unsafe extern "C" fn(*mut c_void)>;

#[link(name = "c")]
extern "C" {
    pub fn __libc_malloc(size: usize) -> *mut c_void;
    pub fn __libc_calloc(count: usize, size: usize) -> *mut c_void;
    pub fn __libc_realloc(ptr: *mut c_void, size: usize) -> *mut c_void;
    pub fn __libc_free(ptr: *mut c_void);
    pub fn __libc_memalign(align: usize, size: usize) -> *mut c_void;

    pub fn pread(fd: c_int, buf: *mut c_void, count: usize, offset: i64) -> isize;
    pub fn mmap(
        addr: *mut c_void,
        len: usize,
        prot: c_int,
        flags: c_int,
        fd: c_int,
        offset: i64,
    ) -> *mut c_void;
    pub fn getpid() -> c_int;
    pub fn getppid() -> c_int;
    pub fn pthread_key_create(key: *mut u32, destructor: KeyDestructor) -> c_int;
    pub fn pthread_setspecific(key: u32, value: *const c_void) -> c_int;
    pub fn sysconf(name: c_int) -> c_long;
    pub fn pthread_atfork(
        prepare: AtforkHandler,
        parent: AtforkHandler,
        child: AtforkHandler,
    ) -> c_int;
    pub fn __errno_location() -> *mut c_int;
    pub fn syscall(number: c_long, ...) -> c_long;
    pub fn abort() -> !;
}

/// The calling thread's thread pointer: the address of its thread control block, which
/// glibc keeps unique among live threads (every thread that can use glibc's allocator
/// has its own, because glibc's per-thread malloc cache is reached through it). Read
/// with one instruction, without `__tls_get_addr`, and also right for threads made with
/// a raw `clone(CLONE_SETTLS)` that glibc does not know about.
#[inline(always)]
pub fn thread_pointer() -> u64 {
    let tp: u64;
    #[cfg(target_arch = "x86_64")]
    // SAFETY: reads the first word of the thread control block, which the x86_64 TLS ABI
    // requires to hold its own address; no memory is written.
    unsafe {
        core::arch::asm!("mov {}, qword ptr fs:[0]", out(reg) tp, options(nostack, readonly, preserves_flags));
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: reads the thread pointer register; no memory is touched.
    unsafe {
        core::arch::asm!("mrs {}, tpidr_el0", out(reg) tp, options(nomem, nostack, preserves_flags));
    }
    tp
}

/// The system calls of attaching to the report file (`sbs_agent_abi::attach`).
pub struct Libc;

impl sbs_agent_abi::attach::Os for Libc {
    fn read_header(fd: c_int, out: &mut [u8; sbs_agent_abi::HEADER_SIZE]) -> bool {
        // SAFETY: reads at most out.len() bytes into the caller's buffer.
        let got = unsafe { pread(fd, out.as_mut_ptr().cast(), out.len(), 0) };
        got == out.len() as isize
    }

    fn map(fd: c_int) -> Option<&'static sbs_agent_abi::attach::Report> {
        // SAFETY: a fresh shared mapping; the caller checked the header, so `fd` is the
        // collector's report file of REPORT_SIZE bytes.
        let map = unsafe {
            mmap(
                core::ptr::null_mut(),
                sbs_agent_abi::REPORT_SIZE,
                PROT_READ | PROT_WRITE,
                MAP_SHARED,
                fd,
                0,
            )
        };
        if map == MAP_FAILED || map.is_null() {
            return None;
        }
        // SAFETY: REPORT_SIZE bytes, page-aligned, shared, never unmapped; every bit
        // pattern is a valid `Report` (atomics only).
        Some(unsafe { &*map.cast::<sbs_agent_abi::attach::Report>() })
    }

    fn pids() -> (u64, u64) {
        // SAFETY: getpid/getppid have no preconditions.
        let (pid, ppid) = unsafe { (getpid(), getppid()) };
        (pid as u64, ppid as u64)
    }
}

/// Through `syscall`, not libc's `open` and `close`: those are cancellation points, and a
/// hook may run in a thread with a cancellation pending.
impl sbs_agent_abi::attach::Open for Libc {
    fn open_rw(path: &[u8]) -> Option<c_int> {
        if path.last() != Some(&0) {
            return None;
        }
        // SAFETY: `path` is NUL-terminated (checked); openat only reads it.
        let fd = unsafe { syscall(SYS_OPENAT, AT_FDCWD, path.as_ptr(), O_RDWR | O_CLOEXEC) };
        (fd >= 0).then_some(fd as c_int)
    }

    fn close(fd: c_int) {
        // SAFETY: closes a descriptor `open_rw` returned, used by nothing else.
        unsafe { syscall(SYS_CLOSE, fd as c_long) };
    }
}
