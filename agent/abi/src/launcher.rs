//! The contract between the collector's runner and the launcher (`sbs-launcher`): the
//! small static program every measured child is started through.
//!
//! Why a launcher: the kernel records in a process's `ru_maxrss` the resident set of the
//! address space it had before its `execve`, and a child made by `fork` or
//! `clone(CLONE_VM)` has the collector's (FINDINGS: `/bin/true` read 5.1-5.6 MiB; with
//! 100 MB held by the parent, 100 MB). The launcher's own address space is a few pages,
//! and the benchmark's process is a copy of it.
//!
//! The collector starts one launcher and keeps it: `argv = [launcher]`, a `SOCK_SEQPACKET`
//! socket at [`SOCKET_FD`]. For each run it writes a *request* into a memfd (the layout
//! below) and sends one datagram of [`DATAGRAM_WORDS`] words (`[REQUEST_MAGIC, length]`)
//! with the descriptors as `SCM_RIGHTS`: the request memfd, the write end of the run's
//! report pipe, for a latched run the read end of its latch, then one descriptor per target
//! number the request lists (stdin, stdout, stderr, the instruments' descriptors). The
//! report pipe and the latch get no number of their own in the benchmark's process: it
//! keeps them above its highest target number, close-on-exec, so the program sees
//! neither, and no number is taken that the soft limit of open files might not allow.
//! The launcher starts a *run parent* for the request (a process sharing its memory, on a
//! stack of its own) and goes back to its socket; it exits when the collector's end
//! closes, after killing the process group of every benchmark still running. The run
//! parent vforks the benchmark's process, which puts itself in a process group of its
//! own, sets itself up as the request says (descriptors, ASLR, CPUs), reports
//! [`Message::Started`] on the report pipe, and in a latched run waits at the latch while
//! the collector attaches to it: one byte releases it to `execve`, end of file makes it
//! exit with 126. A run that is not latched execs at once, and the run parent's clock times
//! it, from just before the vfork to the return of `wait4`. A failed set-up or exec is
//! reported by the process itself ([`Message::ExecFailed`], [`Message::LauncherFailed`]).
//! The run parent reaps it and reports [`Message::Exited`] with the status, the rusage
//! and the wall time, then exits. If the process stops instead (a job-control signal:
//! it is outside the terminal's foreground, so touching the terminal stops it), the run
//! parent reports [`Message::Stopped`] and goes on waiting: the collector decides.
//! A run that is not latched is *direct*: the launcher itself vforks the benchmark's
//! process, reaps it and reports the same messages (`run_parent` 0 in
//! [`Message::Started`]); one process fewer per run.
//! Every message is [`MESSAGE_WORDS`] little-endian words; a death tie runs from the
//! benchmark to its run parent to the launcher, which ends with the collector's socket.
//!
//! The request, in 64-bit little-endian words: [`REQUEST_MAGIC`], flags ([`FLAG_LATCHED`],
//! [`FLAG_NO_ASLR`], [`FLAG_CPUS`]), the number of target descriptors, of arguments
//! (`argv[0]` included) and of environment entries; [`CPU_MASK_WORDS`] words of CPU mask;
//! one word per target descriptor number; then NUL-terminated strings: the program's path,
//! the arguments, the environment entries.

/// Descriptor of the launcher's socket in the launcher (the first after stdin, stdout and
/// stderr: a low number that any limit of open files allows).
pub const SOCKET_FD: i32 = 3;

/// First word of a request and of its datagram.
pub const REQUEST_MAGIC: u64 = 0x5342_5352_554e_0001; // "SBSRUN", version 1
/// Words in the datagram that announces a request: the magic and the request's length.
pub const DATAGRAM_WORDS: usize = 2;
/// Flag: the benchmark's process waits at the latch.
pub const FLAG_LATCHED: u64 = 1;
/// Flag: the benchmark runs with address-space layout randomisation off (otherwise on).
pub const FLAG_NO_ASLR: u64 = 2;
/// Flag: the CPU mask applies (otherwise the CPUs are left as they are).
pub const FLAG_CPUS: u64 = 4;
/// Words of the CPU mask (1,024 CPUs).
pub const CPU_MASK_WORDS: usize = 16;
/// Words before the target descriptor numbers.
pub const REQUEST_HEADER_WORDS: usize = 5 + CPU_MASK_WORDS;
/// The most descriptors a request may pass (the kernel's `SCM_MAX_FD` is 253, and the
/// request memfd is one of them).
pub const MAX_TARGETS: usize = 250;

/// The number of 64-bit words in a message.
pub const MESSAGE_WORDS: usize = 6;
/// The size of a message in bytes.
pub const MESSAGE_BYTES: usize = MESSAGE_WORDS * 8;

const TAG_STARTED: u64 = 0x5342_4c31; // "SBL1"
const TAG_EXEC_FAILED: u64 = 0x5342_4c32;
const TAG_EXITED: u64 = 0x5342_4c33;
const TAG_FAILED: u64 = 0x5342_4c34;
const TAG_STOPPED: u64 = 0x5342_4c35;

