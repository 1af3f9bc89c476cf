//! A divan bench file with known answers per operation, written for divan and built here
//! against sbs-divan (the package renames it `divan`); the file builds unchanged against
//! divan itself, whose `AllocProfiler` then prints the same allocation counts.
//!
//! - `new_string`: a new `String` per call: 1 allocation of 12 bytes;
//! - `reused_buffer`: writes into a `String` made before `bench_local`: 0;
//! - `collect::{1,10,100}` (`args`): one `Vec<u64>` of exact size: 1 allocation of 8n bytes;
//! - `boxed::{u8,u64}` (`types`): one `Box<T>`: 1 allocation of `size_of::<T>()`;
//! - `strings::{2,5}` (`consts`): a `Vec` of N `String`s: N + 1 allocations;
//! - `array::{3,40}` (`consts = LENS`, a named array): an array on the stack: 0;
//! - `inputs::sort_refs`, `inputs::len_values` (`with_inputs`): the 1000-element vector is
//!   made outside the measurement; sorting it in place and taking its length allocate 0;
//! - `grouped::format` (a `bench_group` renamed): its path;
//! - `skipped` (`ignore`): not run, not listed.
use divan::counter::{BytesCount, ItemsCount};
use divan::{black_box, AllocProfiler, Bencher};

#[global_allocator]
static ALLOC: AllocProfiler = AllocProfiler::system();

fn main() {
    divan::main();
}

#[divan::bench]
fn new_string() -> String {
    black_box("hello, world").to_string()
}

#[divan::bench(sample_count = 50, min_time = 0.01, max_time = 2)]
fn reused_buffer(bencher: Bencher) {
    let mut buf = String::with_capacity(64);
    bencher.counter(BytesCount::new(12u32)).bench_local(|| {
        buf.clear();
        buf.push_str(black_box("hello, world"));
        buf.len()
    });
}

#[divan::bench(args = [1, 10, 100])]
fn collect(n: u64) -> Vec<u64> {
    (0..black_box(n)).collect()
}

#[divan::bench(types = [u8, u64])]
fn boxed<T: Default>() -> Box<T> {
    Box::new(black_box(T::default()))
}

#[divan::bench(consts = [2, 5])]
fn strings<const N: usize>() -> Vec<String> {
    let mut v = Vec::with_capacity(N);
    for _ in 0..N {
        v.push(black_box("x").to_string());
    }
    v
}

/// Constants from a named array rather than a literal.
const LENS: [usize; 2] = [3, 40];

#[divan::bench(consts = LENS)]
fn array<const N: usize>() -> [u8; N] {
    black_box([7u8; N])
}

#[divan::bench_group(sample_size = 10)]
mod inputs {
    use divan::counter::ItemsCount;
    use divan::Bencher;

    fn descending() -> Vec<u32> {
        (0..1000u32).rev().collect()
    }

    #[divan::bench]
    fn sort_refs(bencher: Bencher) {
        bencher
            .with_inputs(descending)
            .input_counter(|v: &Vec<u32>| ItemsCount::new(v.len()))
            .bench_local_refs(|v| v.sort_unstable());
    }

    #[divan::bench]
    fn len_values(bencher: Bencher) {
        bencher
            .with_inputs(descending)
            .bench_values(|v: Vec<u32>| divan::black_box(v.len()));
    }
}

#[divan::bench_group(name = "grouped")]
mod group {
    #[divan::bench(name = "format", threads = [1])]
    fn fmt() -> String {
        format!("{}-{}", divan::black_box(1), divan::black_box(2))
    }
}

#[divan::bench(ignore)]
fn skipped() {
    panic!("an ignored benchmark must not run");
}

#[divan::bench(args = ["a", "bcd"])]
fn count_chars(bencher: Bencher, s: &str) {
    bencher
        .counter(ItemsCount::new(s.len()))
        .bench(|| black_box(s).chars().count());
}
