//! Practical thresholds: a default and per-metric overrides (`PCT`, `METRIC=PCT`,
//! `PREFIX*=PCT`), and absolute floors (`METRIC=+N`, `+N` for all): a significant change
//! fails only when it is larger than both.

use super::DEFAULT_THRESHOLD;

/// Practical thresholds: a default and per-metric overrides.
#[derive(Debug, Clone, PartialEq)]
pub struct Thresholds {
    /// For metrics without an override, as a fraction.
    pub default: f64,
    /// `(pattern, fraction)`: a pattern is a metric id, or a prefix ending in `*`.
    pub per_metric: Vec<(String, f64)>,
    /// Absolute floor for metrics without an override, in the metric's unit (none: 0).
    pub default_absolute: f64,
    /// `(pattern, amount)`: absolute floors per metric, patterns as for `per_metric`.
    pub per_metric_absolute: Vec<(String, f64)>,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            default: DEFAULT_THRESHOLD,
            per_metric: Vec::new(),
            default_absolute: 0.0,
            per_metric_absolute: Vec::new(),
        }
    }
}

/// A `--threshold` argument that cannot be parsed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid threshold `{arg}`: {reason}; write a percentage such as `2` (all metrics) or `alloc.count=0.5` / `alloc.*=1` (per metric), or an absolute amount such as `alloc.count=+5`")]
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
            let text = pct.trim();
            let (absolute, number) = match text.strip_prefix('+') {
                Some(n) => (true, n.trim()),
                None => (false, text.trim_end_matches('%')),
            };
            let value: f64 = number
                .parse()
                .map_err(|_| error("the amount is not a number"))?;
            if !value.is_finite() || value < 0.0 {
                return Err(error("the amount must be a finite number >= 0"));
            }
            let (default, per_metric, value) = if absolute {
                (
                    &mut thresholds.default_absolute,
                    &mut thresholds.per_metric_absolute,
                    value,
                )
            } else {
                (
                    &mut thresholds.default,
                    &mut thresholds.per_metric,
                    value / 100.0,
                )
            };
            match pattern {
                None => *default = value,
                Some("") => return Err(error("the metric name before `=` is empty")),
                Some(p) if p.contains('*') && !p.ends_with('*') || p.matches('*').count() > 1 => {
                    return Err(error(
                        "`*` is allowed only once, at the end of the metric name",
                    ))
                }
                Some(p) => {
                    per_metric.retain(|(q, _)| q != p);
                    per_metric.push((p.to_string(), value));
                }
            }
        }
        Ok(thresholds)
    }

    /// The relative threshold of `metric`: an exact id match, else the longest matching
    /// prefix pattern, else the default.
    pub fn for_metric(&self, metric: &str) -> f64 {
        lookup(&self.per_metric, metric).unwrap_or(self.default)
    }

    /// The absolute floor of `metric` (0: none), looked up like [`Thresholds::for_metric`].
    pub fn absolute_for_metric(&self, metric: &str) -> f64 {
        lookup(&self.per_metric_absolute, metric).unwrap_or(self.default_absolute)
    }

    /// Every metric pattern the arguments named.
    pub fn patterns(&self) -> impl Iterator<Item = &str> {
        self.per_metric
            .iter()
            .chain(&self.per_metric_absolute)
            .map(|(p, _)| p.as_str())
    }
}

/// The value of the exact `metric` entry of `table`, else of its longest prefix pattern.
fn lookup(table: &[(String, f64)], metric: &str) -> Option<f64> {
    if let Some((_, t)) = table.iter().find(|(p, _)| p == metric) {
        return Some(*t);
    }
    table
        .iter()
        .filter_map(|(p, t)| {
            let prefix = p.strip_suffix('*')?;
            metric.starts_with(prefix).then_some((prefix.len(), *t))
        })
        .max_by_key(|(len, _)| *len)
        .map(|(_, t)| t)
}
