//! Skipping a test that lacks something this machine may not have (root, valgrind, a PMU,
//! Chromium...), in a way nobody can mistake for a pass.
//!
//! A test calls [`skip!`] with the capability it lacks and a reason, then returns. Unlike a
//! bare `eprintln!` (which libtest swallows for a passing test), a skip:
//!
//! - is remembered, and when the test binary exits, the skips of that binary are written to
//!   its standard error after libtest's `test result:` line (libtest captures only the
//!   `print!` family, not a direct write), so a plain `cargo test` shows them;
//! - is appended as one line to the file named by `SBS_SKIP_LOG`, when set, so that a script
//!   can print one summary for a whole workspace run (`.ci/run` does);
//! - is a failure instead when `SBS_REQUIRE` lists the capability: that machine is supposed
//!   to have it, so a skip there would hide a broken set-up.
//!
//! [`build!`] does the same for a fixture whose compiler may be missing.
//!
//! ```no_run
//! use sbs_skip::{skip, Need};
//!
//! if std::process::Command::new("valgrind").arg("--version").output().is_err() {
//!     skip!(Need::Valgrind, "valgrind is not installed (apt-get install valgrind)");
//!     return;
//! }
//! ```
use std::fmt;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, Once};

/// Capabilities the machine promises (comma-separated [`Need`] names): a skip for one of
/// them fails the test.
pub const REQUIRE_VAR: &str = "SBS_REQUIRE";
/// File that every skip appends one line to.
pub const LOG_VAR: &str = "SBS_SKIP_LOG";

/// What a test may lack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// Running as root (uprobes, mounts, namespaces).
    Root,
    /// A kernel with tracefs (uprobe definitions).
    Tracefs,
    /// `perf_event_open` for software events.
    PerfEvents,
    /// Hardware performance counters (a PMU the kernel exposes).
    Pmu,
    /// A machine without hardware counters (for the tests of that path).
    NoPmu,
    /// The `valgrind` command.
    Valgrind,
    /// The `perf` command (Debian's linux-perf).
    Perf,
    /// A C compiler: `gcc`, also run as `cc`.
    Gcc,
    /// The C++ compiler `g++`.
    Gxx,
    /// A static C library, for `gcc -static`.
    StaticLibc,
    /// binutils' `nm`, `strip`, `objcopy`.
    Binutils,
    /// util-linux's `setpriv`, `unshare`.
    UtilLinux,
    /// GNU time (`/usr/bin/time -v`, Debian's `time`): an oracle for peak RSS.
    GnuTime,
    /// `rustc` in `PATH`.
    Rustc,
    /// A Chromium browser in `PATH`.
    Chromium,
    /// The unprivileged user `nobody` can run programs from a temporary directory.
    Nobody,
    /// A python 3.11.7 built from source with -O3 and DWARF (pyenv's, under
    /// `$PYENV_ROOT`, default `/root/.pyenv`): a real -O3 C library.
    Pyenv311,
    /// A `python3` interpreter in `PATH`: real programs that start children the way
    /// Python's `subprocess` does.
    Python3,
    /// Debian's `python3.11` with its own test suite (`libpython3.11-testsuite`) and its
    /// symbols (`python3.11-dbg`): a peer's test suite as the judge of "the program runs
    /// as it would alone".
    PythonTestsuite,
    /// Debian's `python3.11` (stripped) with its separate debug file from `python3.11-dbg`
    /// under `/usr/lib/debug/.build-id/`: a real program whose symbols and DWARF are
    /// elsewhere.
    PythonDbg,
    /// A directory every user can reach and load a library from (`/dev/shm` or the
    /// temporary directory, not mounted `noexec`), where sbs-profile puts its preload
    /// libraries for a run.
    SharedDir,
    /// QEMU's user-mode emulator `qemu-x86_64` with TCG plugin support (Debian's
    /// `qemu-user`): the `--instructions qemu` engine.
    Qemu,
}

