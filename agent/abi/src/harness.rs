//! The contract between the benchmark harness (`sbs-harness`, inside the child) and the
//! collector: which descriptors and env vars announce what, and the records the harness
//! reports back.
//!
//! - [`ENV_OUT`] names a file (`/proc/self/fd/1017` under the collector, a temporary file
//!   when the harness runs its own child processes) the harness writes its records to:
//!   one per line, `KEY VALUE` with a decimal or float value ([`parse_record`]).
//! - [`ENV_MODE`] says what the run is for: [`MODE_TIME`] (time the operation, nothing
//!   attached) or [`MODE_COUNT`] (run [`ENV_OPS`] operations inside the measured region
//!   while counters, uprobes and the allocation agent count).
//! - Each instrument that counts only inside the region passes a Unix socket at its own
//!   descriptor number, announced by one of [`REGION_SOCKET_ENVS`]. After attaching to the
//!   child it sends its perf-event descriptors over it (`SCM_RIGHTS`); the harness receives
//!   them before the set-up and turns them on (`PERF_EVENT_IOC_ENABLE`) just before each
//!   operation and off just after it.
//! - When the run is under valgrind's callgrind with collection off at start, the collector
//!   sets [`ENV_REGION_CALLGRIND`]; the harness then toggles callgrind's collection on just
//!   before each operation and off just after it (a client request), and reports
//!   [`REC_REGION_VALGRIND`].

/// Env var: path of the file the harness writes its records to.
pub const ENV_OUT: &str = "SBS_HARNESS_OUT";
/// Env var: [`MODE_TIME`] or [`MODE_COUNT`].
pub const ENV_MODE: &str = "SBS_HARNESS_MODE";
/// Env var: operations to run in a [`MODE_COUNT`] run.
pub const ENV_OPS: &str = "SBS_HARNESS_OPS";
/// Env var: set (to `1`) in a [`MODE_COUNT`] run to run the *empty* operation instead of
/// the benchmark's (same state, set-up, reset, loop and region markers): what the harness
/// itself costs per operation (the calibration).
pub const ENV_EMPTY: &str = "SBS_HARNESS_EMPTY";
/// Env var: parameter overrides, `KEY=VALUE` pairs separated by commas, applied after
/// the command line's `--param`s: how the collector runs a benchmark at a second size.
pub const ENV_PARAMS: &str = "SBS_HARNESS_PARAMS";
/// Time the operation.
pub const MODE_TIME: &str = "time";
/// Count inside the measured region.
pub const MODE_COUNT: &str = "count";
/// Count the first operations one at a time (the drift check): under callgrind with
/// collection off at start ([`ENV_REGION_CALLGRIND`]), the harness runs [`ENV_OPS`]
/// operations on a fresh set-up, then [`FIRST_FRESH_OPS`] on a second set-up, toggling
/// collection around each operation and dumping callgrind's counts after it
/// (`CALLGRIND_DUMP_STATS`: dump `i` holds operation `i` alone, numbered from 1 in run
/// order). Records: [`REC_FIRST_OPS`], [`REC_FIRST_FRESH_OPS`], [`REC_REGION_VALGRIND`].
pub const MODE_FIRST: &str = "first";
/// Operations counted on the second set-up of a [`MODE_FIRST`] run: the first one on a
/// fresh input in a process whose one-time work (lazy statics, the allocator's first
/// pass) is done, and the next.
pub const FIRST_FRESH_OPS: u64 = 2;

/// Operations a [`MODE_COUNT`] run makes before the region, unmeasured (the replay of a
/// capture's calls cycles through them from the first, so the counted operations are
/// calls `COUNT_WARMUP_OPS..COUNT_WARMUP_OPS + ops`, modulo their number).
pub const COUNT_WARMUP_OPS: u64 = 1;

/// Descriptor number of the record file in the child.
pub const OUT_FD: i32 = 1017;
/// Env var and descriptor of the uprobe counters' socket.
pub const REGION_SOCKET_UPROBES: (&str, i32) = ("SBS_REGION_UPROBES", 1016);
/// Env var and descriptor of the perf counters' socket.
pub const REGION_SOCKET_COUNTERS: (&str, i32) = ("SBS_REGION_COUNTERS", 1015);
/// Every region socket the harness looks for.
pub const REGION_SOCKET_ENVS: [(&str, i32); 2] = [REGION_SOCKET_UPROBES, REGION_SOCKET_COUNTERS];

/// Env var: set (to `1`) when the run is under callgrind started with collection off; the
/// harness toggles collection around each operation.
pub const ENV_REGION_CALLGRIND: &str = "SBS_REGION_CALLGRIND";

/// Command-line flag of a harness binary: list the benchmarks, one per line:
/// `NAME<TAB>KEY=DEFAULT,...<TAB>SIZE,...`, the last field naming the size parameters
/// (those the operation's cost must depend on). A line without a tab may also be
/// criterion's `NAME: benchmark` (what `sbs-criterion`'s binaries print, as criterion's do).
pub const ARG_LIST: &str = "--list";
/// Command-line flag of a harness binary: run this one benchmark in this process.
pub const ARG_RUN: &str = "--sbs-run";

