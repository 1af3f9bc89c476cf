//! The in-process engine: the collector decides which sites can be patched
//! (`sbs_probes::patch`), encodes their trampolines and writes the site table
//! (`sbs_agent_abi::inproc`); the counting library, preloaded into the child, patches
//! them before the program's code runs; the counters live in the table's live region,
//! shared by every process of the run, read after the child is reaped. The library is
//! handed over like the allocation agent: a copy per run, stamped with where the table is,
//! loaded as `/proc/<our pid>/fd/<n>` (see [`crate::run::instruments::preload`]).

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use anyhow::Context;
use nix::sys::memfd::{memfd_create, MemFdCreateFlag};
use sbs_agent_abi::inproc::{
    pages, LiveLayout, LoadedLater, ModuleRecord, ModuleStatus, Refusal, TableHeader, FIXUP_WORDS,
    MAX_BUILD_ID, MODULES_AT, MODULE_WORDS, SITE_WORDS,
};
use sbs_probes::execs::ExecWatch;
use sbs_probes::patch::{module_code, ModuleCode, Patch, PatchRefusal};
use sbs_probes::program::Program;

use crate::run::instrument::ChildSetup;
use crate::run::instruments::preload::StampedLibrary;

/// The counting library, built by `build.rs` from `agent/inproc`.
pub static INPROC_LIBRARY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libsbs_inproc.so"));

/// A run in which the counting library declined to patch a module it found (a seccomp
/// filter, threads already running, a shadow stack, a W^X policy...): the program is one
/// the engine cannot count, not a fault of the run. `--invocations-engine auto` then
/// counts with uprobes.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(super) struct Refused(pub PatchRefusal);

/// The in-process engine's part of one run in flight ([`Inproc::park`]).
pub(super) struct InprocRun {
    run: Option<(File, u64, StampedLibrary)>,
    execs: Option<ExecWatch>,
}

/// Per-thread counter blocks of a run (see `sbs_agent_abi::inproc`): the threads that
/// count first, in all the processes of a run, each get one and count in it with a plain
/// `inc`; threads beyond count with a `lock inc` of the shared counters (exact, but slower
/// and contended). A block is not given back when its thread ends. Unused blocks cost
/// address space only: the table's memory is allocated as it is written.
const BLOCKS: u64 = 256;

/// One module of the table, for messages.
#[derive(Debug)]
struct Module {
    path: PathBuf,
    /// A library the program may load at run time (`dlopen`): a run that never loads it
    /// patches it nowhere, and its sites count 0.
    later: bool,
}

/// The in-process engine of one group of runs.
#[derive(Debug)]
pub(super) struct Inproc {
    /// Everything before the live region, with a zero token (set per run).
    table: Vec<u8>,
    layout: LiveLayout,
    modules: Vec<Module>,
    counters: usize,
    /// The child's own `LD_PRELOAD`, kept after the counting library.
    existing_preload: Option<OsString>,
    /// This run's table, its token, and the run's copy of the library, kept open until
    /// the run is read: the child and its descendants open both through our descriptors.
    run: Option<(File, u64, StampedLibrary)>,
    /// The run's `exec`s, to find process images that ran without the library.
    execs: Option<ExecWatch>,
    /// Why the `exec`s cannot be counted, once that is known.
    no_exec_count: Option<String>,
    /// The run that had the most process images without the library: (without, all).
    unloaded: Option<(u64, u64)>,
    /// Runs whose exec count may be low (a ring of the watch filled up), and runs checked.
    saturated: usize,
    checked: usize,
    /// Whether the last run read had images without the counting library, or may have
    /// had some unseen (its check could not complete).
    last_missed: bool,
}

