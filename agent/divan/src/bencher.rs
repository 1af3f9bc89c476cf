//! `Bencher`: what a benchmark function that takes one is given, and what runs a function
//! that takes none. The routine is handed over once, and the method does all of the
//! benchmark's work at that call: under sbs-profile the harness's child run
//! (`sbs_harness::adapter`), under `cargo bench` the sampling loop, under `cargo test`
//! one iteration.

use std::marker::PhantomData;
use std::time::{Duration, Instant};

use sbs_harness::adapter::ChildRun;

use crate::black_box;
use crate::counter::{any_counter, AnyCounter, AsCountUInt, Counter, IntoCounter};

/// How `cargo bench` samples a benchmark (divan's options, merged).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Plan {
    pub sample_count: u32,
    pub sample_size: Option<u32>,
    pub min_time: Duration,
    pub max_time: Duration,
}

/// What the routine is for in this process.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Job<'a> {
    /// The harness's child run: measured per operation by sbs-profile.
    Child(&'a ChildRun),
    /// One iteration, to check that it runs.
    Test,
    /// The sampling loop.
    Measure(Plan),
}

/// The samples of the sampling loop: seconds per iteration, and iterations per sample.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Measured {
    pub per_iter: Vec<f64>,
    pub iters: u64,
}

/// What became of the routine.
#[derive(Debug, Default)]
pub(crate) enum Outcome {
    /// No `bench` method was called.
    #[default]
    NotRun,
    /// Ran as asked (child, test).
    Done,
    /// The sampling loop's samples.
    Measured(Measured),
    /// The harness's child run failed.
    Failed(String),
}

/// A benchmark's state while its function runs.
#[derive(Debug)]
pub(crate) struct State<'j> {
    pub job: Job<'j>,
    pub outcome: Outcome,
    pub counter: Option<AnyCounter>,
}

/// The routine has no inputs.
#[derive(Debug, Clone, Copy, Default)]
pub struct BencherConfig;

/// The routine takes inputs made by `G`, outside the measurement.
#[derive(Debug, Clone, Copy)]
pub struct WithInputs<G> {
    gen: G,
}

/// Runs a benchmark's routine: the benchmark function calls one of its `bench` methods
/// with it.
pub struct Bencher<'a, 'b, C = BencherConfig> {
    state: &'a mut State<'b>,
    config: C,
    _lifetimes: PhantomData<&'b ()>,
}

impl<'a, 'b> Bencher<'a, 'b> {
    pub(crate) fn new(state: &'a mut State<'b>) -> Self {
        Bencher {
            state,
            config: BencherConfig,
            _lifetimes: PhantomData,
        }
    }
}

impl<C> Bencher<'_, '_, C> {
    fn ran(&self) -> bool {
        !matches!(self.state.outcome, Outcome::NotRun)
    }

    fn child_done(&mut self, result: Result<(), sbs_harness::HarnessError>) {
        self.state.outcome = match result {
            Ok(()) => Outcome::Done,
            Err(e) => Outcome::Failed(e.to_string()),
        };
    }

    /// Everything but the child run: `sample(n)` runs `n` iterations and returns the time
    /// they took, set-ups excluded.
    fn sampled(&mut self, sample: &mut dyn FnMut(u64) -> Duration) {
        self.state.outcome = sample_job(self.state.job, sample);
    }
}

impl<'a, 'b> Bencher<'a, 'b> {
    /// Benchmark `routine`: under sbs-profile each call is one operation, its result
    /// dropped outside the measured region.
    pub fn bench<O, F>(self, routine: F)
    where
        F: FnMut() -> O,
    {
        self.bench_local(routine);
    }

    /// [`Bencher::bench`]; divan runs it on the calling thread only, as is always done here.
    pub fn bench_local<O, F>(mut self, mut routine: F)
    where
        F: FnMut() -> O,
    {
        if let Job::Child(child) = self.state.job {
            if !self.ran() {
                let result = child.run(|| (), |_: &mut ()| routine());
                self.child_done(result);
            }
            return;
        }
        self.sampled(&mut |n| {
            let mut outputs = Vec::with_capacity(usize::try_from(n).unwrap_or(0).min(1 << 16));
            let start = Instant::now();
            for _ in 0..n {
                let out = routine();
                if outputs.len() < outputs.capacity() {
                    outputs.push(out);
                } else {
                    black_box(out);
                }
            }
            let took = start.elapsed();
            drop(black_box(outputs));
            took
        });
    }

