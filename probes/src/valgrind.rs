//! Instruction counts without a PMU: valgrind's cachegrind with its simulations off.
//!
//! The benchmark runs under `valgrind --tool=cachegrind --cache-sim=no --branch-sim=no`
//! (the cheapest instruction counter valgrind has) with `--log-fd=N`, so valgrind's own
//! report goes to a private descriptor and never mixes with the benchmark's stderr.
//! `--trace-children=yes` follows exec'd children; each process (forked or exec'd) writes
//! its own `I refs` summary, and the total is their sum, like inherited perf counters.
//!
//! For the measured region of a harnessed benchmark the benchmark runs under callgrind
//! instead, with collection off at start ([`callgrind_wrapper`]): the harness toggles it
//! on and off around each operation with a client request, and callgrind's summary (the
//! same `I refs` line, which there counts only what was collected) is the region's count.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Metric source of valgrind instruction counts. Never compared with `perf-hw`.
pub const SOURCE: &str = "valgrind";

/// The command that installs valgrind on Debian/Ubuntu.
pub const INSTALL_HINT: &str =
    "sudo apt-get install -y valgrind (Fedora: sudo dnf install valgrind)";

/// Errors of the valgrind layer.
#[derive(Debug, thiserror::Error)]
pub enum ValgrindError {
    /// No `valgrind` on PATH.
    #[error("valgrind is not installed (not found on PATH): install it with `{INSTALL_HINT}`, or use `--instructions perf` on a machine with a PMU")]
    NotInstalled,
    /// Valgrind's log had no instruction summary.
    #[error("valgrind produced no `I refs` summary{}: its log was:\n{log}", pid.map(|p| format!(" for pid {p}")).unwrap_or_default())]
    NoSummary {
        /// The process, when known.
        pid: Option<i32>,
        /// The log, for diagnosis.
        log: String,
    },
    /// A number in the log did not parse.
    #[error(
        "cannot parse valgrind's instruction count `{text}`: expected digits with optional commas"
    )]
    BadNumber {
        /// The text.
        text: String,
    },
}

/// Find the `valgrind` executable on PATH.
pub fn find_valgrind() -> Result<PathBuf, ValgrindError> {
    which::which("valgrind").map_err(|_| ValgrindError::NotInstalled)
}

/// The wrapper command: `valgrind` and its options, to be followed by the benchmark's
/// program and arguments. Valgrind writes its report to descriptor `log_fd`.
pub fn wrapper(valgrind: &Path, log_fd: i32) -> Vec<OsString> {
    let mut v: Vec<OsString> = vec![valgrind.into()];
    v.extend(
        [
            "--tool=cachegrind".to_string(),
            "--cache-sim=no".to_string(),
            "--branch-sim=no".to_string(),
            "--cachegrind-out-file=/dev/null".to_string(),
            "--trace-children=yes".to_string(),
            // No vgdb pipes in /tmp (a killed valgrind leaves them behind).
            "--vgdb=no".to_string(),
            format!("--log-fd={log_fd}"),
        ]
        .into_iter()
        .map(OsString::from),
    );
    v
}

/// The wrapper command for a measured region: callgrind with collection off until the
/// program toggles it (`CALLGRIND_TOGGLE_COLLECT`), no out-file (`/dev/null`), its report on
/// descriptor `log_fd`. Its cache and branch simulations are off by default.
pub fn callgrind_wrapper(valgrind: &Path, log_fd: i32) -> Vec<OsString> {
    let mut v: Vec<OsString> = vec![valgrind.into()];
    v.extend(
        [
            "--tool=callgrind".to_string(),
            "--collect-atstart=no".to_string(),
            "--callgrind-out-file=/dev/null".to_string(),
            "--trace-children=yes".to_string(),
            // No vgdb pipes in /tmp (a killed valgrind leaves them behind).
            "--vgdb=no".to_string(),
            format!("--log-fd={log_fd}"),
        ]
        .into_iter()
        .map(OsString::from),
    );
    v
}

/// The wrapper command for counting a harness's first operations one at a time: callgrind
/// with collection off until the program toggles it, each `CALLGRIND_DUMP_STATS` of the
/// program writing the counts since the last one to `OUT_FILE.N` (N from 1), valgrind's
/// messages to `log_file`. Children are not followed: only the harness's own process dumps.
pub fn dumps_wrapper(valgrind: &Path, out_file: &Path, log_file: &Path) -> Vec<OsString> {
    to_files(
        valgrind,
        &[
            "--tool=callgrind",
            "--collect-atstart=no",
            "--trace-children=no",
        ],
        ("--callgrind-out-file=", out_file),
        log_file,
    )
}

