//! Counting uprobe hits in one child process, its threads and its descendants.
//!
//! Each uprobe defined in tracefs is a tracepoint; a perf counter on that tracepoint,
//! opened on the child's pid with `inherit` and `enable_on_exec` while the child waits at
//! its start latch, counts every hit in the child after `exec`, in all its threads and in
//! the processes it forks. (A uprobe opened through the uprobe PMU with `inherit` makes
//! every `clone()` of the child fail: see FINDINGS.)
//!
//! Cost: when the last perf event of a uprobe closes, the kernel unregisters the uprobe
//! and waits for an RCU grace period (~110 ms each here, measured with strace). Per-run
//! counters would pay that once per probe per run. [`Anchors`] keep one disabled event per
//! probe open for the whole series, so per-run counters come and go cheaply (the kernel
//! then only updates the probe's pid filter); the grace periods are paid once per probe
//! per series, when the anchors close. Closing them on parallel threads does not help:
//! the kernel serialises the unregistrations (measured: 73 probes, 32 threads, 6.6 s).

use perf_event::events::Tracepoint;
use perf_event::{Builder, Counter};

use crate::error::ProbeError;
use crate::tracefs::{DefinedProbe, ProbeSet};

/// The kernel's internal "not supported" errno, which x86 uprobes return for an
/// instruction they cannot single-step (no name in libc: it is not a user-space errno).
const ENOTSUPP: i32 = 524;

/// The error for a counter on `probe` that would not open, for `pid`.
fn open_error(probe: &DefinedProbe, pid: i32, what: String, e: std::io::Error) -> ProbeError {
    if e.raw_os_error() == Some(ENOTSUPP) {
        return ProbeError::Refused {
            what: probe.what.clone(),
            path: probe.path.clone(),
            offset: probe.offset,
        };
    }
    ProbeError::or_permission(e, what, |cause| ProbeError::Counter {
        event: probe.event.clone(),
        pid,
        cause,
    })
}

/// Open counters for one run.
#[derive(Debug)]
pub struct RunCounters {
    counters: Vec<(String, Counter)>,
}

impl RunCounters {
    /// Open one counter per probe of `set` on `pid`, which must not have exec'd yet,
    /// counting from its exec.
    pub fn open(set: &ProbeSet, pid: i32) -> Result<RunCounters, ProbeError> {
        Self::open_with(set, pid, true)
    }

    /// Open the counters disabled, for a harness to switch on around its measured region
    /// (see [`RunCounters::raw_fds`]); they count nothing until it does.
    pub fn open_for_region(set: &ProbeSet, pid: i32) -> Result<RunCounters, ProbeError> {
        Self::open_with(set, pid, false)
    }

    /// The counters' descriptors, in the order of the probes.
    pub fn raw_fds(&self) -> Vec<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        self.counters.iter().map(|(_, c)| c.as_raw_fd()).collect()
    }

    fn open_with(set: &ProbeSet, pid: i32, on_exec: bool) -> Result<RunCounters, ProbeError> {
        let wanted = set.probes().len() as u64 + 256;
        let _ = crate::sys::raise_nofile_limit(wanted);
        let mut counters = Vec::with_capacity(set.probes().len());
        for p in set.probes() {
            let counter = Builder::new(Tracepoint::with_id(p.id))
                .observe_pid(pid)
                .any_cpu()
                .inherit(true)
                .enabled(false)
                .enable_on_exec(on_exec)
                .build()
                .map_err(|e| {
                    let what =
                        format!("opening a perf counter on uprobe {} for pid {pid}", p.event);
                    open_error(p, pid, what, e)
                })?;
            counters.push((p.event.clone(), counter));
        }
        Ok(RunCounters { counters })
    }

    /// Number of counters.
    pub fn len(&self) -> usize {
        self.counters.len()
    }

    /// No counters at all.
    pub fn is_empty(&self) -> bool {
        self.counters.is_empty()
    }

    /// Read every counter, in the order of the probes. Call after the child was reaped:
    /// the counts of its exited descendants are then folded in.
    pub fn read(&mut self) -> Result<Vec<u64>, ProbeError> {
        self.counters
            .iter_mut()
            .map(|(event, c)| {
                c.read().map_err(|source| ProbeError::ReadCounter {
                    event: event.clone(),
                    cause: source,
                })
            })
            .collect()
    }
}

/// One disabled perf event per probe, on this process itself, that keeps the uprobes
/// registered between runs (see the module documentation). It never counts; the only
/// effect on this process is a trap if it calls a probed library function while the
/// anchors exist.
#[derive(Debug)]
pub struct Anchors {
    counters: Vec<(String, Counter)>,
}

impl Anchors {
    /// Open one anchor per probe of `set`; `stop` is asked before each one (see
    /// [`ProbeSet::define`]).
    ///
    /// While they are opened, every probed file is mapped into this process (read and
    /// execute, never run): the kernel then inserts each breakpoint here at once and
    /// refuses, with ENOTSUPP, an instruction its x86 uprobes cannot single-step. Without
    /// the mapping it would find out only when the benchmark maps the file, and there it
    /// fails silently: the probe never fires and the count reads 0.
    pub fn open(set: &ProbeSet, stop: &dyn Fn() -> bool) -> Result<Anchors, ProbeError> {
        let _ = crate::sys::raise_nofile_limit(2 * set.probes().len() as u64 + 256);
        let mut files: Vec<&std::path::Path> =
            set.probes().iter().map(|p| p.path.as_path()).collect();
        files.sort_unstable();
        files.dedup();
        // Best effort: a file that cannot be mapped cannot be run by the benchmark either.
        let _mapped: Vec<crate::sys::FileMapping> = files
            .into_iter()
            .filter_map(|f| crate::sys::FileMapping::map_exec(f).ok())
            .collect();
        let me = std::process::id() as i32;
        let mut anchors = Anchors {
            counters: Vec::with_capacity(set.probes().len()),
        };
        for (i, p) in set.probes().iter().enumerate() {
            if stop() {
                return Err(ProbeError::Interrupted {
                    defined: i,
                    total: set.probes().len(),
                });
            }
            let counter = Builder::new(Tracepoint::with_id(p.id))
                .observe_pid(me)
                .any_cpu()
                .build()
                .map_err(|e| {
                    let what = format!("opening a perf counter on uprobe {}", p.event);
                    open_error(p, me, what, e)
                })?;
            anchors.counters.push((p.event.clone(), counter));
        }
        Ok(anchors)
    }
}
