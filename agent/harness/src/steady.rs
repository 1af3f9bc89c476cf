//! Steady-state detection for benchmarks that iterate inside one process (harnessed).
//!
//! It runs inside the child, in the harness's timing loop; the collector only reads the
//! outcome from the harness's records.
//!
//! After Georges, Buytaert and Eeckhout (OOPSLA 2007): a sliding window of the last `k`
//! measurements whose coefficient of variation (sd / |mean|) falls under a threshold marks
//! steady state; the next `k` measurements are the ones kept. A cap on the number of
//! iterations ends a benchmark that never settles, and says so.
//!
//! Pure logic over numbers: the harness feeds measurements in and asks what to do next.

use statrs::statistics::Statistics;

/// Default window size.
pub const DEFAULT_WINDOW: usize = 10;
/// Default CoV threshold (2%).
pub const DEFAULT_COV: f64 = 0.02;

/// Parameters of the detector.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SteadyConfig {
    /// Window size `k` (at least 2).
    pub window: usize,
    /// CoV under which a window counts as steady, e.g. 0.02.
    pub max_cov: f64,
    /// Give up after this many measurements in total (warm-up and kept ones).
    pub max_iterations: usize,
}

impl Default for SteadyConfig {
    fn default() -> Self {
        SteadyConfig {
            window: DEFAULT_WINDOW,
            max_cov: DEFAULT_COV,
            max_iterations: 1000,
        }
    }
}

/// A configuration that cannot work.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SteadyConfigError {
    /// The window is too small to have a variance.
    #[error("steady-state window {0} is too small: use at least 2 measurements")]
    WindowTooSmall(usize),
    /// The CoV threshold is not a positive finite number.
    #[error("steady-state CoV threshold {0} must be a finite number > 0, e.g. 0.02 for 2%")]
    BadCov(f64),
    /// The cap leaves no room for a window and the kept measurements.
    #[error("at most {max} iterations cannot hold a window of {window} plus {window} kept measurements: raise the cap to at least {needed}")]
    CapTooSmall {
        /// The cap.
        max: usize,
        /// The window.
        window: usize,
        /// `2 * window`.
        needed: usize,
    },
}

impl SteadyConfig {
    /// Check that the detector can ever finish.
    pub fn validate(&self) -> Result<(), SteadyConfigError> {
        if self.window < 2 {
            return Err(SteadyConfigError::WindowTooSmall(self.window));
        }
        if !self.max_cov.is_finite() || self.max_cov <= 0.0 {
            return Err(SteadyConfigError::BadCov(self.max_cov));
        }
        if self.max_iterations < 2 * self.window {
            return Err(SteadyConfigError::CapTooSmall {
                max: self.max_iterations,
                window: self.window,
                needed: 2 * self.window,
            });
        }
        Ok(())
    }
}

/// Coefficient of variation of `values`: sample sd / |mean|. 0 when all values are equal
/// (also all zero); `None` for fewer than 2 values or a zero mean with spread.
pub fn cov(values: &[f64]) -> Option<f64> {
    if values.len() < 2 {
        return None;
    }
    let (mean, var) = (values.mean(), values.variance());
    if var == 0.0 || values.iter().all(|&v| v == values[0]) {
        Some(0.0)
    } else if mean == 0.0 {
        None
    } else {
        Some(var.sqrt() / mean.abs())
    }
}

/// Where steady state was found in a complete series.
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SteadyState {
    /// Index of the first measurement of the steady window.
    pub window_start: usize,
    /// CoV of that window.
    pub window_cov: f64,
    /// Index of the first kept measurement (`window_start + k`).
    pub kept_start: usize,
}

/// The first window of `config.window` consecutive values with CoV under
/// `config.max_cov`, provided `config.window` values follow it to be kept. `None` if the
/// series never settles that early. The offline reference the tests hold the online
/// [`Detector`] to.
#[cfg(test)]
pub fn detect(values: &[f64], config: &SteadyConfig) -> Option<SteadyState> {
    let k = config.window.max(2);
    if values.len() < 2 * k {
        return None;
    }
    (0..=values.len() - 2 * k).find_map(|start| {
        let c = cov(&values[start..start + k])?;
        (c < config.max_cov).then_some(SteadyState {
            window_start: start,
            window_cov: c,
            kept_start: start + k,
        })
    })
}

