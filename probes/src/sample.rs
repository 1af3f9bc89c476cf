//! Sampling a child process's user call stacks on a software clock, without a PMU.
//!
//! The `cpu-clock` software event fires every [`SampleConfig::period_ns`] of CPU time a
//! watched task runs; each firing writes a sample with the task's user registers (`ip`,
//! `sp`, `bp`) and a copy of the top of its user stack ([`SampleConfig::stack_bytes`]).
//! The stacks are unwound after the run ([`crate::unwind`]) with each object's CFI
//! (`.eh_frame`), falling back to frame pointers where no CFI covers an address, so a
//! binary built without frame pointers unwinds as well as one built with them.
//!
//! The event is opened on the child before it execs (`enable_on_exec`: nothing of the
//! collector's side of the fork is sampled) with `inherit`, so it follows every thread
//! and every forked or exec'd descendant. The kernel refuses a ring buffer for an
//! inherited event not bound to a CPU, so there is one event and one ring per online CPU.
//! `mmap2` records say where each executable file was mapped, in which process, to put
//! the sampled addresses back into the files' own addresses (PIE, ASLR, shared
//! libraries). A thread drains the rings while the child runs, so that the stack copies
//! do not overflow them; a full ring drops samples, and the count of dropped samples is
//! kept ([`Recorded::lost`]).

use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use perf_event::data::Record as Parsed;
use perf_event::events::Software;
use perf_event::{Builder, SampleFlag, Sampler};

use crate::execs::ONLINE_CPUS;

/// Bytes of each CPU's ring (a power of two number of pages).
const RING_BYTES: usize = 4 << 20;

/// `perf_event_open`'s x86-64 register numbers of `bp`, `sp` and `ip`: the sample carries
/// them in this order.
const REG_BP: u32 = 6;
const REG_SP: u32 = 7;
const REG_IP: u32 = 8;

/// `PROT_EXEC` in an `mmap2` record.
const PROT_EXEC: u32 = 4;

/// How often and how much is sampled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampleConfig {
    /// CPU time between two samples of a task, in nanoseconds (250,000: 4 kHz).
    pub period_ns: u64,
    /// Bytes of user stack copied with each sample (a multiple of 8, at most 65,528).
    pub stack_bytes: u32,
}

impl Default for SampleConfig {
    fn default() -> Self {
        SampleConfig {
            period_ns: 250_000,
            stack_bytes: 16 * 1024,
        }
    }
}

/// Why sampling could not start.
#[derive(Debug, thiserror::Error)]
pub enum SampleError {
    /// The list of online CPUs is unreadable or malformed.
    #[error("cannot read the online CPUs from {ONLINE_CPUS}: {0}")]
    Cpus(io::Error),
    /// `perf_event_open` refused the event.
    #[error("perf_event_open of the cpu-clock sampling event on pid {pid} (CPU {cpu}) failed: {cause}; {}", open_hint(.cause))]
    Open {
        /// The process.
        pid: i32,
        /// The CPU of the event.
        cpu: usize,
        /// The OS error.
        cause: io::Error,
    },
    /// The thread that drains the rings could not be started.
    #[error("cannot start the thread that reads the samples: {0}")]
    Thread(io::Error),
    /// The ring buffer could not be mapped.
    #[error("cannot map the {} KiB sample ring of CPU {cpu}: {cause}; raise `kernel.perf_event_mlock_kb` or `ulimit -l`, or run as root", RING_BYTES / 1024)]
    Map {
        /// The CPU of the ring.
        cpu: usize,
        /// The OS error.
        cause: io::Error,
    },
}

fn open_hint(cause: &io::Error) -> &'static str {
    match cause.raw_os_error() {
        Some(libc::EACCES | libc::EPERM) => {
            "allow perf events with `sudo sysctl -w kernel.perf_event_paranoid=1`, or run as root or with CAP_PERFMON"
        }
        _ => "this kernel needs perf events (CONFIG_PERF_EVENTS) with user stack sampling",
    }
}

/// One sample: the task, its CPU time since the last one, its registers and stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawSample {
    /// Process.
    pub pid: u32,
    /// Thread.
    pub tid: u32,
    /// CPU time this sample stands for, ns.
    pub period: u64,
    /// Instruction pointer.
    pub ip: u64,
    /// Stack pointer.
    pub sp: u64,
    /// Frame pointer register.
    pub bp: u64,
    /// The user stack from `sp` up, as much as was copied.
    pub stack: Vec<u8>,
}

/// An executable file mapping of a watched process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    /// Process.
    pub pid: u32,
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// File offset mapped at `start`.
    pub pgoff: u64,
    /// The file.
    pub path: PathBuf,
}

/// What one run's sampling recorded.
#[derive(Debug, Clone, Default)]
pub struct Recorded {
    /// The samples, in the order the rings gave them.
    pub samples: Vec<RawSample>,
    /// Executable file mappings, in the order made (per CPU ring).
    pub mappings: Vec<Mapping>,
    /// Samples the kernel dropped (full ring or throttling).
    pub lost: u64,
    /// Samples that came without registers or stack (kernel threads, a task caught outside
    /// user mode).
    pub without_stack: u64,
    /// Whether time the tasks spent in the kernel on their behalf (system calls, page
    /// faults) was sampled too, at the user stack that entered the kernel; `false` where
    /// kernel samples are not allowed (`perf_event_paranoid` 2 without root).
    pub kernel: bool,
}

