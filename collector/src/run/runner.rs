//! Runs one sample: one fresh child process, held at a start latch while the group's
//! instruments attach, then released, timed, reaped.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use crate::run::instrument::{ChildSetup, ExitKind, Instrument, RunOutcome, Sample};
use crate::run::launcher::{self, Message};
use crate::run::sys;

mod overlap;
pub use overlap::{run_overlapping, Planned, RunResult};

/// Everything about how to start the child, the same for every run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunConfig {
    /// Absolute or relative path of the resolved program.
    pub program: PathBuf,
    /// argv, argv[0] included.
    pub args: Vec<OsString>,
    /// The child's base environment (instruments may add to it).
    pub env: Vec<(OsString, OsString)>,
    /// Show the child's stdout/stderr instead of discarding them.
    pub show_output: bool,
    /// Disable address-space layout randomisation in the child.
    pub disable_aslr: bool,
    /// CPUs to pin the child to (empty: no pinning).
    pub cpus: Vec<usize>,
    /// Kill the child's process group after this long.
    pub timeout: Option<Duration>,
    /// A file the child reads as its stdin, opened afresh for every run (`/dev/null` when
    /// `None`). A FIFO's run waits for a writer, within `timeout` (see [`open_input`]).
    pub input: Option<PathBuf>,
}

/// Why a run could not produce an outcome.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The child could not be started.
    #[error("cannot start {program:?}: {source}")]
    Spawn {
        /// The program.
        program: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// `execve` failed in the child.
    #[error("cannot execute {program:?}: {source}")]
    Exec {
        /// The program.
        program: PathBuf,
        /// The errno reported by the child.
        source: io::Error,
    },
    /// `execve` found no such file although the program exists: what it needs to start
    /// (a script's `#!` interpreter, a program's dynamic loader) is missing.
    #[error("cannot execute {program:?}: {missing} does not exist; {advice}")]
    Missing {
        /// The program.
        program: PathBuf,
        /// What is missing, named.
        missing: String,
        /// What to do.
        advice: &'static str,
    },
    /// The benchmark's parent (the launcher's child that starts it and waits for it)
    /// ended before it could say how the benchmark ended.
    #[error(
        "the parent process of {program:?} (pid {run_parent}, which sbs-profile starts each run \
         from and which waits for it) was killed before the run ended, so how it ended is \
         unknown: a benchmark must not signal its parent (kill $PPID, kill(getppid(), ...)); \
         if it does not, look for what killed it (`dmesg` shows the OOM killer)"
    )]
    ParentGone {
        /// The program.
        program: PathBuf,
        /// The run parent's pid.
        run_parent: i32,
    },
    /// The `--input` file could not be opened for a run.
    #[error("--input {}: {source}; check the path", path.display())]
    Input {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// An instrument failed to set up or to collect.
    #[error("{instrument}")]
    Instrument {
        /// Instrument name.
        instrument: String,
        /// The cause.
        source: anyhow::Error,
    },
    /// The child stopped (a job-control signal); it was killed with its process group.
    #[error("{}", stopped_message(program, *signal))]
    Stopped {
        /// The program.
        program: PathBuf,
        /// The signal that stopped it.
        signal: i32,
    },
    /// The user pressed Ctrl-C, or the collector got SIGTERM, SIGHUP (its terminal or ssh
    /// session closed) or SIGQUIT.
    #[error("interrupted")]
    Interrupted,
}

impl RunError {
    /// Whether an instrument answered [`RunAgain`](crate::run::instrument::RunAgain): it
    /// measures differently now, and the run is to be made again.
    pub fn asks_again(&self) -> bool {
        matches!(self, RunError::Instrument { source, .. }
            if source.is::<crate::run::instrument::RunAgain>())
    }
}

/// Why `program` stopped with `signal`, and what to do: one line. Every process the
/// runner starts has a process group of its own (so that a timeout or Ctrl-C kills all it
/// started), which a terminal treats as a background job: reading the terminal stops it,
/// and so does writing to it under `stty tostop`. A stopped run would never end.
pub fn stopped_message(program: &std::path::Path, signal: i32) -> String {
    let program = program.display();
    let own_group = "a run is a background job to the terminal (it has a process group of \
                     its own), so";
    match signal {
        libc::SIGTTOU => format!(
            "{program} was stopped by SIGTTOU: it wrote to the terminal (or changed its \
             settings), and {own_group} `stty tostop` stops it there; it was killed; redirect \
             its output in the command, drop --show-output, or run `stty -tostop`"
        ),
        libc::SIGTTIN => format!(
            "{program} was stopped by SIGTTIN: it read from the terminal, and {own_group} the \
             terminal stops it there; it was killed; give it its input with --input FILE or a \
             redirection in the command"
        ),
        _ => {
            let name = Signal::try_from(signal)
                .map(|s| s.as_str().to_string())
                .unwrap_or_else(|_| format!("signal {signal}"));
            format!(
                "{program} was stopped by {name} (it stopped itself, or another process \
                 stopped it) and was killed, since a stopped run never ends; benchmark a \
                 command that does not stop"
            )
        }
    }
}