/// `valgrind` with `options`, its tool's output to a file (`out`: the option that names
/// it, and the file) and its messages to `log_file`; never vgdb pipes in /tmp (a killed
/// valgrind leaves them behind). To be followed by the program and its arguments.
pub fn to_files(
    valgrind: &Path,
    options: &[&str],
    out: (&str, &Path),
    log_file: &Path,
) -> Vec<OsString> {
    let mut out_arg = OsString::from(out.0);
    out_arg.push(out.1);
    let mut log_arg = OsString::from("--log-file=");
    log_arg.push(log_file);
    let mut v: Vec<OsString> = vec![valgrind.into()];
    v.extend(options.iter().map(OsString::from));
    v.push("--vgdb=no".into());
    v.push(out_arg);
    v.push(log_arg);
    v
}

/// The instruction count of one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstructionCount {
    /// Sum over all processes.
    pub total: u64,
    /// `(pid, instructions)` per process, in the order their summaries were written.
    pub per_process: Vec<(i32, u64)>,
}

fn parse_number(text: &str) -> Result<u64, ValgrindError> {
    let digits: String = text.chars().filter(|&c| c != ',').collect();
    digits.parse().map_err(|_| ValgrindError::BadNumber {
        text: text.to_string(),
    })
}

/// Parse valgrind's log: every `==PID== I refs: N` line (cachegrind's and callgrind's
/// summary; 3.19 writes `I   refs:`, newer versions `I refs:`; callgrind's equals its
/// `Collected :` line, the events collected while collection was on).
pub fn parse_log(log: &str) -> Result<InstructionCount, ValgrindError> {
    let mut per_process = Vec::new();
    for line in log.lines() {
        let Some(rest) = line.strip_prefix("==") else {
            continue;
        };
        let Some((pid, body)) = rest.split_once("==") else {
            continue;
        };
        let Ok(pid) = pid.parse::<i32>() else {
            continue;
        };
        let body = body.trim_start();
        let Some(after_i) = body.strip_prefix('I') else {
            continue;
        };
        let Some(count) = after_i.trim_start().strip_prefix("refs:") else {
            continue;
        };
        per_process.push((pid, parse_number(count.trim())?));
    }
    if per_process.is_empty() {
        return Err(ValgrindError::NoSummary {
            pid: None,
            log: log.to_string(),
        });
    }
    Ok(InstructionCount {
        total: per_process.iter().map(|&(_, n)| n).sum(),
        per_process,
    })
}

/// Read the total `Ir` from a cachegrind output file (`summary: N` line): valgrind's
/// own figure, used as an oracle.
pub fn parse_out_file_summary(text: &str) -> Result<u64, ValgrindError> {
    text.lines()
        .find_map(|l| l.strip_prefix("summary:"))
        .map(|s| {
            let first = s.split_whitespace().next().unwrap_or("");
            parse_number(first)
        })
        .unwrap_or_else(|| {
            Err(ValgrindError::NoSummary {
                pid: None,
                log: text.chars().take(2000).collect(),
            })
        })
}

/// The message of a valgrind log that says why the program did not finish under it
/// (`Process terminating ...`, a `valgrind: ` error, a bad option), if the log has one.
pub fn log_hint(log: &str) -> Option<&str> {
    log.lines()
        .filter_map(|l| l.split_once("== ").map(|(_, m)| m.trim()))
        .find(|m| {
            m.starts_with("Process terminating")
                || m.contains("valgrind: ")
                || m.starts_with("Bad option")
        })
}

