//! The two builds as the search sees them: their symbol tables and machine code (call
//! lists), and per run, what each call site and each function cost.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use sbs_probes::calls::{call_sites, CallSite, CallTargets, Callee};
use sbs_probes::demangle::{demangle, Scheme};
use sbs_probes::elf::{Function, Image};
use sbs_probes::pattern::Pattern;
use sbs_probes::unwind::Unwound;

use super::costs::{Costs, SampledStack};
use super::cycles::{counted_cost, CallGraph};
use super::search::{Builds, Call, CallLists, Place, Samples};

impl Costs {
    /// For stacks: the cost and the number of the stacks `hit` accepts (each once);
    /// `None` for counts from call edges.
    fn stack_weight(&self, hit: impl Fn(&SampledStack) -> bool) -> Option<(f64, u64)> {
        let stacks = self.stacks.as_ref()?;
        Some(
            stacks
                .iter()
                .filter(|s| hit(s))
                .fold((0.0, 0), |(w, n), s| (w + s.weight, n + 1)),
        )
    }

    /// The call edges of `stacks` (outer frame's function calls the inner's), for the
    /// call graph.
    pub fn edges_of_stacks(stacks: &[Vec<u64>]) -> HashMap<(u64, u64), f64> {
        let mut edges = HashMap::new();
        for frames in stacks {
            for pair in frames.windows(2) {
                edges.insert((pair[1], pair[0]), 0.0);
            }
        }
        edges
    }
}

/// Which build, for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// `--previous`.
    Previous,
    /// The build after `--`.
    Current,
}

impl std::fmt::Display for Side {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Side::Previous => "previous",
            Side::Current => "current",
        })
    }
}

/// One build: its file, and the costs of its runs.
pub struct Build {
    /// Which build.
    pub side: Side,
    /// The executable as given.
    pub exe: PathBuf,
    /// Its symbols and code.
    pub image: Image,
    targets: CallTargets,
    /// One entry per run.
    pub runs: Vec<Costs>,
    /// The calls its runs saw between its functions (set once the runs are made).
    graph: CallGraph,
    /// The labels of monomorphizations that share a demangled name, by start.
    labels: HashMap<u64, String>,
}

impl Build {
    /// How to run this build once with `args` through the runner: `program` (the
    /// executable, or a link to it that both builds share, so that both see the same
    /// `argv[0]`) with `argv0` as argv[0], the collector's environment, ASLR as the system
    /// has it, no timeout.
    pub fn run_config(
        &self,
        program: &Path,
        argv0: &Path,
        args: &[std::ffi::OsString],
    ) -> crate::run::runner::RunConfig {
        crate::run::runner::RunConfig {
            program: program.to_path_buf(),
            args: std::iter::once(argv0.as_os_str().to_os_string())
                .chain(args.iter().cloned())
                .collect(),
            env: std::env::vars_os().collect(),
            show_output: false,
            disable_aslr: false,
            cpus: Vec::new(),
            timeout: None,
            input: None,
        }
    }

