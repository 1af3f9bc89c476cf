//! `sbs-profile`: parse the command line, carry it out, and turn an error into one line
//! on stderr and an exit code (0 success, 1 regression, 2 error, 130 interrupted).

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;
use sbs_profile::cli::{execute, Cli};
use sbs_profile::run::runner::RunError;

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
    let cli = Cli::parse();
    match execute(cli) {
        Ok(code) => code,
        Err(e) => {
            if e.chain()
                .any(|c| matches!(c.downcast_ref::<RunError>(), Some(RunError::Interrupted)))
            {
                eprintln!("sbs-profile: interrupted; the child was killed and nothing was written");
                return ExitCode::from(130);
            }
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) {
                return ExitCode::SUCCESS;
            }
            let _ = writeln!(std::io::stderr(), "error: {}", one_line(&e));
            ExitCode::from(2)
        }
    }
}