/// Remove the temporary files valgrind's process `pid` left in `dir` (its `TMPDIR`).
/// Valgrind creates `valgrind_proc_<pid>_cmdline_*` and `..._auxv_*` there at start-up and
/// unlinks each right after writing it; a valgrind killed in between (a timeout, Ctrl-C)
/// leaves them behind. Only regular files of that pid are touched; errors are ignored
/// (another user's file, already gone).
pub fn remove_leftovers(pid: i32, dir: &Path) {
    // A process just sent SIGKILL may still finish the system call it is in: wait (a
    // little) until it is a zombie or gone.
    for _ in 0..50 {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok();
        let ended = state.as_deref().is_none_or(|s| {
            s.rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with(['Z', 'X']))
        });
        if ended {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(4));
    }
    let prefix = format!("valgrind_proc_{pid}_");
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let ours = entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with(&prefix));
        if ours && entry.file_type().is_ok_and(|t| t.is_file()) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_killed_valgrind_s_files_are_removed_and_no_other() {
        let dir = tempfile::tempdir().unwrap();
        // No process has this pid (above pid_max's largest value, 2^22).
        let pid = i32::MAX;
        let names = [
            format!("valgrind_proc_{pid}_cmdline_1f2e3d4c"),
            format!("valgrind_proc_{pid}_auxv_00aa11bb"),
            format!("valgrind_proc_{pid}0_cmdline_1f2e3d4c"),
            "valgrind_proc_1_cmdline_1f2e3d4c".to_string(),
            "notes".to_string(),
        ];
        for n in &names {
            std::fs::write(dir.path().join(n), b"x").unwrap();
        }
        std::fs::create_dir(dir.path().join(format!("valgrind_proc_{pid}_dir"))).unwrap();
        remove_leftovers(pid, dir.path());
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        let mut kept = vec![
            names[2].clone(),
            names[3].clone(),
            names[4].clone(),
            format!("valgrind_proc_{pid}_dir"),
        ];
        kept.sort();
        assert_eq!(left, kept);
    }

    const LOG_3_19: &str = "\
==4991== Cachegrind, a cache and branch-prediction profiler
==4991== Command: /bin/true
==4991== 
==4991== I   refs:      130,440
==4992== Command: /bin/echo hi
==4992== I   refs:      307,562
==4989== 
==4989== I   refs:      231,640
";

    #[test]
    fn sums_every_process_summary() {
        let c = parse_log(LOG_3_19).unwrap();
        assert_eq!(c.total, 130_440 + 307_562 + 231_640);
        assert_eq!(c.per_process[1], (4992, 307_562));
    }

    #[test]
    fn accepts_the_newer_spelling() {
        let c = parse_log("==7== I refs:        1,234,567,890\n").unwrap();
        assert_eq!(c.total, 1_234_567_890);
    }

    #[test]
    fn ignores_benchmark_lines_and_fails_without_summary() {
        let e = parse_log("I refs: 5\nsomething else\n==x== I refs: 7\n").unwrap_err();
        assert!(matches!(e, ValgrindError::NoSummary { .. }), "{e}");
        let e = parse_log("==3== I refs: 12a\n").unwrap_err();
        assert!(matches!(e, ValgrindError::BadNumber { .. }), "{e}");
    }

    #[test]
    fn reads_the_out_file_summary() {
        let text = "desc: I1 cache: ...\ncmd: ./x\nevents: Ir\nfl=a.c\n1 3\nsummary: 160944\n";
        assert_eq!(parse_out_file_summary(text).unwrap(), 160_944);
        assert!(parse_out_file_summary("events: Ir\n").is_err());
    }

    const CALLGRIND_LOG_3_19: &str = "\
==27906== Callgrind, a call-graph generating cache profiler
==27906== Command: ./t 2 1000
==27906== For interactive control, run 'callgrind_control -h'.
==27906== 
==27906== Events    : Ir
==27906== Collected : 16037
==27906== 
==27906== I   refs:      16,037
";

    #[test]
    fn reads_callgrinds_summary_and_its_wrapper_starts_with_collection_off() {
        assert_eq!(parse_log(CALLGRIND_LOG_3_19).unwrap().total, 16_037);
        let w = callgrind_wrapper(Path::new("/usr/bin/valgrind"), 61);
        let w: Vec<String> = w.iter().map(|s| s.to_string_lossy().into_owned()).collect();
        for opt in [
            "--tool=callgrind",
            "--collect-atstart=no",
            "--trace-children=yes",
            "--log-fd=61",
            "--vgdb=no",
        ] {
            assert!(w.iter().any(|a| a == opt), "{opt} missing in {w:?}");
        }
    }

    #[test]
    fn wrapper_uses_the_cheap_counter_and_a_private_log() {
        let w = wrapper(Path::new("/usr/bin/valgrind"), 1013);
        let w: Vec<String> = w.iter().map(|s| s.to_string_lossy().into_owned()).collect();
        assert_eq!(w[0], "/usr/bin/valgrind");
        for opt in [
            "--tool=cachegrind",
            "--cache-sim=no",
            "--branch-sim=no",
            "--log-fd=1013",
            "--vgdb=no",
        ] {
            assert!(w.iter().any(|a| a == opt), "{opt} missing in {w:?}");
        }
    }
}
