//! Commands run around the measured ones and never measured themselves (hyperfine's
//! options of the same names): `--setup` once per benchmark before its first run,
//! `--prepare` before every run (warm-up runs included), `--cleanup` once per benchmark
//! after its last run, even when the runs or its `--setup` failed.
//!
//! A hook starts as a run does, through the launcher (`launcher.rs`): a process group of
//! its own, tied to the collector's life (after a SIGKILL of the collector the launcher
//! kills the group), killed with its group by Ctrl-C, SIGTERM, SIGHUP or SIGQUIT, and
//! by `--timeout`, which limits each hook as it limits each run. What a hook leaves
//! running in its group is killed when it ends, as a run's leftovers are.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;

use crate::run::launcher::{self, Message};
use crate::run::runner::{stopped_message, Cancel, RunConfig, RunError};
use crate::run::sys;

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

/// How a hook's process ended.
enum End {
    /// Its raw wait status.
    Exited(i32),
    /// Stopped by this signal, then killed.
    Stopped(i32),
    /// Past `--timeout`, killed.
    TimedOut(Duration),
}

/// Kills a hook's process group and its run parent (if it has one) unless it ended.
struct Guard {
    pid: Pid,
    run_parent: Pid,
    ended: bool,
}

impl Drop for Guard {
    fn drop(&mut self) {
        // What it left in its group goes with it, also after a normal end.
        let _ = killpg(self.pid, Signal::SIGKILL);
        if !self.ended {
            let _ = kill(self.pid, Signal::SIGKILL);
            // 0: a direct run, whose parent is the launcher itself (it stays).
            if self.run_parent.as_raw() > 0 {
                let _ = kill(self.run_parent, Signal::SIGKILL);
            }
        }
    }
}

