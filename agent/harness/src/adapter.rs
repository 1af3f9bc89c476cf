//! For crates that offer another benchmark API on top of this harness (`sbs-criterion`,
//! `sbs-divan`):
//! run one benchmark in this process, as `sbs-profile` (or the harness's own `--bench`)
//! asks with `--sbs-run NAME`, from closures that exist only now.
//!
//! A [`Suite`](crate::Suite) registers `'static` closures and runs them from its `main`.
//! APIs such as criterion's hand their routine over while the benchmark function runs,
//! borrowing its locals, so they cannot be registered ahead. Such an adapter parses its
//! arguments with [`ChildRun::from_args`]; when this process is a child run, it skips
//! every benchmark but [`ChildRun::name`] and calls [`ChildRun::run`] with that one's
//! set-up, operation and optional reset. Everything else (the timing loop, the measured
//! region, the records, the calibration and the drift check) is the harness's, unchanged.
//!
//! ```no_run
//! use sbs_harness::adapter::ChildRun;
//!
//! let args: Vec<String> = std::env::args().skip(1).collect();
//! if let Some(child) = ChildRun::from_args(&args).expect("bad arguments") {
//!     let data = vec![1u64; 1000];
//!     if child.name() == "sum" {
//!         child
//!             .run(|| (), |_: &mut ()| data.iter().sum::<u64>())
//!             .expect("the run failed");
//!     }
//! }
//! ```

use sbs_agent_abi::harness::ARG_RUN;

use crate::error::HarnessError;
use crate::options::{self, Options};
use crate::{child, Bench, Reset};

/// A child run of one benchmark: what the arguments ask this process to do.
#[derive(Debug, Clone)]
pub struct ChildRun {
    options: Options,
}

impl ChildRun {
    /// `Some` when `args` (without the program name) ask this process to run one
    /// benchmark (`--sbs-run NAME`, with the harness's options: `--samples`, `--param`,
    /// `--warmup`...), `None` when they do not (the adapter's own command line). An error
    /// for harness options that do not parse.
    pub fn from_args(args: &[String]) -> Result<Option<ChildRun>, HarnessError> {
        let asks = args
            .iter()
            .any(|a| a == ARG_RUN || a.starts_with(&format!("{ARG_RUN}=")));
        if !asks {
            return Ok(None);
        }
        Ok(Some(ChildRun {
            options: options::parse(args)?,
        }))
    }

    /// The benchmark this process must run.
    pub fn name(&self) -> &str {
        self.options.run.as_deref().unwrap_or_default()
    }

    /// Run the benchmark: `setup` builds its state (outside any measurement; called again
    /// for the drift check's second set-up), `op` is the operation. Writes the records the
    /// run asks for (time, count or the first operations).
    pub fn run<S, R>(
        &self,
        setup: impl FnMut() -> S,
        op: impl FnMut(&mut S) -> R,
    ) -> Result<(), HarnessError> {
        self.run_inner(setup, None, op)
    }

    /// [`ChildRun::run`] with a reset: it restores what the operation consumed or changed,
    /// before every operation but the first, outside the measured region (each timing
    /// measurement is then a single operation).
    pub fn run_with_reset<S, R>(
        &self,
        setup: impl FnMut() -> S,
        reset: impl FnMut(&mut S),
        op: impl FnMut(&mut S) -> R,
    ) -> Result<(), HarnessError> {
        self.run_inner(setup, Some(Box::new(reset)), op)
    }

    fn run_inner<'a, S, R>(
        &self,
        mut setup: impl FnMut() -> S + 'a,
        reset: Reset<'a, S>,
        op: impl FnMut(&mut S) -> R,
    ) -> Result<(), HarnessError> {
        // An adapted benchmark declares no parameters.
        if let Some((key, _)) = self.options.params.first() {
            return Err(HarnessError::UnknownParam {
                key: key.clone(),
                bench: self.name().to_string(),
                declared: "none".into(),
            });
        }
        let mut bench = Bench {
            name: self.name().to_string(),
            defaults: Vec::new(),
            sizes: Vec::new(),
            setup: Box::new(move |_: &crate::Params| setup()),
            reset,
            op,
        };
        child::run_child(&mut bench, &self.options)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn only_a_child_run_is_recognised() {
        assert!(ChildRun::from_args(&args(&["--bench", "x"]))
            .unwrap()
            .is_none());
        let c = ChildRun::from_args(&args(&["--sbs-run", "g/f/1", "--samples", "3"]))
            .unwrap()
            .unwrap();
        assert_eq!(c.name(), "g/f/1");
        let c = ChildRun::from_args(&args(&["--sbs-run=a b"]))
            .unwrap()
            .unwrap();
        assert_eq!(c.name(), "a b");
        let e = ChildRun::from_args(&args(&["--sbs-run", "x", "--samples", "1"])).unwrap_err();
        assert!(e.to_string().contains("at least 2"), "{e}");
    }

    #[test]
    fn a_parameter_is_refused() {
        let c = ChildRun::from_args(&args(&["--sbs-run", "x", "--param", "n=3"]))
            .unwrap()
            .unwrap();
        let e = c.run(|| (), |_: &mut ()| ()).unwrap_err();
        assert!(e.to_string().contains("parameter `n`"), "{e}");
    }
}
