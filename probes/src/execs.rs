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
//! A thread drains the rings while the run goes on (the kernel wakes nothing: the thread
//! looks every few milliseconds, and at once when the watch is read), so that a run that
//! starts thousands of processes, or whose process maps and protects code thousands of
//! times (the in-process counting library's patching writes a mapping record per
//! `mprotect` of code), does not fill them. A ring that fills up anyway drops records: the
//! kernel then writes a record of how many it dropped, and the watch says so
//! ([`ExecCount::saturated`]: the count is then a lower bound).
//!
//! # Execs that end the kernel's following
//!
//! At an exec that changes the process's credentials (a program setuid or setgid to
//! another id, or with file capabilities), the kernel ends every perf event of the
//! process (`begin_new_exec` calls `perf_event_exit_task` once the new credentials are
//! committed and the process is no longer dumpable): counters, uprobe counts and sampled
//! stacks miss all it does from there on, without an error. The exit of its events
//! writes an exit record at once, right after the exec's comm record; an exec that keeps
//! the credentials maps the new program's code first (`load_elf_binary` maps it after
//! the point of no return), which writes a mapping record. A watch opened with
//! [`ExecWatch::following`] also asks for mapping and time-stamped records, and calls an
//! exec whose next record for that thread is its exit, with no mapping between, a
//! program the kernel stopped following ([`ExecCount::unfollowed`]). Those records take
//! more room (a dynamically linked process writes about 600 bytes): its rings are
//! [`FOLLOWING_RING_BYTES`] each, and where one fills up the check says so.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use perf_event::events::Software;
use perf_event::{Builder, Clock, SampleFlag, Sampler};

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

/// Bytes of records each CPU's ring holds for a watch that also checks that the kernel
/// kept following every exec'd program. With the control page, 2 CPUs take 264 KiB of the
/// unprivileged allowance of locked memory (516 KiB per CPU by default).
pub const FOLLOWING_RING_BYTES: usize = 128 * 1024;
/// Record type of an exit (of a thread, or of every perf event of a task).
const PERF_RECORD_EXIT: u32 = 4;
/// Record type of a new executable mapping.
const PERF_RECORD_MMAP: u32 = 1;
/// Record type of a new task (a thread, or a process): the new task's pid and tid, its
/// creator's pid and tid.
const PERF_RECORD_FORK: u32 = 7;
/// Bytes the sample id adds at the end of every record of a following watch: pid and
/// tid (`PERF_SAMPLE_TID`), then the time (`PERF_SAMPLE_TIME`).
const SAMPLE_ID_BYTES: usize = 16;

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
    /// The thread that reads the records could not be started.
    #[error("cannot start the thread that reads the exec records: {cause}")]
    Thread {
        /// The OS error.
        cause: io::Error,
    },
}

impl ExecWatchError {
    /// What would make the watch work, for a message that follows this error's.
    pub fn fix(&self) -> String {
        let errno = match self {
            ExecWatchError::Cpus { .. } | ExecWatchError::Thread { .. } => None,
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
            (ExecWatchError::Thread { .. }, _) => {
                "too many threads or too little memory for one more: end other work, or raise \
                 `ulimit -u`"
                    .to_string()
            }
            _ => "this kernel needs perf events (CONFIG_PERF_EVENTS) with comm records \
                  (Linux 3.16 or later)"
                .to_string(),
        }
    }
}

/// What a watch saw in one run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecCount {
    /// Successful execs by the watched process and its descendants.
    pub execs: u64,
    /// Whether a ring may have dropped records: `execs` is then a lower bound, and
    /// `unfollowed` may miss programs.
    pub saturated: bool,
    /// Programs (the name the kernel keeps: the file name, cut to 15 bytes) whose exec
    /// ended the kernel's following of the process, in the order seen; empty unless the
    /// watch was opened with [`ExecWatch::following`].
    pub unfollowed: Vec<String>,
    /// Processes started by a process that had other threads then (a `fork`, `vfork` or
    /// `clone` of a new process while another thread of the parent lived); 0 unless the
    /// watch was opened with [`ExecWatch::following`]. The kernel's uprobes miss calls
    /// around such a fork (see [`forked_while_threaded`]).
    pub forked_while_threaded: u64,
}