    /// Put this build's executable at `at` (a hard link, or a copy across file systems),
    /// replacing what was there: both builds run from one path, so that `argv[0]` (which
    /// valgrind sets to the path it runs) is the same, and a program that reads it does
    /// the same work in both.
    pub fn stage(&self, at: &Path) -> anyhow::Result<()> {
        match std::fs::remove_file(at) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(e).with_context(|| format!("cannot remove {}", at.display()));
            }
        }
        if std::fs::hard_link(&self.image.path, at).is_err() {
            std::fs::copy(&self.image.path, at).with_context(|| {
                format!(
                    "cannot copy the {} build {} to {} (both builds run from one path)",
                    self.side,
                    self.exe.display(),
                    at.display()
                )
            })?;
        }
        Ok(())
    }

    /// Load and check an executable: it exists, can be executed, and has a symbol table.
    pub fn load(side: Side, exe: &Path) -> anyhow::Result<Build> {
        let option = match side {
            Side::Previous => "--previous",
            Side::Current => "the command after --",
        };
        let meta = std::fs::metadata(exe).with_context(|| {
            format!(
                "the {side} build {} ({option}) cannot be read; give the path of an executable",
                exe.display()
            )
        })?;
        use std::os::unix::fs::PermissionsExt;
        if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
            anyhow::bail!(
                "the {side} build {} ({option}) is not an executable file; give the path of a built program",
                exe.display()
            );
        }
        let image = Image::load(exe)
            .with_context(|| format!("the {side} build {} cannot be read", exe.display()))?;
        if image.stripped {
            anyhow::bail!(
                "the {side} build {} has no symbol table (stripped): pinpoint reads functions from it; rebuild without stripping (`strip = false`, no `-s`)",
                exe.display()
            );
        }
        let targets = CallTargets::of(&image)?;
        let mut labels = super::names::monomorph_labels(&image);
        super::names::add_folded(&image, &mut labels);
        Ok(Build {
            side,
            exe: exe.to_path_buf(),
            targets,
            runs: Vec::new(),
            graph: CallGraph::default(),
            labels,
            image,
        })
    }

    /// The function `--function` names (the user's `main` when none is given).
    pub fn find(&self, name: Option<&str>) -> anyhow::Result<&Function> {
        let text = name.unwrap_or("main");
        let pattern = Pattern::parse(text)?;
        let mut found: Vec<&Function> = self
            .image
            .functions
            .iter()
            .filter(|f| pattern.matches(&f.name, &demangle(&f.name).label))
            .collect();
        found.dedup_by_key(|f| f.address);
        if text == "main" {
            // For Rust, the user's `main` (`crate::main`), not the C `main` of the runtime.
            let rust_main: Vec<&Function> = found
                .iter()
                .copied()
                .filter(|f| {
                    let d = demangle(&f.name);
                    matches!(d.scheme, Scheme::RustLegacy | Scheme::RustV0)
                        && d.label.matches("::").count() == 1
                })
                .collect();
            if rust_main.len() == 1 {
                return Ok(rust_main[0]);
            }
            if let Some(c_main) = found.iter().find(|f| f.name == "main") {
                return Ok(c_main);
            }
        }
        match found.as_slice() {
            [] => anyhow::bail!(
                "function `{text}` not found in the {} build {}; check the name (--function) against that build's symbols",
                self.side,
                self.exe.display()
            ),
            [one] => Ok(one),
            many => {
                let names: Vec<String> = many
                    .iter()
                    .take(5)
                    .map(|f| demangle(&f.name).label)
                    .collect();
                anyhow::bail!(
                    "--function `{text}` matches {} functions in the {} build ({}); give more of its path",
                    many.len(),
                    self.side,
                    names.join(", ")
                )
            }
        }
    }

    fn function_at(&self, address: u64) -> anyhow::Result<&Function> {
        self.image
            .functions
            .iter()
            .find(|f| f.address == address)
            .with_context(|| {
                format!(
                    "no function starts at {address:#x} in {}",
                    self.exe.display()
                )
            })
    }

    fn sites(&self, address: u64) -> anyhow::Result<Vec<CallSite>> {
        let f = self.function_at(address)?;
        Ok(call_sites(&self.image, &self.targets, f)?)
    }

    /// Per run, the cost `pick` reads from the counts, or for stacks the weight of the
    /// stacks `hit` accepts; with the number of samples behind it for sampled time.
    fn measure(
        &self,
        pick: impl Fn(&Costs) -> f64,
        hit: impl Fn(&SampledStack) -> bool + Copy,
    ) -> (Vec<f64>, Option<u64>) {
        let mut hits = None;
        let values = self
            .runs
            .iter()
            .map(|c| match c.stack_weight(hit) {
                Some((w, n)) => {
                    if c.timed {
                        *hits.get_or_insert(0) += n;
                    }
                    w
                }
                None => pick(c),
            })
            .collect();
        (values, hits)
    }

    /// The functions of `f`'s recursive cycle, `f` first (only `f` when not recursive).
    fn cycle(&self, f: u64) -> Vec<u64> {
        self.graph.cycle(f)
    }

    /// The call list of the node entered at `f`: `f`'s call sites, or for a recursive
    /// cycle, those of each of its functions (`f` first, then the others by name) that
    /// call out of the cycle.
    fn node_sites(&self, f: u64) -> anyhow::Result<Vec<CallSite>> {
        let members = self.cycle(f);
        if !self.graph.recursive(f) {
            return self.sites(f);
        }
        let mut ordered: Vec<(String, u64)> = members[1..]
            .iter()
            .map(|&m| (self.label_at(m), m))
            .collect();
        ordered.sort();
        let mut sites = Vec::new();
        for m in std::iter::once(f).chain(ordered.into_iter().map(|(_, m)| m)) {
            sites.extend(self.sites(m)?.into_iter().filter(|s| {
                !matches!(s.callee, Callee::Local { address, .. } if members.contains(&address))
            }));
        }
        Ok(sites)
    }

    /// The name of the function at `address` for people: demangled, with its generic
    /// arguments (or hash) when it is one of several monomorphizations of one name.
    pub fn label_at(&self, address: u64) -> String {
        if let Some(l) = self.labels.get(&address) {
            return l.clone();
        }
        self.function_at(address)
            .map(|f| demangle(&f.name).label)
            .unwrap_or_else(|_| format!("{address:#x}"))
    }

    /// The cost of each address of the node entered at `f` (its function, or each
    /// function of its recursive cycle), the mean over the runs, on the call path `via`:
    /// for instructions, each instruction's own count and the inclusive cost of its calls
    /// out of the node; for allocations, the weight of the stacks on the path through each
    /// call the node makes (a stack once per call site); for sampled time, the time of the
    /// samples on the path, each at its innermost address in the node (the sampled
    /// instruction when the node was running, else its call out of the node), as `perf
    /// report` places samples in inlined code.
    fn cost_at(&self, f: u64, via: &[Vec<u64>]) -> Option<HashMap<u64, f64>> {
        let n = self.runs.len().max(1) as f64;
        let out_of_node: Vec<u64> = self.node_sites(f).ok()?.iter().map(|s| s.address).collect();
        let mut at: HashMap<u64, f64> = HashMap::new();
        let members = self.cycle(f);
        let in_node = |a: u64| {
            self.image
                .function_at(a)
                .is_some_and(|g| members.contains(&g.address))
        };
        for run in &self.runs {
            if run.timed {
                for stack in run.stacks.iter().flatten().filter(|s| on_path(s, via)) {
                    if let Some(&a) = stack.at.iter().find(|&&a| in_node(a)) {
                        *at.entry(a).or_default() += stack.weight / n;
                    }
                }
                continue;
            }
            for (a, c) in &run.own_at {
                *at.entry(*a).or_default() += c / n;
            }
            if run.stacks.is_none() {
                for s in &out_of_node {
                    *at.entry(*s).or_default() += run.sites.get(s).copied().unwrap_or(0.0) / n;
                }
            }
            for stack in run.stacks.iter().flatten().filter(|s| on_path(s, via)) {
                for s in out_of_node
                    .iter()
                    .filter(|s| stack.sites.binary_search(s).is_ok())
                {
                    *at.entry(*s).or_default() += stack.weight / n;
                }
            }
        }
        Some(at)
    }

    /// One run's sampled stacks as costs of this build's functions and call sites, and
    /// how many samples had their innermost frame outside the program's functions.
    pub fn time_costs(&self, unwound: &Unwound, weight: impl Fn(u64) -> f64) -> (Costs, u64) {
        let object = unwound.object_index(&self.image.path);
        let mut site_lists: HashMap<u64, Vec<u64>> = HashMap::new();
        let mut stacks = Vec::with_capacity(unwound.stacks.len());
        let mut frames = Vec::with_capacity(unwound.stacks.len());
        let mut outside = 0;
        for stack in &unwound.stacks {
            let mut order = Vec::new();
            let mut sampled = SampledStack {
                weight: weight(stack.period),
                ..SampledStack::default()
            };
            let mut inside = false;
            for (i, frame) in stack.frames.iter().enumerate() {
                let Some(frame) = frame.filter(|f| Some(f.object) == object) else {
                    continue;
                };
                let Some(f) = self.image.function_at(frame.address) else {
                    continue;
                };
                inside |= i == 0;
                sampled.functions.push(f.address);
                order.push(f.address);
                if i == 0 {
                    // The sampled instruction, not a return address: no call site.
                    sampled.at.push(frame.address);
                    continue;
                }
                let list = site_lists.entry(f.address).or_insert_with(|| {
                    call_sites(&self.image, &self.targets, f)
                        .map(|s| s.iter().map(|c| c.address).collect())
                        .unwrap_or_default()
                });
                // The address lies inside its call instruction: the last site at or
                // before it.
                let k = list.partition_point(|&s| s <= frame.address);
                if k > 0 {
                    sampled.sites.push(list[k - 1]);
                    sampled.at.push(list[k - 1]);
                }
            }
            outside += u64::from(!inside);
            frames.push(std::mem::take(&mut order));
            for v in [&mut sampled.functions, &mut sampled.sites] {
                v.sort_unstable();
                v.dedup();
            }
            stacks.push(sampled);
        }
        let mut costs = Costs::default();
        for s in &stacks {
            for f in &s.functions {
                *costs.functions.entry(*f).or_default() += s.weight;
            }
            for site in &s.sites {
                *costs.sites.entry(*site).or_default() += s.weight;
            }
        }
        costs.stacks = Some(stacks);
        costs.timed = true;
        costs.edges = Costs::edges_of_stacks(&frames);
        (costs, outside)
    }
}

