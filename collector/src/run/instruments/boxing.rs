//! `--boxing`: how many values a Rust program puts in a `Box` (`boxing.count`), the
//! counterpart of the boxing counts of the JVM tools.
//!
//! Mechanism: an exact count, by the invocations instrument and its engines (in-process
//! where a site can be patched safely, uprobes for the rest), of
//! `alloc::boxed::box_new_uninit`, the one non-generic function through which the
//! compiler lowers every `Box::new(value)` of a non-zero-sized value (checked on Rust
//! 1.95; older compilers called the `exchange_malloc` lang item, also matched). The
//! `vec![a, b, c]` literal boxes its array first, so it counts once as well. In release
//! builds the function exists only inlined: its inlined copies are counted at their
//! entries, like any inlined function's.
//!
//! What it cannot see, said in the report's warnings: inlined copies without code of
//! their own; `Box::new` of zero-sized values (they do not allocate); boxes made without
//! `Box::new` (`Box::from(slice)`, `into_boxed_slice`, `Box::new_uninit`; `Box::pin` goes
//! through `Box::new` and is counted). Allocation sizes cannot tell a `Box` from a `Vec`,
//! so the allocation agent is no alternative.

use std::ffi::OsStr;
use std::path::Path;

use anyhow::Context;
use nix::unistd::Pid;
use sbs_reports::model::Unit;

use crate::run::instrument::{ChildSetup, InFlight, Instrument, MetricSpec, RunOutcome, Sample};
use crate::run::instruments::invocations::{Invocations, Options};

/// The id of the metric: calls of `Box::new`.
pub const METRIC: &str = "boxing.count";

/// The functions every `Box::new` goes through (current and older compilers).
pub const BOX_ENTRY_POINTS: &[&str] = &[
    "alloc::boxed::box_new_uninit",
    "alloc::alloc::exchange_malloc",
];

/// Counts `Box::new` through uprobes and reports it as `boxing.count`.
#[derive(Debug)]
pub struct Boxing {
    inner: Invocations,
}

impl Boxing {
    /// Probe the box entry points of `program`.
    pub fn new(
        program: &Path,
        ld_library_path: Option<&OsStr>,
        ld_preload: Option<&OsStr>,
        options: Options,
    ) -> anyhow::Result<Self> {
        let options = Options {
            detail: false,
            ..options
        };
        let mut last_error = None;
        for pattern in BOX_ENTRY_POINTS {
            match Invocations::new(
                program,
                ld_library_path,
                ld_preload,
                &[pattern.to_string()],
                options,
            ) {
                Ok(inner) => return Ok(Boxing { inner }),
                Err(e) => match e.downcast::<sbs_probes::ProbeError>() {
                    Ok(e @ sbs_probes::ProbeError::NoMatch { .. }) => last_error = Some(e),
                    Ok(e) => return Err(e).context("--boxing counts Box::new calls"),
                    Err(e) => return Err(e.context("--boxing counts Box::new calls")),
                },
            }
        }
        let e = last_error.map(|e| e.to_string()).unwrap_or_default();
        anyhow::bail!(
            "--boxing: {} has no out-of-line Box entry point ({}): it is not a Rust program, or \
             every Box::new in it was inlined (build with debug assertions or opt-level 0 to count \
             boxes); {e}",
            program.display(),
            BOX_ENTRY_POINTS.join(", ")
        )
    }
}

impl Instrument for Boxing {
    fn name(&self) -> &str {
        "boxing"
    }

    fn needs_start_latch(&self) -> bool {
        self.inner.needs_start_latch()
    }

    fn prepare(&mut self, setup: &mut ChildSetup) -> anyhow::Result<()> {
        self.inner.prepare(setup)
    }

    fn attach(&mut self, pid: Pid) -> anyhow::Result<()> {
        self.inner.attach(pid)
    }

    fn collect(&mut self, outcome: &RunOutcome, out: &mut Vec<Sample>) -> anyhow::Result<()> {
        let mut samples = Vec::new();
        self.inner.collect(outcome, &mut samples)?;
        for mut s in samples {
            // Exact unless the kernel stopped following a process of the run.
            let (exact, range) = (s.metric.exact, s.metric.range);
            s.metric = MetricSpec {
                range,
                ..MetricSpec::new(METRIC, Unit::Count, self.inner.source(), exact)
            };
            out.push(s);
        }
        Ok(())
    }

    fn abort_run(&mut self) {
        self.inner.abort_run();
    }

    fn overlaps(&self) -> bool {
        self.inner.overlaps()
    }

    fn park(&mut self) -> InFlight {
        self.inner.park()
    }

    fn resume(&mut self, run: InFlight) {
        self.inner.resume(run)
    }

    fn warnings(&self) -> Vec<String> {
        self.inner.warnings()
    }

    fn metric_notes(&self) -> Vec<(String, String)> {
        self.inner
            .metric_notes()
            .into_iter()
            .map(|(_, note)| (METRIC.to_string(), note))
            .collect()
    }

    fn finish(&mut self) {
        self.inner.finish();
    }
}
