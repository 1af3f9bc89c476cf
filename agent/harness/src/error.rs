//! What can go wrong in a harness binary. Every message says what to do.

use std::path::PathBuf;

/// A harness error; `main` prints it and exits with code 2.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// A command-line option the harness does not know or whose value is bad.
    #[error("{0}; run with --help for the options")]
    Usage(String),
    /// `--sbs-run NAME` names no registered benchmark.
    #[error("no benchmark named `{name}` in this binary; run it with --list to see the names ({available})")]
    UnknownBenchmark {
        /// The name asked for.
        name: String,
        /// The registered names, comma-separated.
        available: String,
    },
    /// The filters matched nothing.
    #[error("no benchmark matches {filters:?}; run with --list to see the names")]
    NothingSelected {
        /// The filters given.
        filters: Vec<String>,
    },
    /// `--param KEY=VALUE` for a key that no selected benchmark declares.
    #[error("parameter `{key}` is not declared by {bench}; its parameters are: {declared}")]
    UnknownParam {
        /// The key given.
        key: String,
        /// The benchmark(s).
        bench: String,
        /// Its declared parameters.
        declared: String,
    },
    /// A parameter value does not parse as the type the benchmark wants.
    #[error(
        "parameter `{key}={value}` of {bench}: not a valid {ty}; give e.g. --param {key}=<{ty}>"
    )]
    BadParam {
        /// Parameter name.
        key: String,
        /// The text given.
        value: String,
        /// Benchmark name.
        bench: String,
        /// The type wanted.
        ty: &'static str,
    },
    /// The benchmark asked for a parameter it never declared.
    #[error("benchmark {bench} reads parameter `{key}` but never declared it; add .param(\"{key}\", DEFAULT) to its registration")]
    UndeclaredParam {
        /// Parameter name.
        key: String,
        /// Benchmark name.
        bench: String,
    },
    /// Reading or writing a file or descriptor failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done, with the path or descriptor.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A descriptor from the collector (region markers, the allocation report file) could not
    /// be used.
    #[error(
        "{what} (descriptor {fd}): {source}; is this binary run by a matching sbs-profile version?"
    )]
    Descriptor {
        /// What failed.
        what: &'static str,
        /// The descriptor.
        fd: i32,
        /// The cause.
        source: std::io::Error,
    },
    /// A child process of the standalone runner failed.
    #[error("benchmark `{name}` failed in its child process ({status}); run `{exe} --sbs-run '{name}'` to see why")]
    Child {
        /// Benchmark name.
        name: String,
        /// How it ended.
        status: String,
        /// This binary.
        exe: PathBuf,
    },
    /// The child wrote no usable records.
    #[error("benchmark `{name}` reported no {record} record; the child process ended early or wrote to the record file itself")]
    MissingRecord {
        /// Benchmark name.
        name: String,
        /// The record key missing.
        record: &'static str,
    },
    /// The steady-state configuration cannot work.
    #[error(transparent)]
    Steady(#[from] crate::steady::SteadyConfigError),
}

impl HarnessError {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        HarnessError::Io {
            what: what.into(),
            source,
        }
    }
}
