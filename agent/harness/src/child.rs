//! Inside one process: the timed loop (warm-up to steady state, then kept measurements)
//! and the counting loop (region markers around each operation), and their records.

use std::fs::OpenOptions;
use std::hint::black_box;
use std::io::Write;
use std::time::{Duration, Instant};

use crate::steady::{Detector, SteadyConfig, Step};
use sbs_agent_abi::harness as proto;
use statrs::statistics::Statistics;

use crate::error::HarnessError;
use crate::options::{Options, Warmup};
use crate::params::Params;
use crate::region::Region;
use crate::Runnable;

/// Operations run before the region in a counting run, unmeasured: the first call of an
/// operation can do one-time work (under callgrind the first operation of the `pushes`
/// fixture ran 268 instructions more than every later one, its first `sized` allocation
/// 116 more), which would make the per-operation numbers depend on `--ops`.
pub(crate) const COUNT_WARMUP: u64 = proto::COUNT_WARMUP_OPS;

/// Operations timed one at a time at the start of a timing process, before the batches: the
/// first operation against the next ones shows an operation that changes its own input
/// (the collector tests them, see `docs/harness.md`). They count as warm-up.
pub(crate) const FIRST_OPS: usize = 8;

/// Measurements of the empty operation discarded before the kept ones.
const EMPTY_WARMUP: usize = 3;

/// How to time.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TimeConfig {
    pub samples: usize,
    pub warmup: Warmup,
    pub max_iterations: usize,
    pub cov: f64,
    pub batch_time: Duration,
}

/// One process's timing.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct TimeReport {
    /// Kept measurements, seconds per operation.
    pub kept: Vec<f64>,
    /// Operations per measurement.
    pub batch: u64,
    /// Measurements discarded as warm-up (calibration included).
    pub warmup: usize,
    /// CoV of the steady window, when steady state was detected.
    pub steady_cov: Option<f64>,
    /// Steady state was asked for and not reached.
    pub not_steady: bool,
    /// Mean seconds per operation of the empty operation (same loop, batch and reset).
    pub empty: f64,
    /// Seconds of each of the first [`FIRST_OPS`] operations, timed one at a time.
    pub first: Vec<f64>,
    /// Mean seconds of the empty operation timed one at a time.
    pub first_empty: f64,
}

impl TimeReport {
    /// Mean seconds per operation.
    pub fn mean(&self) -> f64 {
        if self.kept.is_empty() {
            return 0.0;
        }
        self.kept.iter().mean()
    }
}

/// One process's counts over the region.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct CountReport {
    pub ops: u64,
    /// (allocations, bytes) made by the operations; `None` without the agent.
    pub alloc: Option<(u64, u64)>,
    /// Mean live bytes retained by one operation's result (and state it grew).
    pub retained: Option<f64>,
}

/// What a measurement reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Clock {
    /// The monotonic clock: what the operation takes.
    Wall,
    /// The CPU time of this thread (user and system, `CLOCK_THREAD_CPUTIME_ID`): what the
    /// operation takes, without the time the thread waited while other processes ran. For the first operations, which a loaded machine's scheduler
    /// would otherwise make look dearer at random.
    ThreadCpu,
}

impl Clock {
    fn now(self) -> Duration {
        match self {
            Clock::Wall => {
                static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
                EPOCH.get_or_init(Instant::now).elapsed()
            }
            // Never None on Linux; a zero duration then (the first operations then tell
            // nothing, and no drift is reported).
            Clock::ThreadCpu => crate::sys::thread_cpu_time().unwrap_or_default(),
        }
    }
}

/// One measurement of `batch` operations of `op` on `state` (a single operation when there
/// is a reset, which runs untimed before every operation but the very first: `fresh`).
fn measure_once<S, R, Z: FnMut(&mut S) + ?Sized>(
    state: &mut S,
    op: &mut impl FnMut(&mut S) -> R,
    reset: Option<&mut Z>,
    fresh: &mut bool,
    batch: u64,
    clock: Clock,
) -> Duration {
    if let Some(reset) = reset {
        if !*fresh {
            reset(state);
        }
        *fresh = false;
        let start = clock.now();
        let result = op(black_box(&mut *state));
        let took = clock.now().saturating_sub(start);
        drop(black_box(result));
        return took;
    }
    *fresh = false;
    let start = clock.now();
    for _ in 0..batch {
        black_box(op(black_box(&mut *state)));
    }
    clock.now().saturating_sub(start)
}

