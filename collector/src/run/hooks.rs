//! Commands run around the measured ones and never measured themselves (hyperfine's
//! options of the same names): `--setup` once per benchmark before its first run,
//! `--prepare` before every run (warm-up runs included), `--cleanup` once per benchmark
//! after its last run, even when the runs or its `--setup` failed.

use std::ffi::OsString;
use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::run::runner::{interrupt_requested, RunError};

/// One command line given to `--setup`, `--prepare` or `--cleanup`, run by a shell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hook {
    /// The option that gave it, for messages (`--prepare`).
    pub option: &'static str,
    /// The shell that runs it (`sh` unless `--shell` names another).
    pub shell: PathBuf,
    /// The command line, as given.
    pub command: String,
}

/// The hooks of one benchmark.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hooks {
    /// Once, before the benchmark's first run.
    pub setup: Option<Hook>,
    /// Before every run.
    pub prepare: Option<Hook>,
    /// Once, after the benchmark's last run.
    pub cleanup: Option<Hook>,
}

impl Hook {
    /// Run the command to its end in the benchmark's environment: its stdout shown with
    /// `show_output` (discarded otherwise), its stderr shown with `show_output` and quoted
    /// in the error when it fails.
    pub fn run(&self, env: &[(OsString, OsString)], show_output: bool) -> anyhow::Result<()> {
        let mut child = Command::new(&self.shell)
            .arg("-c")
            .arg(&self.command)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(if show_output {
                Stdio::inherit()
            } else {
                Stdio::null()
            })
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| {
                anyhow::anyhow!(
                    "{} `{}`: cannot start the shell {}: {e}; install it or choose another with \
                     --shell",
                    self.option,
                    self.command,
                    self.shell.display()
                )
            })?;
        let mut stderr = Vec::new();
        if let Some(mut pipe) = child.stderr.take() {
            // A read error only loses the quote in a message.
            let _ = pipe.read_to_end(&mut stderr);
        }
        let status = child
            .wait()
            .map_err(|e| anyhow::anyhow!("{} `{}`: {e}", self.option, self.command))?;
        // A hook the stop signal cut short; one that finished (a --cleanup run after
        // Ctrl-C, as it should be) is no error.
        if !status.success() && interrupt_requested() {
            return Err(RunError::Interrupted.into());
        }
        let stderr = String::from_utf8_lossy(&stderr);
        if show_output {
            eprint!("{stderr}");
        }
        if status.success() {
            return Ok(());
        }
        let how = match (
            status.code(),
            std::os::unix::process::ExitStatusExt::signal(&status),
        ) {
            (Some(c), _) => format!("exited with code {c}"),
            (None, Some(s)) => format!("was killed by signal {s}"),
            (None, None) => "failed".to_string(),
        };
        let last = stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .map(|l| format!(" (its last words: {})", l.trim()))
            .unwrap_or_default();
        // A cleanup runs after the runs: what they measured stands.
        let after = match self.option {
            "--cleanup" => "",
            _ => "nothing was measured after it; ",
        };
        anyhow::bail!(
            "{} command `{}` {how}{last}; {after}fix the command or drop {}",
            self.option,
            self.command,
            self.option
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook(command: &str) -> Hook {
        Hook {
            option: "--prepare",
            shell: "sh".into(),
            command: command.into(),
        }
    }

    #[test]
    fn a_failing_hook_names_itself_and_quotes_its_stderr() {
        let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
        hook("true").run(&env, false).unwrap();
        let e = hook("echo no such table >&2; exit 3")
            .run(&env, false)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--prepare command `echo no such table >&2; exit 3` exited with code 3"),
            "{e}"
        );
        assert!(e.contains("its last words: no such table"), "{e}");
        let mut missing = hook("true");
        missing.shell = "/nonexistent/sh".into();
        let e = missing.run(&env, false).unwrap_err().to_string();
        assert!(e.contains("cannot start the shell /nonexistent/sh"), "{e}");
    }

    #[test]
    fn a_hook_sees_the_benchmark_environment_only() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("env");
        let env = vec![
            ("PATH".into(), std::env::var_os("PATH").unwrap_or_default()),
            ("SBS_HOOK_TEST".into(), "42".into()),
        ];
        hook(&format!(
            "echo \"$SBS_HOOK_TEST${{HOME:-}}\" > {}",
            out.display()
        ))
        .run(&env, false)
        .unwrap();
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "42\n");
    }
}
