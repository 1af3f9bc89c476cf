//! `Bencher`: what a benchmark's closure calls with its routine. The routine is handed
//! over once, and the method does all of the benchmark's work at that call: under
//! sbs-profile the harness's child run (`sbs_harness::adapter`), under `cargo bench` the
//! timing loop of [`crate::estimate`], under `cargo test` one iteration.

use std::cell::RefCell;
use std::marker::PhantomData;
use std::time::{Duration, Instant};

use sbs_harness::adapter::ChildRun;

use crate::estimate::{self, Measured, Timing};
use crate::measurement::{Measurement, WallTime};
use crate::{black_box, BatchSize};

/// What the routine is for in this process.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Job<'a> {
    /// The harness's child run: measured per operation by sbs-profile.
    Child(&'a ChildRun),
    /// One iteration, to check that it runs.
    Test,
    /// The timing loop.
    Measure(Timing),
    /// Run for about this long, no analysis.
    Profile(Duration),
}

/// What became of the routine.
#[derive(Debug, Default)]
pub(crate) enum Outcome {
    /// No `iter` method was called.
    #[default]
    NotRun,
    /// Ran as asked (child, test, profile).
    Done,
    /// The timing loop's samples.
    Measured(Measured),
    /// The harness's child run failed.
    Failed(String),
}

/// Times a benchmark's routine: the closure given to `bench_function` calls one of its
/// `iter` methods with the routine.
pub struct Bencher<'a, M: Measurement = WallTime> {
    job: Job<'a>,
    pub(crate) outcome: Outcome,
    _measurement: PhantomData<M>,
}

impl<'a, M: Measurement> Bencher<'a, M> {
    pub(crate) fn new(job: Job<'a>) -> Self {
        Bencher {
            job,
            outcome: Outcome::NotRun,
            _measurement: PhantomData,
        }
    }

    /// Everything but the child run: `sample(n)` runs `n` iterations and returns the time
    /// they took, set-ups excluded.
    fn sampled(&mut self, sample: &mut dyn FnMut(u64) -> Duration) {
        self.outcome = match self.job {
            Job::Child(_) => unreachable!("child runs go through the harness"),
            Job::Test => {
                sample(1);
                Outcome::Done
            }
            Job::Measure(timing) => Outcome::Measured(estimate::measure(&timing, sample)),
            Job::Profile(length) => {
                let start = Instant::now();
                let mut iters = 1u64;
                while start.elapsed() < length {
                    sample(iters);
                    iters = iters.saturating_mul(2).min(1 << 40);
                }
                Outcome::Done
            }
        };
    }

    /// Whether an `iter` method already ran the child run: a second call must not run it
    /// again (its records would be written twice).
    fn ran(&self) -> bool {
        !matches!(self.outcome, Outcome::NotRun)
    }

    fn child_done(&mut self, result: Result<(), sbs_harness::HarnessError>) {
        self.outcome = match result {
            Ok(()) => Outcome::Done,
            Err(e) => Outcome::Failed(e.to_string()),
        };
    }

    /// Time `routine`: under sbs-profile each call is one operation.
    pub fn iter<O, R>(&mut self, mut routine: R)
    where
        R: FnMut() -> O,
    {
        if let Job::Child(child) = self.job {
            if self.ran() {
                return;
            }
            let result = child.run(|| (), |_: &mut ()| routine());
            return self.child_done(result);
        }
        self.sampled(&mut |n| {
            let start = Instant::now();
            for _ in 0..n {
                black_box(routine());
            }
            start.elapsed()
        });
    }

    /// Time `routine`, dropping its outputs outside the measurement. Under sbs-profile the
    /// harness always drops an operation's result outside the measured region, so this is
    /// [`Bencher::iter`] there.
    pub fn iter_with_large_drop<O, R>(&mut self, mut routine: R)
    where
        R: FnMut() -> O,
    {
        if let Job::Child(child) = self.job {
            if self.ran() {
                return;
            }
            let result = child.run(|| (), |_: &mut ()| routine());
            return self.child_done(result);
        }
        self.sampled(&mut |n| {
            let mut outputs = Vec::with_capacity(usize::try_from(n).unwrap_or(usize::MAX));
            let start = Instant::now();
            for _ in 0..n {
                outputs.push(routine());
            }
            let took = start.elapsed();
            drop(black_box(outputs));
            took
        });
    }

    /// [`Bencher::iter_batched`] with a fresh input per iteration
    /// ([`BatchSize::PerIteration`]): `setup` is not measured.
    pub fn iter_with_setup<I, O, S, R>(&mut self, setup: S, routine: R)
    where
        S: FnMut() -> I,
        R: FnMut(I) -> O,
    {
        self.iter_batched(setup, routine, BatchSize::PerIteration);
    }

