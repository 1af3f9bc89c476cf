//! `sbs-profile`: parse the command line, carry it out, and turn an error into one line
//! on stderr and an exit code (0 success, 1 regression, 2 error, 130 interrupted).

use std::io::Write;
use std::process::ExitCode;

use sbs_profile::cli::{execute, help};
use sbs_profile::RunError;
use sbs_profile::Unwritten;

/// The error and its causes on one line, each cause once: many errors already quote
/// their cause in their own message.
fn one_line(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out.replace('\n', " ")
}

fn main() -> ExitCode {
    let cli = help::parse();
    match execute(cli) {
        Ok(code) => code,
        Err(e) => {
            // A closed terminal (SIGHUP) may have taken stderr with it: never panic on it.
            let mut stderr = std::io::stderr().lock();
            if e.chain()
                .any(|c| matches!(c.downcast_ref::<RunError>(), Some(RunError::Interrupted)))
            {
                let _ = writeln!(
                    stderr,
                    "sbs-profile: interrupted; the child was killed and nothing was written"
                );
                return ExitCode::from(130);
            }
            if let Some(unwritten) = e.downcast_ref::<Unwritten>() {
                // A stop signal while waiting for a FIFO's reader: after the runs (and the
                // save), so each line says what was not written.
                if unwritten.interrupted() {
                    for failure in &unwritten.failures {
                        let _ = writeln!(stderr, "sbs-profile: {}", one_line(failure));
                    }
                    return ExitCode::from(130);
                }
                // Everything else was done; one line per destination that failed.
                for failure in &unwritten.failures {
                    let _ = writeln!(stderr, "error: {}", one_line(failure));
                }
                return ExitCode::from(2);
            }
            // Only a listing (`--list`, `--list-counters`) reaches here with a reader that
            // went away: it has no verdict to keep, so stay quiet and succeed.
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) {
                return ExitCode::SUCCESS;
            }
            let _ = writeln!(stderr, "error: {}", one_line(&e));
            ExitCode::from(2)
        }
    }
}
