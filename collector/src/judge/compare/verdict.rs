//! From a difference, its significance and the practical threshold to a verdict.

use sbs_reports::model::Verdict;

use super::Policy;

/// The verdict for a difference (positive = worse) of relative size `relative`.
///
/// Not significant: [`Verdict::NoChange`]. Significant and larger than `threshold` in
/// relative terms: [`Verdict::Regressed`] or [`Verdict::Improved`]. Significant but within
/// the threshold: [`Verdict::BelowThreshold`]. A change from a reference mean of 0 has no
/// relative size: for an exact count it is past any threshold (a count appeared), for a
/// measured metric it is [`Verdict::Inconclusive`] (a time of 0 is below the clock's
/// resolution, not a value a relative threshold can be applied to). With an absolute
/// threshold, a change must also be larger than it in the metric's unit.
pub fn verdict(
    significant: bool,
    difference: f64,
    relative: Option<f64>,
    policy: &Policy,
) -> Verdict {
    if !significant || difference == 0.0 {
        return Verdict::NoChange;
    }
    let past_absolute = difference.abs() > policy.threshold_absolute;
    let past = match relative {
        Some(r) => r.abs() > policy.threshold && past_absolute,
        None if policy.exact => past_absolute,
        None => return Verdict::Inconclusive,
    };
    match (past, difference > 0.0) {
        (false, _) => Verdict::BelowThreshold,
        (true, true) => Verdict::Regressed,
        (true, false) => Verdict::Improved,
    }
}
