//! Benchmarks from an application's own calls: the runtime of
//! [`#[sbs_harness::capture]`](crate::capture).
//!
//! ```no_run
//! #[sbs_harness::capture]
//! fn checksum(data: &[u8]) -> u64 {
//!     data.iter().map(|&b| u64::from(b)).sum()
//! }
//! ```
//!
//! A marked function costs one relaxed atomic load per call in a normal run. Before `main`
//! (an `.init_array` entry of each marked function) the runtime reads two variables:
//!
//! - [`ENV_CAPTURE`] (set by `sbs-profile capture`): the process captures. Each marked
//!   function keeps up to [`ENV_CAPTURE_CALLS`] of its calls, a uniform sample of the whole
//!   run (reservoir sampling, Vitter's algorithm R, decided when a call begins, so only
//!   kept calls pay for serializing their arguments), each with the allocations the
//!   allocation agent counted while it ran. At exit each function's capture is written
//!   into a directory of its own (`meta.json`, `calls.jsonl`;
//!   `format`). A call of a marked function made while another
//!   kept call runs on the same thread is counted but not kept (its serialization would
//!   be charged to the outer call). The variables are removed, so the program's children
//!   do not capture.
//! - [`ENV_REPLAY`] (set by `sbs-profile --replay`): the process runs no `main`. Its
//!   captured functions become harness benchmarks named by their paths (the protocol of
//!   [`Suite`]), each operation one captured call, cycling through them.

use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, CStr};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

pub mod format;

use format::{dir_name, Call, Meta, CALLS_FILE, FORMAT, META_FILE, VERSION};
use sbs_agent_abi::harness::capture::{ENV_CAPTURE, ENV_CAPTURE_CALLS, ENV_REPLAY};

use sbs_agent_abi::harness::{ENV_MODE, MODE_FIRST, MODE_TIME};

use crate::region::{AgentSlot, HeapSnapshot};
use crate::Suite;

/// Calls kept per function when [`ENV_CAPTURE_CALLS`] does not say.
pub const DEFAULT_CALLS: usize = 300;

/// Whether this process captures: the one load a marked function makes per call.
static CAPTURING: AtomicBool = AtomicBool::new(false);

/// The capture's settings, set before `main`.
static CONFIG: OnceLock<Config> = OnceLock::new();

struct Config {
    dir: PathBuf,
    calls: usize,
    agent: Option<AgentSlot>,
    pid: u32,
}

thread_local! {
    /// The kept call running on this thread, if one is.
    static PENDING: std::cell::RefCell<Option<Pending>> = const { std::cell::RefCell::new(None) };
}

/// A kept call in progress.
struct Pending {
    entry: &'static Entry,
    slot: usize,
    call: u64,
    args: String,
    before: Option<HeapSnapshot>,
}

/// The kept call of this thread ends: read the counters, keep the record if its slot
/// was not given to a later call meanwhile.
#[cold]
#[inline(never)]
fn finish() {
    let after = snapshot();
    let Some(p) = PENDING.with(|p| p.borrow_mut().take()) else {
        return;
    };
    let cost = p.before.zip(after).map(|(b, a)| {
        (
            a.allocs.saturating_sub(b.allocs),
            a.bytes.saturating_sub(b.bytes),
        )
    });
    let mut r = lock(p.entry.site);
    if r.owner.get(p.slot) == Some(&p.call) {
        let slot = p.slot;
        let record = Record {
            call: p.call,
            args: p.args,
            cost,
        };
        if slot < r.kept.len() {
            r.kept[slot] = Some(record);
        } else {
            r.kept.resize_with(slot, || None);
            r.kept.push(Some(record));
        }
    }
}

/// What the expansion of `#[sbs_harness::capture]` uses; not an API.
#[doc(hidden)]
pub mod __private {
    use super::*;

    pub use linkme::{self, distributed_slice};
    pub use serde_json::Value;

    /// Every marked function of the program.
    #[distributed_slice]
    #[linkme(crate = linkme)]
    pub static ENTRIES: [Entry];