/// The signals that stop a measurement cleanly (children killed, probes removed, nothing
/// written): Ctrl-C, SIGTERM, SIGHUP and SIGQUIT.
pub const STOP_SIGNALS: [libc::c_int; 4] =
    [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

/// The [`STOP_SIGNALS`], turned into a readable descriptor that the runner polls.
pub struct Cancel {
    read: OwnedFd,
    ids: Vec<signal_hook::SigId>,
}

/// Set by the signals a [`Cancel`] catches, for long work that cannot poll its descriptor.
static INTERRUPTED: std::sync::LazyLock<std::sync::Arc<std::sync::atomic::AtomicBool>> =
    std::sync::LazyLock::new(Default::default);

/// Whether one of the [`STOP_SIGNALS`] arrived while a [`Cancel`] was installed: checked
/// between the steps of long set-up work (defining hundreds of uprobes) so that it stops
/// at once.
pub fn interrupt_requested() -> bool {
    INTERRUPTED.load(std::sync::atomic::Ordering::Relaxed)
}

impl Cancel {
    /// Start catching the [`STOP_SIGNALS`].
    pub fn install() -> io::Result<Self> {
        let (read, write) = std::os::unix::net::UnixStream::pair()?;
        read.set_nonblocking(true)?;
        write.set_nonblocking(true)?;
        let mut ids = Vec::new();
        for sig in STOP_SIGNALS {
            ids.push(signal_hook::low_level::pipe::register(
                sig,
                write.try_clone()?,
            )?);
            ids.push(signal_hook::flag::register(sig, INTERRUPTED.clone())?);
        }
        Ok(Cancel {
            read: OwnedFd::from(read),
            ids,
        })
    }

    /// Whether a signal has arrived (non-blocking).
    pub fn requested(&self) -> bool {
        let mut fds = [PollFd::new(self.read.as_fd(), PollFlags::POLLIN)];
        matches!(poll(&mut fds, PollTimeout::ZERO), Ok(n) if n > 0)
    }

    /// Readable once a signal has arrived (and from then on: nothing drains it).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.read.as_fd()
    }

    /// How many signals have arrived (up to a few thousand): work started after the
    /// first (a `--cleanup` after Ctrl-C) stops at the next.
    pub fn signals(&self) -> usize {
        let mut bytes = [0u8; 4096];
        nix::sys::socket::recv(
            self.read.as_raw_fd(),
            &mut bytes,
            nix::sys::socket::MsgFlags::MSG_PEEK | nix::sys::socket::MsgFlags::MSG_DONTWAIT,
        )
        .unwrap_or(0)
    }
}

impl Drop for Cancel {
    fn drop(&mut self) {
        for id in self.ids.drain(..) {
            signal_hook::low_level::unregister(id);
        }
    }
}

fn instrument_error(i: &dyn Instrument, source: anyhow::Error) -> RunError {
    RunError::Instrument {
        instrument: i.name().to_string(),
        source,
    }
}

/// Run the child once with `instruments` attached; returns the outcome and the
/// instruments' samples. Instruments get `abort_run` if the run ends early.
pub fn run_once(
    config: &RunConfig,
    instruments: &mut [Box<dyn Instrument>],
    cancel: &Cancel,
) -> Result<(RunOutcome, Vec<Sample>), RunError> {
    let result = run_inner(config, instruments, cancel);
    if result.is_err() {
        for i in instruments.iter_mut() {
            i.abort_run();
        }
    }
    result
}

fn run_inner(
    config: &RunConfig,
    instruments: &mut [Box<dyn Instrument>],
    cancel: &Cancel,
) -> Result<(RunOutcome, Vec<Sample>), RunError> {
    if cancel.requested() {
        return Err(RunError::Interrupted);
    }
    let launch = prepare(config, instruments)?;
    let mut child = start(config, instruments, launch, cancel)?;
    let ended = wait_for_exit(config, &mut child, cancel)?;
    let outcome = reap(config, child, ended, true)?;
    let mut samples = Vec::new();
    for i in instruments.iter_mut() {
        i.collect(&outcome, &mut samples)
            .map_err(|e| instrument_error(i.as_ref(), e))?;
    }
    Ok((outcome, samples))
}