/// Exec records of one child process and its descendants, one ring per online CPU,
/// drained by a thread of its own until [`ExecWatch::count`].
pub struct ExecWatch {
    stop: Arc<AtomicBool>,
    reader: Option<Reader>,
    /// Whether the rings also hold mapping records and time stamps.
    following: bool,
}

/// Who reads the rings.
enum Reader {
    /// A thread, while the run goes on.
    Thread(JoinHandle<Drained>),
    /// [`ExecWatch::count`], once ([`ExecWatch::read_at_end`]).
    AtEnd(Vec<Sampler>),
}

impl std::fmt::Debug for ExecWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecWatch")
            .field("following", &self.following)
            .finish_non_exhaustive()
    }
}

/// How long the draining thread sleeps when the rings were empty. A ring holds tens of
/// kilobytes; no run writes that many records in so short a time.
const DRAIN_PAUSE: Duration = Duration::from_millis(5);

/// What was read from the rings.
#[derive(Debug, Default)]
struct Drained {
    execs: u64,
    saturated: bool,
    /// The steps of a following watch, in the order read (per ring, in time order).
    timeline: Vec<Step>,
}

impl ExecWatch {
    /// Watch `pid` (which should not have exec'd yet, so that its own exec counts) and
    /// everything it starts from now on. `pid` 0 is the calling process.
    pub fn open(pid: i32) -> Result<ExecWatch, ExecWatchError> {
        ExecWatch::open_with(pid, false, true)
    }

    /// Like [`ExecWatch::open`], and also find the execs at which the kernel stopped
    /// following a process (see the module's documentation).
    pub fn following(pid: i32) -> Result<ExecWatch, ExecWatchError> {
        ExecWatch::open_with(pid, true, true)
    }

    /// Like [`ExecWatch::open`], with the rings read only by [`ExecWatch::count`]: what a
    /// ring holds at once is then all it can hold, and a run that writes more is
    /// reported saturated. For tests of that report.
    #[doc(hidden)]
    pub fn read_at_end(pid: i32) -> Result<ExecWatch, ExecWatchError> {
        ExecWatch::open_with(pid, false, false)
    }

    fn open_with(pid: i32, following: bool, drained: bool) -> Result<ExecWatch, ExecWatchError> {
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
            if following {
                builder
                    .mmap(true)
                    .sample_id_all(true)
                    .sample(SampleFlag::TID | SampleFlag::TIME)
                    .clockid(Clock::MONOTONIC);
            }
            if pid == 0 {
                builder.observe_self();
            } else {
                builder.observe_pid(pid);
            }
            let counter = builder
                .build()
                .map_err(|cause| ExecWatchError::Open { cpu, cause })?;
            let ring = counter
                .sampled(ExecWatch::ring_bytes(following))
                .map_err(|cause| ExecWatchError::Map { cpu, cause })?;
            rings.push(ring);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let reader = if drained {
            let flag = stop.clone();
            let thread = std::thread::Builder::new()
                .name("sbs-execs".into())
                .spawn(move || drain(rings, following, &flag))
                .map_err(|cause| ExecWatchError::Thread { cause })?;
            Reader::Thread(thread)
        } else {
            Reader::AtEnd(rings)
        };
        Ok(ExecWatch {
            stop,
            reader: Some(reader),
            following,
        })
    }

    fn ring_bytes(following: bool) -> usize {
        if following {
            FOLLOWING_RING_BYTES
        } else {
            RING_BYTES
        }
    }

    /// Count the exec records. Call after the watched processes are gone: the count is
    /// final then. The watch ends here: a second call counts nothing.
    pub fn count(&mut self) -> ExecCount {
        self.stop.store(true, Ordering::Release);
        let drained = match self.reader.take() {
            None => return ExecCount::default(),
            Some(Reader::Thread(thread)) => {
                thread.thread().unpark();
                // A thread that panicked read nothing to trust: say the count is short.
                thread.join().unwrap_or(Drained {
                    saturated: true,
                    ..Drained::default()
                })
            }
            Some(Reader::AtEnd(mut rings)) => {
                let mut out = Drained::default();
                read_rings(&mut rings, self.following, &mut out);
                out
            }
        };
        let Drained {
            execs,
            saturated,
            mut timeline,
        } = drained;
        let mut total = ExecCount {
            execs,
            saturated,
            ..ExecCount::default()
        };
        if self.following {
            timeline.sort_by_key(|s| s.time);
            total.forked_while_threaded = forked_while_threaded(&timeline);
            total.unfollowed = unfollowed(timeline);
        }
        total
    }
}

