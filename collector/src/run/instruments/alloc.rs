//! Allocations: the embedded preload agent (`agent/`), its report file, and the
//! `alloc` instrument (`--alloc`; with [`AllocMetrics::HeapPeak`] also part of `--memory`).
//!
//! Per run the collector creates a fresh report file (a memfd, see `sbs-agent-abi`) and a
//! copy of the agent library stamped with where that file is (see [`super::preload`]);
//! the child's `LD_PRELOAD` names the copy as `/proc/<our pid>/fd/<n>`, and every process
//! image that loads it opens the report file through our descriptor, maps it and counts
//! into its own slot. No file is written anywhere, and the child gets no descriptor and no
//! variable but `LD_PRELOAD`. After the child is reaped (and its process group killed)
//! the collector reads the slots and sums them.
//!
//! A program that execs a child without the agent (it clears `LD_PRELOAD`, runs it as
//! another user, or the child is static or setuid) leaves no slot: its allocations would
//! vanish unnoticed. So on the agent path each run also counts the execs of the child and
//! its descendants ([`sbs_probes::execs`], perf comm records, no privileges needed at the
//! usual `perf_event_paranoid`), and every exec that left no slot is reported.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use anyhow::Context;
use nix::sys::memfd::{memfd_create, MemFdCreateFlag};
use nix::unistd::Pid;
use sbs_agent_abi::tree::{self, TreeValues};
use sbs_agent_abi::{
    slot_offset, HeaderValues, Origin, SlotValues, ENV_HARNESS_FD, ENV_HARNESS_TOKEN, GRANULE,
    HEADER_SIZE, REPORT_FD, REPORT_SIZE, SLOT_COUNT, SLOT_SIZE,
};
use sbs_probes::execs::{ExecCount, ExecWatch};
use sbs_reports::model::{Family, Unit};

use super::preload::StampedLibrary;
use crate::run::instrument::{ChildSetup, InFlight, Instrument, MetricSpec, RunOutcome, Sample};

/// The agent library, built by `build.rs` from `agent/` and embedded in this binary.
pub static AGENT_LIBRARY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libsbs_agent.so"));

/// What can go wrong with the agent, before or after a run.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// memfd_create, write or sealing failed.
    #[error("cannot create the in-memory file for {what}: {source}; the allocation agent needs memfd_create (Linux 3.17+)")]
    Memfd {
        /// `the agent library` or `the report file`.
        what: &'static str,
        /// The cause.
        source: io::Error,
    },
    /// Reading the report file failed.
    #[error("cannot read the allocation agent's report file: {0}")]
    Read(#[source] io::Error),
    /// The report header was overwritten.
    #[error("the allocation agent's report file was overwritten (bad header); the benchmark may write to descriptor {REPORT_FD}")]
    Damaged,
    /// The program cannot load a preload library.
    #[error(
        "{path}: {reason}; the allocation agent cannot be loaded into it (LD_PRELOAD). {advice}"
    )]
    Unsupported {
        /// The program.
        path: PathBuf,
        /// Why.
        reason: String,
        /// What to do instead.
        advice: &'static str,
    },
    /// Reading the program failed.
    #[error("cannot read {path} to check that the allocation agent can load into it: {source}")]
    Inspect {
        /// The program.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
}

fn memfd(
    name: &std::ffi::CStr,
    what: &'static str,
    flags: MemFdCreateFlag,
) -> Result<File, AgentError> {
    memfd_create(name, flags)
        .map(File::from)
        .map_err(|e| AgentError::Memfd {
            what,
            source: e.into(),
        })
}

/// One run's report file.
#[derive(Debug)]
pub struct ReportFile {
    file: File,
    token: u64,
}

/// What the agent reported in one run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reports {
    /// One entry per process image that loaded the agent.
    pub images: Vec<SlotValues>,
    /// Images that loaded the agent but found no free slot.
    pub unreported: u64,
    /// The process tree's words (see `sbs_agent_abi::tree`).
    pub tree: TreeValues,
}

/// The sum over a run's process images.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// Blocks allocated (each realloc that returns a block counts, as in DHAT).
    pub allocs: u64,
    /// Blocks released.
    pub frees: u64,
    /// Reallocations.
    pub reallocs: u64,
    /// Requested bytes.
    pub bytes: u64,
    /// Sum of each image's peak live bytes.
    pub peak: u64,
    /// How far `peak` may be from the sum of the images' true peaks, in bytes (0: exact;
    /// see `SlotValues::peak_bound`).
    pub peak_bound: u64,
    /// The part of `peak_bound` that ended threads changed after a thread had gone solo
    /// again (`Slot::unseen`).
    pub unseen: u64,
    /// Sum of each image's live bytes when it ended (exit, `_exit`, exec or kill).
    pub live_at_exit: u64,
    /// Process images that reported.
    pub images: u64,
    /// Distinct process ids among them.
    pub processes: u64,
    /// Peak of the sum of live bytes over the images alive at once (see
    /// `sbs_agent_abi::tree`).
    pub tree_peak: u64,
    /// How far `tree_peak` may be from the true simultaneous peak, in bytes (0: exact):
    /// the images' own bounds, less than a granule per other image in the tree, and the
    /// bytes of images that ended without leaving the tree.
    pub tree_bound: u64,
    /// Images that ended without leaving the tree (killed, or exec'd a program without
    /// the agent): their last bytes stayed in the total.
    pub stranded: u64,
}

impl ReportFile {
    /// A fresh report file with a random token.
    pub fn new() -> Result<Self, AgentError> {
        let what = "the report file";
        let file = memfd(c"sbs-alloc-report", what, MemFdCreateFlag::MFD_CLOEXEC)?;
        let err = |source: io::Error| AgentError::Memfd { what, source };
        file.set_len(REPORT_SIZE as u64).map_err(err)?;
        let token = random_token();
        file.write_all_at(&HeaderValues::new(token).to_bytes(), 0)
            .map_err(err)?;
        Ok(ReportFile { file, token })
    }