/// Time `op` on `state`: first [`FIRST_OPS`] operations one at a time (in the thread's CPU
/// time), then measurements
/// of a batch of operations long enough to reach `batch_time` (single operations when
/// there is a reset, which must stay outside). Then the empty operation, with the same
/// loop, batch size and reset: the calibration.
pub(crate) fn time<S, R, Z: FnMut(&mut S) + ?Sized>(
    state: &mut S,
    op: &mut impl FnMut(&mut S) -> R,
    mut reset: Option<&mut Z>,
    config: &TimeConfig,
) -> Result<TimeReport, HarnessError> {
    let has_reset = reset.is_some();
    let mut fresh = true;
    let first: Vec<f64> = (0..FIRST_OPS)
        .map(|_| {
            measure_once(
                state,
                op,
                reset.as_deref_mut(),
                &mut fresh,
                1,
                Clock::ThreadCpu,
            )
            .as_secs_f64()
        })
        .collect();
    let mut measure = |batch: u64| {
        measure_once(
            state,
            op,
            reset.as_deref_mut(),
            &mut fresh,
            batch,
            Clock::Wall,
        )
    };
    let (batch, warmup) = if has_reset {
        (1, 0)
    } else {
        calibrate(&mut measure, config.batch_time)
    };
    let mut report = keep(&mut measure, config, batch, warmup + FIRST_OPS)?;
    let mut empty = |s: &mut S| {
        black_box(s);
    };
    let mut measure_empty = |batch: u64, clock: Clock| {
        measure_once(
            state,
            &mut empty,
            reset.as_deref_mut(),
            &mut fresh,
            batch,
            clock,
        )
    };
    let per_op = |d: Duration, batch: u64| d.as_secs_f64() / batch as f64;
    // Timed one at a time with the clock of the first operations: what it adds to each.
    let single: Vec<f64> = (0..EMPTY_WARMUP + config.samples)
        .map(|_| per_op(measure_empty(1, Clock::ThreadCpu), 1))
        .skip(EMPTY_WARMUP)
        .collect();
    let batched: Vec<f64> = (0..EMPTY_WARMUP + config.samples)
        .map(|_| per_op(measure_empty(batch, Clock::Wall), batch))
        .skip(EMPTY_WARMUP)
        .collect();
    report.first = first;
    report.first_empty = single.iter().mean();
    report.empty = batched.iter().mean();
    Ok(report)
}

/// The batch size whose measurement lasts `batch_time`, doubling (or more) from one
/// operation; the measurements taken on the way count as warm-up. Returns the batch and
/// the number of those measurements.
fn calibrate(measure: &mut impl FnMut(u64) -> Duration, batch_time: Duration) -> (u64, usize) {
    let mut warmup = 0usize;
    let mut batch = 1u64;
    loop {
        let took = measure(batch);
        warmup += 1;
        if took >= batch_time || batch >= 1 << 32 {
            return (batch, warmup);
        }
        let factor = if took.is_zero() {
            16.0
        } else {
            (batch_time.as_secs_f64() / took.as_secs_f64()).clamp(1.5, 16.0)
        };
        batch = ((batch as f64) * factor).ceil() as u64;
    }
}

