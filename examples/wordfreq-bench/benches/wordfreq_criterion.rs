//! The word-frequency example written as a criterion user writes it: the same routines as
//! `benches/wordfreq.rs` (the sbs-harness suite), run through `sbs-criterion`, which this
//! crate's manifest imports under the name `criterion`. Nothing here knows sbs-profile.
//!
//! `cargo bench -p wordfreq-bench --bench wordfreq_criterion` prints criterion's timing
//! lines; `sbs-profile --bench wordfreq_criterion --alloc` gives every metric per
//! operation, with the same per-operation counts as the sbs-harness suite's
//! `wordfreq/count` and `wordfreq/top` (`tests/tests/criterion.rs` checks them).
use std::collections::HashMap;
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{
    black_box, criterion_group, criterion_main, BatchSize, BenchmarkGroup, BenchmarkId, Criterion,
    Throughput,
};
use wordfreq_bench::{count, generate, top};

/// The sbs-harness suite's default size.
const WORDS: usize = 200_000;

fn counting(c: &mut Criterion) {
    let text = generate(WORDS);
    let mut group = c.benchmark_group("wordfreq");
    group.throughput(Throughput::Elements(WORDS as u64));
    group.bench_with_input(BenchmarkId::new("count", WORDS), &text, |b, text| {
        b.iter(|| count(black_box(text)).len())
    });
    group.finish();
}

/// Every way criterion offers to time `top` on counts made outside the measurement.
fn top_variants(group: &mut BenchmarkGroup<'_, WallTime>, text: &[String]) {
    let freq = count(text);
    group.bench_function("top", |b| b.iter(|| top(black_box(&freq), 3)));
    group.bench_function("top-batched", |b| {
        b.iter_batched(
            || count(text),
            |freq: HashMap<&str, usize>| top(black_box(&freq), 3),
            BatchSize::SmallInput,
        )
    });
    group.bench_function("top-batched-ref", |b| {
        b.iter_batched_ref(
            || count(text),
            |freq| top(black_box(freq), 3),
            BatchSize::PerIteration,
        )
    });
    group.bench_function("top-with-setup", |b| {
        b.iter_with_setup(|| count(text), |freq| top(black_box(&freq), 3))
    });
    group.bench_function("top-custom", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                black_box(top(black_box(&freq), 3));
            }
            start.elapsed()
        })
    });
}

fn choosing(c: &mut Criterion) {
    let text = generate(WORDS);
    let mut group = c.benchmark_group("wordfreq");
    group.sample_size(20);
    top_variants(&mut group, &text);
    group.finish();
}

criterion_group!(counts, counting);
criterion_group! {
    name = tops;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
        .noise_threshold(0.05)
        .without_plots();
    targets = choosing
}
criterion_main!(counts, tops);