    /// A descriptor of the report file for one child (the harness path).
    pub fn child_fd(&self) -> io::Result<OwnedFd> {
        Ok(self.file.try_clone()?.into())
    }

    /// A copy of the agent library that finds this report file (see [`super::preload`]).
    pub fn agent_library(&self) -> Result<StampedLibrary, AgentError> {
        StampedLibrary::new(c"sbs-alloc-agent", AGENT_LIBRARY, &self.file, self.token).map_err(
            |source| AgentError::Memfd {
                what: "the agent library",
                source,
            },
        )
    }

    /// The env vars that announce the report file, passed at [`REPORT_FD`], to the
    /// harness (`--alloc-harness`). The agent needs none: its library is stamped.
    pub fn harness_env(&self) -> Vec<(OsString, OsString)> {
        vec![
            (ENV_HARNESS_FD.into(), REPORT_FD.to_string().into()),
            (
                ENV_HARNESS_TOKEN.into(),
                format!("{:016x}", self.token).into(),
            ),
        ]
    }

    /// Read every claimed slot.
    pub fn read(&self) -> Result<Reports, AgentError> {
        let mut head = [0u8; HEADER_SIZE];
        self.file
            .read_exact_at(&mut head, 0)
            .map_err(AgentError::Read)?;
        let header = HeaderValues::from_bytes(&head).ok_or(AgentError::Damaged)?;
        if !header.matches(self.token) {
            return Err(AgentError::Damaged);
        }
        let claimed = usize::try_from(header.claims)
            .unwrap_or(usize::MAX)
            .min(SLOT_COUNT);
        let mut raw = vec![0u8; claimed * SLOT_SIZE];
        self.file
            .read_exact_at(&mut raw, slot_offset(0) as u64)
            .map_err(AgentError::Read)?;
        let images = raw
            .chunks_exact(SLOT_SIZE)
            .filter_map(SlotValues::from_bytes)
            .filter(|s| s.origin().is_some())
            .collect();
        Ok(Reports {
            images,
            unreported: header.claims.saturating_sub(SLOT_COUNT as u64),
            tree: header.tree,
        })
    }
}

pub(crate) fn random_token() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    RandomState::new().hash_one((std::process::id(), nanos))
}

impl Reports {
    /// Sum over the images. Counts of a forked child start at the fork, so they add up
    /// without double counting; its live and peak bytes include the heap it inherited.
    pub fn totals(&self) -> Totals {
        let mut t = Totals::default();
        let mut pids: Vec<u64> = self.images.iter().map(|s| s.pid).collect();
        pids.sort_unstable();
        pids.dedup();
        t.processes = pids.len() as u64;
        t.images = self.images.len() as u64;
        for s in &self.images {
            t.allocs += s.allocs;
            t.frees += s.frees;
            t.reallocs += s.reallocs;
            t.bytes += s.bytes;
            t.peak += clamp(s.peak);
            t.peak_bound += s.peak_bound();
            t.unseen += s.unseen;
            t.live_at_exit += clamp(s.live);
        }
        self.tree_totals(&mut t);
        t
    }

    /// The tree's peak and its bound. Every image's own peak is a lower bound of the
    /// tree's: that image alone held that much, at a moment when the others held zero or
    /// more. The agent's total can be below it: an image in the tree keeps less than a
    /// granule of change to itself (children that each held 100 bytes left the total at
    /// 0), and an image that never joined the tree adds its own peak only when it ends
    /// (not when killed). So the figure is never below the largest own peak.
    fn tree_totals(&self, t: &mut Totals) {
        let mut stranded_bytes = 0u64;
        t.tree_peak = clamp(self.tree.peak);
        for s in &self.images {
            t.tree_peak = t.tree_peak.max(clamp(s.peak));
            if tree::in_tree(s.tree) {
                t.stranded += 1;
                stranded_bytes += clamp(s.tree);
            }
        }
        t.tree_bound =
            t.peak_bound + self.tree.max_active.saturating_sub(1) * GRANULE + stranded_bytes;
    }

    /// Allocations by role: the main program, forked children, exec'd programs.
    pub fn by_role(&self, main_pid: u64) -> Vec<(String, f64)> {
        let mut main = 0;
        let mut forked = 0;
        let mut execd = 0;
        let mut seen_main = false;
        for s in &self.images {
            match s.origin() {
                Some(Origin::Load) if s.pid == main_pid && !seen_main => {
                    seen_main = true;
                    main += s.allocs;
                }
                Some(Origin::Fork) => forked += s.allocs,
                _ => execd += s.allocs,
            }
        }
        vec![
            ("main process".into(), main as f64),
            ("forked children".into(), forked as f64),
            ("exec'd programs".into(), execd as f64),
        ]
    }
}

/// What the report says when threads allocated concurrently; `unseen`: bytes of the
/// bound that ended threads changed once another thread counted alone again.
fn peak_bound_note(bound: u64, unseen: u64) -> String {
    let mut note = format!(
        "heap.peak exact to \u{b1}{bound} bytes: threads allocated concurrently, and each keeps less than {GRANULE} bytes of change to itself while others run (exact when one thread allocates at a time; see docs/alloc.md)"
    );
    if unseen > 0 {
        note.push_str(&format!(
            "; {unseen} bytes of it were allocated or freed by threads after their end was counted (destructors that ran late), while the thread left counted alone"
        ));
    }
    note
}

/// What the report says when the tree's peak is not exact.
fn tree_bound_note(bound: u64, stranded: u64) -> String {
    let mut note = format!(
        "heap.tree_peak exact to \u{b1}{bound} bytes: processes of the tree were alive at once, and each keeps less than {GRANULE} bytes of change to itself while others are (see docs/alloc.md)"
    );
    if stranded > 0 {
        note.push_str(&format!(
            "; {stranded} process image(s) ended without leaving the tree (killed by a signal, or exec'd a program without the agent), so their last bytes stayed counted after their end: the figure may be high by that much, which the bound includes"
        ));
    }
    note
}

/// Live and peak are stored wrapping and read signed (see the agent's `counters`).
fn clamp(v: u64) -> u64 {
    (v as i64).max(0) as u64
}

