//! Series from different mechanisms are never compared: `counter.instructions` counted by
//! valgrind (guest instructions under emulation) and by the PMU (`perf-hw`, retired
//! instructions, plus interrupt skid) differ by design, not by a regression.
//!
//! Every comparison (baseline vs current, A vs B) goes through [`ensure_same_source`].
//! What a source can resolve is here too: [`resolution`].

use sbs_reports::model::Unit;

/// Two series of the same metric from different mechanisms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "cannot compare {metric} measured by {baseline} with {metric} measured by {current}: \
     different mechanisms count different things; measure both sides with the same \
     mechanism{hint}"
)]
pub struct SourceMismatch {
    /// The metric id.
    pub metric: String,
    /// Source of the baseline (or first) series.
    pub baseline: String,
    /// Source of the current (or second) series.
    pub current: String,
    /// What to pass to get the same mechanism, if known.
    pub hint: String,
}

/// The option that selects a source, for the message.
fn option_for(source: &str) -> Option<String> {
    match source {
        "valgrind" => Some("--instructions valgrind".into()),
        "perf-hw" => Some("--instructions perf".into()),
        _ => source
            .strip_prefix("qemu:")
            .map(|cpu| format!("--instructions qemu --qemu-cpu {cpu}")),
    }
}

/// `Ok` when both series come from the same mechanism.
pub fn ensure_same_source(
    metric: &str,
    baseline: &str,
    current: &str,
) -> Result<(), SourceMismatch> {
    if baseline == current {
        return Ok(());
    }
    let model = |s: &str| s.strip_prefix("qemu:").map(str::to_string);
    let hint = match (model(baseline), model(current)) {
        (Some(_), Some(_)) => format!(
            " (both counted by qemu, but with different CPU models: the model is part of the \
             count, as programs pick their code by CPUID; re-measure with {})",
            option_for(baseline).unwrap_or_default()
        ),
        _ => option_for(baseline)
            .map(|o| format!(" (re-measure with {o})"))
            .unwrap_or_default(),
    };
    Err(SourceMismatch {
        metric: metric.to_string(),
        baseline: baseline.to_string(),
        current: current.to_string(),
        hint,
    })
}

/// The resolution of a measured metric from `source` in `unit`: what a value can move by
/// in one step, so that equal samples are not taken for an exact count.
///
/// - Resident sizes (`rusage`'s `ru_maxrss`, `/proc`'s RSS) move by pages: 4 KiB.
/// - CPU times from `rusage`: the kernel splits a task's run time into user and system
///   time by sampling at the scheduler tick, so small programs read exactly 0 or a
///   multiple of a few milliseconds; 1 ms is a conservative step.
/// - Wall clock, harness times, perf counters and every exact count: 0 (continuous, or
///   exact by the mechanism).
pub fn resolution(source: &str, unit: Unit) -> f64 {
    match (source, unit) {
        ("rusage" | "procfs", Unit::Bytes) => 4096.0,
        ("rusage", Unit::Seconds) => 1e-3,
        _ => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qemu_models_are_different_series_and_the_message_says_why() {
        let e = ensure_same_source("counter.instructions", "qemu:Haswell-v2", "qemu:max")
            .unwrap_err()
            .to_string();
        assert!(e.contains("different CPU models"), "{e}");
        assert!(e.contains("--qemu-cpu Haswell-v2"), "{e}");
        let e = ensure_same_source("counter.instructions", "qemu:max", "valgrind")
            .unwrap_err()
            .to_string();
        assert!(e.contains("--instructions qemu --qemu-cpu max"), "{e}");
        assert!(ensure_same_source("counter.instructions", "qemu:max", "qemu:max").is_ok());
    }

    #[test]
    fn same_source_compares() {
        assert!(ensure_same_source("counter.instructions", "valgrind", "valgrind").is_ok());
    }

    #[test]
    fn valgrind_and_pmu_counts_are_refused_with_the_fix() {
        let e = ensure_same_source("counter.instructions", "valgrind", "perf-hw").unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("cannot compare counter.instructions measured by valgrind with counter.instructions measured by perf-hw"), "{msg}");
        assert!(msg.contains("--instructions valgrind"), "{msg}");
    }
}