/// What the harness should do after a measurement.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Not steady yet: measure again (warm-up).
    WarmingUp,
    /// Steady state reached: measure again, the measurements from now on are kept.
    Keeping,
    /// Done: these are the `k` kept measurements.
    Done(Steady),
    /// The cap was reached before steady state (or before `k` were kept).
    GaveUp(NotSteady),
}

/// The outcome of a series that reached steady state.
#[derive(Debug, Clone, PartialEq)]
pub struct Steady {
    /// Measurements spent warming up, including the steady window itself.
    pub warmup: usize,
    /// CoV of the window that marked steady state.
    pub window_cov: f64,
    /// The kept measurements.
    pub kept: Vec<f64>,
}

/// The outcome of a series that never settled.
#[derive(Debug, Clone, PartialEq)]
pub struct NotSteady {
    /// Measurements made.
    pub iterations: usize,
    /// The smallest CoV seen over any window (`None` if no window could be computed).
    pub best_cov: Option<f64>,
    /// The last `k` measurements, for a report that says it is not steady.
    pub last: Vec<f64>,
}

impl std::fmt::Display for NotSteady {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "no steady state after {} iterations (best window CoV {}): raise the \
             iteration cap or the CoV threshold, or reduce noise (pin CPUs, quiet machine)",
            self.iterations,
            self.best_cov
                .map_or("n/a".to_string(), |c| format!("{:.2}%", c * 100.0))
        )
    }
}

/// The online detector a harness feeds, one measurement at a time.
#[derive(Debug, Clone)]
pub struct Detector {
    config: SteadyConfig,
    values: Vec<f64>,
    steady_at: Option<(usize, f64)>,
    best_cov: Option<f64>,
    finished: bool,
}

impl Detector {
    /// A detector; `config` must pass [`SteadyConfig::validate`].
    pub fn new(config: SteadyConfig) -> Result<Detector, SteadyConfigError> {
        config.validate()?;
        Ok(Detector {
            config,
            values: Vec::new(),
            steady_at: None,
            best_cov: None,
            finished: false,
        })
    }

