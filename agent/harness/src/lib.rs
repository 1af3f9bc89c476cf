//! A benchmark harness for Rust whose runs `sbs-profile` can measure per operation.
//!
//! A benchmark is a name, parameters with defaults, a set-up that is not measured, the
//! operation, and an optional reset that restores what the operation mutates (outside the
//! measured region, as AutoJMH's "smart reset"):
//!
//! ```no_run
//! use sbs_harness::{black_box, Suite};
//!
//! let mut suite = Suite::new();
//! suite
//!     .bench("vec/push", |p| Vec::<u64>::with_capacity(p.get("n")))
//!     .param("n", 5000)
//!     .reset(|v| v.clear())
//!     .run(|v| {
//!         for i in 0..black_box(1000u64) {
//!             v.push(i);
//!         }
//!     });
//! suite.main();
//! ```
//!
//! Put it in a `[[bench]] harness = false` target (`cargo bench` measures it) or in any
//! binary. Under `sbs-profile --bench NAME` each benchmark runs in its own fresh child
//! processes; the collector passes perf-event descriptors that the harness switches on
//! just around each operation (and, under valgrind, toggles callgrind's collection around
//! it), and reads the allocation agent's counters before and after it, so invocation
//! counts, allocations, counters and instructions come out per operation with the set-up
//! excluded. The protocol is in `sbs_agent_abi::harness`.
//!
//! Timing: warm-up until steady state (the CoV window of the `steady` module) or a fixed count,
//! then `--samples` measurements per process; the interval is over per-process means.
//!
//! The crate also has [`CountingAlloc`], a counting `#[global_allocator]` wrapper for
//! programs the preload agent cannot see into (`sbs-profile --alloc --alloc-harness`).

pub mod adapter;
pub mod capture;
mod child;
mod counting;
mod error;
mod options;
mod params;
mod region;
mod standalone;
mod steady;
mod sys;
mod valgrind;
pub mod words;

use std::io::Write;

pub use counting::CountingAlloc;
pub use error::HarnessError;
pub use params::Params;
/// Mark a function of an application so that `sbs-profile capture` records its calls and
/// `sbs-profile --replay` replays them as benchmarks: see [`mod@capture`].
pub use sbs_harness_macros::capture;
/// Keeps the optimizer from deleting work whose result is unused, or from computing it
/// ahead from known inputs: wrap inputs and results in it.
pub use std::hint::black_box;

use options::Action;

/// What one registered benchmark can do; implemented for each concrete set of closures
/// so the operation is called without dynamic dispatch inside the timed loop.
trait Runnable {
    fn name(&self) -> &str;
    fn defaults(&self) -> &[(String, String)];
    fn sizes(&self) -> &[String];
    fn time(
        &mut self,
        params: &Params,
        config: &child::TimeConfig,
    ) -> Result<child::TimeReport, HarnessError>;
    fn count(
        &mut self,
        params: &Params,
        warmup: u64,
        ops: u64,
        region: &region::Region,
        empty: bool,
    ) -> Result<child::CountReport, HarnessError>;
    /// The drift check ([`sbs_agent_abi::harness::MODE_FIRST`]): `ops` operations counted
    /// one at a time on a set-up, then [`sbs_agent_abi::harness::FIRST_FRESH_OPS`] on a
    /// second one; returns the operations counted on the second (0 if it panicked).
    fn first(
        &mut self,
        params: &Params,
        ops: u64,
        region: &region::Region,
    ) -> Result<u64, HarnessError>;
}

type Setup<'a, S> = Box<dyn FnMut(&Params) -> S + 'a>;
type Reset<'a, S> = Option<Box<dyn FnMut(&mut S) + 'a>>;

/// A benchmark's closures; `'static` when registered in a [`Suite`], borrowed when an
/// [`adapter`] runs one at once.
struct Bench<'a, S, R, F: FnMut(&mut S) -> R> {
    name: String,
    defaults: Vec<(String, String)>,
    sizes: Vec<String>,
    setup: Setup<'a, S>,
    reset: Reset<'a, S>,
    op: F,
}