    /// Time `routine` on inputs made by `setup`, which is not measured. Under sbs-profile
    /// each operation gets an input of its own, made outside the measured region (the
    /// harness's reset), whatever `size` says.
    pub fn iter_batched<I, O, S, R>(&mut self, setup: S, mut routine: R, size: BatchSize)
    where
        S: FnMut() -> I,
        R: FnMut(I) -> O,
    {
        let setup = RefCell::new(setup);
        let make = || (setup.borrow_mut())();
        if let Job::Child(child) = self.job {
            if self.ran() {
                return;
            }
            let result = child.run_with_reset(
                || Some(make()),
                |input: &mut Option<I>| *input = Some(make()),
                |input: &mut Option<I>| {
                    routine(
                        input
                            .take()
                            .expect("the harness resets the input before every operation"),
                    )
                },
            );
            return self.child_done(result);
        }
        self.sampled(&mut |n| {
            let mut took = Duration::ZERO;
            let mut left = n;
            while left > 0 {
                let batch = size.iters_per_batch(n).clamp(1, left);
                left -= batch;
                let inputs: Vec<I> = (0..batch).map(|_| make()).collect();
                let mut outputs = Vec::with_capacity(inputs.len());
                let start = Instant::now();
                for input in inputs {
                    outputs.push(routine(input));
                }
                took += start.elapsed();
                drop(black_box(outputs));
            }
            took
        });
    }

    /// [`Bencher::iter_batched`] with the routine taking its input by reference; the
    /// inputs are dropped outside the measurement too.
    pub fn iter_batched_ref<I, O, S, R>(&mut self, setup: S, mut routine: R, size: BatchSize)
    where
        S: FnMut() -> I,
        R: FnMut(&mut I) -> O,
    {
        let setup = RefCell::new(setup);
        let make = || (setup.borrow_mut())();
        if let Job::Child(child) = self.job {
            if self.ran() {
                return;
            }
            let result = child.run_with_reset(
                make,
                |input: &mut I| *input = make(),
                |input: &mut I| routine(input),
            );
            return self.child_done(result);
        }
        self.sampled(&mut |n| {
            let mut took = Duration::ZERO;
            let mut left = n;
            while left > 0 {
                let batch = size.iters_per_batch(n).clamp(1, left);
                left -= batch;
                let mut inputs: Vec<I> = (0..batch).map(|_| make()).collect();
                let mut outputs = Vec::with_capacity(inputs.len());
                let start = Instant::now();
                for input in inputs.iter_mut() {
                    outputs.push(routine(input));
                }
                took += start.elapsed();
                drop(black_box(outputs));
                drop(black_box(inputs));
            }
            took
        });
    }

    /// The routine runs `iters` iterations and returns the time they took. Under `cargo
    /// bench` that time is used as it is. Under sbs-profile each operation is one call
    /// `routine(1)`, measured by the harness as a whole (what the routine does outside its
    /// own timer is in the operation), and the duration it returns is not used.
    pub fn iter_custom<R>(&mut self, mut routine: R)
    where
        R: FnMut(u64) -> Duration,
    {
        if let Job::Child(child) = self.job {
            if self.ran() {
                return;
            }
            let result = child.run(|| (), |_: &mut ()| routine(1));
            return self.child_done(result);
        }
        self.sampled(&mut |n| routine(n));
    }
}

impl BatchSize {
    /// Iterations per batch for a sample of `iters` iterations (criterion's rule).
    fn iters_per_batch(self, iters: u64) -> u64 {
        match self {
            BatchSize::SmallInput => iters.div_ceil(10),
            BatchSize::LargeInput => iters.div_ceil(1000),
            BatchSize::PerIteration => 1,
            BatchSize::NumBatches(batches) => iters.div_ceil(batches.max(1)),
            BatchSize::NumIterations(size) => size.max(1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing() -> Timing {
        Timing {
            sample_size: 10,
            warm_up_time: Duration::from_millis(5),
            measurement_time: Duration::from_millis(10),
            confidence_level: 0.95,
        }
    }

    #[test]
    fn batched_set_ups_are_made_for_every_iteration_and_not_timed() {
        for size in [
            BatchSize::SmallInput,
            BatchSize::LargeInput,
            BatchSize::PerIteration,
            BatchSize::NumBatches(3),
            BatchSize::NumIterations(7),
        ] {
            let (mut setups, mut runs) = (0u64, 0u64);
            let mut b = Bencher::<WallTime>::new(Job::Measure(timing()));
            b.iter_batched(
                || {
                    setups += 1;
                    std::thread::sleep(Duration::from_micros(50));
                    vec![1u8; 10]
                },
                |v| {
                    runs += 1;
                    v.len()
                },
                size,
            );
            assert_eq!(setups, runs, "{size:?}: one input per iteration");
            let Outcome::Measured(m) = b.outcome else {
                panic!("{size:?}: not measured")
            };
            let (mean, _, _) = estimate::interval(&m.per_iter, 0.95);
            assert!(
                mean < 40e-6,
                "{size:?}: the 50 µs set-up is not timed: {mean}"
            );
        }
    }

    #[test]
    fn a_test_run_is_one_iteration_and_custom_times_are_used() {
        let mut calls = 0;
        let mut b = Bencher::<WallTime>::new(Job::Test);
        b.iter_batched_ref(
            || 0u32,
            |x| {
                *x += 1;
                calls += 1
            },
            BatchSize::SmallInput,
        );
        assert_eq!(calls, 1);
        assert!(matches!(b.outcome, Outcome::Done));
        let mut b = Bencher::<WallTime>::new(Job::Measure(timing()));
        b.iter_custom(|iters| Duration::from_nanos(3 * iters));
        let Outcome::Measured(m) = b.outcome else {
            panic!("not measured")
        };
        assert!(
            m.per_iter.iter().all(|&t| (t - 3e-9).abs() < 1e-15),
            "{m:?}"
        );
    }
}