/// What to exec for one run, once the instruments have said what they need.
struct Launch {
    /// The program to exec: the benchmark, or the first word of a wrapper.
    path: OsString,
    /// argv, argv[0] included.
    args: Vec<OsString>,
    /// The whole environment of the child.
    env: Vec<(OsString, OsString)>,
    /// Descriptors to install in the child.
    pass_fds: Vec<(OwnedFd, i32)>,
}

/// Let the instruments prepare the run and lay out the command it execs: the
/// environment they add, and a wrapper (valgrind) in front of the benchmark.
fn prepare(
    config: &RunConfig,
    instruments: &mut [Box<dyn Instrument>],
) -> Result<Launch, RunError> {
    let mut setup = ChildSetup::default();
    for i in instruments.iter_mut() {
        i.prepare(&mut setup).map_err(|e| {
            if interrupt_requested() {
                // Set-up work stopped by the signal.
                RunError::Interrupted
            } else {
                instrument_error(i.as_ref(), e)
            }
        })?;
    }
    let mut env = config.env.clone();
    for (k, v) in setup.env.drain(..) {
        env.retain(|(ek, _)| ek != &k);
        env.push((k, v));
    }
    let Some(wrapper) = setup.wrapper.first() else {
        return Ok(Launch {
            path: config.program.clone().into_os_string(),
            args: config.args.clone(),
            env,
            pass_fds: setup.pass_fds,
        });
    };
    let mut args = setup.wrapper.clone();
    match setup.argv0_option.take() {
        Some(option) => {
            args.push(option);
            args.push(
                config
                    .args
                    .first()
                    .cloned()
                    .unwrap_or_else(|| config.program.clone().into_os_string()),
            );
            args.push(config.program.clone().into_os_string());
        }
        None => args.push(program_as_given(config, &env)),
    }
    args.extend(config.args.iter().skip(1).cloned());
    // A wrapper is looked up in PATH like a shell would.
    let path = if wrapper.as_encoded_bytes().contains(&b'/') {
        wrapper.clone()
    } else {
        which::which(wrapper)
            .map_err(|e| spawn_error(config, io::Error::new(io::ErrorKind::NotFound, e)))?
            .into_os_string()
    };
    Ok(Launch {
        path,
        args,
        env,
        pass_fds: setup.pass_fds,
    })
}

/// How a wrapper (valgrind) names the program: valgrind runs the program it finds by that
/// name (through `PATH` when it has no `/`) and gives the program that name as its
/// `argv[0]`, so the argv[0] the user gave, where it finds the same file as the resolved
/// program in the child's environment: every group then runs the same argv (a program's
/// work may depend on its argv[0]: jq 1.6's does). Else the resolved program's path.
fn program_as_given(config: &RunConfig, env: &[(OsString, OsString)]) -> OsString {
    let resolved = config.program.clone().into_os_string();
    let Some(given) = config.args.first() else {
        return resolved;
    };
    let found = if given.as_encoded_bytes().contains(&b'/') {
        Some(std::path::PathBuf::from(given))
    } else {
        let path = env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.clone());
        std::env::current_dir()
            .ok()
            .and_then(|cwd| which::which_in(given, path, cwd).ok())
    };
    match found.map(|f| same_file(&f, &config.program)) {
        Some(true) => given.clone(),
        _ => resolved,
    }
}

