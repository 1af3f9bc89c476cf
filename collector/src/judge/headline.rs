//! The report at a glance: one line over every comparison ("2 of 12 metrics regressed
//! against ..."), and `compare`'s hyperfine-style speed ratios, both computed here so that
//! every renderer only prints them.

use sbs_reports::model::{Report, SpeedRatio, Verdict};

/// At most this many metrics are named per verdict in the headline.
const NAMED: usize = 4;

/// The headline of a judged report, saying what the comparisons were `against`; `None`
/// when no metric was compared.
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
/// comparison already made (so with its interval and its multiple-comparison correction).
pub fn speed_ratios(report: &Report) -> Vec<SpeedRatio> {
    let Some(first) = report.benchmarks.first() else {
        return Vec::new();
    };
    report.benchmarks[1..]
        .iter()
        .filter_map(|b| {
            let m = b.metrics.iter().find(|m| m.id == "time.wall")?;
            let c = m.comparison.as_ref()?;
            let rel = c.relative?;
            let (low, high) = (c.relative_ci_low?, c.relative_ci_high?);
            Some(SpeedRatio {
                benchmark: b.name.clone(),
                reference: first.name.clone(),
                ratio: 1.0 + rel,
                ratio_low: 1.0 + low,
                ratio_high: 1.0 + high,
                confidence: c.confidence,
                verdict: c.verdict,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ratio(r: f64, low: f64, high: f64, verdict: Verdict) -> String {
        SpeedRatio {
            benchmark: "b".into(),
            reference: "a".into(),
            ratio: r,
            ratio_low: low,
            ratio_high: high,
            confidence: 0.95,
            verdict,
        }
        .sentence()
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
