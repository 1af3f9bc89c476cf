//! Practical thresholds: a default and per-metric overrides (`PCT`, `METRIC=PCT`,
//! `PREFIX*=PCT`).

use super::DEFAULT_THRESHOLD;

/// Practical thresholds: a default and per-metric overrides.
#[derive(Debug, Clone, PartialEq)]
pub struct Thresholds {
    /// For metrics without an override, as a fraction.
    pub default: f64,
    /// `(pattern, fraction)`: a pattern is a metric id, or a prefix ending in `*`.
    pub per_metric: Vec<(String, f64)>,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            default: DEFAULT_THRESHOLD,
            per_metric: Vec::new(),
        }
    }
}

/// A `--threshold` argument that cannot be parsed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid threshold `{arg}`: {reason}; write a percentage such as `2` (all metrics) or `alloc.count=0.5` / `alloc.*=1` (per metric)")]
pub struct ThresholdError {
    /// The argument.
    pub arg: String,
    /// What is wrong with it.
    pub reason: String,
}

impl Thresholds {
    /// Thresholds from `--threshold` arguments: `PCT` sets the default, `METRIC=PCT`
    /// overrides one metric (or a prefix, `alloc.*=PCT`). Percentages, not fractions.
    /// Later arguments win.
    pub fn from_args<S: AsRef<str>>(args: &[S]) -> Result<Thresholds, ThresholdError> {
        let mut thresholds = Thresholds::default();
        for arg in args {
            let arg = arg.as_ref();
            let error = |reason: &str| ThresholdError {
                arg: arg.to_string(),
                reason: reason.to_string(),
            };
            let (pattern, pct) = match arg.rsplit_once('=') {
                Some((p, v)) => (Some(p.trim()), v),
                None => (None, arg),
            };
            let pct = pct.trim().trim_end_matches('%');
            let value: f64 = pct
                .parse()
                .map_err(|_| error("the percentage is not a number"))?;
            if !value.is_finite() || value < 0.0 {
                return Err(error("the percentage must be a finite number >= 0"));
            }
            let fraction = value / 100.0;
            match pattern {
                None => thresholds.default = fraction,
                Some("") => return Err(error("the metric name before `=` is empty")),
                Some(p) if p.contains('*') && !p.ends_with('*') || p.matches('*').count() > 1 => {
                    return Err(error(
                        "`*` is allowed only once, at the end of the metric name",
                    ))
                }
                Some(p) => {
                    thresholds.per_metric.retain(|(q, _)| q != p);
                    thresholds.per_metric.push((p.to_string(), fraction));
                }
            }
        }
        Ok(thresholds)
    }

    /// The threshold of `metric`: an exact id match, else the longest matching prefix
    /// pattern, else the default.
    pub fn for_metric(&self, metric: &str) -> f64 {
        if let Some((_, t)) = self.per_metric.iter().find(|(p, _)| p == metric) {
            return *t;
        }
        self.per_metric
            .iter()
            .filter_map(|(p, t)| {
                let prefix = p.strip_suffix('*')?;
                metric.starts_with(prefix).then_some((prefix.len(), *t))
            })
            .max_by_key(|(len, _)| *len)
            .map_or(self.default, |(_, t)| t)
    }
}