/// Whether two paths name the same file (device and inode).
fn same_file(a: &std::path::Path, b: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// A started child, owned by its guard until it is reaped.
struct Started {
    guard: ChildGuard,
    /// Readable when the benchmark's process exits, for a latched run (the collector times
    /// it); `None` for a run at once, which the launcher times and whose end its report
    /// pipe signals.
    pidfd: Option<OwnedFd>,
    /// When the benchmark was released (a latched run's timing starts here), or when the
    /// launcher was started (a run at once).
    start: Instant,
    /// Where the run's deadline (`--timeout`) counts from: `start`, or for a run that
    /// waited for its input FIFO's writer, the launcher's start (the wait is the run's).
    deadline_from: Instant,
    /// The parent's end of the launcher's report pipe.
    report: File,
    /// A message read from it while waiting (the end, or a stop), with `None` for end of
    /// file; [`reap`] reads it before the pipe.
    early: Option<Option<Message>>,
}

/// Start the child through the launcher (see `launcher.rs`), which forks the benchmark's
/// process and reports its pid. If an instrument attaches, or its input is a FIFO, the
/// process waits at the latch while they do and until the FIFO has a writer, then is
/// released; otherwise it execs at once (two wake-ups fewer per run) and the launcher
/// times it. A FIFO without a writer by the deadline leaves the process at the latch,
/// killed, and the deadline passed: the wait then ends as a timeout.
fn start(
    config: &RunConfig,
    instruments: &mut [Box<dyn Instrument>],
    launch: Launch,
    cancel: &Cancel,
) -> Result<Started, RunError> {
    let err = |e| spawn_error(config, e);
    let input = open_input(config)?;
    let fifo = input.as_ref().filter(|i| i.fifo).map(|i| &i.file);
    let latched = instruments.iter().any(|i| i.needs_start_latch()) || fifo.is_some();
    let mut pipes = send(config, launch, latched, input.as_ref().map(|i| &i.file))?;
    let launched = pipes.launched;
    let (pid, run_parent) = match launcher::read_message(&mut pipes.report).map_err(err)? {
        Some(Message::Started { pid, run_parent }) => {
            (Pid::from_raw(pid), Pid::from_raw(run_parent))
        }
        Some(other) => return Err(launcher_error(config, other)),
        None => {
            return Err(err(io::Error::other(
                "the launcher that starts each run did not start this one: it could not map \
                 the request or make the process (out of memory or of processes?)",
            )))
        }
    };
    let guard = ChildGuard {
        pid,
        run_parent,
        reaped: false,
    };
    let Pipes { report, latch, .. } = pipes;
    let Some(latch) = latch else {
        return Ok(Started {
            guard,
            pidfd: None,
            start: launched,
            deadline_from: launched,
            report,
            early: None,
        });
    };
    let pidfd = sys::pidfd_open(pid).map_err(err)?;
    for i in instruments.iter_mut() {
        i.attach(pid).map_err(|e| instrument_error(i.as_ref(), e))?;
    }
    let mut latch = File::from(latch);
    if let Some(fifo) = fifo {
        if !wait_for_writer(config, fifo, launched, cancel)? {
            // Never released: killed before the latch closes, so it cannot exec.
            let _ = killpg(pid, Signal::SIGKILL);
            return Ok(Started {
                guard,
                pidfd: Some(pidfd),
                start: launched,
                deadline_from: launched,
                report,
                early: None,
            });
        }
    }
    // Timing starts at the release: attaching is not the benchmark's time.
    let start = Instant::now();
    match latch.write_all(b"g") {
        // The process is gone already; the launcher's report says how.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {}
        other => other.map_err(err)?,
    }
    Ok(Started {
        guard,
        pidfd: Some(pidfd),
        start,
        deadline_from: match fifo {
            Some(_) => launched,
            None => start,
        },
        report,
        early: None,
    })
}

/// The `--input` file of one run.
struct Input {
    file: File,
    /// A FIFO (a named pipe).
    fifo: bool,
}

/// Open `config.input` for one run, without blocking: opening a FIFO for reading waits
/// for a writer, and here, before the run, neither its timeout nor Ctrl-C would apply.
/// `O_NONBLOCK` returns at once; the flag is cleared then, so that the benchmark's reads
/// block as they would have. A FIFO whose writer has not come yet reads as empty (end of
/// file), so its run waits for one at the latch ([`wait_for_writer`]).
fn open_input(config: &RunConfig) -> Result<Option<Input>, RunError> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let Some(path) = &config.input else {
        return Ok(None);
    };
    let err = |source| RunError::Input {
        path: path.clone(),
        source,
    };
    let file = File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(err)?;
    let fifo = file.metadata().map_err(err)?.file_type().is_fifo();
    sys::set_blocking(&file).map_err(err)?;
    Ok(Some(Input { file, fifo }))
}

/// Wait until the FIFO `input` has had a writer (it holds data, or its writer came and
/// went: the benchmark then reads what it wrote, or the end of the file), the run's
/// deadline (`--timeout` from `from`) passes, or a stop signal arrives. `Ok(false)` when
/// the deadline came first.
fn wait_for_writer(
    config: &RunConfig,
    input: &File,
    from: Instant,
    cancel: &Cancel,
) -> Result<bool, RunError> {
    loop {
        let remaining = match config.timeout {
            Some(t) => match t.checked_sub(from.elapsed()) {
                Some(r) => PollTimeout::try_from(r).unwrap_or(PollTimeout::MAX),
                None => return Ok(false),
            },
            None => PollTimeout::NONE,
        };
        // A reader opened with O_NONBLOCK sees no hang-up before a first writer came.
        let mut fds = [
            PollFd::new(input.as_fd(), PollFlags::POLLIN),
            PollFd::new(cancel.read.as_fd(), PollFlags::POLLIN),
        ];
        match poll(&mut fds, remaining) {
            Ok(0) => continue, // re-check the deadline
            Ok(_) => {
                if fds[1].any().unwrap_or(false) {
                    return Err(RunError::Interrupted);
                }
                return Ok(true);
            }
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(spawn_error(config, e.into())),
        }
    }
}

