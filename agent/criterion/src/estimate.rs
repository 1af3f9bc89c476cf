//! Plain `cargo bench`: the timing loop of one benchmark (warm-up, then flat samples of
//! equal iteration counts) and the lines criterion prints.
//!
//! The estimate is the mean time per iteration over the samples, with Student's t
//! interval at the configured confidence level (criterion bootstraps a regression slope;
//! see docs/criterion-and-divan.md for what differs).

use std::time::{Duration, Instant};

use statrs::distribution::{ContinuousCDF, StudentsT};

use crate::Throughput;

/// How long and how often to measure one benchmark.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Timing {
    pub sample_size: usize,
    pub warm_up_time: Duration,
    pub measurement_time: Duration,
    pub confidence_level: f64,
}

/// The samples of one benchmark.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Measured {
    /// Seconds per iteration, one value per sample.
    pub per_iter: Vec<f64>,
    /// Iterations per sample.
    pub iters: u64,
    /// How long the samples took (routine time only), when it was well over the target.
    pub overran: Option<Duration>,
}

/// Warm up for `timing.warm_up_time` (doubling the iterations of each call), then take
/// `timing.sample_size` samples of one iteration count chosen so that they fill about
/// `timing.measurement_time` of wall-clock time (set-ups included, so that a costly
/// `iter_batched` set-up does not stretch the run). `sample(n)` runs `n` iterations and
/// returns the time they took (set-ups excluded).
pub(crate) fn measure(timing: &Timing, sample: &mut dyn FnMut(u64) -> Duration) -> Measured {
    let start = Instant::now();
    let (mut iters, mut done) = (1u64, 0u64);
    loop {
        sample(iters);
        done += iters;
        if start.elapsed() >= timing.warm_up_time {
            break;
        }
        iters = iters.saturating_mul(2).min(1 << 40);
    }
    // Wall-clock time per iteration, set-ups included: what the samples will take.
    let wall_per_iter = (start.elapsed().as_secs_f64() / done as f64).max(1e-12);
    let n = timing.sample_size.max(2);
    let target = timing.measurement_time.as_secs_f64();
    let iters = ((target / n as f64) / wall_per_iter)
        .ceil()
        .clamp(1.0, 1e12) as u64;
    let sampling = Instant::now();
    let per_iter = (0..n)
        .map(|_| sample(iters).as_secs_f64() / iters as f64)
        .collect();
    let took = sampling.elapsed();
    Measured {
        per_iter,
        iters,
        overran: (took.as_secs_f64() > 1.5 * target).then_some(took),
    }
}

/// Mean, and the interval's low and high ends (the low end cut at 0).
pub(crate) fn interval(values: &[f64], confidence: f64) -> (f64, f64, f64) {
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    if values.len() < 2 {
        return (mean, mean, mean);
    }
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
    let t = StudentsT::new(0.0, 1.0, n - 1.0)
        .map(|d| d.inverse_cdf(0.5 + confidence / 2.0))
        .unwrap_or(f64::NAN);
    let half = t * (var / n).sqrt();
    ((mean), (mean - half).max(0.0), mean + half)
}

/// A number with criterion's precision: about 5 significant digits.
fn short(n: f64) -> String {
    if n < 10.0 {
        format!("{n:.4}")
    } else if n < 100.0 {
        format!("{n:.3}")
    } else if n < 1000.0 {
        format!("{n:.2}")
    } else if n < 10000.0 {
        format!("{n:.1}")
    } else {
        format!("{n:.0}")
    }
}

/// Seconds as criterion prints them (`28.143 µs`).
pub(crate) fn time(secs: f64) -> String {
    let ns = secs * 1e9;
    if ns < 1.0 {
        format!("{} ps", short(ns * 1e3))
    } else if ns < 1e3 {
        format!("{} ns", short(ns))
    } else if ns < 1e6 {
        format!("{} µs", short(ns / 1e3))
    } else if ns < 1e9 {
        format!("{} ms", short(ns / 1e6))
    } else {
        format!("{} s", short(ns / 1e9))
    }
}

/// A rate with the prefixes of `base` (1024 or 1000) and `unit`.
fn rate(per_sec: f64, base: f64, prefixes: [&str; 4], unit: &str) -> String {
    let mut value = per_sec;
    let mut i = 0;
    while value >= base && i < 3 {
        value /= base;
        i += 1;
    }
    format!("{} {}{unit}", short(value), prefixes[i])
}

/// `per_iter` seconds per iteration as a throughput.
pub(crate) fn throughput(t: &Throughput, per_iter: f64) -> String {
    let per_sec = |amount: u64| amount as f64 / per_iter.max(1e-18);
    match *t {
        Throughput::Bytes(b) => rate(per_sec(b), 1024.0, ["", "Ki", "Mi", "Gi"], "B/s"),
        Throughput::BytesDecimal(b) => rate(per_sec(b), 1000.0, ["", "K", "M", "G"], "B/s"),
        Throughput::Bits(b) => rate(per_sec(b), 1000.0, ["", "K", "M", "G"], "bit/s"),
        Throughput::Elements(e) | Throughput::ElementsAndBytes { elements: e, .. } => {
            rate(per_sec(e), 1000.0, ["", "K", "M", "G"], "elem/s")
        }
    }
}