impl Need {
    /// Every capability, in the order the docs list them.
    pub const ALL: [Need; 22] = [
        Need::Root,
        Need::Tracefs,
        Need::PerfEvents,
        Need::Pmu,
        Need::NoPmu,
        Need::Valgrind,
        Need::Perf,
        Need::Gcc,
        Need::Gxx,
        Need::StaticLibc,
        Need::Binutils,
        Need::UtilLinux,
        Need::GnuTime,
        Need::Rustc,
        Need::Chromium,
        Need::Nobody,
        Need::Pyenv311,
        Need::Python3,
        Need::PythonTestsuite,
        Need::PythonDbg,
        Need::SharedDir,
        Need::Qemu,
    ];

    /// The name used in `SBS_REQUIRE` and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Need::Root => "root",
            Need::Tracefs => "tracefs",
            Need::PerfEvents => "perf-events",
            Need::Pmu => "pmu",
            Need::NoPmu => "no-pmu",
            Need::Valgrind => "valgrind",
            Need::Perf => "perf",
            Need::Gcc => "gcc",
            Need::Gxx => "g++",
            Need::StaticLibc => "static-libc",
            Need::Binutils => "binutils",
            Need::UtilLinux => "util-linux",
            Need::GnuTime => "gnu-time",
            Need::Rustc => "rustc",
            Need::Chromium => "chromium",
            Need::Nobody => "nobody",
            Need::Pyenv311 => "pyenv-python3.11",
            Need::Python3 => "python3",
            Need::PythonTestsuite => "python3.11-testsuite",
            Need::PythonDbg => "python3.11-dbg",
            Need::SharedDir => "shared-dir",
            Need::Qemu => "qemu-user",
        }
    }

    /// The capability called `name`, if there is one.
    pub fn from_name(name: &str) -> Option<Need> {
        Need::ALL.into_iter().find(|n| n.name() == name)
    }
}

impl fmt::Display for Need {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What the environment says about skips.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    /// Capabilities the machine is supposed to have.
    pub required: Vec<Need>,
    /// Where to append a line per skip.
    pub log: Option<PathBuf>,
}

impl Policy {
    /// The policy from `SBS_REQUIRE` and `SBS_SKIP_LOG`.
    pub fn from_env() -> Result<Policy, String> {
        let require = std::env::var(REQUIRE_VAR).ok();
        let log = std::env::var_os(LOG_VAR)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
        Policy::parse(require.as_deref(), log)
    }

    /// The policy from the values of the two variables; an unknown capability is an error
    /// (a misspelt name would otherwise promise nothing).
    pub fn parse(require: Option<&str>, log: Option<PathBuf>) -> Result<Policy, String> {
        let mut required = Vec::new();
        for name in require
            .unwrap_or("")
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|n| !n.is_empty())
        {
            let need = Need::from_name(name).ok_or_else(|| {
                let known: Vec<&str> = Need::ALL.iter().map(|n| n.name()).collect();
                format!(
                    "{REQUIRE_VAR} names `{name}`, which is not a capability the tests know; \
                     known: {}",
                    known.join(", ")
                )
            })?;
            required.push(need);
        }
        Ok(Policy { required, log })
    }

    /// Whether the machine is supposed to have `need`.
    pub fn requires(&self, need: Need) -> bool {
        self.required.contains(&need)
    }

    /// The skip as a report line, or the failure message when the machine is supposed to
    /// have what the test lacks.
    pub fn judge(&self, skip: &Skip) -> Result<String, String> {
        if self.requires(skip.need) {
            Err(format!(
                "{}: {}; this machine is supposed to have `{}` ({REQUIRE_VAR} lists it), \
                 so the test fails instead of skipping",
                skip.test, skip.reason, skip.need
            ))
        } else {
            Ok(skip.to_string())
        }
    }
}

/// One skipped test (or part of a test).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skip {
    /// `crate::path::to::test`.
    pub test: String,
    pub need: Need,
    /// One line: whitespace, newlines included, is collapsed.
    pub reason: String,
}

impl Skip {
    pub fn new(test: impl Into<String>, need: Need, reason: &str) -> Skip {
        Skip {
            test: test.into(),
            need,
            reason: reason.split_whitespace().collect::<Vec<_>>().join(" "),
        }
    }
}

