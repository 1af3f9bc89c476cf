//! The capture format, version [`VERSION`]: one directory per function (its name from
//! [`dir_name`]) holding [`META_FILE`] ([`Meta`]) and [`CALLS_FILE`] (one [`Call`] per
//! line). Read and written by the program (this crate) and by `sbs-profile`.

use serde::{Deserialize, Serialize};

pub use sbs_agent_abi::harness::capture::{CALLS_FILE, DEFAULT_DIR, FORMAT, META_FILE, VERSION};

/// The directory name of a function's capture: its path with `::` as `.` and any
/// character other than a letter, digit, `_`, `-` or `.` as `_`
/// (`app::Stats::mean` is `app.Stats.mean`).
pub fn dir_name(path: &str) -> String {
    path.replace("::", ".")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// `meta.json`: what a capture is of.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    /// Always [`FORMAT`].
    pub format: String,
    /// [`VERSION`].
    pub version: u64,
    /// The function's path (`app::tokenize`, `app::Stats::mean`): its benchmark's name.
    pub function: String,
    /// Its signature as the attribute saw it; a replay refuses a capture whose
    /// signature differs from the function's.
    pub signature: String,
    /// Calls of the function in the captured run.
    pub calls_seen: u64,
    /// Calls kept ([`CALLS_FILE`]'s lines): a uniform sample of the run's calls
    /// (reservoir sampling), at most the `--calls` asked for.
    pub calls_kept: u64,
    /// Whether each kept call carries its in-situ allocations (the run had the
    /// allocation agent).
    pub allocations: bool,
}

/// One line of [`CALLS_FILE`]: one kept call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Call {
    /// Its number among the function's calls in the run, from 1.
    pub call: u64,
    /// Allocations made while the call ran (every thread of the process), in situ.
    pub alloc_count: Option<u64>,
    /// Bytes they asked for.
    pub alloc_bytes: Option<u64>,
    /// The arguments, `self` first: a JSON array, one element per argument, as serde
    /// serializes each.
    pub args: serde_json::Value,
}