    /// Record one measurement and say what to do next. After `Done` or `GaveUp`, further
    /// calls repeat the final answer without recording.
    pub fn push(&mut self, value: f64) -> Step {
        let k = self.config.window;
        if !self.finished {
            self.values.push(value);
        }
        let n = self.values.len();
        if let Some((end, window_cov)) = self.steady_at {
            if n >= end + k {
                self.finished = true;
                return Step::Done(Steady {
                    warmup: end,
                    window_cov,
                    kept: self.values[end..end + k].to_vec(),
                });
            }
        } else if n >= k {
            if let Some(c) = cov(&self.values[n - k..]) {
                self.best_cov = Some(self.best_cov.map_or(c, |b: f64| b.min(c)));
                if c < self.config.max_cov && n + k <= self.config.max_iterations {
                    self.steady_at = Some((n, c));
                }
            }
        }
        if n >= self.config.max_iterations {
            self.finished = true;
            return Step::GaveUp(NotSteady {
                iterations: n,
                best_cov: self.best_cov,
                last: self.values[n.saturating_sub(k)..].to_vec(),
            });
        }
        if self.steady_at.is_some() {
            Step::Keeping
        } else {
            Step::WarmingUp
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(window: usize, max_cov: f64, max_iterations: usize) -> SteadyConfig {
        SteadyConfig {
            window,
            max_cov,
            max_iterations,
        }
    }

    /// A warm-up that decays geometrically, then flat with a small alternating wiggle.
    fn jit_like(n: usize) -> Vec<f64> {
        (0..n)
            .map(|i| 100.0 + 400.0 * 0.5f64.powi(i as i32) + if i % 2 == 0 { 0.5 } else { -0.5 })
            .collect()
    }

    #[test]
    fn cov_values() {
        assert_eq!(cov(&[1.0]), None);
        assert_eq!(cov(&[3.0, 3.0, 3.0]), Some(0.0));
        assert_eq!(cov(&[0.0, 0.0]), Some(0.0));
        assert_eq!(cov(&[-1.0, 1.0]), None);
        // sd of [9, 11] is sqrt(2), mean 10.
        let c = cov(&[9.0, 11.0]).unwrap();
        assert!((c - 2f64.sqrt() / 10.0).abs() < 1e-15);
    }

    #[test]
    fn detect_finds_first_steady_window() {
        let v = jit_like(40);
        let s = detect(&v, &config(5, 0.02, 100)).unwrap();
        // Window [i, i+5) is steady once the decay term is small against 100.
        for start in 0..s.window_start {
            assert!(cov(&v[start..start + 5]).unwrap() >= 0.02);
        }
        assert!(s.window_cov < 0.02);
        assert_eq!(s.kept_start, s.window_start + 5);
        assert!(s.window_start > 0);
        // Too short to keep k after the window.
        assert_eq!(detect(&v[..9], &config(5, 0.02, 100)), None);
        // Never steady.
        let noisy: Vec<f64> = (0..50)
            .map(|i| if i % 2 == 0 { 1.0 } else { 2.0 })
            .collect();
        assert_eq!(detect(&noisy, &config(5, 0.02, 100)), None);
    }

    #[test]
    fn detector_agrees_with_detect() {
        let v = jit_like(60);
        let cfg = config(5, 0.02, 60);
        let offline = detect(&v, &cfg).unwrap();
        let mut d = Detector::new(cfg).unwrap();
        let mut outcome = None;
        for (i, &x) in v.iter().enumerate() {
            match d.push(x) {
                Step::WarmingUp => assert!(i + 1 < offline.kept_start),
                Step::Keeping => assert!(i + 1 >= offline.kept_start),
                Step::Done(s) => {
                    assert_eq!(i + 1, offline.kept_start + 5);
                    outcome = Some(s);
                    break;
                }
                Step::GaveUp(n) => panic!("gave up: {n}"),
            }
        }
        let s = outcome.expect("steady");
        assert_eq!(s.warmup, offline.kept_start);
        assert_eq!(s.kept, v[offline.kept_start..offline.kept_start + 5]);
        assert_eq!(s.window_cov, offline.window_cov);
        // Finished: more pushes repeat the answer.
        assert!(matches!(d.push(1e9), Step::Done(ref again) if *again == s));
    }

    #[test]
    fn detector_gives_up_at_the_cap() {
        let mut d = Detector::new(config(3, 0.01, 12)).unwrap();
        let mut last = Step::WarmingUp;
        for i in 0..12 {
            last = d.push(if i % 2 == 0 { 1.0 } else { 2.0 });
            if i < 11 {
                assert_eq!(last, Step::WarmingUp);
            }
        }
        match last {
            Step::GaveUp(n) => {
                assert_eq!(n.iterations, 12);
                assert_eq!(n.last, vec![2.0, 1.0, 2.0]);
                assert!(n.best_cov.unwrap() > 0.01);
                assert!(n
                    .to_string()
                    .contains("no steady state after 12 iterations"));
            }
            other => panic!("expected GaveUp, got {other:?}"),
        }
    }

    #[test]
    fn detector_does_not_start_keeping_when_the_cap_leaves_no_room() {
        // The window [3, 3, 3] is complete after 8 values; 3 more must fit under the cap.
        let v = [1.0, 5.0, 1.0, 5.0, 1.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0];
        let mut d = Detector::new(config(3, 0.01, 10)).unwrap();
        let steps: Vec<Step> = v.iter().take(10).map(|&x| d.push(x)).collect();
        assert_eq!(steps[7], Step::WarmingUp);
        assert!(matches!(steps.last(), Some(Step::GaveUp(_))));
        let mut d = Detector::new(config(3, 0.01, 11)).unwrap();
        let steps: Vec<Step> = v.iter().map(|&x| d.push(x)).collect();
        assert_eq!(steps[7], Step::Keeping);
        assert!(matches!(steps.last(), Some(Step::Done(s)) if s.warmup == 8 && s.kept == [3.0; 3]));
    }

    #[test]
    fn config_validation() {
        assert!(Detector::new(config(1, 0.02, 10)).is_err());
        assert!(Detector::new(config(5, 0.0, 100)).is_err());
        assert!(Detector::new(config(5, f64::NAN, 100)).is_err());
        let e = Detector::new(config(5, 0.02, 9)).unwrap_err();
        assert!(e.to_string().contains("at least 10"), "{e}");
        assert!(SteadyConfig::default().validate().is_ok());
    }
}
