//! The shape of a series of timings in the order the runs were made: a drift (later runs
//! steadily slower or faster: the machine warming up, throttling, a neighbour starting)
//! and two modes (runs that take one of two distinct times: a CPU that changes
//! frequency, two cores of different speed, an allocator or cache state that alternates).
//! Either makes the mean describe no run well, and a comparison of means depend on when
//! and where the runs fell; the report says so.

use super::stats;
use statrs::distribution::{ContinuousCDF, Normal};

/// Fewest runs for either check.
const MIN_RUNS: usize = 8;
/// A drift must be this unlikely without one (Mann-Kendall, two-sided) ...
const DRIFT_P: f64 = 0.01;
/// ... and move the median of the last third of the runs this much from the first's.
const DRIFT_CHANGE: f64 = 0.05;
/// Each mode holds at least this share of the runs ...
const MODE_SHARE: f64 = 0.2;
/// ... the gap between them is this share of the median at least ...
const MODE_GAP: f64 = 0.05;
/// ... and this many times the spread inside the modes (their larger median absolute
/// deviation, at least 0.1% of the median).
const MODE_SEPARATION: f64 = 6.0;

/// A steady change over the runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Drift {
    /// Median of the first and of the last third of the runs.
    pub first: f64,
    pub last: f64,
    /// Two-sided p-value of Mann-Kendall's trend test.
    pub p: f64,
}

/// The series in run order drifts: Mann-Kendall's S (the pairs of runs where the later
/// is slower, less those where it is faster) is far from 0, with the normal
/// approximation and its variance corrected for ties, and the last third's median moved
/// materially from the first third's.
pub fn drift(samples: &[f64]) -> Option<Drift> {
    let n = samples.len();
    if n < MIN_RUNS {
        return None;
    }
    let mut s: i64 = 0;
    for i in 0..n {
        for j in i + 1..n {
            s += match samples[j].partial_cmp(&samples[i])? {
                std::cmp::Ordering::Greater => 1,
                std::cmp::Ordering::Less => -1,
                std::cmp::Ordering::Equal => 0,
            };
        }
    }
    let nf = n as f64;
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let ties: f64 = sorted
        .chunk_by(|a, b| a == b)
        .map(|g| g.len() as f64)
        .filter(|&t| t > 1.0)
        .map(|t| t * (t - 1.0) * (2.0 * t + 5.0))
        .sum();
    let var = (nf * (nf - 1.0) * (2.0 * nf + 5.0) - ties) / 18.0;
    if var <= 0.0 {
        return None;
    }
    let z = (s - s.signum()) as f64 / var.sqrt();
    let p = 2.0 * (1.0 - Normal::standard().cdf(z.abs()));
    let third = n / 3;
    let median = stats::median;
    let (first, last) = (median(&samples[..third]), median(&samples[n - third..]));
    let change = (last - first).abs() / first.abs().max(f64::MIN_POSITIVE);
    (p < DRIFT_P && change >= DRIFT_CHANGE).then_some(Drift { first, last, p })
}

/// Two distinct times.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Modes {
    /// Runs near the lower time, and its median; the same for the upper.
    pub low_runs: usize,
    pub low: f64,
    pub high_runs: usize,
    pub high: f64,
}

/// The series has two modes: split at its widest gap, each side holds a fair share of the
/// runs, and the gap is wide against the median and against the spread inside each side.
pub fn modes(samples: &[f64]) -> Option<Modes> {
    let n = samples.len();
    if n < MIN_RUNS {
        return None;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let least = ((n as f64 * MODE_SHARE).ceil() as usize).max(2);
    let (at, gap) = (least..=n - least)
        .map(|i| (i, sorted[i] - sorted[i - 1]))
        .max_by(|a, b| a.1.total_cmp(&b.1))?;
    let (median, mad) = (stats::median, stats::mad);
    let (low, high) = (&sorted[..at], &sorted[at..]);
    let whole = median(&sorted);
    let spread = mad(low).max(mad(high)).max(whole.abs() * 0.001);
    (gap >= MODE_GAP * whole.abs() && gap >= MODE_SEPARATION * spread).then(|| Modes {
        low_runs: low.len(),
        low: median(low),
        high_runs: high.len(),
        high: median(high),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic jitter in [-0.5, 0.5).
    fn jitter(i: usize) -> f64 {
        ((i * 7919 % 101) as f64 / 101.0) - 0.5
    }

    #[test]
    fn a_steady_slowdown_is_a_drift_and_noise_is_not() {
        let rising: Vec<f64> = (0..20)
            .map(|i| 100.0 + 2.0 * i as f64 + jitter(i))
            .collect();
        let d = drift(&rising).expect("a drift");
        assert!(d.p < 1e-6 && d.last > d.first * 1.2, "{d:?}");
        let flat: Vec<f64> = (0..20).map(|i| 100.0 + 4.0 * jitter(i)).collect();
        assert_eq!(drift(&flat), None);
        // Significant but immaterial: 0.1% over the runs.
        let creeping: Vec<f64> = (0..20).map(|i| 100.0 + 0.01 * i as f64).collect();
        assert_eq!(drift(&creeping), None);
        assert_eq!(drift(&rising[..5]), None, "too few runs");
        // Ties everywhere: no variance, no drift.
        assert_eq!(drift(&[3.0; 12]), None);
    }

    #[test]
    fn two_distinct_times_are_two_modes_and_one_outlier_is_not() {
        let alternating: Vec<f64> = (0..20)
            .map(|i| if i % 3 == 0 { 150.0 } else { 100.0 } + jitter(i))
            .collect();
        let m = modes(&alternating).expect("two modes");
        assert_eq!((m.low_runs, m.high_runs), (13, 7), "{m:?}");
        assert!(
            (m.low - 100.0).abs() < 1.0 && (m.high - 150.0).abs() < 1.0,
            "{m:?}"
        );
        let mut one_slow: Vec<f64> = (0..20).map(|i| 100.0 + jitter(i)).collect();
        one_slow[4] = 180.0;
        assert_eq!(modes(&one_slow), None, "one outlier is no mode");
        let spread: Vec<f64> = (0..20).map(|i| 100.0 + 3.0 * i as f64).collect();
        assert_eq!(modes(&spread), None, "an even spread has no gap");
    }
}