impl Drop for ExecWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(Reader::Thread(thread)) = self.reader.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

/// Read the rings until `stop` is set, then once more to their end.
fn drain(mut rings: Vec<Sampler>, following: bool, stop: &AtomicBool) -> Drained {
    let mut out = Drained::default();
    loop {
        let last = stop.load(Ordering::Acquire);
        let any = read_rings(&mut rings, following, &mut out);
        if last {
            return out;
        }
        if !any {
            std::thread::park_timeout(DRAIN_PAUSE);
        }
    }
}

/// Read what the rings hold now into `out`; whether there was anything.
fn read_rings(rings: &mut [Sampler], following: bool, out: &mut Drained) -> bool {
    let ring_bytes = ExecWatch::ring_bytes(following);
    let mut any = false;
    for ring in rings {
        let mut used = 0usize;
        while let Some(record) = ring.next_record() {
            // The header (8 bytes) is not part of `len`.
            used += record.len() + 8;
            let exec = record.misc() & MISC_COMM_EXEC != 0;
            match record.ty() {
                PERF_RECORD_COMM if exec => out.execs += 1,
                PERF_RECORD_LOST => out.saturated = true,
                _ => {}
            }
            if following {
                out.timeline
                    .extend(Step::read(record.ty(), exec, &record.to_contiguous()));
            }
        }
        // One pass read all the ring took since the last: a ring read (nearly) full may
        // have dropped a record the kernel found no room to report.
        if used + LARGEST_RECORD > ring_bytes {
            out.saturated = true;
        }
        any |= used > 0;
    }
    any
}

/// One record of a following watch, as far as the check needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Step {
    /// When (`CLOCK_MONOTONIC`, ns): the rings of several CPUs interleave by it.
    time: u64,
    /// The thread the record is about.
    tid: u32,
    what: What,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum What {
    /// An exec, and the program's name.
    Exec(String),
    /// A new executable mapping.
    Map,
    /// The end of the thread's perf events (its exit, or a credential change), in
    /// process `pid`.
    Exit {
        /// The thread's process.
        pid: u32,
    },
    /// A new task `pid` made by a thread of process `ppid`: a thread of it when they are
    /// equal, else a new process.
    Fork {
        /// The new task's process.
        pid: u32,
        /// Its creator's process.
        ppid: u32,
    },
}

impl Step {
    /// The step a record of type `ty` (body `data`, without the header) is, if any.
    /// Every record of a following watch ends in its sample id (pid, tid, time); a comm
    /// record's name starts after its pid and tid.
    fn read(ty: u32, exec: bool, data: &[u8]) -> Option<Step> {
        let at = data.len().checked_sub(SAMPLE_ID_BYTES)?;
        let id = &data[at..];
        let tid = u32::from_le_bytes(id[4..8].try_into().ok()?);
        let time = u64::from_le_bytes(id[8..16].try_into().ok()?);
        // A fork or exit record starts with pid, ppid, tid, ptid (its sample id is the
        // creator's, for a fork).
        let word = |k: usize| -> Option<u32> {
            Some(u32::from_le_bytes(
                data.get(4 * k..4 * k + 4)?.try_into().ok()?,
            ))
        };
        let what = match ty {
            PERF_RECORD_COMM if exec => {
                let name = data.get(8..at)?;
                let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
                What::Exec(String::from_utf8_lossy(&name[..end]).into_owned())
            }
            PERF_RECORD_MMAP => What::Map,
            PERF_RECORD_EXIT => What::Exit { pid: word(0)? },
            PERF_RECORD_FORK => {
                let what = What::Fork {
                    pid: word(0)?,
                    ppid: word(1)?,
                };
                return Some(Step {
                    time,
                    tid: word(2)?,
                    what,
                });
            }
            _ => return None,
        };
        Some(Step { time, tid, what })
    }
}

