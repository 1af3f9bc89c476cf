//! Numbers for people: humanised units and thousands separators.

use crate::model::{CountRange, Unit};

/// What a calibrated value that cannot be told from zero shows instead of its mean.
pub const INDISTINGUISHABLE: &str = "indistinguishable from 0";

/// A count with thousands separators (`1,234,567`), or with two decimals when it is not
/// a whole number (a mean of counts).
pub fn count(v: f64) -> String {
    if !v.is_finite() {
        return v.to_string();
    }
    let neg = v < 0.0;
    let a = v.abs();
    let whole = a.trunc();
    let frac = a - whole;
    let digits = format!("{whole:.0}");
    let mut grouped = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    let mut s = if neg { format!("-{grouped}") } else { grouped };
    if frac > 1e-9 {
        let f = format!("{frac:.2}");
        // "0.50" -> ".50"; rounding up to "1.00" is shown as ".99" not to lie about the integer.
        s.push_str(if f.starts_with('1') { ".99" } else { &f[1..] });
    }
    s
}

/// Seconds with the unit that keeps 3-4 significant digits (ns, us, ms, s).
pub fn seconds(v: f64) -> String {
    let a = v.abs();
    let (scale, unit) = if a == 0.0 || a >= 1.0 {
        (1.0, "s")
    } else if a >= 1e-3 {
        (1e3, "ms")
    } else if a >= 1e-6 {
        (1e6, "us")
    } else {
        (1e9, "ns")
    };
    format!("{} {unit}", sig(v * scale))
}

/// A fixed unit for times (`--time-unit`), instead of the one that suits each value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeUnit {
    /// `s`.
    Second,
    /// `ms`.
    Millisecond,
    /// `us`.
    Microsecond,
    /// `ns`.
    Nanosecond,
}

impl TimeUnit {
    fn scale(self) -> (f64, &'static str) {
        match self {
            TimeUnit::Second => (1.0, "s"),
            TimeUnit::Millisecond => (1e3, "ms"),
            TimeUnit::Microsecond => (1e6, "us"),
            TimeUnit::Nanosecond => (1e9, "ns"),
        }
    }
}

/// [`value`], with times in `time` when it is given.
pub fn value_in(v: f64, unit: Unit, time: Option<TimeUnit>) -> String {
    match (unit, time) {
        (Unit::Seconds, Some(t)) => {
            let (scale, name) = t.scale();
            // Four significant digits, however small the value is in this unit.
            let x = v * scale;
            let digits = if x == 0.0 {
                3
            } else {
                (3 - x.abs().log10().floor() as i32).clamp(0, 9) as usize
            };
            format!("{x:.digits$} {name}")
        }
        _ => value(v, unit),
    }
}

/// Bytes in B, KiB, MiB or GiB.
pub fn bytes(v: f64) -> String {
    let a = v.abs();
    let (scale, unit) = if a < 1024.0 {
        return format!("{} B", count(v));
    } else if a < 1024.0 * 1024.0 {
        (1024.0, "KiB")
    } else if a < 1024.0 * 1024.0 * 1024.0 {
        (1024.0 * 1024.0, "MiB")
    } else {
        (1024.0 * 1024.0 * 1024.0, "GiB")
    };
    format!("{} {unit}", sig(v / scale))
}

/// A value in its unit, humanised.
pub fn value(v: f64, unit: Unit) -> String {
    match unit {
        Unit::Seconds => seconds(v),
        Unit::Bytes => bytes(v),
        Unit::Count => count(v),
    }
}

/// A fraction as a percentage with adaptive precision (`1.23%`, `0.012%`).
pub fn percent(f: f64) -> String {
    let p = f * 100.0;
    if p == 0.0 {
        "0%".into()
    } else if p.abs() >= 10.0 {
        format!("{p:.1}%")
    } else if p.abs() >= 0.1 {
        format!("{p:.2}%")
    } else {
        format!("{p:.3}%")
    }
}

/// The most decimals of a confidence level's percentage: what `--confidence` accepts,
/// and so what a report can print in full.
pub const LEVEL_DECIMALS: usize = 10;