/// Record: operations run inside the region ([`MODE_COUNT`]).
pub const REC_OPS: &str = "ops";
/// Record: allocations made by the operations, all of them together.
pub const REC_ALLOC_COUNT: &str = "alloc.count";
/// Record: bytes requested by the operations, all of them together.
pub const REC_ALLOC_BYTES: &str = "alloc.bytes";
/// Record: live heap bytes retained by one result, averaged over the operations.
pub const REC_RETAINED: &str = "heap.retained";
/// Record: perf-event descriptors received and switched around each operation.
pub const REC_REGION_EVENTS: &str = "region.events";
/// Record: with [`ENV_REGION_CALLGRIND`], what `RUNNING_ON_VALGRIND` answered in the child
/// (0 natively: the toggles reached no valgrind); absent without it.
pub const REC_REGION_VALGRIND: &str = "region.valgrind";
/// Record: mean seconds per operation of this process's kept measurements.
pub const REC_TIME_OP: &str = "time.op";
/// Record: mean seconds per operation of the *empty* operation, timed with the same loop,
/// batch size and reset as the benchmark's (the calibration).
pub const REC_TIME_EMPTY: &str = "time.op.empty";
/// Record, repeated in order: each kept measurement, seconds per operation.
pub const REC_TIME_KEPT: &str = "time.kept";
/// Record, repeated in order: seconds of each of the first operations of the process,
/// timed one at a time before anything else (the first is the first operation ever).
pub const REC_TIME_FIRST: &str = "time.first";
/// Record: mean seconds of the empty operation timed one at a time (what the clock and
/// the loop add to each [`REC_TIME_FIRST`]).
pub const REC_TIME_FIRST_EMPTY: &str = "time.first.empty";
/// Record ([`MODE_FIRST`]): operations counted one at a time on the first set-up (dumps
/// 1 to N).
pub const REC_FIRST_OPS: &str = "first.ops";
/// Record ([`MODE_FIRST`]): operations counted one at a time on the second set-up (the
/// dumps after the first set-up's); 0 when the second set-up or its operations panicked.
pub const REC_FIRST_FRESH_OPS: &str = "first.fresh_ops";
/// Record: measurements kept (each a batch of operations).
pub const REC_SAMPLES: &str = "samples";
/// Record: operations per measurement.
pub const REC_BATCH: &str = "batch";
/// Record: measurements spent warming up.
pub const REC_WARMUP: &str = "warmup";
/// Record: coefficient of variation of the window that marked steady state.
pub const REC_STEADY_COV: &str = "steady.cov";
/// Record: 1 when no steady state was reached (the last measurements were kept).
pub const REC_NOT_STEADY: &str = "not_steady";

/// Parse one record line: `KEY VALUE`. `None` for a malformed line.
pub fn parse_record(line: &str) -> Option<(&str, f64)> {
    let (key, value) = line.trim().split_once(' ')?;
    let value: f64 = value.trim().parse().ok()?;
    (!key.is_empty() && value.is_finite()).then_some((key, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_parse() {
        assert_eq!(parse_record("ops 10\n"), Some(("ops", 10.0)));
        assert_eq!(parse_record("time.op 1.5e-7"), Some(("time.op", 1.5e-7)));
        assert_eq!(parse_record("ops"), None);
        assert_eq!(parse_record("ops ten"), None);
        assert_eq!(parse_record(" 5"), None);
        assert_eq!(parse_record("x NaN"), None);
    }

    #[test]
    fn descriptor_numbers_do_not_collide() {
        let mut fds = [
            crate::REPORT_FD,
            OUT_FD,
            REGION_SOCKET_UPROBES.1,
            REGION_SOCKET_COUNTERS.1,
        ];
        fds.sort_unstable();
        assert!(fds.windows(2).all(|w| w[0] != w[1]));
    }
}

/// Capture and replay (`#[sbs_harness::capture]`, `sbs-profile capture`, `--replay`).
pub mod capture {
    /// Env var: the directory a capturing process writes its captures into (one
    /// directory per marked function that ran); set by `sbs-profile capture`.
    pub const ENV_CAPTURE: &str = "SBS_CAPTURE";
    /// Env var: how many calls of each marked function a capture keeps.
    pub const ENV_CAPTURE_CALLS: &str = "SBS_CAPTURE_CALLS";
    /// Env var: the captures directory a process replays from: the program then runs no
    /// `main` but its captured calls as harness benchmarks (`--list`, `--sbs-run NAME`).
    pub const ENV_REPLAY: &str = "SBS_REPLAY";
    /// The `format` field of every capture's `meta.json`.
    pub const FORMAT: &str = "sbs-capture";
    /// The version of the capture format; a reader refuses any other.
    pub const VERSION: u64 = 1;
    /// A capture's description (JSON).
    pub const META_FILE: &str = "meta.json";
    /// A capture's calls, one JSON object per line.
    pub const CALLS_FILE: &str = "calls.jsonl";
    /// The default captures directory.
    pub const DEFAULT_DIR: &str = "sbs-captures";
}