/// Criterion's lines for one benchmark: the id (on a line of its own when longer than 23
/// characters), `time:   [low estimate high]`, and `thrpt:` when a throughput is set.
pub(crate) fn criterion_lines(
    id: &str,
    (mean, low, high): (f64, f64, f64),
    throughput_of: Option<&Throughput>,
) -> String {
    let mut out = if id.chars().count() > 23 {
        format!("{id}\n{:24}", "")
    } else {
        format!("{id:<24}")
    };
    out.push_str(&format!(
        "time:   [{} {} {}]\n",
        time(low),
        time(mean),
        time(high)
    ));
    if let Some(t) = throughput_of {
        // The slowest time is the lowest rate.
        out.push_str(&format!(
            "{:24}thrpt:  [{} {} {}]\n",
            "",
            throughput(t, high),
            throughput(t, mean),
            throughput(t, low)
        ));
    }
    out
}

/// An integer with thousands separators, as libtest prints them.
fn integer(n: f64) -> String {
    let digits = format!("{:.0}", n.max(0.0));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// libtest's line (`--output-format bencher`): the mean and the spread (max - min) in
/// nanoseconds per iteration.
pub(crate) fn bencher_line(id: &str, per_iter: &[f64]) -> String {
    let n = per_iter.len().max(1) as f64;
    let mean = per_iter.iter().sum::<f64>() / n;
    let max = per_iter.iter().copied().fold(f64::MIN, f64::max);
    let min = per_iter.iter().copied().fold(f64::MAX, f64::min);
    format!(
        "test {id} ... bench: {:>11} ns/iter (+/- {})\n",
        integer(mean * 1e9),
        integer((max - min) * 1e9)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interval_is_students_t_over_the_samples() {
        let (m, lo, hi) = interval(&[1.0, 2.0, 3.0], 0.95);
        assert_eq!(m, 2.0);
        // t(0.975, 2) = 4.302652729911275, sd/sqrt(n) = 1/sqrt(3)
        let half = 4.302652729911275 / 3f64.sqrt();
        assert!((hi - (2.0 + half)).abs() < 1e-9);
        assert_eq!(lo, 0.0, "cut at 0");
        assert_eq!(interval(&[5.0], 0.95), (5.0, 5.0, 5.0));
    }

    #[test]
    fn times_rates_and_lines_read_as_criterion_prints_them() {
        assert_eq!(time(28.143e-6), "28.143 µs");
        assert_eq!(time(1.5e-10), "150.00 ps");
        assert_eq!(time(2.0), "2.0000 s");
        assert_eq!(
            throughput(&Throughput::Bytes(1024 * 1024), 1e-3),
            "1000.0 MiB/s"
        );
        assert_eq!(
            throughput(&Throughput::Elements(1000), 1e-6),
            "1.0000 Gelem/s"
        );
        let lines = criterion_lines("hex_encode", (2e-6, 1e-6, 3e-6), None);
        assert_eq!(
            lines,
            "hex_encode              time:   [1.0000 µs 2.0000 µs 3.0000 µs]\n"
        );
        let lines = criterion_lines(
            "a_much_longer_group_name/function/1024",
            (2e-6, 1e-6, 3e-6),
            Some(&Throughput::Bytes(2048)),
        );
        assert!(lines.starts_with(
            "a_much_longer_group_name/function/1024\n                        time:   ["
        ));
        assert!(
            lines.ends_with("thrpt:  [651.04 MiB/s 976.56 MiB/s 1.9073 GiB/s]\n"),
            "{lines}"
        );
        assert_eq!(
            bencher_line("x", &[1.0e-6, 1.2e-6, 1.1e-6]),
            "test x ... bench:       1,100 ns/iter (+/- 200)\n"
        );
    }

    #[test]
    fn samples_fill_about_the_measurement_time() {
        let timing = Timing {
            sample_size: 10,
            warm_up_time: Duration::from_millis(20),
            measurement_time: Duration::from_millis(50),
            confidence_level: 0.95,
        };
        // A routine whose iterations take at least 1 µs each, of which it reports 1 µs.
        let mut calls = Vec::new();
        let started = Instant::now();
        let m = measure(&timing, &mut |n| {
            calls.push(n);
            std::thread::sleep(Duration::from_micros(n));
            Duration::from_micros(n)
        });
        assert_eq!(m.per_iter.len(), 10);
        assert!(
            (100..=5000).contains(&m.iters),
            "at most 50 ms / 10 samples / 1 µs: {}",
            m.iters
        );
        assert!(m.per_iter.iter().all(|&t| (t - 1e-6).abs() < 1e-12));
        // Warm-up (20 ms and its last call) and samples (50 ms): well under a second even
        // on a loaded machine.
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(calls[..3], [1, 2, 4], "warm-up doubles");
    }
}
