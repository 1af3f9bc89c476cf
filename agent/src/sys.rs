//! The few libc functions the agent calls. Declared by hand: the agent has no
//! dependencies, so that `collector/build.rs` can compile it with a bare `rustc`.
//!
//! glibc exports its allocator under `__libc_*` names as well; calling those reaches the
//! real allocator without `dlsym` and without recursing into our own `malloc`.

use core::ffi::{c_char, c_int, c_long, c_void};

pub const PROT_READ: c_int = 1;
pub const PROT_WRITE: c_int = 2;
pub const MAP_SHARED: c_int = 1;
pub const MAP_FAILED: *mut c_void = !0usize as *mut c_void;
pub const SC_PAGESIZE: c_int = 30;
pub const ENOMEM: c_int = 12;
pub const EINVAL: c_int = 22;
/// `RTLD_NEXT` on glibc.
pub const RTLD_NEXT: *mut c_void = !0usize as *mut c_void;

pub type AtforkHandler = Option<unsafe extern "C" fn()>;

#[link(name = "c")]
extern "C" {
    pub fn __libc_malloc(size: usize) -> *mut c_void;
    pub fn __libc_calloc(count: usize, size: usize) -> *mut c_void;
    pub fn __libc_realloc(ptr: *mut c_void, size: usize) -> *mut c_void;
    pub fn __libc_free(ptr: *mut c_void);
    pub fn __libc_memalign(align: usize, size: usize) -> *mut c_void;

    pub fn getenv(name: *const c_char) -> *const c_char;
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
    pub fn pthread_self() -> usize;
    pub fn sysconf(name: c_int) -> c_long;
    pub fn pthread_atfork(
        prepare: AtforkHandler,
        parent: AtforkHandler,
        child: AtforkHandler,
    ) -> c_int;
    pub fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    pub fn __errno_location() -> *mut c_int;
    pub fn abort() -> !;

    /// Non-zero while the process has a single thread (glibc 2.32+).
    pub static __libc_single_threaded: c_char;
}