/// The error for a message the launcher should not have sent at this point.
fn launcher_error(config: &RunConfig, message: Message) -> RunError {
    match message {
        Message::ExecFailed { errno } => exec_error(config, errno),
        Message::LauncherFailed { step, errno } => spawn_error(
            config,
            io::Error::new(
                io::Error::from_raw_os_error(errno).kind(),
                format!(
                    "the launcher that starts each run failed at {step:?}: {}",
                    io::Error::from_raw_os_error(errno)
                ),
            ),
        ),
        other => spawn_error(
            config,
            io::Error::other(format!("the launcher sent {other:?} out of turn")),
        ),
    }
}

/// The error of an `execve` of the run's program that failed with `errno`. ENOENT for a
/// program that exists means that what it needs to start is missing: the interpreter of
/// its `#!` line, or the dynamic loader an ELF program names (a program built for another
/// system, a 32-bit one without the 32-bit libraries).
fn exec_error(config: &RunConfig, errno: i32) -> RunError {
    let exec = || RunError::Exec {
        program: config.program.clone(),
        source: io::Error::from_raw_os_error(errno),
    };
    if errno != libc::ENOENT {
        return exec();
    }
    let Ok(data) = std::fs::read(&config.program) else {
        return exec();
    };
    let program = config.program.clone();
    if let Some(line) = data.strip_prefix(b"#!") {
        let line = &line[..line.iter().position(|&b| b == b'\n').unwrap_or(line.len())];
        let line = String::from_utf8_lossy(line);
        let interpreter = line.split_whitespace().next().unwrap_or_default();
        return RunError::Missing {
            program,
            missing: format!("the interpreter its `#!` line names, `{interpreter}`,"),
            advice: "install it, or fix the script's `#!` line",
        };
    }
    match elf_interpreter(&data) {
        Some(loader) => RunError::Missing {
            program,
            missing: format!("the dynamic loader it names, `{loader}`,"),
            advice: "it was built for another system: install that loader (for a 32-bit \
                     program, the 32-bit C library) or build the program on this machine",
        },
        None => exec(),
    }
}

/// The `PT_INTERP` path of an ELF file (32- or 64-bit), if it names one.
fn elf_interpreter(data: &[u8]) -> Option<String> {
    use object::elf::{FileHeader32, FileHeader64, ELFCLASS32, ELFCLASS64, PT_INTERP};
    use object::read::elf::{FileHeader, ProgramHeader};
    use object::Endianness;
    fn of<H: FileHeader<Endian = Endianness>>(data: &[u8]) -> Option<String> {
        let header = H::parse(data).ok()?;
        let endian = header.endian().ok()?;
        let interp = header
            .program_headers(endian, data)
            .ok()?
            .iter()
            .find(|ph| ph.p_type(endian) == PT_INTERP)?;
        let path = interp.data(endian, data).ok()?;
        let path = path.split(|&b| b == 0).next().unwrap_or_default();
        Some(String::from_utf8_lossy(path).into_owned())
    }
    match *data.get(4)? {
        ELFCLASS32 => of::<FileHeader32<Endianness>>(data),
        ELFCLASS64 => of::<FileHeader64<Endianness>>(data),
        _ => None,
    }
}

impl Started {
    /// Read the message waiting on the report pipe, kept for [`reap`].
    fn read_early(&mut self, config: &RunConfig) -> Result<(), RunError> {
        if self.early.is_none() {
            let message =
                launcher::read_message(&mut self.report).map_err(|e| spawn_error(config, e))?;
            self.early = Some(message);
        }
        Ok(())
    }
}

/// Our ends of a run's pipes to the launcher.
struct Pipes {
    /// Its messages.
    report: File,
    /// The benchmark's start latch, for a latched run.
    latch: Option<OwnedFd>,
    /// When the request went out (the deadline of a run at once counts from here).
    launched: Instant,
}