impl fmt::Display for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "skipped: {}: {} [needs {}]",
            self.test, self.reason, self.need
        )
    }
}

/// Skip the calling test: `skip!(Need::Valgrind, "valgrind is not installed")`, with
/// `format!` arguments after the capability. The test must `return` right after; the
/// macro does not, so that helpers returning `Option` or `bool` can use it too. Panics
/// when `SBS_REQUIRE` lists the capability.
#[macro_export]
macro_rules! skip {
    ($need:expr, $($reason:tt)+) => {
        $crate::skip_test(env!("CARGO_CRATE_NAME"), $need, &format!($($reason)+))
    };
}

/// What [`skip!`] calls, with the name of the calling crate. A failure points at the
/// caller's line.
#[track_caller]
pub fn skip_test(krate: &str, need: Need, reason: &str) {
    let policy = match Policy::from_env() {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    };
    let skip = Skip::new(test_name(krate), need, reason);
    let line = match policy.judge(&skip) {
        Ok(line) => line,
        Err(e) => panic!("{e}"),
    };
    // Shown by libtest only if the test fails later; the summary at exit always is.
    eprintln!("{line}");
    remember(krate, line.clone());
    if let Some(log) = &policy.log {
        append_line(log, &line).unwrap_or_else(|e| panic!("{e}"));
    }
}

/// Build a fixture with a tool the machine may lack (a C, C++ or Rust compiler): runs
/// `cmd` and gives `None` after a skip for `need` when the tool cannot be started, or
/// panics with the tool's messages when it fails. The test returns on `None`.
///
/// ```no_run
/// use sbs_skip::{build, Need};
/// let mut cc = std::process::Command::new("cc");
/// let Some(()) = build!(Need::Gcc, cc.args(["-O2", "-o", "/tmp/x", "x.c"])) else {
///     return;
/// };
/// ```
#[macro_export]
macro_rules! build {
    ($need:expr, $cmd:expr) => {
        $crate::build_with(env!("CARGO_CRATE_NAME"), $need, $cmd)
    };
}

/// What [`build!`] calls, with the name of the calling crate.
#[track_caller]
pub fn build_with(krate: &str, need: Need, cmd: &mut std::process::Command) -> Option<()> {
    match cmd.output() {
        Ok(out) => {
            assert!(
                out.status.success(),
                "{cmd:?} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            Some(())
        }
        Err(e) => {
            skip_test(
                krate,
                need,
                &format!("cannot run {:?} ({e})", cmd.get_program()),
            );
            None
        }
    }
}

/// `rustc` (or `$RUSTC`) as the release fixtures are built: edition 2021, opt-level 3
/// (so small functions exist only inlined) and full debug info (to find them).
pub fn rustc_release() -> std::process::Command {
    let mut cmd =
        std::process::Command::new(std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into()));
    cmd.args([
        "--edition",
        "2021",
        "-C",
        "opt-level=3",
        "-C",
        "debuginfo=2",
    ]);
    cmd
}

/// libtest runs each test on a thread named after it (`module::test`).
fn test_name(krate: &str) -> String {
    match std::thread::current().name() {
        Some(name) if name != "main" => format!("{krate}::{name}"),
        _ => format!("{krate}::<unnamed thread>"),
    }
}

/// Append `line` and a newline in one write (`O_APPEND`: lines from concurrent test
/// processes do not interleave).
pub fn append_line(path: &Path, line: &str) -> Result<(), String> {
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("{LOG_VAR}: cannot open {}: {e}", path.display()))?;
    file.write_all(format!("{line}\n").as_bytes())
        .map_err(|e| format!("{LOG_VAR}: cannot write {}: {e}", path.display()))
}

/// Skips of this process: the crate's name and the report lines.
static SKIPS: Mutex<(String, Vec<String>)> = Mutex::new((String::new(), Vec::new()));
static AT_EXIT: Once = Once::new();

