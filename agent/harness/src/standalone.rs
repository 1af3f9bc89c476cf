//! Without sbs-profile: `--bench` measures each benchmark in fresh child processes of this
//! same binary (`--sbs-run NAME`) and prints the per-operation time with its interval over
//! the per-process means; without `--bench` (`cargo test`) each benchmark runs once.

use std::io::Write;
use std::process::{Command, Stdio};

use sbs_agent_abi::harness as proto;
use statrs::distribution::{ContinuousCDF, StudentsT};
use statrs::statistics::Statistics;

use crate::error::HarnessError;
use crate::options::Options;
use crate::params::Params;
use crate::region::Region;
use crate::Runnable;

/// Per-process results of one benchmark.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ProcessResult {
    pub time_op: f64,
    pub samples: f64,
    pub batch: f64,
    pub warmup: f64,
    pub not_steady: bool,
}

/// Mean and half-width of the 95% interval of `means` (Student's t); no interval for one.
pub(crate) fn interval(means: &[f64]) -> (f64, Option<f64>) {
    let n = means.len() as f64;
    let mean = means.mean();
    if means.len() < 2 {
        return (mean, None);
    }
    let var = means.variance();
    let t = StudentsT::new(0.0, 1.0, n - 1.0)
        .map(|d| d.inverse_cdf(0.975))
        .unwrap_or(f64::NAN);
    (mean, Some(t * (var / n).sqrt()))
}

/// Seconds as a readable duration.
pub(crate) fn human(secs: f64) -> String {
    let (v, unit) = if secs < 1e-6 {
        (secs * 1e9, "ns")
    } else if secs < 1e-3 {
        (secs * 1e6, "µs")
    } else if secs < 1.0 {
        (secs * 1e3, "ms")
    } else {
        (secs, "s")
    };
    format!("{v:.4} {unit}")
}

fn one_process(
    exe: &std::path::Path,
    name: &str,
    options: &Options,
) -> Result<ProcessResult, HarnessError> {
    let file = tempfile::NamedTempFile::new()
        .map_err(|e| HarnessError::io("creating a temporary record file", e))?;
    let status = Command::new(exe)
        .arg(proto::ARG_RUN)
        .arg(name)
        .args(options.forwarded())
        .env(proto::ENV_OUT, file.path())
        .env(proto::ENV_MODE, proto::MODE_TIME)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .map_err(|e| HarnessError::io(format!("starting {}", exe.display()), e))?;
    if !status.success() {
        return Err(HarnessError::Child {
            name: name.to_string(),
            status: status.to_string(),
            exe: exe.to_path_buf(),
        });
    }
    let text = std::fs::read_to_string(file.path())
        .map_err(|e| HarnessError::io(format!("reading {}", file.path().display()), e))?;
    let get = |key: &'static str| {
        text.lines()
            .filter_map(proto::parse_record)
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v)
            .ok_or(HarnessError::MissingRecord {
                name: name.to_string(),
                record: key,
            })
    };
    Ok(ProcessResult {
        time_op: get(proto::REC_TIME_OP)?,
        samples: get(proto::REC_SAMPLES)?,
        batch: get(proto::REC_BATCH)?,
        warmup: get(proto::REC_WARMUP)?,
        not_steady: get(proto::REC_NOT_STEADY)? != 0.0,
    })
}

/// `--bench`: each benchmark in `options.processes` fresh processes.
pub(crate) fn measure(
    benches: &[Box<dyn Runnable>],
    options: &Options,
) -> Result<(), HarnessError> {
    let exe = std::env::current_exe()
        .map_err(|e| HarnessError::io("finding this benchmark binary", e))?;
    let mut out = std::io::stdout().lock();
    for b in benches {
        let params = Params::resolve(b.name(), b.defaults(), &options.params);
        let mut results = Vec::new();
        for _ in 0..options.processes {
            results.push(one_process(&exe, b.name(), options)?);
        }
        let means: Vec<f64> = results.iter().map(|r| r.time_op).collect();
        let (mean, half) = interval(&means);
        let shown_params = if params.pairs().is_empty() {
            String::new()
        } else {
            format!(" [{}]", params.describe())
        };
        let ci = match half {
            Some(h) => format!(
                "± {} ({:.1}%, 95% CI over {} processes)",
                human(h),
                h / mean * 100.0,
                means.len()
            ),
            None => "(1 process: no interval)".to_string(),
        };
        let batch = results.iter().map(|r| r.batch).fold(0.0, f64::max);
        let warmup: f64 = results.iter().map(|r| r.warmup).sum::<f64>() / results.len() as f64;
        let unsteady = results.iter().filter(|r| r.not_steady).count();
        let _ = writeln!(
            out,
            "{}{}\n    time/op {} {}\n    {} samples × {} ops per process, mean warm-up {:.0} measurements{}",
            b.name(),
            shown_params,
            human(mean),
            ci,
            results[0].samples,
            batch,
            warmup,
            if unsteady > 0 {
                format!("; NOT steady in {unsteady} of {} processes (raise --max-iterations or --cov)", results.len())
            } else {
                String::new()
            }
        );
    }
    Ok(())
}

/// No `--bench` (`cargo test`): set-up and one operation per benchmark, to check they run.
pub(crate) fn smoke(
    mut benches: Vec<Box<dyn Runnable>>,
    options: &Options,
) -> Result<(), HarnessError> {
    let mut out = std::io::stdout().lock();
    for b in benches.iter_mut() {
        let params = Params::resolve(b.name(), b.defaults(), &options.params);
        b.count(&params, 0, 1, &Region::default(), false)?;
        let _ = writeln!(
            out,
            "test {} ... ok (one operation; measure with --bench)",
            b.name()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interval_over_process_means() {
        let (m, h) = interval(&[1.0, 2.0, 3.0]);
        assert_eq!(m, 2.0);
        // t(0.975, 2) = 4.3027, sd/sqrt(n) = 1/sqrt(3)
        assert!((h.unwrap() - 4.302652729911275 / 3f64.sqrt()).abs() < 1e-9);
        assert_eq!(interval(&[5.0]), (5.0, None));
        assert_eq!(human(1.5e-7), "150.0000 ns");
        assert_eq!(human(0.0025), "2.5000 ms");
    }
}
