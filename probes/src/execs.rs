//! Counting the programs a child process and its descendants exec, without privileges.
//!
//! The kernel writes a `PERF_RECORD_COMM` record flagged `PERF_RECORD_MISC_COMM_EXEC`
//! each time a watched task execs, into the ring buffer of a perf event that asked for
//! `comm` records. A software `dummy` event counts nothing itself, and with
//! `exclude_kernel` it may be opened on one's own child at `perf_event_paranoid` 2 (the
//! usual default), no root needed. With `inherit` it follows every thread and every
//! forked or spawned descendant. The kernel refuses a ring buffer for an inherited event
//! that is not bound to a CPU, so there is one event and one ring per online CPU; each
//! records what the tasks running on its CPU did.
//!
//! The rings are read once, after the run, so no reader runs next to the benchmark. A
//! ring that fills up drops records: the watch says so (the count is then a lower bound).
//! The events also bring fork and exit records (the kernel adds them to `comm` ones), so
//! a ring of [`RING_BYTES`] holds about a thousand processes or threads per CPU.

use std::io;

use perf_event::events::Software;
use perf_event::{Builder, Sampler};

/// Bytes of records each CPU's ring holds (a power of two). With its control page, the
/// ring takes 68 KiB of locked memory per CPU, well inside the kernel's unprivileged
/// allowance (`kernel.perf_event_mlock_kb`, 516 KiB per CPU by default).
pub const RING_BYTES: usize = 64 * 1024;

/// Record type of a task's new name, at exec or by `prctl(PR_SET_NAME)`.
const PERF_RECORD_COMM: u32 = 3;
/// Record type that says how many records a full ring dropped.
const PERF_RECORD_LOST: u32 = 2;
/// The flag of a `PERF_RECORD_COMM` written by exec.
const MISC_COMM_EXEC: u16 = 1 << 13;
/// No record these events write is larger (fork, exit and comm records are 32 bytes);
/// with less room than this left, a ring may have dropped one.
const LARGEST_RECORD: usize = 64;

/// Where the kernel lists the CPUs that are online.
pub(crate) const ONLINE_CPUS: &str = "/sys/devices/system/cpu/online";

/// Why exec records cannot be watched on this machine.
#[derive(Debug, thiserror::Error)]
pub enum ExecWatchError {
    /// The list of online CPUs is unreadable or malformed.
    #[error("cannot read the online CPUs from {ONLINE_CPUS}: {cause}")]
    Cpus {
        /// The cause.
        cause: io::Error,
    },
    /// `perf_event_open` refused the event.
    #[error("perf_event_open of a software event recording execs (CPU {cpu}) failed: {cause}")]
    Open {
        /// The CPU of the event.
        cpu: usize,
        /// The OS error.
        cause: io::Error,
    },
    /// The ring buffer could not be mapped.
    #[error("cannot map the ring buffer of the exec records (CPU {cpu}): {cause}")]
    Map {
        /// The CPU of the ring.
        cpu: usize,
        /// The OS error.
        cause: io::Error,
    },
}

impl ExecWatchError {
    /// What would make the watch work, for a message that follows this error's.
    pub fn fix(&self) -> String {
        let errno = match self {
            ExecWatchError::Cpus { .. } => None,
            ExecWatchError::Open { cause, .. } | ExecWatchError::Map { cause, .. } => {
                cause.raw_os_error()
            }
        };
        match (self, errno) {
            (ExecWatchError::Open { .. }, Some(libc::EACCES | libc::EPERM)) => {
                let facts = crate::capability::MachineFacts::read();
                let level = facts
                    .paranoid
                    .map_or_else(|| "unknown".to_string(), |p| p.to_string());
                format!(
                    "perf_event_paranoid is {level}; allow perf events on one's own processes \
                     with `sudo sysctl -w kernel.perf_event_paranoid=2`, or run as root or \
                     with CAP_PERFMON"
                )
            }
            (ExecWatchError::Map { .. }, Some(libc::EPERM | libc::ENOMEM)) => {
                "the locked memory for perf buffers is used up (other perf sessions of this \
                 user?); close them, or raise `kernel.perf_event_mlock_kb` or `ulimit -l`"
                    .to_string()
            }
            _ => "this kernel needs perf events (CONFIG_PERF_EVENTS) with comm records \
                  (Linux 3.16 or later)"
                .to_string(),
        }
    }
}

