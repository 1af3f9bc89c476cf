//! Fixture programs and integration tests live in this package; see `src/bin/` and `tests/`.

use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use sbs_profile::alloc_reports::{ReportFile, Reports};

/// Run `command` once with the allocation agent loaded (the library and report file
/// `--alloc` uses), outside the collector's runner, and return its exit status and the
/// agent's reports: the per-process values that tests and benchmark scripts compare. The
/// tool itself measures only through the runner. A run longer than `timeout` is killed
/// and reported as an error (a deadlock guard).
pub fn run_with_agent(
    mut command: Command,
    timeout: Duration,
) -> Result<(ExitStatus, Reports), String> {
    let report = ReportFile::new().map_err(|e| e.to_string())?;
    let library = report.agent_library().map_err(|e| e.to_string())?;
    command.env("LD_PRELOAD", library.ld_preload(None));
    let mut child = command
        .spawn()
        .map_err(|e| format!("cannot start {:?}: {e}", command.get_program()))?;
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break status;
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "{:?} did not finish within {timeout:?} with the allocation agent loaded (deadlock?)",
                command.get_program()
            ));
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    drop(library);
    let reports = report.read().map_err(|e| e.to_string())?;
    Ok((status, reports))
}
