//! `AllocProfiler`, accepted as the `#[global_allocator]` of a bench file. It hands every
//! call to the allocator it wraps (the system's by default) and counts nothing itself:
//! under sbs-profile the allocation agent counts every allocation of the process, per
//! operation, whatever the global allocator (as long as it ends in the C library's
//! `malloc` family, as the system allocator does).

// The crate's only unsafe code: the `GlobalAlloc` implementation and its test.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};

/// divan's allocation profiler, as a pass-through global allocator.
#[derive(Debug, Default, Clone, Copy)]
pub struct AllocProfiler<Alloc = System> {
    alloc: Alloc,
}

impl AllocProfiler {
    /// Wrapping the system allocator.
    pub const fn system() -> Self {
        AllocProfiler { alloc: System }
    }
}

impl<A> AllocProfiler<A> {
    /// Wrapping `alloc`.
    pub const fn new(alloc: A) -> Self {
        AllocProfiler { alloc }
    }
}

// SAFETY: every method forwards its arguments unchanged to the wrapped allocator, which
// upholds `GlobalAlloc`'s contract; nothing here reads or changes the memory.
unsafe impl<A: GlobalAlloc> GlobalAlloc for AllocProfiler<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's guarantees for `layout` are the wrapped allocator's.
        unsafe { self.alloc.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        unsafe { self.alloc.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, hence from the wrapped one, with `layout`.
        unsafe { self.alloc.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as for `dealloc`; `new_size` is the caller's, checked by its contract.
        unsafe { self.alloc.realloc(ptr, layout, new_size) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_allocates_through_the_wrapped_allocator() {
        let a = AllocProfiler::system();
        let layout = Layout::from_size_align(64, 8).expect("a layout");
        // SAFETY: a non-zero-sized layout; the block is written within its size, grown,
        // checked and freed with the layout it has.
        unsafe {
            let p = a.alloc_zeroed(layout);
            assert!(!p.is_null());
            assert_eq!(*p.add(63), 0);
            *p = 7;
            let q = a.realloc(p, layout, 128);
            assert!(!q.is_null());
            assert_eq!(*q, 7);
            a.dealloc(q, Layout::from_size_align(128, 8).expect("a layout"));
        }
    }
}