/// New processes made while their parent process had another thread, in `steps` (in
/// time order): the live threads of each process counted from the fork and exit records
/// (the watched process starts with one). Uprobe counts are not exact across such a
/// fork: on Linux 6.x, `tests/src/bin/thread_calls.rs`'s `fork` case (threads calling
/// the probed function while the main thread forks) loses a few percent of its calls in
/// some runs, with `perf probe` and `perf stat` as with sbs-profile's uprobes, and none
/// without the forks or with the threads' calls done before them.
fn forked_while_threaded(steps: &[Step]) -> u64 {
    let mut threads: std::collections::HashMap<u32, u64> = Default::default();
    let mut forks = 0;
    for step in steps {
        match step.what {
            What::Fork { pid, ppid } if pid == ppid => {
                *threads.entry(pid).or_insert(1) += 1;
            }
            What::Fork { pid, ppid } => {
                if threads.get(&ppid).copied().unwrap_or(1) > 1 {
                    forks += 1;
                }
                threads.insert(pid, 1);
            }
            What::Exit { pid } => {
                let live = threads.entry(pid).or_insert(1);
                *live = live.saturating_sub(1);
            }
            What::Exec(_) | What::Map => {}
        }
    }
    forks
}

/// The programs whose exec was followed, for the same thread, by the end of its events
/// with no mapping between. `steps` are in time order.
fn unfollowed(steps: Vec<Step>) -> Vec<String> {
    let mut pending: std::collections::HashMap<u32, String> = Default::default();
    let mut out = Vec::new();
    for step in steps {
        match step.what {
            What::Exec(name) => {
                pending.insert(step.tid, name);
            }
            What::Map => {
                pending.remove(&step.tid);
            }
            What::Exit { .. } => out.extend(pending.remove(&step.tid)),
            What::Fork { .. } => {}
        }
    }
    out
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
    fn an_exec_ended_before_its_program_was_mapped_is_unfollowed() {
        let step = |time, tid, what| Step { time, tid, what };
        let exec = |name: &str| What::Exec(name.to_string());
        // Two rings (CPU 0 then CPU 1), each in time order, interleaved by time: thread 7
        // execs `sh` on CPU 0 and maps it on CPU 1; thread 8 execs `ping` and its events
        // end at once; thread 9 execs `true`, maps it and exits; thread 10's exec is still
        // running at the end.
        let exit = What::Exit { pid: 1 };
        let mut steps = vec![
            step(10, 7, exec("sh")),
            step(30, 8, exec("ping")),
            step(31, 8, exit.clone()),
            step(40, 9, exec("true")),
            step(60, 9, exit.clone()),
            step(70, 10, exec("sleep")),
            step(12, 7, What::Map),
            step(50, 9, What::Map),
            step(90, 7, exit),
        ];
        steps.sort_by_key(|s| s.time);
        assert_eq!(unfollowed(steps), vec!["ping".to_string()]);
    }

    #[test]
    fn a_fork_while_another_thread_lives_is_found() {
        let step = |time, what| Step { time, tid: 0, what };
        let fork = |pid, ppid| What::Fork { pid, ppid };
        // Process 10 forks 11 alone; starts thread 10 (a second thread), forks 12 while it
        // lives; the thread exits; 10 forks 13 alone again; 11 starts a thread and ends it.
        let steps = [
            step(1, fork(11, 10)),
            step(2, fork(10, 10)),
            step(3, fork(12, 10)),
            step(4, What::Exit { pid: 10 }),
            step(5, fork(13, 10)),
            step(6, fork(11, 11)),
            step(7, What::Exit { pid: 11 }),
            step(8, fork(14, 11)),
        ];
        assert_eq!(forked_while_threaded(&steps), 1);
    }

    #[test]
    fn records_of_a_following_watch_are_read_from_their_sample_id() {
        let mut comm = Vec::new();
        comm.extend_from_slice(&5u32.to_le_bytes());
        comm.extend_from_slice(&6u32.to_le_bytes());
        comm.extend_from_slice(b"ping\0\0\0\0");
        comm.extend_from_slice(&5u32.to_le_bytes());
        comm.extend_from_slice(&6u32.to_le_bytes());
        comm.extend_from_slice(&1234u64.to_le_bytes());
        assert_eq!(
            Step::read(PERF_RECORD_COMM, true, &comm),
            Some(Step {
                time: 1234,
                tid: 6,
                what: What::Exec("ping".into())
            })
        );
        // A rename is no exec; a record shorter than its sample id is skipped.
        assert_eq!(Step::read(PERF_RECORD_COMM, false, &comm), None);
        assert_eq!(Step::read(PERF_RECORD_EXIT, false, &comm[..8]), None);
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
