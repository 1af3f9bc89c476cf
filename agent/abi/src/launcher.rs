//! The contract between the collector's runner and the launcher (`sbs-launcher`): the
//! small static program every measured child is started through.
//!
//! Why a launcher: the kernel records in a process's `ru_maxrss` the resident set of the
//! address space it had before its `execve`, and a child made by `fork` or
//! `clone(CLONE_VM)` has the collector's (FINDINGS: `/bin/true` read 5.1-5.6 MiB; with
//! 100 MB held by the parent, 100 MB). The launcher is exec'd first, so its own address
//! space is a few pages; the benchmark is its child and inherits only that.
//!
//! The runner starts the launcher with `argv = [launcher, MODE, PROGRAM, ARGV0, ARGV1...]`
//! and the benchmark's environment, with [`REPORT_FD`] (the write end of a pipe)
//! installed, and for a gated run ([`MODE_GATED`]) [`GATE_FD`] (the read end of another).
//! The launcher forks the benchmark's process, puts it in a process group of its own, and
//! reports [`Message::Started`] with its pid. In a gated run that process waits at the
//! gate while the collector attaches to it: one byte releases it to `execve(PROGRAM)`, end
//! of file makes it exit with 126. In a run at once ([`MODE_AT_ONCE`]) it execs straight
//! away, and the launcher's clock times it, from just before the fork to the return of
//! `wait4`. If the exec fails it reports [`Message::ExecFailed`]. The launcher reaps it
//! with `wait4` and reports [`Message::Exited`] with the status, the rusage and its wall
//! time, then exits. Every message is [`MESSAGE_WORDS`] little-endian words.

/// Descriptor of the report pipe in the launcher (and, until its exec, in the benchmark).
pub const REPORT_FD: i32 = 1012;
/// Descriptor of the start gate in the launcher (and, until its exec, in the benchmark).
pub const GATE_FD: i32 = 1013;

/// `argv[1]` of a gated run.
pub const MODE_GATED: &str = "gated";
/// `argv[1]` of a run that starts at once.
pub const MODE_AT_ONCE: &str = "at-once";

/// The number of 64-bit words in a message.
pub const MESSAGE_WORDS: usize = 6;
/// The size of a message in bytes.
pub const MESSAGE_BYTES: usize = MESSAGE_WORDS * 8;

const TAG_STARTED: u64 = 0x5342_4c31; // "SBL1"
const TAG_EXEC_FAILED: u64 = 0x5342_4c32;
const TAG_EXITED: u64 = 0x5342_4c33;
const TAG_FAILED: u64 = 0x5342_4c34;

/// The step of the launcher that failed ([`Message::LauncherFailed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u64)]
pub enum Step {
    /// Its `argv` had no program.
    Arguments = 1,
    /// `fork` failed.
    Fork = 2,
    /// `wait4` failed.
    Wait = 3,
}

/// What the launcher (or the benchmark's process before its exec) reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message {
    /// The benchmark's process exists and waits at the gate.
    Started {
        /// Its pid.
        pid: i32,
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
        /// Nanoseconds from just before the fork to the return of `wait4` (the launcher's
        /// `CLOCK_MONOTONIC`).
        wall_ns: u64,
    },
    /// The launcher itself failed at `step` with this errno.
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
            Message::Started { pid } => [TAG_STARTED, pid as u32 as u64, 0, 0, 0, 0],
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
            TAG_STARTED => Message::Started { pid: int(1) },
            TAG_EXEC_FAILED => Message::ExecFailed { errno: int(1) },
            TAG_EXITED => Message::Exited {
                status: int(1),
                user_us: word(2),
                sys_us: word(3),
                max_rss_kib: word(4),
                wall_ns: word(5),
            },
            TAG_FAILED => Message::LauncherFailed {
                errno: int(1),
                step: match word(2) {
                    1 => Step::Arguments,
                    2 => Step::Fork,
                    3 => Step::Wait,
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
            Message::Started { pid: 4_194_304 },
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