/// The step of the launcher that failed ([`Message::LauncherFailed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u64)]
pub enum Step {
    /// The request could not be read (malformed, or its memfd could not be mapped).
    Request = 1,
    /// The run parent or the benchmark's process could not be made.
    Fork = 2,
    /// `wait4` failed.
    Wait = 3,
    /// The benchmark's process could not set itself up (descriptors, CPUs).
    Setup = 4,
}

/// What the launcher (or the benchmark's process before its exec) reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message {
    /// The benchmark's process exists (and, in a latched run, waits at the latch).
    Started {
        /// Its pid.
        pid: i32,
        /// The pid of its run parent, the launcher's child that reaps it; 0 in a direct
        /// run, which the launcher starts and reaps itself.
        run_parent: i32,
    },
    /// Its `execve` failed with this errno.
    ExecFailed {
        /// The errno.
        errno: i32,
    },
    /// It was reaped.
    Exited {
        /// The raw wait status.
        status: i32,
        /// User CPU time, microseconds.
        user_us: u64,
        /// System CPU time, microseconds.
        sys_us: u64,
        /// `ru_maxrss`, KiB.
        max_rss_kib: u64,
        /// Nanoseconds from just before the vfork to the return of `wait4` (the run parent's
        /// `CLOCK_MONOTONIC`).
        wall_ns: u64,
    },
    /// It stopped (and is still there, stopped): the run parent goes on waiting for its end.
    Stopped {
        /// The signal that stopped it (`SIGTTOU`, `SIGTTIN`, `SIGTSTP`, `SIGSTOP`).
        signal: i32,
    },
    /// The launcher, the run parent or the benchmark's process before its exec failed at
    /// `step` with this errno.
    LauncherFailed {
        /// Where.
        step: Step,
        /// The errno.
        errno: i32,
    },
}

impl Message {
    /// The message as little-endian words.
    pub fn encode(&self) -> [u8; MESSAGE_BYTES] {
        let words: [u64; MESSAGE_WORDS] = match *self {
            Message::Started { pid, run_parent } => [
                TAG_STARTED,
                pid as u32 as u64,
                run_parent as u32 as u64,
                0,
                0,
                0,
            ],
            Message::ExecFailed { errno } => [TAG_EXEC_FAILED, errno as u32 as u64, 0, 0, 0, 0],
            Message::Exited {
                status,
                user_us,
                sys_us,
                max_rss_kib,
                wall_ns,
            } => [
                TAG_EXITED,
                status as u32 as u64,
                user_us,
                sys_us,
                max_rss_kib,
                wall_ns,
            ],
            Message::Stopped { signal } => [TAG_STOPPED, signal as u32 as u64, 0, 0, 0, 0],
            Message::LauncherFailed { step, errno } => {
                [TAG_FAILED, errno as u32 as u64, step as u64, 0, 0, 0]
            }
        };
        let mut bytes = [0u8; MESSAGE_BYTES];
        let mut i = 0;
        while i < MESSAGE_WORDS {
            let w = words[i].to_le_bytes();
            let mut j = 0;
            while j < 8 {
                bytes[i * 8 + j] = w[j];
                j += 1;
            }
            i += 1;
        }
        bytes
    }

    /// Decode a message; `None` for bytes no launcher wrote.
    pub fn decode(bytes: &[u8; MESSAGE_BYTES]) -> Option<Message> {
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&bytes[i * 8..i * 8 + 8]);
            u64::from_le_bytes(w)
        };
        let int = |i: usize| word(i) as u32 as i32;
        Some(match word(0) {
            TAG_STARTED => Message::Started {
                pid: int(1),
                run_parent: int(2),
            },
            TAG_EXEC_FAILED => Message::ExecFailed { errno: int(1) },
            TAG_EXITED => Message::Exited {
                status: int(1),
                user_us: word(2),
                sys_us: word(3),
                max_rss_kib: word(4),
                wall_ns: word(5),
            },
            TAG_STOPPED => Message::Stopped { signal: int(1) },
            TAG_FAILED => Message::LauncherFailed {
                errno: int(1),
                step: match word(2) {
                    1 => Step::Request,
                    2 => Step::Fork,
                    3 => Step::Wait,
                    4 => Step::Setup,
                    _ => return None,
                },
            },
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip() {
        let all = [
            Message::Started {
                pid: 4_194_304,
                run_parent: 77,
            },
            Message::ExecFailed { errno: 2 },
            Message::Exited {
                status: 0x8b,
                user_us: 1_234_567,
                sys_us: 89,
                max_rss_kib: 40_960,
                wall_ns: 987_654_321,
            },
            Message::LauncherFailed {
                step: Step::Fork,
                errno: 11,
            },
            Message::Stopped { signal: 22 },
        ];
        for m in all {
            assert_eq!(Message::decode(&m.encode()), Some(m));
        }
    }

    #[test]
    fn foreign_bytes_are_not_a_message() {
        assert_eq!(Message::decode(&[0; MESSAGE_BYTES]), None);
        let mut bad = Message::LauncherFailed {
            step: Step::Wait,
            errno: 4,
        }
        .encode();
        bad[16] = 9;
        assert_eq!(Message::decode(&bad), None);
    }
}
