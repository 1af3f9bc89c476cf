//! A harnessed suite with known answers per operation, behind a set-up that does far more.
//!
//! - `pushes`: each operation calls `push_one` exactly [`PUSHES`] times and makes exactly
//!   [`ALLOCS`] allocations ([`RESULT_BYTES`] bytes), all of them in the result it returns,
//!   so the result retains exactly [`RESULT_BYTES`]. The set-up calls `push_one`
//!   10 × [`PUSHES`] times and makes 1000 allocations; the reset clears the vector (keeping
//!   its capacity) so pushes never reallocate.
//! - `boxes`: each operation boxes exactly [`BOXES`] values (`Box::new`); the set-up
//!   boxes 1000.
//! - `sized`: one allocation of `bytes` (a parameter, default 1000) per operation.
//! - `spin`: a fixed amount of arithmetic, no allocation: for timing.
//! - `threaded`: each operation starts 2 threads that call `push_one` 500 times each
//!   ([`PUSHES`] in all): region markers must follow the work into new threads.
//! - `mix`: each operation runs `work` (a parameter, default 1000) rounds of [`mix`], a
//!   fixed instruction sequence, and allocates nothing; the set-up runs `setup` rounds
//!   (default 100,000): the instruction count per operation is deterministic and scales
//!   with `work` only.
use sbs_harness::{black_box, Suite};

const PUSHES: u64 = 1000;
/// One outer vector with room for 4, and 4 inner vectors of 100 bytes.
const ALLOCS: usize = 5;
/// 4 × 24 bytes of the outer vector + 4 × 100.
const RESULT_BYTES: usize = 4 * 24 + 4 * 100;
/// Values boxed by one operation of `boxes`.
const BOXES: u64 = 7;

#[inline(never)]
fn push_one(v: &mut Vec<u64>, x: u64) {
    v.push(black_box(x));
}

/// `rounds` rounds of a multiply-add chain the optimizer cannot fold (the round count and
/// the seed pass through `black_box`).
#[inline(never)]
fn mix(seed: u64, rounds: u64) -> u64 {
    let mut s = black_box(seed);
    for i in 0..black_box(rounds) {
        s = s.wrapping_mul(6364136223846793005).wrapping_add(i) ^ (s >> 7);
    }
    s
}

fn main() {
    let mut suite = Suite::new();
    suite
        .bench("pushes", |_| {
            let mut scratch = Vec::new();
            for i in 0..10 * PUSHES {
                push_one(&mut scratch, i);
            }
            let garbage: Vec<Box<u64>> = (0..1000).map(Box::new).collect();
            black_box(garbage);
            Vec::<u64>::with_capacity(PUSHES as usize)
        })
        .reset(|v| v.clear())
        .run(|v| {
            for i in 0..PUSHES {
                push_one(v, i);
            }
            let mut out: Vec<Vec<u8>> = Vec::with_capacity(ALLOCS - 1);
            for i in 0..ALLOCS - 1 {
                out.push(vec![i as u8; 100]);
            }
            debug_assert_eq!(RESULT_BYTES, 496);
            out
        });
    // Boxes exactly BOXES values per operation, behind a set-up that boxes 1000.
    suite
        .bench("boxes", |_| {
            let kept: Vec<Box<u64>> = (0..1000).map(Box::new).collect();
            black_box(kept)
        })
        .run(|_| {
            let boxed: Vec<Box<u64>> = (0..BOXES).map(|i| Box::new(black_box(i))).collect();
            boxed
        });
    suite
        .bench("sized", |p| p.get::<usize>("bytes"))
        .param("bytes", 1000)
        .run(|n| vec![1u8; black_box(*n)]);
    suite.bench("spin", |_| 0u64).run(|s| {
        for i in 0..2000u64 {
            *s = black_box(s.wrapping_mul(6364136223846793005).wrapping_add(i));
        }
        *s
    });
    suite.bench("threaded", |_| ()).run(|_| {
        std::thread::scope(|scope| {
            for _ in 0..2 {
                scope.spawn(|| {
                    let mut v = Vec::with_capacity(PUSHES as usize / 2);
                    for i in 0..PUSHES / 2 {
                        push_one(&mut v, i);
                    }
                    v.len()
                });
            }
        })
    });
    suite
        .bench("mix", |p| {
            let seed = mix(1, p.get::<u64>("setup"));
            (seed, p.get::<u64>("work"))
        })
        .param("work", 1000)
        .param("setup", 100_000)
        .run(|(seed, work)| mix(*seed, *work));
    suite.main();
}
