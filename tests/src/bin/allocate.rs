//! Fixture: makes exactly BLOCKS heap allocations of SIZE bytes each (arguments 1 and 2,
//! default 100 and 65536), writes every byte so the pages are resident, keeps them all
//! alive until the end, then frees them. Peak RSS and the allocation count grow with
//! BLOCKS, so `allocate 210 S` allocates 5% more than `allocate 200 S`.
use std::hint::black_box;

fn arg(n: usize, default: usize) -> usize {
    match std::env::args().nth(n) {
        Some(a) => a.parse().unwrap_or_else(|_| {
            eprintln!("allocate: argument {n} `{a}` is not a whole number");
            std::process::exit(2)
        }),
        None => default,
    }
}

fn main() {
    let blocks = arg(1, 100);
    let size = arg(2, 65536);
    let mut kept: Vec<Box<[u8]>> = Vec::with_capacity(blocks);
    for i in 0..blocks {
        // Non-zero fill: the allocator cannot hand back untouched zero pages.
        kept.push(vec![(i % 251) as u8 + 1; size].into_boxed_slice());
    }
    black_box(&kept);
    drop(kept);
}