/// `/dev/null`, open for reading and writing, opened once per collector: every run's
/// stdin and (without `--show-output`) output.
fn dev_null() -> io::Result<&'static File> {
    static DEV_NULL: std::sync::OnceLock<File> = std::sync::OnceLock::new();
    if let Some(f) = DEV_NULL.get() {
        return Ok(f);
    }
    let file = File::options().read(true).write(true).open("/dev/null")?;
    Ok(DEV_NULL.get_or_init(|| file))
}

/// Ask the launcher for the run: the command as the instruments laid it out, ASLR and CPUs
/// as configured, stdin, the output, the instruments' descriptors, the report pipe and,
/// if `latched`, the latch at their numbers. Our copies of the child's ends are closed once
/// the request is sent (the launcher has its own).
fn send(
    config: &RunConfig,
    launch: Launch,
    latched: bool,
    input: Option<&File>,
) -> Result<Pipes, RunError> {
    let err = |e| spawn_error(config, e);
    let devnull = dev_null().map_err(err)?;
    let (report_read, report_write) = sys::pipe_cloexec().map_err(err)?;
    let (latch_read, latch_write) = match latched {
        true => {
            let (r, w) = sys::pipe_cloexec().map_err(err)?;
            (Some(r), Some(w))
        }
        false => (None, None),
    };
    let (stdout, stderr) = (io::stdout(), io::stderr());
    let mut fds: Vec<(BorrowedFd, i32)> = vec![(input.unwrap_or(devnull).as_fd(), 0)];
    if config.show_output {
        fds.push((stdout.as_fd(), 1));
        fds.push((stderr.as_fd(), 2));
    } else {
        fds.push((devnull.as_fd(), 1));
        fds.push((devnull.as_fd(), 2));
    }
    fds.extend(launch.pass_fds.iter().map(|(fd, n)| (fd.as_fd(), *n)));
    let request = launcher::LaunchRequest {
        program: &launch.path,
        args: &launch.args,
        env: &launch.env,
        report: report_write.as_fd(),
        latch: latch_read.as_ref().map(|g| g.as_fd()),
        no_aslr: config.disable_aslr,
        cpus: &config.cpus,
        fds,
    };
    let launched = Instant::now();
    launcher::start(&request).map_err(err)?;
    Ok(Pipes {
        report: File::from(report_read),
        latch: latch_write,
        launched,
    })
}

/// How the wait for the child ended.
struct Ended {
    /// Wall time from the release (or the launcher's start) to the exit (or the deadline).
    wall: Duration,
    /// The deadline passed first.
    timed_out: bool,
}

/// Wait until the child exits or stops, its deadline passes, or a signal asks us to stop
/// (then the error; the guard kills and reaps the child). A stop is the launcher's
/// message: [`reap`] reads it.
fn wait_for_exit(
    config: &RunConfig,
    child: &mut Started,
    cancel: &Cancel,
) -> Result<Ended, RunError> {
    loop {
        let remaining = match config.timeout {
            Some(t) => match t.checked_sub(child.deadline_from.elapsed()) {
                Some(r) => PollTimeout::try_from(r).unwrap_or(PollTimeout::MAX),
                None => {
                    return Ok(Ended {
                        wall: child.start.elapsed(),
                        timed_out: true,
                    })
                }
            },
            None => PollTimeout::NONE,
        };
        // A run at once ends when the launcher reports (it reaped the process); a latched
        // one when its pidfd says so. The launcher reports a stop too.
        let end = match &child.pidfd {
            Some(pidfd) => pidfd.as_fd(),
            None => child.report.as_fd(),
        };
        let mut fds = [
            PollFd::new(cancel.read.as_fd(), PollFlags::POLLIN),
            PollFd::new(child.report.as_fd(), PollFlags::POLLIN),
            PollFd::new(end.as_fd(), PollFlags::POLLIN),
        ];
        match poll(&mut fds, remaining) {
            Ok(0) => continue, // re-check the deadline
            Ok(_) => {
                if fds[0].any().unwrap_or(false) {
                    return Err(RunError::Interrupted);
                }
                let wall = child.start.elapsed();
                if fds[1].any().unwrap_or(false) {
                    child.read_early(config)?;
                }
                return Ok(Ended {
                    wall,
                    timed_out: false,
                });
            }
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(spawn_error(config, e.into())),
        }
    }
}