/// Warm up (a fixed count, or to steady state) and keep `config.samples` measurements of
/// `batch` operations each, in seconds per operation.
fn keep(
    measure: &mut impl FnMut(u64) -> Duration,
    config: &TimeConfig,
    batch: u64,
    warmup: usize,
) -> Result<TimeReport, HarnessError> {
    let per_op = |d: Duration| d.as_secs_f64() / batch as f64;
    match config.warmup {
        Warmup::Fixed(n) => {
            for _ in 0..n {
                measure(batch);
            }
            let kept = (0..config.samples)
                .map(|_| per_op(measure(batch)))
                .collect();
            Ok(TimeReport {
                kept,
                batch,
                warmup: warmup + n,
                steady_cov: None,
                not_steady: false,
                ..TimeReport::default()
            })
        }
        Warmup::Steady => {
            let mut detector = Detector::new(SteadyConfig {
                window: config.samples,
                max_cov: config.cov,
                max_iterations: config.max_iterations,
            })?;
            loop {
                match detector.push(per_op(measure(batch))) {
                    Step::WarmingUp | Step::Keeping => {}
                    Step::Done(s) => {
                        return Ok(TimeReport {
                            kept: s.kept,
                            batch,
                            warmup: warmup + s.warmup,
                            steady_cov: Some(s.window_cov),
                            not_steady: false,
                            ..TimeReport::default()
                        })
                    }
                    Step::GaveUp(n) => {
                        return Ok(TimeReport {
                            warmup: warmup + n.iterations - n.last.len(),
                            kept: n.last,
                            batch,
                            steady_cov: None,
                            not_steady: true,
                            ..TimeReport::default()
                        })
                    }
                }
            }
        }
    }
}

/// Run `warmup` operations outside the region, then `ops` operations each inside it: the
/// agent's counters are read just before and after, the perf events (and callgrind's
/// collection) switched on just around it; resets and the drop of each result happen
/// outside. The warm-up operations take the one-time work of a first call (allocator
/// paths taken for the first time, lazily initialised statics) out of the counts.
pub(crate) fn count<S, R, Z: FnMut(&mut S) + ?Sized>(
    state: &mut S,
    op: &mut impl FnMut(&mut S) -> R,
    mut reset: Option<&mut Z>,
    warmup: u64,
    ops: u64,
    region: &Region,
) -> Result<CountReport, HarnessError> {
    let (mut allocs, mut bytes, mut retained) = (0u64, 0u64, 0i128);
    for i in 0..warmup + ops {
        if i > 0 {
            if let Some(reset) = reset.as_deref_mut() {
                reset(state);
            }
        }
        if i < warmup {
            drop(black_box(op(black_box(&mut *state))));
            continue;
        }
        let before = match &region.agent {
            Some(a) => Some(a.snapshot()?),
            None => None,
        };
        region.switch(true)?;
        let result = op(black_box(&mut *state));
        region.switch(false)?;
        if let (Some(a), Some(before)) = (&region.agent, before) {
            let after = a.snapshot()?;
            allocs += after.allocs - before.allocs;
            bytes += after.bytes - before.bytes;
            retained += i128::from(after.live) - i128::from(before.live);
        }
        drop(black_box(result));
    }
    Ok(CountReport {
        ops,
        alloc: region.agent.as_ref().map(|_| (allocs, bytes)),
        retained: region.agent.as_ref().map(|_| retained as f64 / ops as f64),
    })
}

/// Run `ops` operations one at a time, each inside the region and followed by a dump of
/// callgrind's counts (the drift check, [`proto::MODE_FIRST`]); no warm-up operation: the
/// first is the first call on this state. Resets and result drops happen outside.
pub(crate) fn first<S, R, Z: FnMut(&mut S) + ?Sized>(
    state: &mut S,
    op: &mut impl FnMut(&mut S) -> R,
    mut reset: Option<&mut Z>,
    ops: u64,
    region: &Region,
) -> Result<(), HarnessError> {
    for i in 0..ops {
        if i > 0 {
            if let Some(reset) = reset.as_deref_mut() {
                reset(state);
            }
        }
        region.switch(true)?;
        let result = op(black_box(&mut *state));
        region.switch(false)?;
        region.dump();
        drop(black_box(result));
    }
    Ok(())
}

