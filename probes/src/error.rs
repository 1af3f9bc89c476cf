//! Typed errors of the probes crate. Every message says what happened and what to do.

use std::io;
use std::path::PathBuf;

/// Everything that can go wrong while resolving, defining or counting probes.
///
/// The OS error is part of each message (field `cause`, not a `source`), so that a
/// chain printed with `{:#}` says it once.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// A file could not be read.
    #[error("cannot read {path}: {cause}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        cause: io::Error,
    },
    /// The target is not an ELF file (nor, where scripts are followed, a script with a
    /// `#!` line).
    #[error("{path} is not an ELF executable: give the path of a compiled program")]
    NotElf {
        /// The file.
        path: PathBuf,
    },
    /// A script where the ELF file itself must be read (its symbols, its code).
    #[error("{path} is a script (`{line}`), not a compiled program, so it has no functions to read: give the compiled program that does the work")]
    Script {
        /// The script.
        path: PathBuf,
        /// Its `#!` line.
        line: String,
    },
    /// An ELF file this crate cannot probe (wrong class or machine, malformed).
    #[error("{path}: {reason}")]
    UnsupportedElf {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A script's `#!` interpreter could not be found.
    #[error("{path} is a script whose interpreter `{interpreter}` was not found: {hint}")]
    Interpreter {
        /// The script.
        path: PathBuf,
        /// The interpreter named on the `#!` line.
        interpreter: String,
        /// What to do.
        hint: String,
    },
    /// A pattern is not usable (empty, unbalanced brackets).
    #[error("invalid pattern `{pattern}`: {reason}")]
    BadPattern {
        /// The pattern.
        pattern: String,
        /// Why.
        reason: String,
    },
    /// A pattern matched no probeable function.
    #[error("pattern `{pattern}` matches no function in {target}{context}{closest}")]
    NoMatch {
        /// The pattern.
        pattern: String,
        /// The executable.
        target: PathBuf,
        /// Extra facts: stripped, static, inlined-only instances.
        context: String,
        /// "; closest names: ..." or empty.
        closest: String,
    },
    /// A pattern needs more probes (functions and entry points of inlined copies) than
    /// the limit.
    #[error("pattern `{pattern}` needs {count} probes (matched functions and entry points of inlined copies), more than the limit of {limit} (e.g. {examples}): make the pattern more specific or raise the limit with --max-probes")]
    TooMany {
        /// The pattern.
        pattern: String,
        /// How many probes it needs.
        count: usize,
        /// The limit.
        limit: usize,
        /// A few matched names.
        examples: String,
    },
    /// No tracefs is mounted and mounting it failed.
    #[error("tracefs is not mounted and mounting it at /sys/kernel/tracing failed ({cause}): run `mount -t tracefs nodev /sys/kernel/tracing` as root")]
    NoTracefs {
        /// The mount error.
        cause: io::Error,
    },
    /// The kernel refused a uprobe or a counter for lack of privilege.
    #[error("{what}: permission denied ({cause}); uprobes need root or CAP_SYS_ADMIN (kernel.perf_event_paranoid is {paranoid}): run sbs-profile as root, e.g. with sudo")]
    Permission {
        /// What was refused.
        what: String,
        /// The OS error.
        cause: io::Error,
        /// Content of /proc/sys/kernel/perf_event_paranoid.
        paranoid: String,
    },
    /// Writing a uprobe definition failed.
    #[error("the kernel refused the uprobe definition `{definition}` in {file}: {cause}; check `dmesg` and that the file still exists")]
    Define {
        /// The line written.
        definition: String,
        /// The tracefs file written to.
        file: PathBuf,
        /// The OS error.
        cause: io::Error,
    },
    /// A probed file path the tracefs syntax cannot express.
    #[error("cannot probe {path}: uprobe definitions cannot name a path containing whitespace; copy or link the program to a path without spaces")]
    UnprobeablePath {
        /// The file.
        path: PathBuf,
    },
    /// Setting up the probes (definitions, anchors) was stopped, e.g. by Ctrl-C; what was
    /// set up is removed when the partial set is dropped.
    #[error("interrupted while setting up {total} uprobes (after {defined}); what was set up is removed")]
    Interrupted {
        /// How many were set up when it stopped.
        defined: usize,
        /// How many were to be set up.
        total: usize,
    },
    /// A function's calls cannot be counted: a uprobe cannot sit on its first instruction,
    /// and the instruction after it is no exact substitute.
    #[error("cannot count calls of `{function}`: its first instruction at {path}:{offset:#x} is `{instruction}`, {reason}; leave it out of the pattern (name the other functions exactly), or rebuild it so that it starts with another instruction (C/C++: -fcf-protection=branch puts an endbr64 first)")]
    UnprobeableEntry {
        /// The function (row label).
        function: String,
        /// The file holding it.
        path: PathBuf,
        /// File offset of its first instruction.
        offset: u64,
        /// The instruction, disassembled.
        instruction: String,
        /// Why uprobes refuse it, and why the next instruction cannot stand in for it.
        reason: String,
    },
    /// The kernel refused a uprobe when its counter was opened (errno 524, ENOTSUPP): the
    /// instruction there is one x86 uprobes cannot single-step.
    #[error("the kernel refused the uprobe on {what} at {path}:{offset:#x} (error 524, ENOTSUPP): x86 uprobes cannot take the instruction there (LOCK- or segment-prefixed, or some VEX-encoded ones); leave it out of the pattern (name the other functions exactly), or rebuild so that the code there differs")]
    Refused {
        /// What the probe counts (see [`crate::tracefs::ProbeTarget::what`]).
        what: String,
        /// The probed file.
        path: PathBuf,
        /// The probed file offset.
        offset: u64,
    },
    /// Opening a counter on the child failed.
    #[error("cannot open a counter for uprobe {event} on pid {pid}: {cause}")]
    Counter {
        /// The tracefs event (`group/name`).
        event: String,
        /// The child.
        pid: i32,
        /// The OS error.
        cause: io::Error,
    },
    /// Reading a counter failed.
    #[error("cannot read the counter of uprobe {event}: {cause}")]
    ReadCounter {
        /// The tracefs event (`group/name`).
        event: String,
        /// The OS error.
        cause: io::Error,
    },
}

impl ProbeError {
    /// A read error for `path`.
    pub(crate) fn read(path: impl Into<PathBuf>, source: io::Error) -> Self {
        ProbeError::Read {
            path: path.into(),
            cause: source,
        }
    }

    /// Turn EPERM/EACCES into [`ProbeError::Permission`], anything else via `other`.
    pub(crate) fn or_permission(
        source: io::Error,
        what: impl Into<String>,
        other: impl FnOnce(io::Error) -> ProbeError,
    ) -> Self {
        match source.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => ProbeError::Permission {
                what: what.into(),
                cause: source,
                paranoid: perf_event_paranoid(),
            },
            _ => other(source),
        }
    }
}

/// The current `kernel.perf_event_paranoid`, or a note why it is unknown.
pub fn perf_event_paranoid() -> String {
    match std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid") {
        Ok(s) => s.trim().to_string(),
        Err(e) => format!("unknown ({e})"),
    }
}