/// A function in both builds, as the chain reached it: its name, its start address in
/// each, and the call path that led to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pair {
    /// Demangled, without Rust's hash.
    pub name: String,
    /// Start in the previous build.
    pub previous: u64,
    /// Start in the current build.
    pub current: u64,
    /// The calling context, per build (`[previous, current]`): for each layer above, the
    /// call sites through which the chain came down (all the sites that call the next
    /// link). Costs read from stacks (DHAT, time) count only the stacks that pass through
    /// one site of every layer: the function's costs on this call path, not summed over
    /// its other callers. Empty for the inspected function.
    pub via: [Vec<Vec<u64>>; 2],
}

impl Pair {
    /// The inspected function: no calling context.
    pub fn inspected(name: String, previous: u64, current: u64) -> Pair {
        Pair {
            name,
            previous,
            current,
            via: [Vec::new(), Vec::new()],
        }
    }
}

/// Whether `stack` passes through one site of every layer of `via`.
fn on_path(stack: &SampledStack, via: &[Vec<u64>]) -> bool {
    via.iter()
        .all(|layer| layer.iter().any(|s| stack.sites.binary_search(s).is_ok()))
}

/// The sites of `sites` that call each local callee, by the callee's start.
fn sites_by_callee(sites: &[CallSite]) -> HashMap<u64, Vec<u64>> {
    let mut by: HashMap<u64, Vec<u64>> = HashMap::new();
    for s in sites {
        if let Callee::Local { address, .. } = s.callee {
            by.entry(address).or_default().push(s.address);
        }
    }
    by
}