/// Collect the benchmark's end from the launcher (killing its group first on a
/// timeout), reap the launcher, kill what is left of the benchmark's process group, and
/// describe how it ended. The processes it left behind are looked for if `survivors`
/// (not while other runs are in flight: see [`overlap`]).
fn reap(
    config: &RunConfig,
    child: Started,
    ended: Ended,
    survivors: bool,
) -> Result<RunOutcome, RunError> {
    let Started {
        mut guard,
        mut report,
        pidfd,
        early,
        ..
    } = child;
    let pid = guard.pid;
    if ended.timed_out {
        let _ = killpg(pid, Signal::SIGKILL);
    }
    let err = |e| spawn_error(config, e);
    let mut next = match early {
        Some(message) => message,
        None => launcher::read_message(&mut report).map_err(err)?,
    };
    // A stopped process would never end: killed, its end read, and the run is an error.
    let mut stopped = None;
    while let Some(Message::Stopped { signal }) = next {
        let _ = killpg(pid, Signal::SIGKILL);
        stopped = Some(signal);
        next = launcher::read_message(&mut report).map_err(err)?;
    }
    // The launcher reaps the benchmark's process and reports at once; an exec that failed
    // reports that first.
    let (status, user_us, sys_us, max_rss_kib, wall_ns) = match next {
        Some(Message::Exited {
            status,
            user_us,
            sys_us,
            max_rss_kib,
            wall_ns,
        }) => (status, user_us, sys_us, max_rss_kib, wall_ns),
        Some(other) => return Err(launcher_error(config, other)),
        None => {
            return Err(RunError::ParentGone {
                program: config.program.clone(),
                run_parent: match guard.run_parent.as_raw() {
                    0 => launcher::server_pid().map_or(0, Pid::as_raw),
                    pid => pid,
                },
            })
        }
    };
    // The run parent is the launcher's to reap.
    guard.reaped = true;
    // Leftover descendants in the benchmark's process group do not outlive the run.
    let _ = killpg(pid, Signal::SIGKILL);
    let exit = if ended.timed_out {
        ExitKind::TimedOut
    } else if libc::WIFSIGNALED(status) {
        ExitKind::Signal(libc::WTERMSIG(status))
    } else {
        ExitKind::Code(libc::WEXITSTATUS(status))
    };
    let survivors = overlap::survivors(survivors);
    if let Some(signal) = stopped {
        return Err(RunError::Stopped {
            program: config.program.clone(),
            signal,
        });
    }
    // A latched run is timed from its release, by us; a run at once by the launcher, from
    // its fork (it started the clock and saw the end first).
    let wall = match pidfd.is_some() || ended.timed_out {
        true => ended.wall,
        false => Duration::from_nanos(wall_ns),
    };
    Ok(RunOutcome {
        pid,
        wall,
        user: Duration::from_micros(user_us),
        sys: Duration::from_micros(sys_us),
        max_rss: max_rss_kib * 1024,
        exit,
        survivors,
    })
}

/// Make this process the subreaper of the benchmarks it starts: a process the benchmark
/// leaves behind in a session of its own (a daemon, beyond the reach of the process-group
/// kill) is re-parented to us when its parent exits, instead of to init, so the run can
/// find it.
pub fn adopt_orphans() -> io::Result<()> {
    nix::sys::prctl::set_child_subreaper(true).map_err(io::Error::from)
}

/// Kill and reap what is left of the run: once the benchmark is reaped, any child of
/// ours is a descendant it left behind (see [`adopt_orphans`]). Returns them as
/// `pid (name)`.
fn kill_survivors() -> Vec<String> {
    let mut found = Vec::new();
    let launcher = launcher::server_pid().map(Pid::as_raw);
    for pid in own_children() {
        // The launcher stays for the next run.
        if Some(pid) == launcher {
            continue;
        }
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        let pid = nix::unistd::Pid::from_raw(pid);
        // Its own group too: a daemon leads a new session, and may have children.
        let _ = killpg(pid, Signal::SIGKILL);
        let _ = nix::sys::signal::kill(pid, Signal::SIGKILL);
        let _ = nix::sys::wait::waitpid(pid, None);
        found.push(format!("{pid} ({})", comm.trim_end()));
    }
    found
}

/// The children of this process, from each thread's `/proc/self/task/TID/children` (a
/// few small reads, where scanning every process of `/proc` cost about 1 ms per run).
fn own_children() -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    let mut pids = Vec::new();
    for task in tasks.flatten() {
        let Ok(list) = std::fs::read_to_string(task.path().join("children")) else {
            continue;
        };
        pids.extend(
            list.split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok()),
        );
    }
    pids
}

fn spawn_error(config: &RunConfig, source: io::Error) -> RunError {
    RunError::Spawn {
        program: config.program.clone(),
        source,
    }
}