impl Hook {
    /// Run the command to its end in the environment of the benchmark `config` starts:
    /// its stdout shown with `--show-output` (discarded otherwise), its stderr shown with
    /// it and quoted in the error when it fails. `config.timeout` limits it. A stop
    /// signal (`cancel`) kills it and ends with [`RunError::Interrupted`]. After one, a
    /// `--setup` or `--prepare` does not start, and a `--cleanup` (after Ctrl-C) runs on
    /// until the next signal.
    pub fn run(&self, config: &RunConfig, cancel: &Cancel) -> anyhow::Result<()> {
        let cannot_start = |e: &dyn std::fmt::Display| {
            anyhow::anyhow!(
                "{} `{}`: cannot start the shell {}: {e}; install it or choose another with \
                 --shell",
                self.option,
                self.command,
                self.shell.display()
            )
        };
        let before = cancel.signals();
        // Once a stop signal came, only a --cleanup still starts.
        if before > 0 && self.option != "--cleanup" {
            return Err(RunError::Interrupted.into());
        }
        let shell = self.shell_path(&config.env).map_err(|e| cannot_start(&e))?;
        let devnull = File::options()
            .read(true)
            .write(true)
            .open("/dev/null")
            .map_err(|e| cannot_start(&e))?;
        let (report_read, report_write) = sys::pipe_cloexec().map_err(|e| cannot_start(&e))?;
        let (stderr_read, stderr_write) = sys::pipe_cloexec().map_err(|e| cannot_start(&e))?;
        let stdout = io::stdout();
        let shown: BorrowedFd = match config.show_output {
            true => stdout.as_fd(),
            false => devnull.as_fd(),
        };
        let args = [
            self.shell.clone().into_os_string(),
            OsString::from("-c"),
            OsString::from(&self.command),
        ];
        let request = launcher::LaunchRequest {
            program: shell.as_os_str(),
            args: &args,
            env: &config.env,
            report: report_write.as_fd(),
            latch: None,
            no_aslr: false,
            cpus: &[],
            fds: vec![(devnull.as_fd(), 0), (shown, 1), (stderr_write.as_fd(), 2)],
        };
        let launched = Instant::now();
        launcher::start(&request).map_err(|e| cannot_start(&e))?;
        drop((report_write, stderr_write));
        let mut report = File::from(report_read);
        let (pid, run_parent) = match launcher::read_message(&mut report) {
            Ok(Some(Message::Started { pid, run_parent })) => {
                (Pid::from_raw(pid), Pid::from_raw(run_parent))
            }
            Ok(Some(Message::ExecFailed { errno })) => {
                return Err(cannot_start(&io::Error::from_raw_os_error(errno)))
            }
            Ok(other) => {
                return Err(cannot_start(&format!(
                    "the launcher that starts each run answered {other:?}"
                )))
            }
            Err(e) => return Err(cannot_start(&e)),
        };
        let mut guard = Guard {
            pid,
            run_parent,
            ended: false,
        };
        let mut stderr = Vec::new();
        let mut stderr_pipe = Some(File::from(stderr_read));
        let end = loop {
            let left = match config.timeout {
                Some(t) => match t.checked_sub(launched.elapsed()) {
                    Some(left) => Some(left),
                    None => break End::TimedOut(t),
                },
                None => None,
            };
            // Before any signal, the cancel descriptor wakes us; after one it stays
            // readable, so the count of signals is looked at now and then instead.
            let watch_fd = before == 0;
            let tick = match watch_fd {
                true => left,
                false => Some(left.map_or(TICK, |l| l.min(TICK))),
            };
            let wait = tick.map_or(PollTimeout::NONE, |d| {
                PollTimeout::try_from(d).unwrap_or(PollTimeout::MAX)
            });
            let mut fds = vec![PollFd::new(report.as_fd(), PollFlags::POLLIN)];
            if let Some(pipe) = &stderr_pipe {
                fds.push(PollFd::new(pipe.as_fd(), PollFlags::POLLIN));
            }
            if watch_fd {
                fds.push(PollFd::new(cancel.fd(), PollFlags::POLLIN));
            }
            let ready: Vec<bool> = match poll(&mut fds, wait) {
                Ok(_) => fds.iter().map(|f| f.any().unwrap_or(false)).collect(),
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(self.failed(&io::Error::from(e))),
            };
            drop(fds);
            if cancel.signals() > before {
                return Err(RunError::Interrupted.into());
            }
            if stderr_pipe.is_some() && ready[1] {
                let mut chunk = [0u8; 4096];
                match stderr_pipe.as_mut().map(|p| p.read(&mut chunk)) {
                    Some(Ok(n)) if n > 0 => stderr.extend_from_slice(&chunk[..n]),
                    Some(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                    // End of file, or a pipe that cannot be read: only the quote is lost.
                    _ => stderr_pipe = None,
                }
            }
            if ready[0] {
                match launcher::read_message(&mut report) {
                    Ok(Some(Message::Exited { status, .. })) => break End::Exited(status),
                    Ok(Some(Message::ExecFailed { errno })) => {
                        return Err(cannot_start(&io::Error::from_raw_os_error(errno)))
                    }
                    Ok(Some(Message::Stopped { signal })) => {
                        let _ = killpg(pid, Signal::SIGKILL);
                        break End::Stopped(signal);
                    }
                    Ok(other) => {
                        return Err(
                            self.failed(&format!("the launcher that starts it answered {other:?}"))
                        )
                    }
                    Err(e) => return Err(self.failed(&e)),
                }
            }
        };
        match end {
            End::Exited(_) => guard.ended = true,
            // Killed with its group as the guard drops.
            End::TimedOut(t) => anyhow::bail!(
                "{} command `{}` did not end within {:.3} s (--timeout, which limits each \
                 hook as it limits each run) and was killed with its process group; make it \
                 faster, raise --timeout, or drop {}",
                self.option,
                self.command,
                t.as_secs_f64(),
                self.option
            ),
            End::Stopped(signal) => anyhow::bail!(
                "{} command `{}`: {}",
                self.option,
                self.command,
                stopped_message(&shell, signal)
            ),
        }
        // What it left running in its group holds the pipe too: what is there now is all
        // that is read.
        drop(guard);
        if let Some(pipe) = stderr_pipe {
            let _ = nix::fcntl::fcntl(
                pipe.as_raw_fd(),
                nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
            );
            let _ = (&pipe).read_to_end(&mut stderr);
        }
        let End::Exited(status) = end else {
            unreachable!("only an exit gets here");
        };
        let stderr = String::from_utf8_lossy(&stderr);
        if config.show_output {
            eprint!("{stderr}");
        }
        if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
            return Ok(());
        }
        let how = match libc::WIFSIGNALED(status) {
            true => {
                let s = libc::WTERMSIG(status);
                let name = Signal::try_from(s)
                    .map(|s| s.as_str().to_string())
                    .unwrap_or_else(|_| format!("signal {s}"));
                format!("was killed by {name}")
            }
            false => format!("exited with code {}", libc::WEXITSTATUS(status)),
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

    /// The shell to exec: as given if it names a path, otherwise looked up in the
    /// benchmark's `PATH` (then ours), as `sh -c` would be found by a shell.
    fn shell_path(&self, env: &[(OsString, OsString)]) -> io::Result<PathBuf> {
        if self.shell.as_os_str().as_encoded_bytes().contains(&b'/') {
            return Ok(self.shell.clone());
        }
        let path = env
            .iter()
            .find(|(k, _)| k == OsStr::new("PATH"))
            .map(|(_, v)| v.clone())
            .or_else(|| std::env::var_os("PATH"))
            .unwrap_or_default();
        let cwd = std::env::current_dir()?;
        which::which_in(&self.shell, Some(path), cwd)
            .map_err(|e| io::Error::new(io::ErrorKind::NotFound, e))
    }

    /// The error for a hook whose wait failed (its group is killed as the guard drops).
    fn failed(&self, e: &dyn std::fmt::Display) -> anyhow::Error {
        anyhow::anyhow!(
            "{} `{}`: cannot wait for its end: {e}; try again",
            self.option,
            self.command
        )
    }
}

/// How often a hook started after a stop signal looks for the next one.
const TICK: Duration = Duration::from_millis(50);

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

    fn config(env: Vec<(OsString, OsString)>) -> RunConfig {
        RunConfig {
            program: "sh".into(),
            args: Vec::new(),
            env,
            show_output: false,
            disable_aslr: false,
            cpus: Vec::new(),
            timeout: Some(Duration::from_secs(20)),
            input: None,
        }
    }

    #[test]
    fn a_failing_hook_names_itself_and_quotes_its_stderr() {
        let cancel = Cancel::install().unwrap();
        let env = config(std::env::vars_os().collect());
        hook("true").run(&env, &cancel).unwrap();
        let e = hook("echo no such table >&2; exit 3")
            .run(&env, &cancel)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--prepare command `echo no such table >&2; exit 3` exited with code 3"),
            "{e}"
        );
        assert!(e.contains("its last words: no such table"), "{e}");
        let mut missing = hook("true");
        missing.shell = "/nonexistent/sh".into();
        let e = missing.run(&env, &cancel).unwrap_err().to_string();
        assert!(e.contains("cannot start the shell /nonexistent/sh"), "{e}");
    }

    #[test]
    fn a_hook_sees_the_benchmark_environment_only() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("env");
        let env = config(vec![
            ("PATH".into(), std::env::var_os("PATH").unwrap_or_default()),
            ("SBS_HOOK_TEST".into(), "42".into()),
        ]);
        let cancel = Cancel::install().unwrap();
        hook(&format!(
            "echo \"$SBS_HOOK_TEST${{HOME:-}}\" > {}",
            out.display()
        ))
        .run(&env, &cancel)
        .unwrap();
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "42\n");
    }
}
