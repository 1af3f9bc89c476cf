//! Timing: wall clock around the child, CPU times and peak RSS from `wait4` rusage;
//! `time.cpu` is the user and system time together, what the child cost the CPUs.
//! Nothing is attached to the child, so these runs are undisturbed.

use sbs_reports::model::{Family, Unit};

use crate::run::instrument::{Instrument, MetricSpec, RunOutcome, Sample};

/// The families of a timing run's metrics: times, and the peak RSS when it measures it.
pub fn families(rss: bool) -> Vec<Family> {
    if rss {
        vec![Family::Time, Family::Rss]
    } else {
        vec![Family::Time]
    }
}

/// The ids of a timing run's metrics.
pub fn metric_ids(rss: bool) -> &'static [&'static str] {
    if rss {
        &["time.wall", "time.cpu", "time.user", "time.sys", "rss.peak"]
    } else {
        &["time.wall", "time.cpu", "time.user", "time.sys"]
    }
}

/// Records `time.wall`, `time.cpu` (user + system), `time.user`, `time.sys` and, unless
/// the memory group owns it, `rss.peak` of every run.
#[derive(Debug)]
pub struct Timing {
    /// Also report `rss.peak` (off when a dedicated memory group measures it).
    pub rss: bool,
}

impl Instrument for Timing {
    fn name(&self) -> &str {
        "timing"
    }

    fn needs_start_latch(&self) -> bool {
        false
    }

    fn collect(&mut self, outcome: &RunOutcome, out: &mut Vec<Sample>) -> anyhow::Result<()> {
        let metric = |id: &str, unit, source: &str| MetricSpec::new(id, unit, source, false);
        out.push(Sample::new(
            metric("time.wall", Unit::Seconds, "clock"),
            outcome.wall.as_secs_f64(),
        ));
        out.push(Sample::new(
            metric("time.cpu", Unit::Seconds, "rusage"),
            (outcome.user + outcome.sys).as_secs_f64(),
        ));
        out.push(Sample::new(
            metric("time.user", Unit::Seconds, "rusage"),
            outcome.user.as_secs_f64(),
        ));
        out.push(Sample::new(
            metric("time.sys", Unit::Seconds, "rusage"),
            outcome.sys.as_secs_f64(),
        ));
        if self.rss {
            out.push(Sample::new(
                metric("rss.peak", Unit::Bytes, "rusage"),
                outcome.max_rss as f64,
            ));
        }
        Ok(())
    }
}