const STATIC_ADVICE: &str = "Link it dynamically (the default for Rust and C on glibc), or \
for a Rust program wrap its global allocator in sbs_harness::CountingAlloc and add --alloc-harness.";

/// Check that `program` can load the agent. Returns warnings for what may make the counts
/// incomplete (a private allocator), and an error where the agent cannot work at all.
pub fn preflight(program: &Path) -> Result<Vec<String>, AgentError> {
    let inspect = |source| AgentError::Inspect {
        path: program.to_path_buf(),
        source,
    };
    let meta = std::fs::metadata(program).map_err(inspect)?;
    let (euid, egid) = (
        nix::unistd::geteuid().as_raw(),
        nix::unistd::getegid().as_raw(),
    );
    // The loader's secure mode (which drops LD_PRELOAD) starts when the ids change.
    let secure = (meta.mode() & 0o4000 != 0 && meta.uid() != euid)
        || (meta.mode() & 0o2000 != 0 && meta.gid() != egid);
    if secure {
        return Err(AgentError::Unsupported {
            path: program.to_path_buf(),
            reason:
                "it is setuid/setgid, and the dynamic loader ignores LD_PRELOAD for such programs"
                    .into(),
            advice: "Measure a copy without the setuid bit.",
        });
    }
    // Read only what the checks need (the headers, the symbol tables), not the whole
    // program: a release build with debug info is tens of megabytes, and reading it all
    // cost 50 ms before the first run.
    let data = object::ReadCache::new(std::fs::File::open(program).map_err(inspect)?);
    if object::ReadRef::read_bytes_at(&data, 0, 4) != Ok(&b"\x7fELF"[..]) {
        // A script: its interpreter gets the agent.
        return Ok(Vec::new());
    }
    if let Some(reason) = foreign_elf(&data) {
        return Err(AgentError::Unsupported {
            path: program.to_path_buf(),
            reason,
            advice: "Build it as a 64-bit program for this machine to count its allocations.",
        });
    }
    if !has_interpreter(&data) {
        return Err(AgentError::Unsupported {
            path: program.to_path_buf(),
            reason: "it is statically linked (no dynamic loader)".into(),
            advice: STATIC_ADVICE,
        });
    }
    Ok(allocator_warnings(program, &data))
}

/// Why the agent, a 64-bit library for this machine, can never load into the ELF file
/// `data` (a 32-bit program, one built for another architecture), if it cannot. Such a
/// program runs without it (a 32-bit loader skips a 64-bit library; a static one has no
/// loader), so the runs would be made and then report nothing.
fn foreign_elf<'data, R: object::ReadRef<'data>>(data: R) -> Option<String> {
    let ident = object::ReadRef::read_bytes_at(data, 0, 20).ok()?;
    let class = ident[4];
    if class == object::elf::ELFCLASS32 {
        return Some(
            "it is a 32-bit program, and the allocation agent is a 64-bit library".to_string(),
        );
    }
    let machine = match ident[5] {
        object::elf::ELFDATA2LSB => u16::from_le_bytes([ident[18], ident[19]]),
        _ => u16::from_be_bytes([ident[18], ident[19]]),
    };
    let native = if cfg!(target_arch = "aarch64") {
        object::elf::EM_AARCH64
    } else {
        object::elf::EM_X86_64
    };
    (class == object::elf::ELFCLASS64 && machine != native).then(|| {
        format!(
            "it is built for another architecture (ELF machine {machine}), and the allocation \
             agent is a library for this one"
        )
    })
}

fn has_interpreter<'data, R: object::ReadRef<'data>>(data: R) -> bool {
    use object::read::elf::{FileHeader, ProgramHeader};
    let Ok(header) = object::elf::FileHeader64::<object::Endianness>::parse(data) else {
        // Not a 64-bit ELF: let the loader decide.
        return true;
    };
    let Ok(endian) = header.endian() else {
        return true;
    };
    match header.program_headers(endian, data) {
        Ok(phdrs) => phdrs
            .iter()
            .any(|ph| ph.p_type(endian) == object::elf::PT_INTERP),
        Err(_) => true,
    }
}

/// Symbols of allocators that bypass malloc, and the name users know them by.
const PRIVATE_ALLOCATORS: &[(&str, &str)] = &[
    ("_rjem_malloc", "jemalloc (tikv-jemallocator)"),
    ("je_malloc", "jemalloc"),
    ("mi_malloc", "mimalloc"),
    ("tc_malloc", "tcmalloc"),
    ("rpmalloc", "rpmalloc"),
    ("sn_rust_alloc", "snmalloc"),
];

/// The names among `wanted` that a symbol table of `data` (an ELF64 file) defines:
/// `.dynsym` alone when `dynamic`, else `.symtab` and `.dynsym`. Reads those sections and
/// their string tables, nothing else: a name at a time through the cache would be a read
/// per symbol.
fn defined<'data, R: object::ReadRef<'data>>(
    data: R,
    wanted: &[&'static str],
    dynamic: bool,
) -> Vec<&'static str> {
    use object::read::elf::{FileHeader, SectionHeader, Sym};
    let Ok(header) = object::elf::FileHeader64::<object::Endianness>::parse(data) else {
        return Vec::new();
    };
    let Ok(endian) = header.endian() else {
        return Vec::new();
    };
    let Ok(sections) = header.sections(endian, data) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for section in sections.iter() {
        let kind = section.sh_type(endian);
        if kind != object::elf::SHT_DYNSYM && (dynamic || kind != object::elf::SHT_SYMTAB) {
            continue;
        }
        let strings = sections
            .section(object::SectionIndex(section.sh_link(endian) as usize))
            .ok()
            .and_then(|s| s.data(endian, data).ok());
        let symbols = section
            .data_as_array::<object::elf::Sym64<object::Endianness>, R>(endian, data)
            .ok();
        let (Some(strings), Some(symbols)) = (strings, symbols) else {
            continue;
        };
        for sym in symbols.iter().filter(|s| !s.is_undefined(endian)) {
            let Some(name) = strings
                .get(sym.st_name(endian) as usize..)
                .and_then(|rest| rest.split(|&b| b == 0).next())
            else {
                continue;
            };
            if let Some(w) = wanted.iter().find(|w| w.as_bytes() == name) {
                if !found.contains(w) {
                    found.push(*w);
                }
            }
        }
    }
    found
}