/// Kills the benchmark's process group and its run parent if a run ends early (the
/// launcher reaps the run parent, which reaps the benchmark's process).
struct ChildGuard {
    /// The benchmark's process.
    pid: Pid,
    /// Its parent, the launcher's child; 0 for a direct run, whose parent is the
    /// launcher.
    run_parent: Pid,
    reaped: bool,
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if !self.reaped {
            let _ = killpg(self.pid, Signal::SIGKILL);
            let _ = nix::sys::signal::kill(self.pid, Signal::SIGKILL);
            // 0: a direct run, whose parent is the launcher itself (it stays).
            if self.run_parent.as_raw() > 0 {
                let _ = nix::sys::signal::kill(self.run_parent, Signal::SIGKILL);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::instrument::MetricSpec;
    use sbs_reports::model::Unit;
    use std::sync::{Arc, Mutex};

    /// Attaches like a perf counter would, and records what it saw.
    struct Spy {
        exe_at_attach: Arc<Mutex<Option<PathBuf>>>,
    }

    impl Instrument for Spy {
        fn name(&self) -> &str {
            "spy"
        }
        fn prepare(&mut self, setup: &mut ChildSetup) -> anyhow::Result<()> {
            setup.env.push(("SBS_SPY".into(), "1".into()));
            Ok(())
        }
        fn attach(&mut self, pid: Pid) -> anyhow::Result<()> {
            *self.exe_at_attach.lock().unwrap() =
                std::fs::read_link(format!("/proc/{pid}/exe")).ok();
            Ok(())
        }
        fn collect(&mut self, o: &RunOutcome, out: &mut Vec<Sample>) -> anyhow::Result<()> {
            let code = match o.exit {
                ExitKind::Code(c) => c as f64,
                _ => -1.0,
            };
            out.push(Sample::new(
                MetricSpec::new("spy.exit", Unit::Count, "test", true),
                code,
            ));
            Ok(())
        }
    }

    pub(super) fn config(args: &[&str]) -> RunConfig {
        RunConfig {
            program: PathBuf::from(args[0]),
            args: args.iter().map(OsString::from).collect(),
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            show_output: false,
            disable_aslr: true,
            cpus: Vec::new(),
            timeout: Some(Duration::from_secs(20)),
            input: None,
        }
    }

    #[test]
    fn the_child_has_not_exec_d_when_instruments_attach() {
        let cancel = Cancel::install().unwrap();
        let seen = Arc::new(Mutex::new(None));
        let spy = Spy {
            exe_at_attach: seen.clone(),
        };
        let mut instruments: Vec<Box<dyn Instrument>> = vec![Box::new(spy)];
        // The child exits 0 only if the instrument's env var reached it.
        let cfg = config(&["/bin/sh", "-c", "test \"$SBS_SPY\" = 1"]);
        let (outcome, samples) = run_once(&cfg, &mut instruments, &cancel).unwrap();
        assert_eq!(outcome.exit, ExitKind::Code(0));
        assert_eq!(samples[0].value, 0.0);
        // Held at the latch: still a copy of the launcher, not yet /bin/sh.
        let exe = seen.lock().unwrap().clone().expect("attach saw the child");
        assert!(
            exe.to_string_lossy().contains("sbs-launcher"),
            "at attach the child was {exe:?}"
        );
    }

    /// The peak RSS of a child is its own, however much memory the collector holds: the
    /// child is a copy of the launcher, not of us (a vfork'd or forked copy of this
    /// process would read 100 MB here).
    #[test]
    fn peak_rss_is_the_child_s_own_whatever_the_collector_holds() {
        let cancel = Cancel::install().unwrap();
        let ballast = std::hint::black_box(vec![1u8; 100 << 20]);
        let mut none: Vec<Box<dyn Instrument>> = Vec::new();
        let (outcome, _) = run_once(&config(&["/bin/true"]), &mut none, &cancel).unwrap();
        assert_eq!(outcome.exit, ExitKind::Code(0));
        // /bin/true maps about 1 MiB (libc's pages); nothing near the ballast.
        assert!(
            outcome.max_rss < 4 << 20,
            "/bin/true read {} bytes of peak RSS with {} MB held by the parent",
            outcome.max_rss,
            ballast.len() >> 20
        );
    }

    #[test]
    fn exec_failure_reports_errno() {
        let cancel = Cancel::install().unwrap();
        let mut none: Vec<Box<dyn Instrument>> = Vec::new();
        let err = run_once(
            &config(&["/proc/self/cwd/does-not-exist"]),
            &mut none,
            &cancel,
        )
        .unwrap_err();
        assert!(matches!(err, RunError::Exec { .. }), "{err}");
        assert!(err.to_string().contains("No such file"), "{err}");
    }
}
