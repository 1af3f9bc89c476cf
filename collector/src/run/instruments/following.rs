//! Whether the kernel kept following every process of a run: a descendant that execs a
//! program setuid or setgid to another id (or with file capabilities) ends every perf
//! event of its process at that exec, so uprobe counts and counters miss all it does
//! from there on, without an error (see [`sbs_probes::execs`]). The benchmark itself is
//! refused before the runs for that reason (`capability::credential_change`); its
//! descendants can only be found while the run goes on.
//!
//! Instruments built on perf events that follow the child (the uprobe counts, the
//! counters) each keep one [`Following`]: it opens a following exec watch when the child
//! waits at its start latch, reads it after the child was reaped, and says which runs lost
//! a process that way.

use std::collections::BTreeSet;

use nix::unistd::Pid;
use sbs_probes::execs::ExecWatch;

/// The check of one instrument over its runs.
#[derive(Debug, Default)]
pub struct Following {
    /// This run's watch, opened at the start latch.
    watch: Option<ExecWatch>,
    /// Runs checked.
    runs: usize,
    /// Runs in which the kernel stopped following a process.
    lost_runs: usize,
    /// The programs it stopped following at, over all runs.
    programs: BTreeSet<String>,
    /// Runs whose records overflowed (a process may have been lost unseen).
    saturated: usize,
    /// Runs not checked (the watch could not be opened), and the first reason.
    unchecked: usize,
    reason: Option<String>,
    /// Runs in which a process forked while it had another thread, and whether the last
    /// run read did ([`Following::forked_while_threaded`]).
    fork_runs: usize,
    last_forked: bool,
}

impl Following {
    /// The child waits at its start latch: watch it and what it starts.
    pub fn attach(&mut self, pid: Pid) {
        match ExecWatch::following(pid.as_raw()) {
            Ok(watch) => self.watch = Some(watch),
            Err(e) => {
                self.unchecked += 1;
                self.reason
                    .get_or_insert_with(|| format!("{e}; {}", e.fix()));
            }
        }
    }

    /// After the child was reaped: whether the kernel stopped following a process of
    /// this run (its counts then miss what that process did), or may have unseen: the
    /// run's records overflowed, so the check could not complete and guards nothing.
    pub fn lost_one(&mut self) -> bool {
        let Some(mut watch) = self.watch.take() else {
            return false;
        };
        let seen = watch.count();
        self.runs += 1;
        if seen.saturated {
            self.saturated += 1;
        }
        self.last_forked = seen.forked_while_threaded > 0;
        self.fork_runs += usize::from(self.last_forked);
        if seen.unfollowed.is_empty() {
            return seen.saturated;
        }
        self.lost_runs += 1;
        self.programs.extend(seen.unfollowed);
        true
    }

    /// Whether, in the run [`Following::lost_one`] last read, a process forked while it
    /// had another thread: uprobe counts may then miss calls (see
    /// `sbs_probes::execs::ExecCount::forked_while_threaded`).
    pub fn forked_while_threaded(&self) -> bool {
        self.last_forked
    }

    /// The warning for uprobe counts (`what`) of runs in which a process forked while it
    /// had another thread.
    pub fn fork_warning(&self, what: &str) -> Option<String> {
        (self.fork_runs > 0).then(|| {
            format!(
                "in {} of {} runs a process of the benchmark forked while another of its \
                 threads ran: the kernel's uprobes can miss calls made around such a fork \
                 (seen on Linux 6.x, with perf probe too), so {what} of those runs are \
                 lower bounds, not exact; --invocations-engine inproc counts such programs \
                 exactly",
                self.fork_runs,
                self.runs + self.unchecked
            )
        })
    }

    /// The run was abandoned.
    pub fn abort(&mut self) {
        self.watch = None;
    }

    /// The watch of the run in flight, taken out while other runs start (`--jobs`).
    pub fn park(&mut self) -> Option<ExecWatch> {
        self.watch.take()
    }

    /// The watch [`Following::park`] took out, back for its run's end.
    pub fn resume(&mut self, watch: Option<ExecWatch>) {
        self.watch = watch;
    }

    /// What a report must say, for metrics named by `what` (e.g. `the invocations.*
    /// counts`), which are lower bounds where a process was lost.
    pub fn warnings(&self, what: &str) -> Vec<String> {
        let mut out = Vec::new();
        let all = self.runs + self.unchecked;
        if self.lost_runs > 0 {
            let names: Vec<String> = self.programs.iter().map(|p| format!("`{p}`")).collect();
            let (programs, it) = match names.len() {
                1 => (
                    format!("a program that changed its credentials ({})", names[0]),
                    "it",
                ),
                _ => (
                    format!(
                        "programs that changed their credentials ({})",
                        names.join(", ")
                    ),
                    "they",
                ),
            };
            out.push(format!(
                "in {} of {all} runs a process of the benchmark exec'd {programs}: setuid or \
                 setgid to another user or group, or with file capabilities; the kernel ends \
                 every perf event of a process at such an exec, so {what} miss what {it} did \
                 (lower bounds, not exact); measure a copy without the setuid bit, or \
                 run sbs-profile as the program's owner",
                self.lost_runs
            ));
        }
        if self.saturated > 0 {
            out.push(format!(
                "in {} of {all} runs the kernel's exec records overflowed (more processes \
                 started, or more code mapped, than the records could hold while they were \
                 read): a descendant that exec'd a setuid program may have gone unnoticed \
                 there, so {what} of those runs are lower bounds, not exact",
                self.saturated
            ));
        }
        if let Some(reason) = &self.reason {
            out.push(format!(
                "whether a descendant exec'd a setuid program (which ends the kernel's \
                 counting for it) was not checked in {} of {all} runs: {reason}",
                self.unchecked
            ));
        }
        out
    }
}