fn remember(krate: &str, line: String) {
    {
        let mut skips = SKIPS.lock().unwrap_or_else(|p| p.into_inner());
        if skips.0.is_empty() {
            skips.0 = krate.to_string();
        }
        skips.1.push(line);
    }
    AT_EXIT.call_once(|| {
        // SAFETY: `print_summary` is a plain function with C linkage that catches any
        // panic of its own and touches only statics that live as long as the process.
        let registered = unsafe { libc::atexit(print_summary) } == 0;
        if !registered {
            eprintln!("sbs-skip: atexit failed; the skip summary will be missing");
        }
    });
}

/// The summary of a test binary's skips, as printed when it exits.
pub fn summary(krate: &str, lines: &[String]) -> String {
    let mut text = format!(
        "{} skipped in {krate} (a capability listed in {REQUIRE_VAR} makes its skip a failure):\n",
        lines.len()
    );
    for line in lines {
        text.push_str("    ");
        text.push_str(line);
        text.push('\n');
    }
    text.push('\n');
    text
}

extern "C" fn print_summary() {
    let _ = std::panic::catch_unwind(|| {
        let skips = SKIPS.lock().unwrap_or_else(|p| p.into_inner());
        if !skips.1.is_empty() {
            // A direct write to descriptor 2: nothing captures it, unlike `eprint!`.
            let _ = std::io::stderr().write_all(summary(&skips.0, &skips.1).as_bytes());
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_distinct() {
        for need in Need::ALL {
            assert_eq!(Need::from_name(need.name()), Some(need));
        }
        let mut names: Vec<&str> = Need::ALL.iter().map(|n| n.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Need::ALL.len());
    }

    #[test]
    fn require_lists_commas_or_spaces_and_refuses_unknown_names() {
        let p = Policy::parse(Some("root, valgrind,g++  chromium"), None).unwrap();
        assert_eq!(
            p.required,
            vec![Need::Root, Need::Valgrind, Need::Gxx, Need::Chromium]
        );
        assert_eq!(Policy::parse(None, None).unwrap(), Policy::default());
        assert_eq!(Policy::parse(Some(""), None).unwrap(), Policy::default());
        let err = Policy::parse(Some("root,valgirnd"), None).unwrap_err();
        assert!(
            err.contains("`valgirnd`") && err.contains("known: root,"),
            "{err}"
        );
    }

    #[test]
    fn a_skip_of_a_required_capability_is_a_failure() {
        let p = Policy::parse(Some("valgrind,gcc"), None).unwrap();
        let missing = Skip::new("alloc::dhat", Need::Valgrind, "valgrind is not installed");
        let err = p.judge(&missing).unwrap_err();
        assert!(
            err.starts_with("alloc::dhat: valgrind is not installed;")
                && err.contains("`valgrind`")
                && err.contains(REQUIRE_VAR),
            "{err}"
        );
        // The same skip is allowed where nothing promises valgrind, and a PMU is never
        // promised here.
        assert_eq!(
            Policy::default().judge(&missing).unwrap(),
            "skipped: alloc::dhat: valgrind is not installed [needs valgrind]"
        );
        let pmu = Skip::new("counters::hw", Need::Pmu, "no PMU");
        assert!(p.judge(&pmu).is_ok());
    }

    #[test]
    fn reasons_become_one_line() {
        let s = Skip::new("t", Need::Perf, "  perf said:\n  not permitted\n");
        assert_eq!(s.reason, "perf said: not permitted");
    }

    #[test]
    fn log_lines_accumulate() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("skips");
        append_line(&log, "one").unwrap();
        append_line(&log, "two").unwrap();
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "one\ntwo\n");
        let err = append_line(&dir.path().join("no/such/dir"), "x").unwrap_err();
        assert!(err.contains(LOG_VAR), "{err}");
    }

    #[test]
    fn summary_counts_and_lists_every_skip() {
        let lines = vec!["skipped: a::x: r [needs perf]".to_string()];
        let text = summary("a", &lines);
        assert!(text.starts_with("1 skipped in a "), "{text}");
        assert!(
            text.contains("\n    skipped: a::x: r [needs perf]\n"),
            "{text}"
        );
    }
}