fn allocator_warnings<'data, R: object::ReadRef<'data>>(program: &Path, data: R) -> Vec<String> {
    let mut warnings = Vec::new();
    let exports_malloc = !defined(data, &["malloc"], true).is_empty();
    if exports_malloc {
        warnings.push(format!(
            "{} defines its own malloc, which takes precedence over the agent's: allocation counts cover only what reaches the agent (shared libraries' calls)",
            program.display()
        ));
    }
    let names: Vec<&str> = PRIVATE_ALLOCATORS.iter().map(|(sym, _)| *sym).collect();
    let defined = defined(data, &names, false);
    let found: Vec<&str> = PRIVATE_ALLOCATORS
        .iter()
        .filter(|(sym, _)| defined.contains(sym))
        .map(|(_, name)| *name)
        .collect();
    if !found.is_empty() {
        warnings.push(format!(
            "{} contains {}, which does not go through malloc: the agent counts only the allocations that do; for a Rust global allocator wrap it in sbs_harness::CountingAlloc and add --alloc-harness",
            program.display(),
            found.join(", ")
        ));
    }
    warnings
}

/// On the harness path the child gets the report file at descriptor [`REPORT_FD`]: make
/// sure it may have it. A soft `RLIMIT_NOFILE` at or below that is raised (the child
/// inherits ours); a hard limit that low is an error with the command that fixes it.
fn ensure_fd_limit() -> anyhow::Result<()> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let needed = (REPORT_FD + 1) as u64;
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).context("cannot read RLIMIT_NOFILE")?;
    if soft >= needed {
        return Ok(());
    }
    if hard < needed {
        anyhow::bail!(
            "--alloc-harness needs descriptor number {} in the child, but the hard limit on open files is {hard}; raise it (e.g. `ulimit -Hn 4096` as root) and try again",
            needed - 1
        );
    }
    setrlimit(Resource::RLIMIT_NOFILE, needed.max(soft), hard)
        .context("cannot raise RLIMIT_NOFILE for the harness's report descriptor")?;
    Ok(())
}

/// The families of the allocation metrics `metrics` asks for.
pub fn families(metrics: AllocMetrics) -> Vec<Family> {
    match metrics {
        AllocMetrics::All => vec![Family::Alloc, Family::Heap],
        AllocMetrics::HeapPeak => vec![Family::Heap],
    }
}

/// The ids of the allocation metrics `metrics` asks for (all of them, also those only
/// some runs report).
pub fn metric_ids(metrics: AllocMetrics) -> &'static [&'static str] {
    match metrics {
        AllocMetrics::All => &[
            "alloc.count",
            "alloc.bytes",
            "alloc.frees",
            "alloc.reallocs",
            "heap.peak",
            "heap.tree_peak",
            "heap.live_at_exit",
            "alloc.processes",
            "alloc.unmeasured_images",
        ],
        AllocMetrics::HeapPeak => &["heap.peak", "heap.tree_peak"],
    }
}

/// Which metrics the instrument reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllocMetrics {
    /// `--alloc`: counts, bytes, peak, live at exit, processes.
    All,
    /// `--memory`: only `heap.peak`.
    HeapPeak,
}

/// Who counts inside the child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllocPath {
    /// The preloaded agent (`LD_PRELOAD`): any dynamically linked program using malloc.
    Agent,
    /// The program's own `sbs_harness::CountingAlloc` global allocator
    /// (`--alloc-harness`): Rust programs with a custom allocator, static binaries.
    Harness,
}

impl AllocPath {
    /// The metrics' source.
    pub fn source(self) -> &'static str {
        match self {
            AllocPath::Agent => "agent",
            AllocPath::Harness => "harness",
        }
    }
}

/// The allocation agent (or the in-process harness) as an instrument.
#[derive(Debug)]
pub struct AllocAgent {
    metrics: AllocMetrics,
    path: AllocPath,
    /// The child's own `LD_PRELOAD`, kept after the agent.
    existing_preload: Option<OsString>,
    report: Option<ReportFile>,
    /// This run's copy of the agent library (agent path), kept open until the run is read:
    /// the child and its descendants load it through our descriptor.
    library: Option<StampedLibrary>,
    program: PathBuf,
    notes: Vec<String>,
    runs_without_allocs: usize,
    runs: usize,
    unreported: u64,
    max_images: u64,
    /// Largest `Totals::peak_bound` of a run, and the largest `Totals::unseen`.
    max_peak_bound: u64,
    max_unseen: u64,
    /// Most images per run that ended without leaving the process tree, and the widest
    /// tree bound.
    max_stranded: u64,
    max_tree_bound: u64,
    execs: ExecCheck,
}

/// What the agent holds about one run in flight ([`Instrument::park`]).
struct AllocRun {
    report: Option<ReportFile>,
    library: Option<StampedLibrary>,
    watch: Option<ExecWatch>,
}

/// Whether every exec'd program of a run reported: the kernel's count of execs against the
/// images that claimed a slot. Agent path only (on the harness path only programs that
/// carry the harness report, so an exec without a report is normal there).
#[derive(Debug, Default)]
struct ExecCheck {
    /// This run's watch, opened when the child waits at its start latch.
    watch: Option<ExecWatch>,
    /// Runs whose watch could not be opened, and the first reason.
    unchecked: usize,
    reason: Option<String>,
    /// Runs checked.
    runs: usize,
    /// Runs in which a ring may have dropped records (the count is a lower bound).
    saturated: usize,
    /// Runs with exec'd images that did not report, and the fewest and most per run.
    missing_runs: usize,
    missing_min: u64,
    missing_max: u64,
}

/// What the exec check found in one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Unmeasured {
    /// Exec'd images that did not report.
    missing: u64,
    /// Whether the check saw every exec: false when the kernel's records overflowed, and
    /// `missing` is then a lower bound.
    complete: bool,
}