impl Inproc {
    /// Encode the table for `patches` (image index, patch). Each patch gets consecutive
    /// counters, one per site it counts, from the first returned for it. Patches whose
    /// module cannot be encoded are returned with the reason, and are not in the table:
    /// the caller counts their sites otherwise.
    #[allow(clippy::type_complexity)]
    pub fn build(
        target: &Program,
        patches: &[(usize, Patch)],
        existing_preload: Option<&OsStr>,
    ) -> anyhow::Result<(Inproc, Vec<Option<usize>>, Vec<(usize, PatchRefusal)>)> {
        let mut images: Vec<usize> = patches.iter().map(|(i, _)| *i).collect();
        images.sort_unstable();
        images.dedup();
        // Counters for every patch, whether its module can be encoded or not, so that the
        // layout is known before the first module is.
        let all: usize = patches.iter().map(|(_, p)| p.counts.len()).sum();
        let layout = LiveLayout::new(images.len() as u64, all as u64, BLOCKS);
        let Encoded {
            modules,
            counter_of,
            refused,
            counters,
        } = encode_modules(target, patches, &images, &layout);
        let table = lay_out_table(&modules, &layout);
        let inproc = Inproc {
            table,
            layout,
            modules: modules
                .into_iter()
                .map(|m| Module {
                    path: m.path,
                    later: m.later.is_some(),
                })
                .collect(),
            counters,
            existing_preload: existing_preload.map(OsStr::to_os_string),
            run: None,
            execs: None,
            no_exec_count: None,
            unloaded: None,
            saturated: 0,
            checked: 0,
            last_missed: false,
        };
        Ok((inproc, counter_of, refused))
    }

    /// Whether any site is counted in-process.
    pub fn is_empty(&self) -> bool {
        self.counters == 0
    }

    /// A fresh table for one run, and a copy of the library that finds it.
    pub fn prepare(&mut self, setup: &mut ChildSetup) -> anyhow::Result<()> {
        let token = crate::run::instruments::alloc::random_token() | 1;
        let file: File = memfd_create(c"sbs-inproc-table", MemFdCreateFlag::MFD_CLOEXEC)
            .context("cannot create the in-memory site table (memfd_create)")?
            .into();
        let mut table = self.table.clone();
        let header = TableHeader::read(&table).context("internal error: site table header")?;
        TableHeader { token, ..header }.write(&mut table);
        file.write_all_at(&table, 0)
            .and_then(|()| file.set_len(table.len() as u64 + self.layout.len))
            .context("cannot write the site table")?;
        let library = StampedLibrary::new(c"sbs-inproc", INPROC_LIBRARY, &file, token)
            .context("cannot hand the counting library to the child (memfd_create)")?;
        setup.env.push((
            "LD_PRELOAD".into(),
            library.ld_preload(self.existing_preload.as_deref()),
        ));
        self.run = Some((file, token, library));
        Ok(())
    }

    /// The child waits at its start latch: watch its `exec`s, so that process images that
    /// ran without the counting library are found. Where perf events do not allow that,
    /// the runs go on and [`Inproc::note`] says the check was not made.
    pub fn attach(&mut self, pid: i32) {
        if self.no_exec_count.is_some() {
            return;
        }
        match ExecWatch::open(pid) {
            Ok(watch) => self.execs = Some(watch),
            Err(e) => self.no_exec_count = Some(format!("{e}; {}", e.fix())),
        }
    }

    /// Whether [`Inproc::attach`] has anything to do.
    pub fn counts_execs(&self) -> bool {
        self.no_exec_count.is_none()
    }

