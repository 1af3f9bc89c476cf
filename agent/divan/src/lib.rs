//! divan's benchmark API, run by `sbs-harness`: a bench file written for divan builds
//! against this crate when its dependency line is renamed,
//!
//! ```toml
//! [dev-dependencies]
//! divan = { package = "sbs-divan", path = "../sbs-profile/agent/divan" }
//! ```
//!
//! and works three ways:
//!
//! - `cargo bench`: each benchmark is sampled as its options say (`sample_count`,
//!   `sample_size`, `min_time`, `max_time`) and printed on a line of its own: its path
//!   (`bench::module::function::arg`), the fastest, slowest, median and mean time per
//!   iteration, and a throughput when it declares a counter.
//! - `sbs-profile --bench NAME`: each benchmark, by its divan path, runs in child processes
//!   through the harness's protocol (`sbs_harness::adapter`): the routine is the
//!   operation, `with_inputs` and everything the function does before calling `bench`
//!   stay outside the measured region, and every metric group comes out per operation.
//! - `cargo test --benches`: each benchmark runs once.
//!
//! ```no_run
//! # extern crate sbs_divan as divan;
//! #[divan::bench(args = [10, 20])]
//! fn fibonacci(n: u64) -> u64 {
//!     (1..n).fold((0, 1), |(a, b), _| (b, a + b)).1
//! }
//!
//! #[divan::bench]
//! fn sort(bencher: divan::Bencher) {
//!     bencher
//!         .with_inputs(|| vec![3, 1, 2])
//!         .bench_refs(|v| v.sort());
//! }
//!
//! fn main() {
//!     divan::main();
//! }
//! ```
//!
//! What maps to what, and what cannot be honoured: `docs/criterion-and-divan.md`.

// Unsafe code only where `alloc` allows it.
#![deny(unsafe_code)]

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;
mod alloc;
mod bencher;
mod cli;
pub mod counter;
mod run;

use std::io::Write;
use std::time::Duration;

pub use alloc::AllocProfiler;
pub use bencher::{Bencher, BencherConfig, WithInputs};
pub use sbs_divan_macros::{bench, bench_group};
/// Keeps the optimizer from deleting work whose result is unused (divan's is this one).
pub use std::hint::black_box;

/// What a bench file usually imports: `use divan::prelude::*;`.
pub mod prelude {
    pub use crate::{bench, bench_group, black_box, black_box_drop, AllocProfiler, Bencher, Divan};
}

/// Drop `value` after hiding it from the optimizer.
pub fn black_box_drop<T>(value: T) {
    drop(black_box(value));
}

/// Run the benchmarks of this program as its command line says: `fn main() {
/// divan::main() }`.
pub fn main() {
    Divan::from_args().main();
}

/// Print `error: MESSAGE` and end the process with exit code 2 (the harness's
/// convention): a bench binary's command line or benchmark that cannot run.
pub(crate) fn fail(message: &str) -> ! {
    let _ = writeln!(std::io::stderr(), "error: {message}");
    std::process::exit(2)
}

/// The runner, with settings for every benchmark (the attributes' options and the
/// command line's override them).
#[derive(Debug, Clone, Default)]
pub struct Divan {
    defaults: __private::Options,
    /// Paths to skip: (filter, exact).
    skips: Vec<(String, bool)>,
    /// How `cargo bench` prints byte throughputs.
    bytes_format: counter::BytesFormat,
    /// The counter of benchmarks that declare none.
    counter: Option<counter::AnyCounter>,
}

impl Divan {
    /// The runner as the command line configures it (the command line is always read).
    pub fn from_args() -> Self {
        Divan::default()
    }

    /// Run the selected benchmarks.
    pub fn main(&self) {
        run::main(run::Settings {
            defaults: self.defaults,
            skips: &self.skips,
            bytes_format: self.bytes_format,
            counter: self.counter,
        });
    }

    /// As [`Divan::main`] (divan's name for running without reading the command line
    /// again; the command line is always read here).
    pub fn run_benches(&self) {
        self.main();
    }

    /// The runner as the command line configures it (the command line is always read, so
    /// this is the runner unchanged).
    pub fn config_with_args(self) -> Self {
        self
    }

    /// Print byte throughputs in powers of 1000 (`MB/s`, the default) or of 1024
    /// (`MiB/s`) under `cargo bench`.
    pub fn bytes_format(mut self, format: counter::BytesFormat) -> Self {
        self.bytes_format = format;
        self
    }

    /// The work of one iteration of every benchmark that declares no counter of its own,
    /// for the throughput `cargo bench` prints.
    pub fn counter<C: counter::IntoCounter>(mut self, counter: C) -> Self {
        self.counter = Some(counter::any_counter(counter));
        self
    }

    /// [`Divan::counter`] with a count of items.
    pub fn items_count<C: Into<counter::ItemsCount>>(self, count: C) -> Self {
        self.counter(count.into())
    }

    /// [`Divan::counter`] with a count of bytes.
    pub fn bytes_count<C: Into<counter::BytesCount>>(self, count: C) -> Self {
        self.counter(count.into())
    }

    /// [`Divan::counter`] with a count of characters.
    pub fn chars_count<C: Into<counter::CharsCount>>(self, count: C) -> Self {
        self.counter(count.into())
    }

    /// [`Divan::counter`] with a count of cycles.
    pub fn cycles_count<C: Into<counter::CyclesCount>>(self, count: C) -> Self {
        self.counter(count.into())
    }

    /// Accepted; sbs-divan's timings include no per-iteration overhead to subtract.
    pub fn skip_ext_time(self, _skip: bool) -> Self {
        self
    }

    /// Accepted; the output has no colours.
    pub fn color(self, _yes: impl Into<Option<bool>>) -> Self {
        self
    }

    /// Samples per benchmark under `cargo bench`.
    pub fn sample_count(mut self, n: u32) -> Self {
        self.defaults.sample_count = Some(n);
        self
    }

    /// Iterations per sample under `cargo bench`.
    pub fn sample_size(mut self, n: u32) -> Self {
        self.defaults.sample_size = Some(n);
        self
    }

    /// Sample each benchmark for at least this long under `cargo bench`.
    pub fn min_time(mut self, d: Duration) -> Self {
        self.defaults.min_time = Some(d);
        self
    }

    /// Sample each benchmark for at most this long under `cargo bench`.
    pub fn max_time(mut self, d: Duration) -> Self {
        self.defaults.max_time = Some(d);
        self
    }

    /// Accepted; every benchmark runs on the calling thread.
    pub fn threads<T>(self, _threads: T) -> Self {
        self
    }

    /// Skip the benchmarks whose path contains `filter` (divan's takes a regular
    /// expression; here it is a plain substring).
    pub fn skip_regex(mut self, filter: &str) -> Self {
        self.skips.push((filter.to_string(), false));
        self
    }

    /// Skip the benchmark whose path is `filter` (see [`Divan::skip_regex`]).
    pub fn skip_exact(mut self, filter: impl Into<String>) -> Self {
        self.skips.push((filter.into(), true));
        self
    }
}