    /// One marked function.
    pub struct Entry {
        /// Its path, crate first.
        pub path: &'static str,
        /// Its signature as the attribute saw it.
        pub signature: &'static str,
        /// Its capture state.
        pub site: &'static Site,
        /// Register its benchmark in `suite` under `name`, replaying `calls` (each the
        /// JSON array of one call's arguments); an error when one does not deserialize.
        pub replay: fn(&mut Suite, &str, Vec<Value>) -> Result<(), String>,
    }

    /// A `.init_array` entry: glibc calls it with `argc`, `argv` and `envp`.
    pub type Init = extern "C" fn(c_int, *const *const c_char, *const *const c_char);

    /// Before `main`: capture, replay or neither, as the environment says. Each marked
    /// function has an entry; the first one does the work.
    pub extern "C" fn startup(argc: c_int, argv: *const *const c_char, _: *const *const c_char) {
        static STARTED: AtomicBool = AtomicBool::new(false);
        if STARTED.swap(true, Ordering::Relaxed) {
            return;
        }
        let args = args_of(argc, argv);
        // No panic may cross this extern "C" boundary.
        let _ = std::panic::catch_unwind(move || super::start(args));
    }

    /// Whether this process captures.
    #[inline(always)]
    pub fn capturing() -> bool {
        CAPTURING.load(Ordering::Relaxed)
    }

    /// The state of one marked function's capture.
    pub struct Site {
        pub(super) reservoir: Mutex<Reservoir>,
    }

    impl Site {
        /// Nothing seen yet.
        #[allow(clippy::new_without_default)]
        pub const fn new() -> Site {
            Site {
                reservoir: Mutex::new(Reservoir {
                    seen: 0,
                    kept: Vec::new(),
                    owner: Vec::new(),
                    rng: 0x9E37_79B9_7F4A_7C15,
                    errors: Vec::new(),
                }),
            }
        }
    }

    /// Writes one call's arguments as a JSON array.
    pub struct ArgWriter {
        out: String,
        error: Option<String>,
    }

    impl ArgWriter {
        /// Append one argument.
        pub fn arg<T: CaptureSerialize + ?Sized>(&mut self, value: &T) {
            if self.error.is_some() {
                return;
            }
            self.out.push(if self.out.is_empty() { '[' } else { ',' });
            match serde_json::to_string(value) {
                Ok(text) => self.out.push_str(&text),
                Err(e) => self.error = Some(e.to_string()),
            }
        }
    }

    /// A kept call in progress (its state is the thread's [`PENDING`]): its drop reads
    /// the allocation counters again. One byte, so the function that holds it pays
    /// for little more than a test when nothing is captured.
    pub struct Guard {
        _kept: std::num::NonZeroU8,
    }

    impl Drop for Guard {
        #[inline]
        fn drop(&mut self) {
            super::finish();
        }
    }

    /// A call of `entry` begins: count it, and if the reservoir keeps it, serialize its
    /// arguments (`write`) and start counting its allocations.
    #[cold]
    #[inline(never)]
    pub fn begin(entry: &'static Entry, write: impl FnOnce(&mut ArgWriter)) -> Option<Guard> {
        let config = CONFIG.get()?;
        let nested = PENDING.with(|p| p.borrow().is_some());
        let (slot, call) = {
            let mut r = lock(entry.site);
            r.seen += 1;
            let call = r.seen;
            if nested {
                return None;
            }
            let slot = if (call as usize) <= config.calls {
                call as usize - 1
            } else {
                let j = (r.next_random() % call) as usize;
                if j >= config.calls {
                    return None;
                }
                j
            };
            if r.owner.len() <= slot {
                r.owner.resize(slot + 1, 0);
            }
            r.owner[slot] = call;
            (slot, call)
        };
        let mut w = ArgWriter {
            out: String::new(),
            error: None,
        };
        write(&mut w);
        if let Some(e) = w.error {
            let mut r = lock(entry.site);
            if r.errors.len() < 3 {
                r.errors.push(format!("call {call}: {e}"));
            }
            return None;
        }
        if w.out.is_empty() {
            w.out.push('[');
        }
        w.out.push(']');
        let pending = Pending {
            entry,
            slot,
            call,
            args: w.out,
            before: None,
        };
        // The thread-local's first use may allocate: before the counters are read.
        PENDING.with(|p| *p.borrow_mut() = Some(pending));
        let before = snapshot();
        PENDING.with(|p| {
            if let Some(p) = p.borrow_mut().as_mut() {
                p.before = before;
            }
        });
        Some(Guard {
            _kept: std::num::NonZeroU8::MIN,
        })
    }

