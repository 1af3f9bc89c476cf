//! The launcher: the small static program (`agent/launcher`), embedded in `sbs-profile`,
//! that starts every measured run's process. The collector starts one launcher and sends
//! it a request per run: the command, the environment, the set-up and the descriptors.
//! The launcher starts a run parent that shares its memory, which vforks the benchmark's
//! process (held at the start latch when an instrument attaches to it); they report its
//! pid, a failed exec, and its exit status, rusage and wall time on the run's report pipe
//! (`sbs_agent_abi::launcher`).
//!
//! Why: a process's `ru_maxrss` covers the address space it had before its `execve`, and
//! a child forked or vforked from the collector has the collector's. The benchmark's
//! process is a copy of the launcher instead, whose address space is a few pages, so
//! `rss.peak` is the benchmark's own whatever the collector holds (checked against
//! `/usr/bin/time -v` in `tests/tests/runner.rs`). Why one launcher and not one per run:
//! an exec per run cost 0.13 ms of CPU more; why no fork in it: a fork costs 86 us here,
//! a vfork 35 (BENCHMARKS.md).

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, IoSlice, Read, Write};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::{Mutex, OnceLock};

use nix::sys::socket::{
    sendmsg, socketpair, AddressFamily, ControlMessage, MsgFlags, SockFlag, SockType,
};
use nix::unistd::Pid;

pub use sbs_agent_abi::launcher::{Message, MESSAGE_BYTES};
use sbs_agent_abi::launcher::{
    CPU_MASK_WORDS, DATAGRAM_WORDS, FLAG_CPUS, FLAG_LATCHED, FLAG_NO_ASLR, MAX_TARGETS,
    REQUEST_MAGIC, SOCKET_FD,
};

use crate::run::sys;

/// The launcher program.
static PROGRAM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/sbs_launcher_bin"));

/// The launcher written once per collector: a read-only descriptor of it and the path
/// a child execs it by.
struct Installed {
    _file: File,
    path: OsString,
}

static INSTALLED: OnceLock<Result<Installed, String>> = OnceLock::new();

/// The path to exec the launcher by, valid while the collector lives.
fn path() -> io::Result<OsString> {
    match INSTALLED.get_or_init(|| install().map_err(|e| e.to_string())) {
        Ok(i) => Ok(i.path.clone()),
        Err(e) => Err(io::Error::other(format!(
            "cannot install the launcher program that starts each run: {e}"
        ))),
    }
}

/// Write the program into a memfd and keep a read-only descriptor of it: a file open for
/// writing cannot be exec'd (ETXTBSY). `/proc/<our pid>/fd/N` names it for the child,
/// whatever descriptor numbers the child itself rearranges.
fn install() -> io::Result<Installed> {
    let mut writable = memfd(c"sbs-launcher", true)?;
    writable.write_all(PROGRAM)?;
    let own = format!("/proc/self/fd/{}", writable.as_raw_fd());
    let file = File::open(own)?;
    drop(writable);
    let path = format!("/proc/{}/fd/{}", std::process::id(), file.as_raw_fd()).into();
    Ok(Installed { _file: file, path })
}

/// A close-on-exec memfd; one that may be exec'd if `exec`: `MFD_EXEC` where the kernel
/// knows the flag (6.3+, where `vm.memfd_noexec` may otherwise forbid it), none on older
/// kernels.
fn memfd(name: &std::ffi::CStr, exec: bool) -> io::Result<File> {
    // `MFD_EXEC` (linux/memfd.h); the libc crate does not define it yet.
    const MFD_EXEC: libc::c_uint = 0x0010;
    let mut flags = libc::MFD_CLOEXEC | if exec { MFD_EXEC } else { 0 };
    loop {
        // SAFETY: memfd_create with a NUL-terminated name and flags; it returns a new
        // descriptor or -1.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), flags) };
        if fd >= 0 {
            // SAFETY: the kernel just returned this descriptor; nobody else owns it.
            return Ok(unsafe { File::from_raw_fd(fd) });
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EINVAL) && flags & MFD_EXEC != 0 {
            flags &= !MFD_EXEC;
            continue;
        }
        return Err(e);
    }
}

