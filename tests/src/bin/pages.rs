//! Fixture: `pages N` maps N fresh anonymous pages and writes one byte to each, so the
//! kernel takes at least N page faults (one per first touch); then exits 0.
use std::hint::black_box;

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1000);
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    let len = n * page;
    // SAFETY: a private anonymous mapping at an address the kernel picks; the result is
    // checked against MAP_FAILED before use.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        eprintln!("pages: mmap of {len} bytes failed");
        std::process::exit(1);
    }
    let base = p.cast::<u8>();
    for i in 0..n {
        // SAFETY: i * page < len, inside the mapping, which is writable.
        unsafe { base.add(i * page).write_volatile(1) };
    }
    // SAFETY: the whole mapping was just created here and is no longer used.
    black_box(unsafe { libc::munmap(p, len) });
}