    /// Which captured call a replay's next operation replays. Counting runs cycle
    /// through them all, from the first. The drift checks look for an operation that
    /// changes its own input by comparing the first operations with each other, which
    /// calls of different sizes would fool: a drift run ([`MODE_FIRST`]) replays the first
    /// call every time, and a timing run its first
    /// [`FIRST_OPS`](crate::child::FIRST_OPS) operations (those timed one at a time),
    /// then cycles. A few compares per operation, no division.
    #[derive(Debug, Clone, Copy)]
    pub struct Cursor {
        hold: u64,
        cycle: bool,
        next: usize,
    }

    impl Cursor {
        /// The cursor of this process's run (the harness's mode variable).
        pub fn new() -> Cursor {
            let mode = std::env::var(ENV_MODE).ok();
            let (hold, cycle) = match mode.as_deref() {
                Some(MODE_FIRST) => (0, false),
                Some(MODE_TIME) => (crate::child::FIRST_OPS as u64, true),
                _ => (0, true),
            };
            Cursor {
                hold,
                cycle,
                next: 0,
            }
        }

        /// The index, among `len` calls, of the next operation's call.
        #[inline(always)]
        pub fn next(&mut self, len: usize) -> usize {
            if self.hold > 0 {
                self.hold -= 1;
                return 0;
            }
            if !self.cycle {
                return 0;
            }
            let i = self.next;
            self.next += 1;
            if self.next >= len {
                self.next = 0;
            }
            i
        }
    }

    impl Default for Cursor {
        fn default() -> Cursor {
            Cursor::new()
        }
    }

    /// Compile-time check of a captured argument's type (the message says what to derive).
    pub fn capturable<T: Capturable>() {}

    /// Compile-time check of an argument the replay clones before every operation.
    pub fn resettable<T: Resettable>() {}

    /// The captured calls as the function's argument tuple.
    pub fn decode<T: serde::de::DeserializeOwned>(calls: &[Value]) -> Result<Vec<T>, String> {
        calls
            .iter()
            .enumerate()
            .map(|(i, v)| {
                T::deserialize(v).map_err(|e| {
                    format!(
                        "kept call {} does not deserialize as the function's arguments ({e})",
                        i + 1
                    )
                })
            })
            .collect()
    }

    /// A type whose values a capture can record and a replay rebuild.
    #[diagnostic::on_unimplemented(
        message = "`{Self}` cannot be captured: it does not implement serde's `Serialize` and `Deserialize`",
        label = "this argument of a #[sbs_harness::capture] function",
        note = "add #[derive(serde::Serialize, serde::Deserialize)] to `{Self}` (serde with its `derive` feature), or capture a function that takes the data it is built from"
    )]
    pub trait Capturable: serde::Serialize + serde::de::DeserializeOwned {}
    impl<T: serde::Serialize + serde::de::DeserializeOwned> Capturable for T {}

    /// An argument a capture can write (its type implements `Serialize`).
    #[diagnostic::on_unimplemented(
        message = "`{Self}` cannot be captured: it does not implement serde's `Serialize` and `Deserialize`",
        label = "this argument of a #[sbs_harness::capture] function",
        note = "add #[derive(serde::Serialize, serde::Deserialize)] to its type (serde with its `derive` feature)"
    )]
    pub trait CaptureSerialize: serde::Serialize {}
    impl<T: serde::Serialize + ?Sized> CaptureSerialize for T {}

    /// A type a replay can clone before every operation (`&mut` and by-value arguments).
    #[diagnostic::on_unimplemented(
        message = "`{Self}` is taken by value or `&mut`, so its replay restores it from a pristine copy before every call, and it does not implement `Clone`",
        label = "this argument of a #[sbs_harness::capture] function",
        note = "add #[derive(Clone)] to `{Self}`"
    )]
    pub trait Resettable: Clone {}
    impl<T: Clone> Resettable for T {}
}