/// Read the next message from the launcher's pipe; `None` at end of file (the launcher
/// and the benchmark's process are gone, or the benchmark exec'd and the launcher died).
pub fn read_message(pipe: &mut File) -> io::Result<Option<Message>> {
    let mut bytes = [0u8; MESSAGE_BYTES];
    let mut got = 0;
    while got < MESSAGE_BYTES {
        match pipe.read(&mut bytes[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    match (got == MESSAGE_BYTES)
        .then(|| Message::decode(&bytes))
        .flatten()
    {
        Some(m) => Ok(Some(m)),
        None => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "the launcher sent a malformed message",
        )),
    }
}

/// One run's process, as the launcher is to start it.
pub struct LaunchRequest<'a> {
    /// The program to exec.
    pub program: &'a OsStr,
    /// Its argv, argv[0] included.
    pub args: &'a [OsString],
    /// Its whole environment.
    pub env: &'a [(OsString, OsString)],
    /// The write end of the run's report pipe.
    pub report: BorrowedFd<'a>,
    /// The read end of its latch: hold it there until a byte comes.
    pub latch: Option<BorrowedFd<'a>>,
    /// ASLR off.
    pub no_aslr: bool,
    /// The CPUs to pin it to (empty: as the launcher runs).
    pub cpus: &'a [usize],
    /// Its descriptors: `(ours, its number)`.
    pub fds: Vec<(BorrowedFd<'a>, i32)>,
}

impl LaunchRequest<'_> {
    /// The request's bytes (layout: `sbs_agent_abi::launcher`).
    fn encode(&self) -> io::Result<Vec<u8>> {
        if self.fds.len() > MAX_TARGETS {
            return Err(io::Error::other(format!(
                "{} descriptors to pass to the benchmark, more than the {MAX_TARGETS} a run can take",
                self.fds.len()
            )));
        }
        let mut flags = 0;
        if self.latch.is_some() {
            flags |= FLAG_LATCHED;
        }
        if self.no_aslr {
            flags |= FLAG_NO_ASLR;
        }
        let mut mask = [0u64; CPU_MASK_WORDS];
        if !self.cpus.is_empty() {
            flags |= FLAG_CPUS;
            for &cpu in self.cpus {
                let word = mask.get_mut(cpu / 64).ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("CPU {cpu} is out of range"),
                    )
                })?;
                *word |= 1 << (cpu % 64);
            }
        }
        let mut words = vec![
            REQUEST_MAGIC,
            flags,
            self.fds.len() as u64,
            self.args.len() as u64,
            self.env.len() as u64,
        ];
        words.extend(mask);
        words.extend(self.fds.iter().map(|&(_, n)| n as u64));
        let mut bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let mut string = |s: &[&OsStr]| -> io::Result<()> {
            for part in s {
                let b = part.as_bytes();
                if b.contains(&0) {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("{:?} contains a NUL byte", part),
                    ));
                }
                bytes.extend_from_slice(b);
            }
            bytes.push(0);
            Ok(())
        };
        string(&[self.program])?;
        for a in self.args {
            string(&[a])?;
        }
        for (k, v) in self.env {
            string(&[k, OsStr::new("="), v])?;
        }
        Ok(bytes)
    }
}

/// The running launcher: our end of its socket, and its pid.
struct Server {
    socket: OwnedFd,
    pid: Pid,
}

static SERVER: Mutex<Option<Server>> = Mutex::new(None);

/// The launcher's pid, if it runs: a child of ours that is not a benchmark's leftover.
pub fn server_pid() -> Option<Pid> {
    SERVER
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .map(|s| s.pid)
}

/// Ask the launcher to start `request`'s process. Its messages come on the report pipe
/// among the request's descriptors. A launcher that died (killed by hand, say) is
/// started again, once.
pub fn start(request: &LaunchRequest) -> io::Result<()> {
    let bytes = request.encode()?;
    let mut file = memfd(c"sbs-run-request", false)?;
    file.write_all(&bytes)?;
    let mut datagram = Vec::with_capacity(DATAGRAM_WORDS * 8);
    datagram.extend(REQUEST_MAGIC.to_le_bytes());
    datagram.extend((bytes.len() as u64).to_le_bytes());
    let mut fds = vec![file.as_raw_fd(), request.report.as_raw_fd()];
    fds.extend(request.latch.map(|g| g.as_raw_fd()));
    fds.extend(request.fds.iter().map(|(fd, _)| fd.as_raw_fd()));
    let mut server = SERVER.lock().unwrap_or_else(|e| e.into_inner());
    for attempt in 0..2 {
        if server.is_none() {
            *server = Some(spawn_server()?);
        }
        let Some(s) = server.as_ref() else {
            unreachable!("the launcher was just started");
        };
        let iov = [IoSlice::new(&datagram)];
        let cmsg = [ControlMessage::ScmRights(&fds)];
        match sendmsg::<()>(
            s.socket.as_raw_fd(),
            &iov,
            &cmsg,
            MsgFlags::MSG_NOSIGNAL,
            None,
        ) {
            Ok(_) => return Ok(()),
            Err(nix::errno::Errno::EPIPE | nix::errno::Errno::ECONNREFUSED) if attempt == 0 => {
                // Gone: reap it and start another.
                let gone = server.take().map(|s| s.pid);
                if let Some(pid) = gone {
                    let _ = sys::reap(pid);
                }
            }
            Err(e) => {
                return Err(io::Error::other(format!(
                    "cannot reach the launcher that starts each run: {e}"
                )))
            }
        }
    }
    Err(io::Error::other(
        "the launcher that starts each run died twice",
    ))
}

/// Start the launcher: a vfork-style child that execs it with one end of a socket pair.
/// Its output goes to /dev/null; it ends when our end of the socket closes.
fn spawn_server() -> io::Result<Server> {
    let path = path()?;
    let (ours, theirs) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )?;
    let devnull = File::options().read(true).write(true).open("/dev/null")?;
    let exec = sys::PreparedExec::new(&path, &[OsString::from("sbs-launcher")], &[])?;
    let child = sys::ChildConfig {
        stdin: devnull.as_raw_fd(),
        output: Some(devnull.as_raw_fd()),
        pass_fds: vec![(theirs.as_raw_fd(), SOCKET_FD)],
    };
    let (err_read, err_write) = sys::pipe_cloexec()?;
    let pid = sys::spawn_vfork(&exec, &child, &err_write)?;
    drop((err_write, theirs, devnull));
    // The child exec'd or failed before `spawn_vfork` returned: its errno, or nothing.
    let mut errno = [0u8; 4];
    let got = File::from(err_read).read(&mut errno)?;
    if got == 4 {
        let _ = sys::reap(pid);
        let e = io::Error::from_raw_os_error(i32::from_ne_bytes(errno));
        return Err(io::Error::new(
            e.kind(),
            format!("cannot execute the launcher that starts each run: {e}"),
        ));
    }
    Ok(Server { socket: ours, pid })
}