    /// The work of one iteration, for the throughput `cargo bench` prints.
    pub fn counter<C: IntoCounter>(self, counter: C) -> Self {
        self.state.counter = Some(any_counter(counter));
        self
    }

    /// Give the routine an input made by `gen` before each iteration, outside the
    /// measurement (under sbs-profile: outside the measured region, the harness's reset).
    pub fn with_inputs<I, G>(self, gen: G) -> Bencher<'a, 'b, WithInputs<G>>
    where
        G: FnMut() -> I,
    {
        Bencher {
            state: self.state,
            config: WithInputs { gen },
            _lifetimes: PhantomData,
        }
    }
}

impl<'a, 'b, I, G> Bencher<'a, 'b, WithInputs<G>>
where
    G: FnMut() -> I,
{
    /// The work of one iteration, for the throughput `cargo bench` prints.
    pub fn counter<C: IntoCounter>(self, counter: C) -> Self {
        self.state.counter = Some(any_counter(counter));
        self
    }

    /// The work of one iteration, from its input (computed from one input made for it,
    /// under `cargo bench` only).
    pub fn input_counter<C, F>(mut self, count: F) -> Self
    where
        F: Fn(&I) -> C,
        C: IntoCounter,
    {
        if let Job::Measure(_) = self.state.job {
            let input = (self.config.gen)();
            self.state.counter = Some(any_counter(count(&input)));
        }
        self
    }

    /// The work of one iteration is its input, an unsigned integer, counted as `C`
    /// (`count_inputs_as::<ItemsCount>()`); as [`Self::input_counter`].
    pub fn count_inputs_as<C>(self) -> Self
    where
        C: Counter + From<u64>,
        I: AsCountUInt,
    {
        self.input_counter(|input: &I| C::from(input.as_u64()))
    }

    /// Benchmark `routine` on inputs it takes by value (dropping them is its work).
    pub fn bench_values<O, F>(self, routine: F)
    where
        F: FnMut(I) -> O,
    {
        self.bench_local_values(routine);
    }

    /// Benchmark `routine` on inputs it takes by reference; they are dropped outside the
    /// measurement.
    pub fn bench_refs<O, F>(self, routine: F)
    where
        F: FnMut(&mut I) -> O,
    {
        self.bench_local_refs(routine);
    }

    /// [`Bencher::bench_values`] on the calling thread.
    pub fn bench_local_values<O, F>(mut self, mut routine: F)
    where
        F: FnMut(I) -> O,
    {
        let gen = std::cell::RefCell::new(&mut self.config.gen);
        let make = || (gen.borrow_mut())();
        if let Job::Child(child) = self.state.job {
            if self.state.outcome.is_not_run() {
                let result = child.run_with_reset(
                    || Some(make()),
                    |input: &mut Option<I>| *input = Some(make()),
                    |input: &mut Option<I>| input.take().map(&mut routine),
                );
                self.state.outcome = Outcome::from(result);
            }
            return;
        }
        let measured = sample_job(self.state.job, &mut |n| {
            let inputs: Vec<I> = (0..n).map(|_| make()).collect();
            let mut outputs = Vec::with_capacity(inputs.len());
            let start = Instant::now();
            for input in inputs {
                outputs.push(routine(input));
            }
            let took = start.elapsed();
            drop(black_box(outputs));
            took
        });
        self.state.outcome = measured;
    }

    /// [`Bencher::bench_refs`] on the calling thread.
    pub fn bench_local_refs<O, F>(mut self, mut routine: F)
    where
        F: FnMut(&mut I) -> O,
    {
        let gen = std::cell::RefCell::new(&mut self.config.gen);
        let make = || (gen.borrow_mut())();
        if let Job::Child(child) = self.state.job {
            if self.state.outcome.is_not_run() {
                let result = child.run_with_reset(
                    make,
                    |input: &mut I| *input = make(),
                    |input: &mut I| routine(input),
                );
                self.state.outcome = Outcome::from(result);
            }
            return;
        }
        let measured = sample_job(self.state.job, &mut |n| {
            let mut inputs: Vec<I> = (0..n).map(|_| make()).collect();
            let mut outputs = Vec::with_capacity(inputs.len());
            let start = Instant::now();
            for input in inputs.iter_mut() {
                outputs.push(routine(input));
            }
            let took = start.elapsed();
            drop(black_box(outputs));
            drop(black_box(inputs));
            took
        });
        self.state.outcome = measured;
    }
}

