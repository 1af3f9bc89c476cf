//! The report at a glance: one line over every comparison ("2 of 12 metrics regressed
//! against ..."), and `compare`'s hyperfine-style speed ratios, both computed here so that
//! every renderer only prints them.

use sbs_reports::model::{BenchmarkResult, Ratio, Report, SpeedRatio, Verdict};

/// At most this many metrics are named per verdict in the headline.
const NAMED: usize = 4;

/// The headline of a judged report, saying what the comparisons were `against`, and in
/// `compare` the speed summary ([`speed_ratios`], computed first); `None` when no metric
/// was compared.
pub fn headline(report: &Report, against: &str) -> Option<String> {
    let several = report.benchmarks.len() > 1;
    let mut compared = 0;
    let (mut regressed, mut improved) = (Vec::new(), Vec::new());
    for b in &report.benchmarks {
        for m in &b.metrics {
            let Some(c) = &m.comparison else { continue };
            compared += 1;
            let change = match c.relative {
                Some(r) => sbs_reports::human::signed_percent(r),
                None => format!("{:+}", c.difference),
            };
            let named = if several {
                format!("`{}` {} {change}", b.name, m.id)
            } else {
                format!("{} {change}", m.id)
            };
            match c.verdict {
                Verdict::Regressed => regressed.push(named),
                Verdict::Improved => improved.push(named),
                _ => {}
            }
        }
    }
    if compared == 0 {
        return None;
    }
    let metrics = if compared == 1 { "metric" } else { "metrics" };
    let mut line = if regressed.is_empty() {
        format!("none of {compared} {metrics} regressed against {against}")
    } else {
        format!(
            "{} of {compared} {metrics} regressed against {against}: {}",
            regressed.len(),
            list(&regressed)
        )
    };
    if !improved.is_empty() {
        line.push_str(&format!(
            "; {} improved ({})",
            improved.len(),
            list(&improved)
        ));
    }
    // `compare`: how much slower or faster, in wall and CPU time.
    for r in report.speed.iter().take(NAMED) {
        line.push_str("; ");
        line.push_str(&r.sentence());
    }
    Some(line)
}

/// The first [`NAMED`] items, and how many more.
fn list(items: &[String]) -> String {
    let mut shown = items[..items.len().min(NAMED)].join(", ");
    if items.len() > NAMED {
        shown.push_str(&format!(", and {} more", items.len() - NAMED));
    }
    shown
}

/// `compare`: each later benchmark's wall time as a multiple of the first's, from the
/// comparison already made (so with its interval, its method and its multiple-comparison
/// correction), with its CPU time (`time.cpu`) beside it where it was measured.
pub fn speed_ratios(report: &Report) -> Vec<SpeedRatio> {
    let Some(first) = report.benchmarks.first() else {
        return Vec::new();
    };
    let cov = |b: &BenchmarkResult| {
        b.metrics
            .iter()
            .find(|m| m.id == "time.wall")
            .and_then(|m| m.summary.cov)
    };
    report.benchmarks[1..]
        .iter()
        .filter_map(|b| {
            let wall = ratio(b, "time.wall")?;
            let wall_cov = match (cov(first), cov(b)) {
                (Some(x), Some(y)) => Some(x.max(y)),
                (x, y) => x.or(y),
            };
            Some(SpeedRatio {
                benchmark: b.name.clone(),
                reference: first.name.clone(),
                ratio: wall.ratio,
                ratio_low: wall.ratio_low,
                ratio_high: wall.ratio_high,
                confidence: wall.confidence,
                verdict: wall.verdict,
                method: Some(wall.method),
                wall_cov,
                cpu: ratio(b, "time.cpu"),
            })
        })
        .collect()
}