/// Exec'd images of a run that did not report: execs the kernel saw, less the images that
/// loaded the agent at start (the benchmark and every exec'd program that kept it). Images
/// that found no free slot are subtracted too: they did load the agent (and are reported
/// by a warning of their own).
pub fn unmeasured_images(seen: &ExecCount, reports: &Reports) -> u64 {
    let loaded = reports
        .images
        .iter()
        .filter(|s| s.origin() == Some(Origin::Load))
        .count() as u64;
    seen.execs
        .saturating_sub(loaded.saturating_add(reports.unreported))
}

impl ExecCheck {
    fn attach(&mut self, pid: Pid) {
        match ExecWatch::open(pid.as_raw()) {
            Ok(watch) => self.watch = Some(watch),
            Err(e) => {
                self.unchecked += 1;
                self.reason
                    .get_or_insert_with(|| format!("{e}; {}", e.fix()));
            }
        }
    }

    /// This run's unmeasured images, if its watch was open.
    fn collect(&mut self, reports: &Reports) -> Option<Unmeasured> {
        let seen = self.watch.take()?.count();
        self.runs += 1;
        if seen.saturated {
            self.saturated += 1;
        }
        let complete = !seen.saturated;
        let missing = unmeasured_images(&seen, reports);
        if missing > 0 {
            self.missing_min = if self.missing_runs == 0 {
                missing
            } else {
                self.missing_min.min(missing)
            };
            self.missing_max = self.missing_max.max(missing);
            self.missing_runs += 1;
        }
        Some(Unmeasured { missing, complete })
    }

    /// `metric`: whether the report has `alloc.unmeasured_images` (not for `--memory`'s
    /// heap runs).
    fn warnings(&self, metric: bool) -> Vec<String> {
        let mut w = Vec::new();
        let all = self.runs + self.unchecked;
        let (counted, bound) = if metric {
            (
                " (alloc.unmeasured_images counts such programs)",
                ": the alloc.* and heap.* amounts of those runs are lower bounds, not exact, \
                 and so is alloc.unmeasured_images",
            )
        } else {
            ("", ": the heap.* values of those runs are not exact")
        };
        if self.missing_runs > 0 {
            let (count, was, they, their) = match (self.missing_min, self.missing_max) {
                (1, 1) => ("1 exec'd program".to_string(), "was", "it", "its"),
                (a, b) if a == b => (format!("{a} exec'd programs"), "were", "they", "their"),
                (a, b) => (
                    format!("{a} to {b} exec'd programs"),
                    "were",
                    "they",
                    "their",
                ),
            };
            w.push(format!(
                "{count} per run {was} not measured (in {} of {all} runs): {they} did not \
                 report to the allocation agent, so {their} allocations are missing from the \
                 alloc.* and heap.* metrics (lower bounds in those runs, not exact){counted}; likely causes: LD_PRELOAD replaced or \
                 cleared, a statically linked or setuid program, a program run as another \
                 user than sbs-profile or in a pid namespace with a /proc of its own (it \
                 cannot open the report file, which it reaches through /proc/<sbs-profile's \
                 pid>/fd); \
                 keep LD_PRELOAD for the children, link them dynamically, or profile the \
                 child program on its own",
                self.missing_runs
            ));
        }
        if self.saturated > 0 {
            w.push(format!(
                "in {} of {all} runs the kernel's exec records overflowed (more processes or \
                 threads started than the records could hold while they were read), so the \
                 check for exec'd programs without the allocation agent could not complete \
                 there{bound}",
                self.saturated
            ));
        }
        if let Some(reason) = &self.reason {
            let runs = if self.unchecked == all {
                String::new()
            } else {
                format!(" in {} of {all} runs", self.unchecked)
            };
            w.push(format!(
                "exec'd programs that ran without the allocation agent (LD_PRELOAD cleared, \
                 static or setuid programs, programs run as another user) could not be \
                 detected{runs}, \
                 so allocations missing from the counts would go unnoticed: {reason}"
            ));
        }
        w
    }
}

impl AllocAgent {
    /// Check `program` (static, setuid, private allocators) and prepare the library.
    /// `base_env` is the child's environment (an existing `LD_PRELOAD` is kept, after ours).
    /// On the harness path nothing is preloaded and nothing checked: the program reports
    /// itself.
    pub fn new(
        metrics: AllocMetrics,
        path: AllocPath,
        program: &Path,
        base_env: &[(OsString, OsString)],
    ) -> anyhow::Result<Self> {
        let notes = match path {
            AllocPath::Agent => preflight(program)?,
            AllocPath::Harness => {
                ensure_fd_limit()?;
                Vec::new()
            }
        };
        let existing_preload = base_env
            .iter()
            .find(|(k, _)| k == OsStr::new("LD_PRELOAD"))
            .map(|(_, v)| v.clone());
        Ok(AllocAgent {
            metrics,
            path,
            existing_preload,
            report: None,
            library: None,
            program: program.to_path_buf(),
            notes,
            runs_without_allocs: 0,
            runs: 0,
            unreported: 0,
            max_images: 0,
            max_peak_bound: 0,
            max_unseen: 0,
            max_stranded: 0,
            max_tree_bound: 0,
            execs: ExecCheck::default(),
        })
    }