impl<S, R, F: FnMut(&mut S) -> R> Runnable for Bench<'_, S, R, F> {
    fn name(&self) -> &str {
        &self.name
    }

    fn defaults(&self) -> &[(String, String)] {
        &self.defaults
    }

    fn sizes(&self) -> &[String] {
        &self.sizes
    }

    fn time(
        &mut self,
        params: &Params,
        config: &child::TimeConfig,
    ) -> Result<child::TimeReport, HarnessError> {
        let mut state = (self.setup)(params);
        child::time(&mut state, &mut self.op, self.reset.as_deref_mut(), config)
    }

    fn count(
        &mut self,
        params: &Params,
        warmup: u64,
        ops: u64,
        region: &region::Region,
        empty: bool,
    ) -> Result<child::CountReport, HarnessError> {
        let mut state = (self.setup)(params);
        let reset = self.reset.as_deref_mut();
        if empty {
            // The calibration: everything but the operation itself.
            let mut nothing = |s: &mut S| {
                black_box(s);
            };
            return child::count(&mut state, &mut nothing, reset, warmup, ops, region);
        }
        child::count(&mut state, &mut self.op, reset, warmup, ops, region)
    }

    fn first(
        &mut self,
        params: &Params,
        ops: u64,
        region: &region::Region,
    ) -> Result<u64, HarnessError> {
        let mut state = (self.setup)(params);
        child::first(
            &mut state,
            &mut self.op,
            self.reset.as_deref_mut(),
            ops,
            region,
        )?;
        drop(state);
        // A fresh input in a warm process: what tells a change of the input from one-time
        // work of the process. A set-up that cannot run twice (it claims a port, sets a
        // once-only static) only loses this half of the check.
        let fresh = sbs_agent_abi::harness::FIRST_FRESH_OPS;
        let second = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut state = (self.setup)(params);
            child::first(
                &mut state,
                &mut self.op,
                self.reset.as_deref_mut(),
                fresh,
                region,
            )
        }));
        match second {
            Ok(done) => done.map(|()| fresh),
            Err(_) => Ok(0),
        }
    }
}

/// The registered benchmarks of one binary.
#[derive(Default)]
pub struct Suite {
    benches: Vec<Box<dyn Runnable>>,
}

/// A benchmark being registered: add parameters and a reset, then [`BenchBuilder::run`].
#[must_use = "a benchmark is registered only by .run(operation)"]
pub struct BenchBuilder<'a, S> {
    suite: &'a mut Suite,
    name: String,
    defaults: Vec<(String, String)>,
    sizes: Vec<String>,
    setup: Setup<'static, S>,
    reset: Reset<'static, S>,
}

impl<S: 'static> BenchBuilder<'_, S> {
    /// Declare parameter `key` with its default; `--param key=VALUE` overrides it, and the
    /// set-up reads it with [`Params::get`].
    pub fn param(mut self, key: &str, default: impl ToString) -> Self {
        self.defaults.retain(|(k, _)| k != key);
        self.defaults.push((key.to_string(), default.to_string()));
        self
    }

    /// Declare a *size* parameter: one the operation's cost must depend on (the length of
    /// the input the set-up builds from it). Otherwise like [`BenchBuilder::param`];
    /// `sbs-profile` also counts the operation's instructions at twice the size and warns
    /// when they do not change (an input folded as a constant, or ignored).
    pub fn size(mut self, key: &str, default: u64) -> Self {
        if !self.sizes.iter().any(|k| k == key) {
            self.sizes.push(key.to_string());
        }
        self.param(key, default)
    }

    /// Restore what the operation mutates, between operations and outside the measured
    /// region (its time, allocations and counts are not the operation's).
    pub fn reset(mut self, reset: impl FnMut(&mut S) + 'static) -> Self {
        self.reset = Some(Box::new(reset));
        self
    }

    /// Register the operation. Its result is kept alive until the region ends (so
    /// `heap.retained` is the footprint of what it returns), then dropped outside it.
    pub fn run<R: 'static>(self, op: impl FnMut(&mut S) -> R + 'static) {
        self.suite.benches.push(Box::new(Bench {
            name: self.name,
            defaults: self.defaults,
            sizes: self.sizes,
            setup: self.setup,
            reset: self.reset,
            op,
        }));
    }
}