impl Outcome {
    fn is_not_run(&self) -> bool {
        matches!(self, Outcome::NotRun)
    }
}

impl From<Result<(), sbs_harness::HarnessError>> for Outcome {
    fn from(result: Result<(), sbs_harness::HarnessError>) -> Self {
        match result {
            Ok(()) => Outcome::Done,
            Err(e) => Outcome::Failed(e.to_string()),
        }
    }
}

/// The outcome of a test or sampling job (not a child run).
fn sample_job(job: Job<'_>, sample: &mut dyn FnMut(u64) -> Duration) -> Outcome {
    match job {
        Job::Child(_) => unreachable!("child runs go through the harness"),
        Job::Test => {
            sample(1);
            Outcome::Done
        }
        Job::Measure(plan) => Outcome::Measured(measure(&plan, sample)),
    }
}

/// The shortest time a sample should take when the iterations per sample are chosen here.
const MIN_SAMPLE: Duration = Duration::from_micros(100);

/// The sampling loop: iterations per sample as `plan` says, or doubled until a sample
/// takes [`MIN_SAMPLE`]; then `sample_count` samples, more while `min_time` has not
/// passed, fewer when `max_time` has.
pub(crate) fn measure(plan: &Plan, sample: &mut dyn FnMut(u64) -> Duration) -> Measured {
    let start = Instant::now();
    let iters = match plan.sample_size {
        Some(n) => u64::from(n.max(1)),
        None => {
            let mut n = 1u64;
            while sample(n) < MIN_SAMPLE && n < 1 << 30 && start.elapsed() < plan.max_time {
                n *= 2;
            }
            n
        }
    };
    let begun = Instant::now();
    let mut per_iter = Vec::new();
    loop {
        let took = sample(iters);
        per_iter.push(took.as_secs_f64() / iters as f64);
        let elapsed = begun.elapsed();
        let enough = per_iter.len() >= plan.sample_count.max(1) as usize;
        if (enough && elapsed >= plan.min_time) || elapsed >= plan.max_time {
            break;
        }
    }
    Measured { per_iter, iters }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> Plan {
        Plan {
            sample_count: 10,
            sample_size: None,
            min_time: Duration::ZERO,
            max_time: Duration::from_secs(5),
        }
    }

    #[test]
    fn inputs_are_made_for_every_iteration_and_not_timed() {
        let (mut made, mut runs) = (0u64, 0u64);
        let mut state = State {
            job: Job::Measure(Plan {
                sample_size: Some(20),
                ..plan()
            }),
            outcome: Outcome::NotRun,
            counter: None,
        };
        Bencher::new(&mut state)
            .with_inputs(|| {
                made += 1;
                std::thread::sleep(Duration::from_micros(50));
                vec![1u8; 10]
            })
            .bench_values(|v| {
                runs += 1;
                v.len()
            });
        assert_eq!(made, runs, "one input per iteration");
        let Outcome::Measured(m) = state.outcome else {
            panic!("not measured")
        };
        assert!(m.per_iter.len() >= 10);
        let mean = m.per_iter.iter().sum::<f64>() / m.per_iter.len() as f64;
        assert!(mean < 40e-6, "the 50 µs set-up is not timed: {mean}");
    }

    #[test]
    fn sample_size_and_count_are_honoured() {
        let mut calls = 0u64;
        let mut state = State {
            job: Job::Measure(Plan {
                sample_size: Some(7),
                ..plan()
            }),
            outcome: Outcome::NotRun,
            counter: None,
        };
        Bencher::new(&mut state).bench(|| calls += 1);
        assert_eq!(calls, 70);
        let mut state = State {
            job: Job::Test,
            outcome: Outcome::NotRun,
            counter: None,
        };
        let mut n = 0;
        Bencher::new(&mut state)
            .with_inputs(|| 1)
            .bench_local_refs(|x| n += *x);
        assert_eq!(n, 1);
        assert!(matches!(state.outcome, Outcome::Done));
    }
}