    fn samples(
        &self,
        reports: &Reports,
        unmeasured: Option<Unmeasured>,
        outcome: &RunOutcome,
        out: &mut Vec<Sample>,
    ) {
        let t = reports.totals();
        let source = self.path.source();
        // A program exec'd without the agent allocated uncounted: the amounts are lower
        // bounds then, not exact (the count of images that reported stays exact). So
        // they are where the check could not complete (its records overflowed): such a
        // program may have gone unseen, and the count of unmeasured images is a lower
        // bound.
        let complete = unmeasured.is_none_or(|u| u.complete);
        let whole = unmeasured.is_none_or(|u| u.missing == 0) && complete;
        let m = |id: &str, unit| MetricSpec::new(id, unit, source, whole);
        let images = |id: &str| MetricSpec::new(id, Unit::Count, source, true);
        // Within the stated bound, not exact, when threads allocated at once.
        let peak = Sample::new(
            MetricSpec::new("heap.peak", Unit::Bytes, source, whole && t.peak_bound == 0)
                .with_bound((t.peak_bound > 0).then_some(t.peak_bound as f64)),
            t.peak as f64,
        );
        // Only for a tree: for one image it is heap.peak.
        let tree_peak = (t.images > 1).then(|| {
            Sample::new(
                MetricSpec::new(
                    "heap.tree_peak",
                    Unit::Bytes,
                    source,
                    whole && t.tree_bound == 0,
                )
                .with_bound((t.tree_bound > 0).then_some(t.tree_bound as f64)),
                t.tree_peak as f64,
            )
        });
        if self.metrics == AllocMetrics::HeapPeak {
            out.push(peak);
            out.extend(tree_peak);
            return;
        }
        let mut count = Sample::new(m("alloc.count", Unit::Count), t.allocs as f64);
        if t.images > 1 {
            count.details = reports.by_role(outcome.pid.as_raw() as u64);
        }
        out.push(count);
        out.push(Sample::new(m("alloc.bytes", Unit::Bytes), t.bytes as f64));
        out.push(Sample::new(m("alloc.frees", Unit::Count), t.frees as f64));
        out.push(Sample::new(
            m("alloc.reallocs", Unit::Count),
            t.reallocs as f64,
        ));
        out.push(peak);
        out.extend(tree_peak);
        out.push(Sample::new(
            m("heap.live_at_exit", Unit::Bytes),
            t.live_at_exit as f64,
        ));
        out.push(Sample::new(images("alloc.processes"), t.images as f64));
        if let Some(u) = unmeasured {
            out.push(Sample::new(
                MetricSpec::new("alloc.unmeasured_images", Unit::Count, source, complete),
                u.missing as f64,
            ));
        }
    }
}

impl Instrument for AllocAgent {
    fn name(&self) -> &str {
        "alloc-agent"
    }

    fn needs_start_latch(&self) -> bool {
        // Env and descriptors are set up before fork; on the agent path the exec watch
        // attaches to the child before it execs, so that its own exec counts.
        self.path == AllocPath::Agent
    }

    fn attach(&mut self, pid: Pid) -> anyhow::Result<()> {
        if self.path == AllocPath::Agent {
            // A watch that cannot be opened is a warning, not a failed run.
            self.execs.attach(pid);
        }
        Ok(())
    }

    fn prepare(&mut self, setup: &mut ChildSetup) -> anyhow::Result<()> {
        let report = ReportFile::new()?;
        match self.path {
            AllocPath::Agent => {
                let library = report.agent_library()?;
                setup.env.push((
                    "LD_PRELOAD".into(),
                    library.ld_preload(self.existing_preload.as_deref()),
                ));
                self.library = Some(library);
            }
            AllocPath::Harness => {
                setup.pass_fds.push((
                    report
                        .child_fd()
                        .context("cannot pass the report file to the child")?,
                    REPORT_FD,
                ));
                setup.env.extend(report.harness_env());
            }
        }
        self.report = Some(report);
        Ok(())
    }

    fn collect(&mut self, outcome: &RunOutcome, out: &mut Vec<Sample>) -> anyhow::Result<()> {
        let report = self
            .report
            .take()
            .context("internal error: collect without prepare")?;
        self.library = None;
        let reports = report.read();
        // Consumed even when the report is unreadable, so no watch outlives its run.
        let unmeasured = match &reports {
            Ok(reports) => self.execs.collect(reports),
            Err(_) => {
                self.execs.watch = None;
                None
            }
        };
        let reports = reports?;
        if reports.images.is_empty() && self.path == AllocPath::Harness {
            anyhow::bail!(
                "{} did not report its allocations: with --alloc-harness the program must use \
                 sbs_harness::CountingAlloc as its #[global_allocator] (see docs/alloc.md)",
                self.program.display()
            );
        }
        if reports.images.is_empty() {
            anyhow::bail!(
                "the allocation agent did not report from {}: it was not loaded (is the program \
                 statically linked or setuid, does it clear LD_PRELOAD, or does it run as another \
                 user than sbs-profile?); zeros would be wrong, so no numbers are given",
                self.program.display()
            );
        }
        let totals = reports.totals();
        self.runs += 1;
        if totals.allocs == 0 {
            self.runs_without_allocs += 1;
        }
        self.unreported += reports.unreported;
        self.max_images = self.max_images.max(totals.images);
        self.max_peak_bound = self.max_peak_bound.max(totals.peak_bound);
        self.max_unseen = self.max_unseen.max(totals.unseen);
        if totals.images > 1 {
            self.max_stranded = self.max_stranded.max(totals.stranded);
            self.max_tree_bound = self.max_tree_bound.max(totals.tree_bound);
        }
        self.samples(&reports, unmeasured, outcome, out);
        Ok(())
    }

    fn abort_run(&mut self) {
        self.report = None;
        self.library = None;
        self.execs.watch = None;
    }

    fn finish(&mut self) {
        self.execs.watch = None;
    }

    fn overlaps(&self) -> bool {
        true
    }

    fn park(&mut self) -> InFlight {
        InFlight::new(AllocRun {
            report: self.report.take(),
            library: self.library.take(),
            watch: self.execs.watch.take(),
        })
    }

    fn resume(&mut self, run: InFlight) {
        if let Some(run) = run.take::<AllocRun>() {
            self.report = run.report;
            self.library = run.library;
            self.execs.watch = run.watch;
        }
    }