impl Suite {
    /// An empty suite.
    pub fn new() -> Suite {
        Suite::default()
    }

    /// Start registering benchmark `name`, whose state `setup` builds from the parameters
    /// once per process, before and outside any measurement.
    pub fn bench<S: 'static>(
        &mut self,
        name: &str,
        setup: impl FnMut(&Params) -> S + 'static,
    ) -> BenchBuilder<'_, S> {
        BenchBuilder {
            suite: self,
            name: name.to_string(),
            defaults: Vec::new(),
            sizes: Vec::new(),
            setup: Box::new(setup),
            reset: None,
        }
    }

    /// Names of the registered benchmarks, in registration order.
    pub fn names(&self) -> Vec<&str> {
        self.benches.iter().map(|b| b.name()).collect()
    }

    /// Parse `std::env::args`, do what they ask, and exit: 0 on success, 2 on error (the
    /// message on stderr).
    pub fn main(self) -> ! {
        let args: Vec<String> = std::env::args().skip(1).collect();
        match self.run_with_args(&args) {
            Ok(()) => std::process::exit(0),
            Err(e) => {
                let _ = writeln!(std::io::stderr(), "error: {e}");
                std::process::exit(2)
            }
        }
    }

    /// Do what `args` (without the program name) ask.
    pub fn run_with_args(mut self, args: &[String]) -> Result<(), HarnessError> {
        let options = options::parse(args)?;
        if let Some(dup) = self
            .names()
            .iter()
            .enumerate()
            .find(|(i, n)| self.names()[..*i].contains(n))
            .map(|(_, n)| n.to_string())
        {
            return Err(HarnessError::Usage(format!(
                "benchmark `{dup}` is registered twice; give each benchmark its own name"
            )));
        }
        match options.action {
            Action::Help => {
                print!("{}", options::USAGE);
                Ok(())
            }
            Action::List => {
                let mut out = std::io::stdout().lock();
                for b in self.benches.iter().filter(|b| options.selects(b.name())) {
                    let _ = writeln!(
                        out,
                        "{}\t{}\t{}",
                        b.name(),
                        params::describe(b.defaults()),
                        b.sizes().join(",")
                    );
                }
                Ok(())
            }
            Action::Child => {
                let name = options.run.clone().unwrap_or_default();
                let Some(bench) = self.benches.iter_mut().find(|b| b.name() == name) else {
                    let available = self.names().join(", ");
                    return Err(HarnessError::UnknownBenchmark { name, available });
                };
                check_params(&options.params, std::slice::from_ref(bench))?;
                child::run_child(bench.as_mut(), &options)
            }
            Action::Measure | Action::Smoke => {
                let selected: Vec<Box<dyn Runnable>> = self
                    .benches
                    .into_iter()
                    .filter(|b| options.selects(b.name()))
                    .collect();
                if selected.is_empty() {
                    return Err(HarnessError::NothingSelected {
                        filters: options.filters.clone(),
                    });
                }
                check_params(&options.params, &selected)?;
                if options.action == Action::Measure {
                    standalone::measure(&selected, &options)
                } else {
                    standalone::smoke(selected, &options)
                }
            }
        }
    }
}

/// Every `--param` key must be declared by at least one of `benches`.
fn check_params(
    overrides: &[(String, String)],
    benches: &[Box<dyn Runnable>],
) -> Result<(), HarnessError> {
    for (key, _) in overrides {
        if !benches
            .iter()
            .any(|b| b.defaults().iter().any(|(k, _)| k == key))
        {
            let bench = benches
                .iter()
                .map(|b| b.name())
                .collect::<Vec<_>>()
                .join(", ");
            let mut declared: Vec<&str> = benches
                .iter()
                .flat_map(|b| b.defaults().iter().map(|(k, _)| k.as_str()))
                .collect();
            declared.sort_unstable();
            declared.dedup();
            return Err(HarnessError::UnknownParam {
                key: key.clone(),
                bench,
                declared: if declared.is_empty() {
                    "none".into()
                } else {
                    declared.join(", ")
                },
            });
        }
    }
    Ok(())
}