/// `--sbs-run NAME`: run one benchmark as the env vars ask and write its records.
pub(crate) fn run_child(bench: &mut dyn Runnable, options: &Options) -> Result<(), HarnessError> {
    let mut overrides = options.params.clone();
    if let Ok(extra) = std::env::var(proto::ENV_PARAMS) {
        for pair in extra.split(',').filter(|p| !p.trim().is_empty()) {
            overrides.push(crate::params::parse_assignment(pair)?);
        }
    }
    let params = Params::resolve(bench.name(), bench.defaults(), &overrides);
    let mode = std::env::var(proto::ENV_MODE).unwrap_or_else(|_| proto::MODE_TIME.into());
    let mut records: Vec<(&'static str, f64)> = Vec::new();
    match mode.as_str() {
        proto::MODE_COUNT => {
            let ops = match std::env::var(proto::ENV_OPS) {
                Ok(v) => v.trim().parse().map_err(|_| {
                    HarnessError::Usage(format!("{}={v}: not a number", proto::ENV_OPS))
                })?,
                Err(_) => options.ops,
            };
            let region = Region::from_env()?;
            let empty = std::env::var_os(proto::ENV_EMPTY).is_some_and(|v| v == "1");
            let r = bench.count(&params, COUNT_WARMUP, ops, &region, empty)?;
            records.push((proto::REC_OPS, r.ops as f64));
            if let Some((n, b)) = r.alloc {
                records.push((proto::REC_ALLOC_COUNT, n as f64));
                records.push((proto::REC_ALLOC_BYTES, b as f64));
            }
            if let Some(bytes) = r.retained {
                records.push((proto::REC_RETAINED, bytes));
            }
            records.push((proto::REC_REGION_EVENTS, region.perf_events() as f64));
            if let Some(n) = region.callgrind() {
                records.push((proto::REC_REGION_VALGRIND, n as f64));
            }
        }
        proto::MODE_FIRST => {
            let ops = match std::env::var(proto::ENV_OPS) {
                Ok(v) => v.trim().parse().map_err(|_| {
                    HarnessError::Usage(format!("{}={v}: not a number", proto::ENV_OPS))
                })?,
                Err(_) => FIRST_OPS as u64,
            };
            let region = Region::from_env()?;
            let fresh = bench.first(&params, ops, &region)?;
            records.push((proto::REC_FIRST_OPS, ops as f64));
            records.push((proto::REC_FIRST_FRESH_OPS, fresh as f64));
            if let Some(n) = region.callgrind() {
                records.push((proto::REC_REGION_VALGRIND, n as f64));
            }
        }
        proto::MODE_TIME => {
            let config = TimeConfig {
                samples: options.samples,
                warmup: options.warmup,
                max_iterations: options.max_iterations,
                cov: options.cov,
                batch_time: options.batch_time,
            };
            let r = bench.time(&params, &config)?;
            records.push((proto::REC_TIME_OP, r.mean()));
            records.push((proto::REC_SAMPLES, r.kept.len() as f64));
            records.push((proto::REC_BATCH, r.batch as f64));
            records.push((proto::REC_WARMUP, r.warmup as f64));
            if let Some(c) = r.steady_cov {
                records.push((proto::REC_STEADY_COV, c));
            }
            records.push((proto::REC_NOT_STEADY, f64::from(u8::from(r.not_steady))));
            records.push((proto::REC_TIME_EMPTY, r.empty));
            records.extend(r.kept.iter().map(|&t| (proto::REC_TIME_KEPT, t)));
            records.extend(r.first.iter().map(|&t| (proto::REC_TIME_FIRST, t)));
            records.push((proto::REC_TIME_FIRST_EMPTY, r.first_empty));
        }
        other => {
            return Err(HarnessError::Usage(format!(
                "{}={other}: expected `{}`, `{}` or `{}`",
                proto::ENV_MODE,
                proto::MODE_TIME,
                proto::MODE_COUNT,
                proto::MODE_FIRST
            )))
        }
    }
    write_records(&records)
}

fn write_records(records: &[(&str, f64)]) -> Result<(), HarnessError> {
    let text: String = records
        .iter()
        .map(|(k, v)| format!("{k} {v:e}\n"))
        .collect();
    match std::env::var_os(proto::ENV_OUT) {
        Some(path) => {
            let shown = std::path::Path::new(&path).display().to_string();
            let mut file = OpenOptions::new()
                .append(true)
                .open(&path)
                .map_err(|e| HarnessError::io(format!("opening the record file {shown}"), e))?;
            file.write_all(text.as_bytes())
                .map_err(|e| HarnessError::io(format!("writing the record file {shown}"), e))
        }
        None => std::io::stdout()
            .write_all(text.as_bytes())
            .map_err(|e| HarnessError::io("writing records to stdout", e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(warmup: Warmup) -> TimeConfig {
        TimeConfig {
            samples: 4,
            warmup,
            max_iterations: 200,
            cov: 0.5,
            batch_time: Duration::from_micros(200),
        }
    }

    #[test]
    fn batches_reach_the_target_time_and_keep_k_samples() {
        let mut calls = 0u64;
        let mut state = 0u64;
        let mut op = |s: &mut u64| {
            calls += 1;
            *s = s.wrapping_mul(6364136223846793005).wrapping_add(1);
            *s
        };
        let r = time(
            &mut state,
            &mut op,
            None::<&mut fn(&mut u64)>,
            &config(Warmup::Fixed(2)),
        )
        .unwrap();
        assert_eq!(r.kept.len(), 4);
        assert!(r.batch > 1, "a tiny op is batched: {}", r.batch);
        assert!(r.kept.iter().all(|&t| t > 0.0 && t < 1e-5), "{:?}", r.kept);
        // Calibration + 2 warm-up + 4 kept measurements, each `batch` ops long at the end.
        assert!(calls >= 6 * r.batch);
        assert!(!r.not_steady);
    }

    #[test]
    fn with_a_reset_each_measurement_is_one_operation() {
        let mut state: Vec<u64> = Vec::new();
        let mut resets = 0;
        let mut reset = |v: &mut Vec<u64>| {
            resets += 1;
            v.clear();
        };
        let mut op = |v: &mut Vec<u64>| {
            assert!(
                v.is_empty(),
                "reset runs before every operation but the first"
            );
            v.push(1);
        };
        let r = time(
            &mut state,
            &mut op,
            Some(&mut reset),
            &config(Warmup::Steady),
        )
        .unwrap();
        assert_eq!(r.batch, 1);
        assert_eq!(r.kept.len(), 4);
        // The operations (first ones, warm-up, kept), then the empty one timed alone and
        // in batches of 1, each with its reset too.
        let empty_ops = 2 * (EMPTY_WARMUP + 4);
        assert_eq!(resets, r.warmup + r.kept.len() - 1 + empty_ops);
        assert_eq!(r.first.len(), FIRST_OPS);
    }

    #[test]
    fn the_empty_operation_costs_less_than_a_real_one_in_the_same_loop() {
        let mut state = 1u64;
        let mut op = |s: &mut u64| {
            for i in 0..black_box(200u64) {
                *s = black_box(s.wrapping_mul(6364136223846793005).wrapping_add(i));
            }
            *s
        };
        let r = time(
            &mut state,
            &mut op,
            None::<&mut fn(&mut u64)>,
            &config(Warmup::Fixed(2)),
        )
        .unwrap();
        assert!(r.empty > 0.0 && r.empty < r.mean() / 5.0, "{r:?}");
        assert!(r.first_empty > 0.0, "{r:?}");
        assert_eq!(r.first.len(), FIRST_OPS);
        assert!(r.first.iter().all(|&t| t > 0.0), "{r:?}");
    }

    #[test]
    fn count_without_collector_runs_ops_and_resets_between() {
        let mut state = 0u32;
        let mut ops = 0;
        let mut op = |s: &mut u32| {
            assert_eq!(*s, 0);
            *s += 1;
            ops += 1;
        };
        let mut reset = |s: &mut u32| *s = 0;
        let r = count(
            &mut state,
            &mut op,
            Some(&mut reset),
            0,
            7,
            &Region::default(),
        )
        .unwrap();
        assert_eq!(r.ops, 7);
        assert_eq!(ops, 7);
        assert_eq!(r.alloc, None);
    }

    #[test]
    fn warm_up_operations_run_before_the_region_with_resets_between() {
        let mut state = 0u32;
        let mut ops = 0;
        let mut op = |s: &mut u32| {
            assert_eq!(*s, 0, "reset before every operation but the first");
            *s += 1;
            ops += 1;
        };
        let mut reset = |s: &mut u32| *s = 0;
        let r = count(
            &mut state,
            &mut op,
            Some(&mut reset),
            1,
            3,
            &Region::default(),
        )
        .unwrap();
        assert_eq!((r.ops, ops), (3, 4));
    }
}