    fn warnings(&self) -> Vec<String> {
        let mut w = self.notes.clone();
        if self.path == AllocPath::Harness {
            w.push(
                "allocations counted in-process by sbs_harness::CountingAlloc (source harness): \
                 only what goes through the Rust global allocator"
                    .into(),
            );
        } else if self.runs > 0 && self.runs_without_allocs == self.runs {
            w.push(format!(
                "the allocation agent loaded into {} but saw no allocation through malloc: the program allocates nothing or uses its own allocator",
                self.program.display()
            ));
        }
        if self.unreported > 0 {
            w.push(format!(
                "{} process images found no free report slot (limit {SLOT_COUNT} per run) and are not counted",
                self.unreported
            ));
        }
        if self.max_peak_bound > 0 {
            w.push(peak_bound_note(self.max_peak_bound, self.max_unseen));
        }
        if self.max_images > 1 && self.metrics == AllocMetrics::All {
            w.push(format!(
                "allocations are summed over up to {} process images per run (forked children and exec'd programs); heap.peak is the sum of their own peaks, an upper bound of the tree's simultaneous peak, which is heap.tree_peak",
                self.max_images
            ));
        }
        if self.max_tree_bound > 0 {
            w.push(tree_bound_note(self.max_tree_bound, self.max_stranded));
        }
        w.extend(self.execs.warnings(self.metrics == AllocMetrics::All));
        w
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run whose exec check could not complete (its records overflowed) may hide a
    /// program that ran without the agent: its amounts and its count of unmeasured images
    /// are lower bounds, not exact; a complete check that found none leaves them exact.
    #[test]
    fn a_check_that_could_not_complete_leaves_no_amount_exact() {
        // Made on the harness path (no program to read), then taken for the agent's.
        let mut agent = AllocAgent::new(
            AllocMetrics::All,
            AllocPath::Harness,
            Path::new("/nonexistent/program"),
            &[],
        )
        .unwrap();
        agent.path = AllocPath::Agent;
        let reports = Reports {
            images: vec![SlotValues {
                origin: Origin::Load.code(),
                allocs: 10,
                ..SlotValues::default()
            }],
            unreported: 0,
            tree: TreeValues::default(),
        };
        let outcome = RunOutcome {
            pid: Pid::from_raw(1),
            wall: std::time::Duration::from_millis(1),
            user: std::time::Duration::ZERO,
            sys: std::time::Duration::ZERO,
            max_rss: 0,
            exit: crate::run::instrument::ExitKind::Code(0),
            survivors: Vec::new(),
        };
        let exact = |complete: bool| {
            let mut out = Vec::new();
            let seen = Unmeasured {
                missing: 0,
                complete,
            };
            agent.samples(&reports, Some(seen), &outcome, &mut out);
            out.into_iter()
                .map(|s| (s.metric.id, s.metric.exact))
                .collect::<Vec<_>>()
        };
        for (id, exact) in exact(false) {
            assert_eq!(exact, id == "alloc.processes", "{id}");
        }
        assert!(exact(true).iter().all(|(_, exact)| *exact));
    }

    #[test]
    fn the_peak_note_says_which_part_of_the_bound_ended_threads_changed() {
        let img = |max_active: u64, unseen: u64| SlotValues {
            origin: Origin::Load.code(),
            max_active,
            granule: GRANULE,
            unseen,
            ..SlotValues::default()
        };
        let r = Reports {
            images: vec![img(3, 700)],
            unreported: 0,
            tree: TreeValues::default(),
        };
        let t = r.totals();
        assert_eq!((t.peak_bound, t.unseen), (2 * GRANULE + 700, 700));
        let note = peak_bound_note(t.peak_bound, t.unseen);
        assert!(
            note.contains(&format!("\u{b1}{} bytes", 2 * GRANULE + 700)),
            "{note}"
        );
        assert!(note.contains("; 700 bytes of it"), "{note}");
        assert!(!peak_bound_note(GRANULE, 0).contains("bytes of it"));
    }

    #[test]
    fn embedded_agent_is_a_shared_library_without_tls() {
        use object::read::elf::{FileHeader, ProgramHeader};
        let header = object::elf::FileHeader64::<object::Endianness>::parse(AGENT_LIBRARY).unwrap();
        let endian = header.endian().unwrap();
        assert_eq!(header.e_type(endian), object::elf::ET_DYN);
        let phdrs = header.program_headers(endian, AGENT_LIBRARY).unwrap();
        assert!(
            phdrs
                .iter()
                .all(|p| p.p_type(endian) != object::elf::PT_TLS),
            "a TLS segment would change every thread's allocations"
        );
        use object::{Object, ObjectSymbol};
        let file = object::File::parse(AGENT_LIBRARY).unwrap();
        for name in [
            "malloc",
            "calloc",
            "realloc",
            "reallocarray",
            "free",
            "posix_memalign",
            "aligned_alloc",
            "memalign",
            "valloc",
            "pvalloc",
            "malloc_usable_size",
        ] {
            assert!(
                file.dynamic_symbols()
                    .any(|s| s.is_definition() && s.name() == Ok(name)),
                "agent does not export {name}"
            );
        }
    }

    #[test]
    fn a_fresh_report_file_reads_empty_and_rejects_damage() {
        let report = ReportFile::new().unwrap();
        assert_eq!(report.read().unwrap(), Reports::default());
        report.file.write_all_at(&[0u8; 8], 0).unwrap();
        assert!(matches!(report.read(), Err(AgentError::Damaged)));
    }

    #[test]
    fn totals_sum_images_and_count_processes() {
        let img = |origin: Origin, pid, allocs, peak: i64, live: i64| SlotValues {
            origin: origin.code(),
            pid,
            allocs,
            frees: allocs / 2,
            bytes: allocs * 10,
            peak: peak as u64,
            live: live as u64,
            ..SlotValues::default()
        };
        let r = Reports {
            images: vec![
                img(Origin::Load, 10, 5, 100, 20),
                img(Origin::Fork, 11, 3, 50, -8), // dipped below its snapshot
                img(Origin::Load, 11, 2, 30, 0),  // the fork child exec'd
            ],
            unreported: 0,
            tree: TreeValues::default(),
        };
        let t = r.totals();
        assert_eq!((t.allocs, t.bytes, t.frees), (10, 100, 2 + 1 + 1));
        assert_eq!(t.peak, 180);
        assert_eq!(t.live_at_exit, 20);
        assert_eq!((t.images, t.processes), (3, 2));
        let roles = r.by_role(10);
        assert_eq!(roles[0].1, 5.0);
        assert_eq!(roles[1].1, 3.0);
        assert_eq!(roles[2].1, 2.0);
    }

    #[test]
    fn the_tree_peak_takes_lone_images_and_bounds_stranded_ones() {
        let img = |tree: u64, peak: u64, max_active: u64| SlotValues {
            origin: Origin::Load.code(),
            tree,
            peak,
            max_active,
            granule: GRANULE,
            ..SlotValues::default()
        };
        // An exec chain: each image alone in turn, the last one killed before it could
        // add its peak to the header's.
        let chain = Reports {
            images: vec![img(tree::LEFT, 500, 1), img(tree::OUT, 900, 1)],
            unreported: 0,
            tree: TreeValues {
                peak: 500,
                ..TreeValues::default()
            },
        };
        let t = chain.totals();
        assert_eq!((t.tree_peak, t.tree_bound, t.stranded), (900, 0, 0));
        // A tree of three with one image killed while it held 4000 published bytes, and
        // one image whose two threads ran at once.
        let tree = Reports {
            images: vec![
                img(tree::LEFT, 100, 2),
                img(4000, 4000, 1),
                img(tree::LEFT, 10, 1),
            ],
            unreported: 0,
            tree: TreeValues {
                live: 4000,
                peak: 7000,
                max_active: 3,
            },
        };
        let t = tree.totals();
        assert_eq!((t.tree_peak, t.stranded), (7000, 1));
        assert_eq!(t.tree_bound, GRANULE + 2 * GRANULE + 4000);
    }

    #[test]
    fn every_exec_without_a_loaded_slot_is_unmeasured() {
        let img = |origin: Origin, pid| SlotValues {
            origin: origin.code(),
            pid,
            ..SlotValues::default()
        };
        let seen = |execs| ExecCount {
            execs,
            ..ExecCount::default()
        };
        // The benchmark, a forked child, and the child's exec'd program.
        let mut r = Reports {
            images: vec![
                img(Origin::Load, 10),
                img(Origin::Fork, 11),
                img(Origin::Load, 11),
            ],
            unreported: 0,
            tree: TreeValues::default(),
        };
        assert_eq!(unmeasured_images(&seen(2), &r), 0);
        // A third exec left no slot; forks are no execs and never make up for one.
        assert_eq!(unmeasured_images(&seen(3), &r), 1);
        // An image that loaded the agent but found no free slot is not unmeasured here.
        r.unreported = 1;
        assert_eq!(unmeasured_images(&seen(3), &r), 0);
        // More slots than execs (a ring that dropped records) is no negative count.
        assert_eq!(unmeasured_images(&seen(0), &r), 0);
    }

    #[test]
    fn exec_check_warnings_name_the_count_or_why_there_is_none() {
        let mut check = ExecCheck {
            runs: 3,
            missing_runs: 2,
            missing_min: 1,
            missing_max: 1,
            ..ExecCheck::default()
        };
        let w = check.warnings(true).join("\n");
        assert!(
            w.starts_with("1 exec'd program per run was not measured (in 2 of 3 runs): it did"),
            "{w}"
        );
        assert!(
            w.contains("LD_PRELOAD") && w.contains("another user"),
            "{w}"
        );
        assert!(w.contains("static") && w.contains("setuid"), "{w}");
        check.missing_max = 3;
        let w = check.warnings(true).join("\n");
        assert!(w.starts_with("1 to 3 exec'd programs per run were"), "{w}");
        assert!(w.contains("(alloc.unmeasured_images counts"), "{w}");
        // --memory's heap runs have no such metric to point to.
        let w = check.warnings(false).join("\n");
        assert!(!w.contains("alloc.unmeasured_images"), "{w}");

        let unavailable = ExecCheck {
            unchecked: 2,
            reason: Some(
                "perf_event_open ... failed: Permission denied; perf_event_paranoid is 3".into(),
            ),
            ..ExecCheck::default()
        };
        let w = unavailable.warnings(true);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("could not be detected, so allocations missing")
                && w[0].ends_with("perf_event_paranoid is 3"),
            "{w:?}"
        );

        let overflowed = ExecCheck {
            runs: 4,
            saturated: 1,
            ..ExecCheck::default()
        };
        let w = overflowed.warnings(true);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].starts_with("in 1 of 4 runs the kernel's exec records overflowed"),
            "{w:?}"
        );
        assert!(ExecCheck::default().warnings(true).is_empty());
    }

    #[test]
    fn preflight_names_a_private_malloc_and_allocator_from_the_symbol_tables() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("a.c");
        std::fs::write(
            &src,
            "#include <stddef.h>\nvoid *malloc(size_t n) { (void)n; return 0; }\n\
             void *mi_malloc(size_t n) { return malloc(n); }\nint main(void) { return mi_malloc(1) != 0; }\n",
        )
        .unwrap();
        let exe = dir.path().join("a");
        let built = std::process::Command::new("cc")
            .args(["-O0", "-rdynamic", "-o"])
            .arg(&exe)
            .arg(&src)
            .status();
        if !built.is_ok_and(|s| s.success()) {
            eprintln!("SKIP: no C compiler (cc) to build a program with its own malloc");
            return;
        }
        let warnings = preflight(&exe).unwrap();
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(
            warnings[0].contains("defines its own malloc"),
            "{warnings:?}"
        );
        assert!(warnings[1].contains("mimalloc"), "{warnings:?}");
        // Without .symtab the exported names still tell.
        let status = std::process::Command::new("strip").arg(&exe).status();
        if status.is_ok_and(|s| s.success()) {
            assert_eq!(preflight(&exe).unwrap().len(), 2);
        }
    }

    #[test]
    fn preflight_rejects_static_and_accepts_dynamic() {
        let me = std::env::current_exe().unwrap();
        assert!(preflight(&me).is_ok());
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("s.sh");
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        assert_eq!(preflight(&script).unwrap(), Vec::<String>::new());
        match preflight(&dir.path().join("missing")) {
            Err(AgentError::Inspect { .. }) => {}
            other => panic!("{other:?}"),
        }
    }
}