/// The name two builds are matched on.
pub fn callee_name(callee: &Callee) -> String {
    match callee {
        Callee::Local { name, .. } => demangle(name).label,
        Callee::External { name } => name.clone(),
        Callee::Unknown => "(indirect call)".to_string(),
    }
}

/// Both builds.
pub struct Programs {
    /// `--previous`.
    pub previous: Build,
    /// The current build.
    pub current: Build,
}

impl Programs {
    /// Both builds, once their runs are made: each one's call graph is read from them.
    pub fn new(mut previous: Build, mut current: Build) -> Programs {
        for b in [&mut previous, &mut current] {
            b.graph = CallGraph::of(&b.runs);
        }
        Programs { previous, current }
    }
}

impl Builds for Programs {
    type F = Pair;

    fn name(&self, f: &Pair) -> String {
        f.name.clone()
    }

    fn cycle(&self, f: &Pair) -> Vec<String> {
        let b = &self.current;
        if !b.graph.recursive(f.current) {
            return Vec::new();
        }
        let mut names: Vec<String> = b.cycle(f.current).iter().map(|&m| b.label_at(m)).collect();
        names[1..].sort();
        names
    }

    fn per_path(&self) -> bool {
        self.current.runs.iter().any(|r| r.stacks.is_some())
    }

