//! A harnessed suite whose allocations are counted in-process (`--alloc-harness`): the
//! global allocator is `sbs_harness::CountingAlloc`. The operation of `three` makes exactly
//! 3 allocations of 64 bytes and returns them (192 bytes retained); its set-up makes 100.
use std::alloc::System;

use sbs_harness::{black_box, CountingAlloc, Suite};

#[global_allocator]
static GLOBAL: CountingAlloc<System> = CountingAlloc::new(System);

fn main() {
    let mut suite = Suite::new();
    suite
        .bench("three", |_| {
            let garbage: Vec<Box<[u8; 64]>> = (0..100).map(|_| Box::new([0u8; 64])).collect();
            black_box(garbage);
        })
        .run(|_| {
            (
                Box::new(black_box([1u8; 64])),
                Box::new(black_box([2u8; 64])),
                Box::new(black_box([3u8; 64])),
            )
        });
    suite.main();
}