/// Sampling of one child and its descendants, from its exec to [`Sampling::finish`].
pub struct Sampling {
    stop: Arc<AtomicBool>,
    drain: Option<JoinHandle<Recorded>>,
    kernel: bool,
}

impl std::fmt::Debug for Sampling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sampling").finish_non_exhaustive()
    }
}

impl Sampling {
    /// Sample `pid` (which has not exec'd yet) from its exec on, and every thread and
    /// process it starts.
    pub fn start(pid: i32, config: SampleConfig) -> Result<Sampling, SampleError> {
        let cpus = crate::execs::online_cpus().map_err(SampleError::Cpus)?;
        let mut rings = Vec::with_capacity(cpus.len());
        let mut kernel = true;
        for cpu in cpus {
            let counter = match open_event(pid, cpu, config, kernel) {
                Err(e)
                    if kernel && matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM)) =>
                {
                    kernel = false;
                    open_event(pid, cpu, config, false)
                }
                other => other,
            }
            .map_err(|cause| SampleError::Open { pid, cpu, cause })?;
            let ring = counter
                .sampled(RING_BYTES)
                .map_err(|cause| SampleError::Map { cpu, cause })?;
            rings.push(ring);
        }

        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let drain = std::thread::Builder::new()
            .name("sbs-sampler".into())
            .spawn(move || drain(rings, &flag))
            .map_err(SampleError::Thread)?;
        Ok(Sampling {
            stop,
            drain: Some(drain),
            kernel,
        })
    }

    /// Stop after the child was reaped, and return what was recorded.
    pub fn finish(mut self) -> Recorded {
        self.stop.store(true, Ordering::Release);
        let mut recorded = self
            .drain
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        recorded.kernel = self.kernel;
        recorded
    }
}

impl Drop for Sampling {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.drain.take() {
            let _ = h.join();
        }
    }
}

/// The sampling event of one CPU. With `kernel`, a sample is also taken while the task
/// runs in the kernel on its behalf (a system call, a page fault), with the user registers
/// and stack it had on entering the kernel: that time goes to the user code that caused
/// it. Without the privilege for kernel samples, only user-mode time is sampled.
fn open_event(
    pid: i32,
    cpu: usize,
    config: SampleConfig,
    kernel: bool,
) -> io::Result<perf_event::Counter> {
    let mut b = Builder::new(Software::CPU_CLOCK);
    b.observe_pid(pid)
        .one_cpu(cpu)
        .inherit(true)
        .enabled(false)
        .enable_on_exec(true)
        .exclude_kernel(!kernel)
        .exclude_hv(true)
        .mmap(true)
        .mmap2(true)
        .sample_period(config.period_ns)
        .sample(
            SampleFlag::TID | SampleFlag::PERIOD | SampleFlag::REGS_USER | SampleFlag::STACK_USER,
        )
        .sample_regs_user((1 << REG_BP) | (1 << REG_SP) | (1 << REG_IP))
        .sample_stack_user(config.stack_bytes);
    b.build()
}

/// Read the rings until `stop` is set, then once more to their end.
fn drain(mut rings: Vec<Sampler>, stop: &AtomicBool) -> Recorded {
    let mut out = Recorded::default();
    loop {
        let last = stop.load(Ordering::Acquire);
        let mut any = false;
        for ring in &mut rings {
            while let Some(record) = ring.next_record() {
                any = true;
                if let Ok(parsed) = record.parse_record() {
                    keep(parsed, &mut out);
                }
            }
        }
        if last {
            return out;
        }
        if !any {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

fn keep(record: Parsed<'_>, out: &mut Recorded) {
    match record {
        Parsed::Sample(s) => {
            let regs = s.regs_user().map(|r| r.regs.to_vec());
            match (regs.as_deref(), s.stack_user()) {
                (Some(&[bp, sp, ip]), Some(stack)) if ip != 0 => out.samples.push(RawSample {
                    pid: s.pid().unwrap_or(0),
                    tid: s.tid().unwrap_or(0),
                    period: s.period().unwrap_or(0),
                    ip,
                    sp,
                    bp,
                    stack: stack.to_vec(),
                }),
                _ => out.without_stack += 1,
            }
        }
        Parsed::Mmap2(m) if m.prot & PROT_EXEC != 0 && m.filename.first() == Some(&b'/') => {
            use std::os::unix::ffi::OsStrExt;
            out.mappings.push(Mapping {
                pid: m.pid,
                start: m.addr,
                end: m.addr + m.len,
                pgoff: m.pgoff,
                path: std::ffi::OsStr::from_bytes(&m.filename).into(),
            });
        }
        Parsed::Lost(l) => out.lost += l.lost,
        _ => {}
    }
}
