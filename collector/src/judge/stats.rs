//! The judge's statistics toolbox: Student's t, medians and robust z-scores, each computed
//! in one place (statrs underneath) for every pass that needs them: summaries and their
//! intervals, Welch, paired and session comparisons, outlier and drift checks.

use statrs::distribution::{ContinuousCDF, Normal, StudentsT};
use statrs::statistics::{Data, Median};

/// The median absolute deviation of normal data is this fraction of its standard
/// deviation: `0.6745 * |x - median| / MAD` is a z-score that outliers do not inflate.
const MAD_TO_Z: f64 = 0.6745;

/// Student's t with `df` degrees of freedom; `None` unless `df > 0`.
pub fn students_t(df: f64) -> Option<StudentsT> {
    StudentsT::new(0.0, 1.0, df).ok()
}

/// Beyond this many degrees of freedom Student's t is the normal distribution to five
/// digits, and statrs' inverse of t does not end (at 10^9 degrees of freedom, a series
/// that long under `--max-runs`).
const NORMAL_DF: f64 = 1e5;

/// The two-sided critical value of Student's t with `df` degrees of freedom for a
/// `confidence` interval (e.g. 0.95); `None` unless `df > 0`.
pub fn t_critical(df: f64, confidence: f64) -> Option<f64> {
    let p = 1.0 - (1.0 - confidence) / 2.0;
    if df > NORMAL_DF {
        return Some(standard_normal().inverse_cdf(p));
    }
    Some(students_t(df)?.inverse_cdf(p))
}

/// The two-sided p-value of statistic `t` under Student's t with `df` degrees of freedom.
pub fn t_p_value(t: f64, df: f64) -> Option<f64> {
    let tail = match df > NORMAL_DF {
        true => standard_normal().sf(t.abs()),
        false => students_t(df)?.sf(t.abs()),
    };
    Some((2.0 * tail).min(1.0))
}

fn standard_normal() -> Normal {
    Normal::standard()
}

/// The median of `values` (NaN when empty).
pub fn median(values: &[f64]) -> f64 {
    Data::new(values.to_vec()).median()
}

/// The median absolute deviation of `values` from their median.
pub fn mad(values: &[f64]) -> f64 {
    let m = median(values);
    median(&values.iter().map(|x| (x - m).abs()).collect::<Vec<_>>())
}

/// Robust z-scores of a sample: distances from its median in units its outliers do not
/// stretch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RobustZ {
    median: f64,
    mad: f64,
}

impl RobustZ {
    /// The scale of `values`; `None` when they are empty or more than half are equal
    /// (a MAD of 0 gives no scale).
    pub fn of(values: &[f64]) -> Option<RobustZ> {
        let (median, mad) = (median(values), mad(values));
        (mad > 0.0).then_some(RobustZ { median, mad })
    }

    /// The robust z-score of `x`, always positive.
    pub fn z(&self, x: f64) -> f64 {
        MAD_TO_Z * (x - self.median).abs() / self.mad
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn t_matches_the_tables() {
        // Two-sided 95%: 12.706 at 1 df, 2.228 at 10, 1.962 at 1000.
        assert!((t_critical(1.0, 0.95).unwrap() - 12.706).abs() < 1e-3);
        assert!((t_critical(10.0, 0.95).unwrap() - 2.228).abs() < 1e-3);
        assert!((t_critical(1000.0, 0.95).unwrap() - 1.962).abs() < 1e-3);
        // Where statrs' inverse would not end, the normal's.
        assert!((t_critical(1e9, 0.95).unwrap() - 1.960).abs() < 1e-3);
        assert!((t_critical(NORMAL_DF, 0.95).unwrap() - 1.960).abs() < 1e-4);
        assert_eq!(t_critical(0.0, 0.95), None);
        // t = 2.228 at 10 df is p = 0.05.
        assert!((t_p_value(2.228, 10.0).unwrap() - 0.05).abs() < 1e-3);
    }

    #[test]
    fn medians_and_robust_z_ignore_the_outlier() {
        let v = [1.0, 2.0, 3.0, 4.0, 100.0];
        assert_eq!(median(&v), 3.0);
        assert_eq!(median(&[1.0, 2.0, 3.0, 4.0]), 2.5);
        assert_eq!(mad(&v), 1.0);
        let rz = RobustZ::of(&v).unwrap();
        assert!(rz.z(100.0) > 60.0 && rz.z(4.0) < 1.0);
        assert_eq!(RobustZ::of(&[5.0, 5.0, 5.0, 6.0]), None);
    }
}