/// The ratio of `b`'s metric `id` to the first benchmark's, from its comparison.
fn ratio(b: &BenchmarkResult, id: &str) -> Option<Ratio> {
    let m = b.metrics.iter().find(|m| m.id == id)?;
    let c = m.comparison.as_ref()?;
    let rel = c.relative?;
    let (low, high) = (c.relative_ci_low?, c.relative_ci_high?);
    Some(Ratio {
        ratio: 1.0 + rel,
        ratio_low: 1.0 + low,
        ratio_high: 1.0 + high,
        confidence: c.confidence,
        verdict: c.verdict,
        method: c.method,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sbs_reports::model::ComparisonMethod;

    fn ratio(r: f64, low: f64, high: f64, verdict: Verdict) -> String {
        SpeedRatio {
            benchmark: "b".into(),
            reference: "a".into(),
            ratio: r,
            ratio_low: low,
            ratio_high: high,
            confidence: 0.95,
            verdict,
            method: None,
            wall_cov: None,
            cpu: None,
        }
        .sentence()
    }

    fn with_cpu(wall: (f64, f64, f64, Verdict), cpu: (f64, f64, f64, Verdict)) -> String {
        SpeedRatio {
            benchmark: "b".into(),
            reference: "a".into(),
            ratio: wall.0,
            ratio_low: wall.1,
            ratio_high: wall.2,
            confidence: 0.95,
            verdict: wall.3,
            method: Some(ComparisonMethod::PairedT),
            wall_cov: Some(0.153),
            cpu: Some(Ratio {
                ratio: cpu.0,
                ratio_low: cpu.1,
                ratio_high: cpu.2,
                confidence: 0.95,
                verdict: cpu.3,
                method: ComparisonMethod::PairedT,
            }),
        }
        .sentence()
    }

    #[test]
    fn cpu_time_is_said_beside_wall_time_and_first_when_only_it_decides() {
        use Verdict::*;
        assert_eq!(
            with_cpu(
                (1.04, 0.98, 1.10, NoChange),
                (1.033, 1.025, 1.041, Regressed)
            ),
            "`b` against `a`: wall time varies 15% here (1.04 ± 0.06 times slower, not \
             significant); CPU time: 1.033 ± 0.008 times slower"
        );
        assert_eq!(
            with_cpu((1.19, 1.15, 1.23, Regressed), (1.18, 1.16, 1.20, Regressed)),
            "`b` ran 1.19 ± 0.04 times slower than `a` (CPU time: 1.18 ± 0.02 times slower)"
        );
        assert_eq!(
            with_cpu(
                (1.01, 0.95, 1.07, NoChange),
                (0.999, 0.997, 1.001, NoChange)
            ),
            "`b` ran 1.01 ± 0.06 times slower than `a` (not a significant difference; CPU \
             time: 1.001 ± 0.002 times faster, not significant either)"
        );
        assert_eq!(
            with_cpu(
                (1.015, 1.005, 1.025, BelowThreshold),
                (1.0, 0.98, 1.02, NoChange)
            ),
            "`b` ran 1.01 ± 0.01 times slower than `a` (within the threshold; CPU time: 1.00 \
             ± 0.02 times slower, not significant)"
        );
    }

    #[test]
    fn speed_sentences_read_like_hyperfine() {
        assert_eq!(
            ratio(1.19, 1.15, 1.23, Verdict::Regressed),
            "`b` ran 1.19 ± 0.04 times slower than `a`"
        );
        // Faster is said with the inverse: 0.8 of the time is 1.25 times faster.
        assert_eq!(
            ratio(0.8, 0.75, 0.85, Verdict::Improved),
            "`b` ran 1.25 ± 0.08 times faster than `a`"
        );
        assert_eq!(
            ratio(1.01, 0.95, 1.07, Verdict::NoChange),
            "`b` ran 1.01 ± 0.06 times slower than `a` (not a significant difference)"
        );
    }

    #[test]
    fn the_headline_names_the_regressions_first_and_stays_short() {
        assert_eq!(list(&["a".into()]), "a");
        let many: Vec<String> = (0..6).map(|i| format!("m{i}")).collect();
        assert_eq!(list(&many), "m0, m1, m2, m3, and 2 more");
    }
}