    /// The run's counters, after the child was reaped; an error if a module that holds
    /// counted sites was not patched in the run, or not in every process that loaded it.
    pub fn read(&mut self) -> anyhow::Result<Vec<u64>> {
        let Some((file, _, _library)) = self.run.take() else {
            anyhow::bail!("internal error: no site table for this run (prepare was not called)");
        };
        let live = self.read_live(&file)?;
        let images = u64::from_le_bytes(live[..8].try_into().unwrap_or_default());
        self.compare_execs(images);
        for (m, module) in self.modules.iter().enumerate() {
            let status = ModuleStatus::read(&live, m).unwrap_or_default();
            if status.refused > 0 {
                return Err(Refused(PatchRefusal::ImageRefused {
                    module: module.path.clone(),
                    images: status.refused,
                    refusal: Refusal::from_code(status.reason),
                })
                .into());
            }
            if status.patched == 0 && !module.later {
                anyhow::bail!(
                    "the in-process engine did not patch {} in any process of the run ({images} \
                     loaded the counting library): did the loader pick another copy of it, or \
                     does the program clear LD_PRELOAD or run as another user than \
                     sbs-profile? Count with uprobes instead: --invocations-engine uprobe",
                    module.path.display()
                );
            }
        }
        Ok(sum_counters(&live, &self.layout, self.counters))
    }

    /// The live region of the run's table, up to the last per-thread block claimed.
    fn read_live(&self, file: &File) -> anyhow::Result<Vec<u8>> {
        let l = &self.layout;
        let mut live = vec![0u8; l.blocks_at.min(l.len) as usize];
        file.read_exact_at(&mut live, self.table.len() as u64)
            .context("cannot read the in-process counters")?;
        let claimed = word(&live, l.next_block_at as usize).min(l.blocks);
        live.resize((l.blocks_at + claimed * l.block_bytes) as usize, 0);
        if claimed > 0 {
            file.read_exact_at(
                &mut live[l.blocks_at as usize..],
                self.table.len() as u64 + l.blocks_at,
            )
            .context("cannot read the in-process per-thread counters")?;
        }
        Ok(live)
    }

    /// Compare the run's `exec`s with the `images` that read the site table.
    fn compare_execs(&mut self, images: u64) {
        self.last_missed = false;
        let Some(mut watch) = self.execs.take() else {
            return;
        };
        let seen = watch.count();
        self.checked += 1;
        self.saturated += usize::from(seen.saturated);
        // A check that could not complete guards nothing: an image without the library
        // may have gone unseen, so the run's counts are not exact either.
        self.last_missed = seen.execs > images || seen.saturated;
        if seen.execs > images {
            let without = seen.execs - images;
            if self.unloaded.is_none_or(|(most, _)| without > most) {
                self.unloaded = Some((without, seen.execs));
            }
        }
    }

    /// Whether process images of the run last read ran without the counting library
    /// (calls they made were not counted in-process), or may have: its exec records
    /// overflowed, so the check could not complete.
    pub fn missed_images(&self) -> bool {
        self.last_missed
    }

    /// What the runs showed about process images without the counting library.
    pub fn warnings(&self) -> Vec<String> {
        let Some((without, execs)) = self.unloaded else {
            return Vec::new();
        };
        vec![format!(
            "{without} of the {execs} process images of a run did not load the in-process \
             counting library (a program that clears LD_PRELOAD or the environment, is \
             static or setuid, or runs as another user than sbs-profile or in a pid \
             namespace with a /proc of its own): calls made in them are not counted \
             in-process, and the counts are lower bounds, not exact; if they run the counted \
             code, count with --invocations-engine uprobe (which cannot count in setuid \
             programs either)"
        )]
    }

    /// A note for the metrics counted in-process when the check behind
    /// [`Inproc::warnings`] could not be made (perf events not allowed) or may have
    /// missed images: a limit of what was checked, not a sign that anything went wrong.
    pub fn note(&self) -> Option<String> {
        if let Some(why) = &self.no_exec_count {
            return Some(format!(
                "not checked that every process image loaded the in-process counting library: \
                 {why}"
            ));
        }
        (self.saturated > 0).then(|| {
            format!(
                "not exact (a lower bound) in {} of {} runs: the check that every process \
                 image loaded the in-process counting library could not complete there (the \
                 kernel's exec records overflowed: more processes started than the records \
                 could hold while they were read), so a program that ran without the library \
                 (setuid, run as another user, LD_PRELOAD cleared) would have gone unnoticed; \
                 --invocations-engine uprobe (root) counts in such programs when they keep \
                 the user",
                self.saturated, self.checked
            )
        })
    }