    fn inside(&self, f: &Pair) -> Vec<Place> {
        let (Some(before), Some(after)) = (
            self.previous.cost_at(f.previous, &f.via[0]),
            self.current.cost_at(f.current, &f.via[1]),
        ) else {
            return Vec::new();
        };
        let code = |b: &Build, at: u64, cost: &HashMap<u64, f64>| {
            super::source::read(&b.image, &b.cycle(at), cost)
        };
        let mut previous = code(&self.previous, f.previous, &before);
        let current = code(&self.current, f.current, &after);
        super::source::match_files(&mut previous, &current);
        super::source::places(&previous, &current, &f.name, 3)
    }

    fn callers(&self, f: &Pair) -> Vec<String> {
        let b = &self.current;
        let members = b.cycle(f.current);
        let mut names: Vec<String> = members
            .iter()
            .flat_map(|&m| b.graph.callers(m))
            .filter(|c| !members.contains(c))
            .map(|c| b.label_at(c))
            .collect();
        names.sort();
        names.dedup();
        names
    }

    fn calls(&self, f: &Pair) -> anyhow::Result<CallLists<Pair>> {
        let previous = self.previous.node_sites(f.previous)?;
        let current = self.current.node_sites(f.current)?;
        let callers = [sites_by_callee(&previous), sites_by_callee(&current)];
        let through = |k: usize, callee: u64| -> Vec<Vec<u64>> {
            let mut via = f.via[k].clone();
            via.push(callers[k].get(&callee).cloned().unwrap_or_default());
            via
        };
        let pair_at = |i: usize| -> Option<Pair> {
            match (&previous.get(i)?.callee, &current.get(i)?.callee) {
                (
                    Callee::Local {
                        address: p,
                        name: pn,
                    },
                    Callee::Local { address: c, .. },
                ) => Some(Pair {
                    name: self
                        .current
                        .labels
                        .get(c)
                        .cloned()
                        .unwrap_or_else(|| demangle(pn).label),
                    previous: *p,
                    current: *c,
                    via: [through(0, *p), through(1, *c)],
                }),
                _ => None,
            }
        };
        let list = |sites: &[CallSite]| -> Vec<Call<Pair>> {
            sites
                .iter()
                .enumerate()
                .map(|(i, s)| Call {
                    name: callee_name(&s.callee),
                    label: match &s.callee {
                        Callee::Local { address, .. } => self.current.label_at(*address),
                        other => callee_name(other),
                    },
                    callee: pair_at(i),
                })
                .collect()
        };
        Ok(CallLists {
            previous: list(&previous),
            current: list(&current),
        })
    }

    fn cost(&self, f: &Pair) -> Samples {
        let of = |b: &Build, at: u64, via: &[Vec<u64>]| {
            let members = b.cycle(at);
            b.measure(
                |c| counted_cost(c, &members),
                |s| members.iter().any(|m| s.functions.binary_search(m).is_ok()) && on_path(s, via),
            )
        };
        Samples::pair(
            of(&self.previous, f.previous, &f.via[0]),
            of(&self.current, f.current, &f.via[1]),
        )
    }

    fn piece(&self, f: &Pair, indices: &[usize]) -> Samples {
        let of = |b: &Build, at: u64, via: &[Vec<u64>]| -> (Vec<f64>, Option<u64>) {
            let all = b.node_sites(at).unwrap_or_default();
            let sites: Vec<&CallSite> = indices.iter().filter_map(|&i| all.get(i)).collect();
            b.measure(
                |c| {
                    sites
                        .iter()
                        .map(|s| c.sites.get(&s.address).copied().unwrap_or(0.0))
                        .sum()
                },
                |stack| {
                    sites
                        .iter()
                        .any(|s| stack.sites.binary_search(&s.address).is_ok())
                        && on_path(stack, via)
                },
            )
        };
        Samples::pair(
            of(&self.previous, f.previous, &f.via[0]),
            of(&self.current, f.current, &f.via[1]),
        )
    }
}