use __private::{Entry, ENTRIES};

/// One kept call.
struct Record {
    call: u64,
    /// The arguments' JSON array.
    args: String,
    /// (allocations, bytes) while it ran.
    cost: Option<(u64, u64)>,
}

/// The calls of one function seen and kept.
struct Reservoir {
    seen: u64,
    kept: Vec<Option<Record>>,
    /// The call each slot was last given to (a call that ends after a later call took
    /// its slot is not kept).
    owner: Vec<u64>,
    rng: u64,
    errors: Vec<String>,
}

impl Reservoir {
    /// splitmix64: a fixed seed, so the same run keeps the same calls.
    fn next_random(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

fn lock(site: &__private::Site) -> std::sync::MutexGuard<'_, Reservoir> {
    site.reservoir.lock().unwrap_or_else(|p| p.into_inner())
}

fn snapshot() -> Option<HeapSnapshot> {
    CONFIG.get()?.agent.as_ref()?.snapshot().ok()
}

/// The program's arguments from what glibc passes an `.init_array` entry.
fn args_of(argc: c_int, argv: *const *const c_char) -> Vec<String> {
    let mut out = Vec::new();
    if argv.is_null() {
        return out;
    }
    for i in 0..usize::try_from(argc).unwrap_or(0) {
        // SAFETY: glibc passes `argc` valid pointers in `argv`, each to a NUL-terminated
        // string that lives as long as the process.
        let arg = unsafe { *argv.add(i) };
        if arg.is_null() {
            break;
        }
        // SAFETY: as above: a NUL-terminated string of the process's lifetime.
        let text = unsafe { CStr::from_ptr(arg) };
        out.push(text.to_string_lossy().into_owned());
    }
    out
}

fn start(args: Vec<String>) {
    if let Some(dir) = std::env::var_os(ENV_REPLAY) {
        let code = match replay(Path::new(&dir), &args) {
            Ok(()) => 0,
            Err(e) => {
                let _ = writeln!(std::io::stderr(), "error: {e}");
                2
            }
        };
        std::process::exit(code);
    }
    if let Some(dir) = std::env::var_os(ENV_CAPTURE) {
        let calls = std::env::var(ENV_CAPTURE_CALLS)
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .filter(|&n| n > 0)
            .unwrap_or(DEFAULT_CALLS);
        std::env::remove_var(ENV_CAPTURE);
        std::env::remove_var(ENV_CAPTURE_CALLS);
        let agent = AgentSlot::find().ok().flatten();
        let config = Config {
            dir: PathBuf::from(dir),
            calls,
            agent,
            pid: std::process::id(),
        };
        if CONFIG.set(config).is_ok() {
            // SAFETY: `write_at_exit` is an `extern "C" fn()` that never unwinds (it
            // catches panics); registering it has no other precondition.
            let registered = unsafe { libc::atexit(write_at_exit) } == 0;
            if registered {
                CAPTURING.store(true, Ordering::Relaxed);
            } else {
                let _ = writeln!(
                    std::io::stderr(),
                    "sbs-harness: cannot register the capture's writer (atexit); nothing is captured"
                );
            }
        }
    }
}

extern "C" fn write_at_exit() {
    CAPTURING.store(false, Ordering::Relaxed);
    let _ = std::panic::catch_unwind(|| {
        if let Err(e) = write_captures() {
            let _ = writeln!(std::io::stderr(), "sbs-harness: capture not written: {e}");
        }
    });
}

/// Write each function's capture into the capture directory.
fn write_captures() -> std::io::Result<()> {
    let Some(config) = CONFIG.get() else {
        return Ok(());
    };
    if config.pid != std::process::id() {
        // A forked child: its parent writes the captures.
        return Ok(());
    }
    for entry in ENTRIES.iter() {
        let r = lock(entry.site);
        for e in &r.errors {
            let _ = writeln!(
                std::io::stderr(),
                "sbs-harness: {}: an argument did not serialize, that call is not kept: {e}",
                entry.path
            );
        }
        if r.seen == 0 {
            continue;
        }
        let mut kept: Vec<&Record> = r.kept.iter().flatten().collect();
        kept.sort_by_key(|k| k.call);
        let dir = config.dir.join(dir_name(entry.path));
        std::fs::create_dir_all(&dir)?;
        let meta = Meta {
            format: FORMAT.to_string(),
            version: VERSION,
            function: entry.path.to_string(),
            signature: entry.signature.to_string(),
            calls_seen: r.seen,
            calls_kept: kept.len() as u64,
            allocations: config.agent.is_some(),
        };
        let mut text = serde_json::to_string_pretty(&meta).map_err(std::io::Error::other)?;
        text.push('\n');
        std::fs::write(dir.join(META_FILE), text)?;
        let mut lines = String::new();
        for k in kept {
            let (count, bytes) = match k.cost {
                Some((c, b)) => (c.to_string(), b.to_string()),
                None => ("null".into(), "null".into()),
            };
            lines.push_str(&format!(
                "{{\"call\":{},\"alloc_count\":{count},\"alloc_bytes\":{bytes},\"args\":{}}}\n",
                k.call, k.args
            ));
        }
        std::fs::write(dir.join(CALLS_FILE), lines)?;
    }
    Ok(())
}

/// Read one function's capture: its description and its calls' arguments.
fn read_capture(dir: &Path) -> Result<(Meta, Vec<serde_json::Value>), String> {
    let meta_path = dir.join(META_FILE);
    let text = std::fs::read_to_string(&meta_path)
        .map_err(|e| format!("cannot read {}: {e}", meta_path.display()))?;
    let meta: Meta = serde_json::from_str(&text).map_err(|e| {
        format!(
            "{} is corrupt ({e}); capture again (sbs-profile capture --force -- PROGRAM ...)",
            meta_path.display()
        )
    })?;
    if meta.format != FORMAT || meta.version != VERSION {
        return Err(format!(
            "{} is format {} version {}, this program reads {FORMAT} version {VERSION}; capture again",
            meta_path.display(),
            meta.format,
            meta.version
        ));
    }
    let calls_path = dir.join(CALLS_FILE);
    let text = std::fs::read_to_string(&calls_path)
        .map_err(|e| format!("cannot read {}: {e}", calls_path.display()))?;
    let mut calls = Vec::new();
    for (n, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let call: Call = serde_json::from_str(line).map_err(|e| {
            format!(
                "{} is corrupt at line {} ({e}); capture again (sbs-profile capture --force -- PROGRAM ...)",
                calls_path.display(),
                n + 1
            )
        })?;
        calls.push(call.args);
    }
    if calls.is_empty() {
        return Err(format!(
            "{} holds no call; capture again",
            calls_path.display()
        ));
    }
    Ok((meta, calls))
}

/// Replay mode: the captured functions as benchmarks, run as `args` ask.
fn replay(dir: &Path, args: &[String]) -> Result<(), String> {
    let mut entries: BTreeMap<&str, &Entry> = BTreeMap::new();
    for e in ENTRIES.iter() {
        entries.insert(e.path, e);
    }
    let mut suite = Suite::new();
    for (path, entry) in entries {
        let fdir = dir.join(dir_name(path));
        if !fdir.exists() {
            continue;
        }
        let (meta, calls) = read_capture(&fdir)?;
        if meta.function != path {
            return Err(format!(
                "{} is the capture of `{}`, not of `{path}`; capture again",
                fdir.display(),
                meta.function
            ));
        }
        if meta.signature != entry.signature {
            return Err(format!(
                "the capture {} was made for `{}`, and `{path}` is now `{}`: capture again \
                 (sbs-profile capture --force -- PROGRAM ...)",
                fdir.display(),
                meta.signature,
                entry.signature
            ));
        }
        (entry.replay)(&mut suite, path, calls)
            .map_err(|e| format!("{}: {e}; capture again", fdir.display()))?;
    }
    suite
        .run_with_args(args.get(1..).unwrap_or_default())
        .map_err(|e| e.to_string())
}