/// What a watch saw in one run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExecCount {
    /// Successful execs by the watched process and its descendants.
    pub execs: u64,
    /// Whether a ring may have dropped records: `execs` is then a lower bound.
    pub saturated: bool,
}

/// Exec records of one child process and its descendants, one ring per online CPU.
pub struct ExecWatch {
    rings: Vec<Sampler>,
}

impl std::fmt::Debug for ExecWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecWatch")
            .field("rings", &self.rings.len())
            .finish()
    }
}

impl ExecWatch {
    /// Watch `pid` (which should not have exec'd yet, so that its own exec counts) and
    /// everything it starts from now on. `pid` 0 is the calling process.
    pub fn open(pid: i32) -> Result<ExecWatch, ExecWatchError> {
        let cpus = online_cpus().map_err(|cause| ExecWatchError::Cpus { cause })?;
        let _ = crate::sys::raise_nofile_limit(cpus.len() as u64 + 256);
        let mut rings = Vec::with_capacity(cpus.len());
        for cpu in cpus {
            let mut builder = Builder::new(Software::DUMMY);
            builder
                .one_cpu(cpu)
                .inherit(true)
                .exclude_kernel(true)
                .exclude_hv(true)
                .comm(true)
                .comm_exec(true)
                .enabled(true);
            if pid == 0 {
                builder.observe_self();
            } else {
                builder.observe_pid(pid);
            }
            let counter = builder
                .build()
                .map_err(|cause| ExecWatchError::Open { cpu, cause })?;
            let ring = counter
                .sampled(RING_BYTES)
                .map_err(|cause| ExecWatchError::Map { cpu, cause })?;
            rings.push(ring);
        }
        Ok(ExecWatch { rings })
    }

    /// Count the exec records. Call after the watched processes are gone: the count is
    /// final then. Reading consumes the records.
    pub fn count(&mut self) -> ExecCount {
        let mut total = ExecCount::default();
        for ring in &mut self.rings {
            let mut used = 0usize;
            while let Some(record) = ring.next_record() {
                // The header (8 bytes) is not part of `len`.
                used += record.len() + 8;
                match record.ty() {
                    PERF_RECORD_COMM if record.misc() & MISC_COMM_EXEC != 0 => total.execs += 1,
                    PERF_RECORD_LOST => total.saturated = true,
                    _ => {}
                }
            }
            // Nothing was read while the run went on, so `used` is all the ring took.
            if used + LARGEST_RECORD > RING_BYTES {
                total.saturated = true;
            }
        }
        total
    }
}

/// Whether execs can be watched here: a watch on the calling process, opened and
/// closed at once.
pub fn check() -> Result<(), ExecWatchError> {
    ExecWatch::open(0).map(drop)
}

/// The online CPUs: a per-task event that is inherited and has a ring buffer must be
/// opened once per CPU.
pub(crate) fn online_cpus() -> io::Result<Vec<usize>> {
    let text = std::fs::read_to_string(ONLINE_CPUS)?;
    parse_cpu_list(&text).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("unexpected contents {:?}", text.trim()),
        )
    })
}

/// The CPUs of a kernel CPU list such as `0-3,8,10-11`.
pub(crate) fn parse_cpu_list(text: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (a.parse::<usize>().ok()?, b.parse::<usize>().ok()?);
                if b < a {
                    return None;
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.parse().ok()?),
        }
    }
    Some(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse_as_the_kernel_writes_them() {
        assert_eq!(parse_cpu_list("0\n"), Some(vec![0]));
        assert_eq!(parse_cpu_list("0-3\n"), Some(vec![0, 1, 2, 3]));
        assert_eq!(parse_cpu_list("0-1,4,6-7"), Some(vec![0, 1, 4, 6, 7]));
        assert_eq!(parse_cpu_list(""), None);
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("0-x"), None);
    }

    #[test]
    fn a_refusal_names_the_setting_that_allows_the_watch() {
        let refused = ExecWatchError::Open {
            cpu: 0,
            cause: io::Error::from_raw_os_error(libc::EACCES),
        };
        assert!(
            refused.fix().contains("perf_event_paranoid"),
            "{}",
            refused.fix()
        );
        let no_memory = ExecWatchError::Map {
            cpu: 1,
            cause: io::Error::from_raw_os_error(libc::EPERM),
        };
        assert!(no_memory.fix().contains("ulimit -l"), "{}", no_memory.fix());
    }
}