/// A confidence level (a fraction) as a percentage with every decimal it was given and
/// none more (`95`, `99.5`, `99.99999999`): rounding would print `99.5` as `100`.
pub fn level(confidence: f64) -> String {
    let text = format!("{:.*}", LEVEL_DECIMALS, confidence * 100.0);
    let text = text.trim_end_matches('0').trim_end_matches('.');
    text.to_string()
}

/// A signed percentage (`+5.00%`, `-0.120%`).
pub fn signed_percent(f: f64) -> String {
    if f > 0.0 {
        format!("+{}", percent(f))
    } else {
        percent(f)
    }
}

/// A difference of counts in words, the one wording every report uses: `2,484 instructions
/// more`, `2,484 instructions fewer`, `as many instructions` (never a signed "-2,484 more").
pub fn more_or_fewer(difference: f64, what: &str) -> String {
    if difference > 0.0 {
        format!("{} {what} more", count(difference))
    } else if difference < 0.0 {
        format!("{} {what} fewer", count(-difference))
    } else {
        format!("as many {what}")
    }
}

fn sig(x: f64) -> String {
    let a = x.abs();
    if a >= 100.0 {
        format!("{x:.1}")
    } else if a >= 10.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    }
}

/// The bounds of a count that is not exact, for people: `10,307 to 10,991 per run`,
/// `at least 1,000 per run`, and when some sites have no bound `, as far as sites are
/// bounded: 218 of 688 unbounded`.
pub fn count_range(r: &CountRange) -> String {
    let mut s = match r.high {
        Some(h) if h == r.low => format!("{} per run", count(h)),
        Some(h) => format!("{} to {} per run", count(r.low), count(h)),
        None => format!("at least {} per run", count(r.low)),
    };
    if r.unbounded_sites > 0 {
        s = format!(
            "{s}, as far as sites are bounded: {} of {} unbounded",
            r.unbounded_sites, r.sites
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_difference_is_more_or_fewer_never_a_negative_more() {
        assert_eq!(
            more_or_fewer(2484.0, "instructions"),
            "2,484 instructions more"
        );
        assert_eq!(
            more_or_fewer(-205_168.0, "instructions"),
            "205,168 instructions fewer"
        );
        assert_eq!(more_or_fewer(0.0, "instructions"), "as many instructions");
    }

    #[test]
    fn humanised() {
        assert_eq!(count(1234567.0), "1,234,567");
        assert_eq!(count(999.0), "999");
        assert_eq!(count(1000.5), "1,000.50");
        assert_eq!(count(-1000.0), "-1,000");
        assert_eq!(count(0.0), "0");
        assert_eq!(seconds(0.001234), "1.234 ms");
        assert_eq!(seconds(2.5), "2.500 s");
        assert_eq!(seconds(0.0000005), "500.0 ns");
        assert_eq!(seconds(0.0), "0.000 s");
        assert_eq!(bytes(512.0), "512 B");
        assert_eq!(bytes(2048.0), "2.000 KiB");
        assert_eq!(bytes(3.5 * 1024.0 * 1024.0), "3.500 MiB");
        assert_eq!(percent(0.0123), "1.23%");
        assert_eq!(percent(0.00012), "0.012%");
        assert_eq!(percent(0.0), "0%");
    }

    #[test]
    fn a_fixed_time_unit_keeps_four_significant_digits() {
        use super::{value_in, TimeUnit};
        use crate::model::Unit;
        assert_eq!(
            value_in(0.0029783, Unit::Seconds, Some(TimeUnit::Microsecond)),
            "2978 us"
        );
        assert_eq!(
            value_in(0.0029783, Unit::Seconds, Some(TimeUnit::Second)),
            "0.002978 s"
        );
        assert_eq!(
            value_in(12.5, Unit::Seconds, Some(TimeUnit::Millisecond)),
            "12500 ms"
        );
        assert_eq!(
            value_in(0.0, Unit::Seconds, Some(TimeUnit::Millisecond)),
            "0.000 ms"
        );
        // Other units are untouched.
        assert_eq!(
            value_in(2048.0, Unit::Bytes, Some(TimeUnit::Second)),
            "2.000 KiB"
        );
    }
}