    /// What the engine holds about the run in flight, taken out while other runs start
    /// (`--jobs`).
    pub fn park(&mut self) -> InprocRun {
        InprocRun {
            run: self.run.take(),
            execs: self.execs.take(),
        }
    }

    /// What [`Inproc::park`] took out, back for its run's end.
    pub fn resume(&mut self, run: InprocRun) {
        self.run = run.run;
        self.execs = run.execs;
    }

    /// Drop the run's table (a run that did not reach `read`).
    pub fn abort(&mut self) {
        self.run = None;
        self.execs = None;
        self.last_missed = false;
    }
}

/// The 64-bit word at byte `at` of `bytes` (0 past the end).
fn word(bytes: &[u8], at: usize) -> u64 {
    bytes
        .get(at..at + 8)
        .and_then(|w| w.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

/// Each of the first `counters` counters of a live region read up to its last claimed
/// block: the shared counter plus that counter in every claimed block.
fn sum_counters(live: &[u8], layout: &LiveLayout, counters: usize) -> Vec<u64> {
    let claimed = word(live, layout.next_block_at as usize).min(layout.blocks);
    (0..counters as u64)
        .map(|k| {
            let shared = word(live, (layout.counters_at + 8 * k) as usize);
            (0..claimed)
                .map(|b| word(live, layout.block_counter(b, k) as usize))
                .fold(shared, u64::wrapping_add)
        })
        .collect()
}

/// One module's encoded trampolines.
struct EncodedModule {
    path: PathBuf,
    build_id: Vec<u8>,
    code: ModuleCode,
    /// How the library finds it, for a library loaded at run time.
    later: Option<LoadedLater>,
}

/// The modules that could be encoded, and where each patch's counters are.
struct Encoded {
    modules: Vec<EncodedModule>,
    /// Per patch: its first counter, or `None` when its module could not be encoded.
    counter_of: Vec<Option<usize>>,
    /// Patches not in the table, with the reason.
    refused: Vec<(usize, PatchRefusal)>,
    /// Number of counters.
    counters: usize,
}

/// Encode the trampolines of each of `images` (indices into `target`) for its
/// `patches`, counting in a live region laid out as `layout`.
fn encode_modules(
    target: &Program,
    patches: &[(usize, Patch)],
    images: &[usize],
    layout: &LiveLayout,
) -> Encoded {
    let mut out = Encoded {
        modules: Vec::new(),
        counter_of: vec![None; patches.len()],
        refused: Vec::new(),
        counters: 0,
    };
    for &image in images {
        let idx: Vec<usize> = (0..patches.len())
            .filter(|&k| patches[k].0 == image)
            .collect();
        let img = &target.images[image];
        let build_id = img
            .build_id
            .clone()
            .filter(|id| !id.is_empty() && id.len() <= MAX_BUILD_ID);
        let Some(build_id) = build_id else {
            for &k in &idx {
                out.refused.push((
                    k,
                    PatchRefusal::NoBuildId {
                        path: img.path.clone(),
                    },
                ));
            }
            continue;
        };
        // A library loaded at run time is found among the loader's objects by where its
        // dynamic section and program headers lie (see `sbs_agent_abi::inproc`).
        let later = match target.loaded_at_run_time(image) {
            false => None,
            true => match img.headers_in_memory() {
                Some((dynamic, phdrs, phnum)) => Some(LoadedLater {
                    dynamic,
                    phdrs,
                    phnum,
                }),
                None => {
                    for &k in &idx {
                        out.refused.push((k, PatchRefusal::LoadedLater));
                    }
                    continue;
                }
            },
        };
        let mut next = out.counters;
        let list: Vec<(Patch, usize)> = idx
            .iter()
            .map(|&k| {
                let first = next;
                next += patches[k].1.counts.len();
                (patches[k].1.clone(), first)
            })
            .collect();
        match module_code(img, &list, layout) {
            Ok(code) => {
                for (&k, (_, first)) in idx.iter().zip(&list) {
                    out.counter_of[k] = Some(*first);
                }
                out.counters = next;
                out.modules.push(EncodedModule {
                    path: img.path.clone(),
                    build_id,
                    code,
                    later,
                });
            }
            Err(why) => {
                for &k in &idx {
                    out.refused.push((k, why.clone()));
                }
            }
        }
    }
    out
}

/// The table file's bytes before the live region.
fn lay_out_table(modules: &[EncodedModule], layout: &LiveLayout) -> Vec<u8> {
    let mut table = vec![0u8; MODULES_AT + modules.len() * MODULE_WORDS * 8];
    let mut records = Vec::new();
    let mut laters = Vec::new();
    for EncodedModule {
        build_id,
        code,
        later,
        ..
    } in modules
    {
        while table.len() % 16 != 0 {
            table.push(0);
        }
        let code_offset = table.len() as u64;
        table.extend_from_slice(&code.code);
        let fixups_offset = align8(&mut table);
        for f in &code.fixups {
            let at = table.len();
            table.resize(at + FIXUP_WORDS * 8, 0);
            f.write(&mut table, at);
        }
        let sites_offset = table.len() as u64;
        for s in &code.sites {
            let at = table.len();
            table.resize(at + SITE_WORDS * 8, 0);
            s.write(&mut table, at);
        }
        let mut id = [0u8; MAX_BUILD_ID];
        id[..build_id.len()].copy_from_slice(build_id);
        records.push(ModuleRecord {
            build_id_len: build_id.len() as u64,
            build_id: id,
            code_offset,
            code_len: code.code.len() as u64,
            code_pages: code.code_pages,
            fixups_offset,
            fixups: code.fixups.len() as u64,
            sites_offset,
            sites: code.sites.len() as u64,
        });
        laters.push(*later);
    }
    for (m, (r, later)) in records.iter().zip(laters).enumerate() {
        r.write(&mut table, MODULES_AT + m * MODULE_WORDS * 8);
        LoadedLater::write(later, &mut table, MODULES_AT + m * MODULE_WORDS * 8);
    }
    let live_offset = pages(table.len() as u64);
    table.resize(live_offset as usize, 0);
    TableHeader {
        token: 0,
        modules: modules.len() as u64,
        live_offset,
        live_len: layout.len,
        blocks: layout.blocks,
    }
    .write(&mut table);
    table
}

fn align8(table: &mut Vec<u8>) -> u64 {
    while table.len() % 8 != 0 {
        table.push(0);
    }
    table.len() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_add_the_shared_word_and_each_claimed_block() {
        let layout = LiveLayout::new(1, 2, 4);
        let mut live = vec![0u8; layout.len as usize];
        let put = |live: &mut Vec<u8>, at: u64, v: u64| {
            live[at as usize..at as usize + 8].copy_from_slice(&v.to_le_bytes());
        };
        put(&mut live, layout.counters_at, 5);
        put(&mut live, layout.counters_at + 8, 1);
        put(&mut live, layout.block_counter(0, 0), 10);
        put(&mut live, layout.block_counter(1, 1), 100);
        // Block 2 is not claimed: not counted even if something is there.
        put(&mut live, layout.block_counter(2, 0), 1000);
        put(&mut live, layout.next_block_at, 2);
        assert_eq!(sum_counters(&live, &layout, 2), [15, 101]);
        // Claims past the last block (failed ones) do not read beyond it.
        put(&mut live, layout.next_block_at, 9);
        assert_eq!(sum_counters(&live, &layout, 2), [1015, 101]);
    }

    #[test]
    fn the_counting_library_carries_one_stamp_and_takes_a_run_s_values() {
        crate::run::instruments::preload::tests::check_stamping(super::INPROC_LIBRARY);
    }
}
