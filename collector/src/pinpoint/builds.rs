//! The two builds as the search sees them: their symbol tables and machine code (call
//! lists), and per run, what each call site and each function cost.

use std::collections::HashMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use anyhow::Context;
use sbs_probes::calls::{call_sites, CallSite, CallTargets, Callee};
use sbs_probes::demangle::{demangle, Scheme};
use sbs_probes::elf::{Function, Image};
use sbs_probes::pattern::Pattern;
use sbs_probes::unwind::Unwound;

use super::search::{Builds, Call, CallLists, Samples};

/// What one run measured in the program's own object: per call site (address of the
/// call instruction) and per function (start address), the inclusive cost.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Costs {
    /// Call site -> inclusive cost of its calls.
    pub sites: HashMap<u64, f64>,
    /// Function start -> inclusive cost of the calls into it.
    pub functions: HashMap<u64, f64>,
    /// For sampled time: each sample's weight and the functions and call sites on its
    /// stack (each once), so that a piece of several call sites counts a sample once.
    pub stacks: Option<Vec<SampledStack>>,
}

/// One stack sample of the program, as pinpoint reads it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SampledStack {
    /// The time it stands for.
    pub weight: f64,
    /// Start addresses of the program's functions on the stack, sorted, each once.
    pub functions: Vec<u64>,
    /// Call sites on the stack (the call instruction of each return address), sorted,
    /// each once.
    pub sites: Vec<u64>,
}

impl Costs {
    /// For sampled time: the cost and the number of samples of the stacks that pass
    /// through `any` of `sites` (each sample once); `None` for counted metrics.
    fn sampled(&self, hit: impl Fn(&SampledStack) -> bool) -> Option<(f64, u64)> {
        let stacks = self.stacks.as_ref()?;
        Some(
            stacks
                .iter()
                .filter(|s| hit(s))
                .fold((0.0, 0), |(w, n), s| (w + s.weight, n + 1)),
        )
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
}

impl Build {
    /// How to run this build once with `args` through the runner: its own executable as
    /// argv[0], the collector's environment, ASLR as the system has it, no timeout.
    pub fn run_config(&self, args: &[std::ffi::OsString]) -> crate::run::runner::RunConfig {
        crate::run::runner::RunConfig {
            program: self.image.path.clone(),
            args: std::iter::once(self.exe.clone().into_os_string())
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
        Ok(Build {
            side,
            exe: exe.to_path_buf(),
            image,
            targets,
            runs: Vec::new(),
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

    /// Per run, the cost `pick` reads from the counts, or for sampled time the weight of
    /// the stacks `hit` accepts; with the number of samples behind it for sampled time.
    fn measure(
        &self,
        pick: impl Fn(&Costs) -> f64,
        hit: impl Fn(&SampledStack) -> bool + Copy,
    ) -> (Vec<f64>, Option<u64>) {
        let mut hits = None;
        let values = self
            .runs
            .iter()
            .map(|c| match c.sampled(hit) {
                Some((w, n)) => {
                    *hits.get_or_insert(0) += n;
                    w
                }
                None => pick(c),
            })
            .collect();
        (values, hits)
    }

    /// One run's sampled stacks as costs of this build's functions and call sites, and
    /// how many samples had their innermost frame outside the program's functions.
    pub fn time_costs(&self, unwound: &Unwound, weight: impl Fn(u64) -> f64) -> (Costs, u64) {
        let object = unwound.object_index(&self.image.path);
        let mut site_lists: HashMap<u64, Vec<u64>> = HashMap::new();
        let mut stacks = Vec::with_capacity(unwound.stacks.len());
        let mut outside = 0;
        for stack in &unwound.stacks {
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
                if i == 0 {
                    // The sampled instruction, not a return address: no call site.
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
                }
            }
            outside += u64::from(!inside);
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
        (costs, outside)
    }
}

/// A function in both builds: its name and its start address in each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pair {
    /// Demangled, without Rust's hash.
    pub name: String,
    /// Start in the previous build.
    pub previous: u64,
    /// Start in the current build.
    pub current: u64,
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

impl Builds for Programs {
    type F = Pair;

    fn name(&self, f: &Pair) -> String {
        f.name.clone()
    }

    fn calls(&self, f: &Pair) -> anyhow::Result<CallLists<Pair>> {
        let previous = self.previous.sites(f.previous)?;
        let current = self.current.sites(f.current)?;
        let pair_at = |i: usize| -> Option<Pair> {
            match (&previous.get(i)?.callee, &current.get(i)?.callee) {
                (
                    Callee::Local {
                        address: p,
                        name: pn,
                    },
                    Callee::Local { address: c, .. },
                ) => Some(Pair {
                    name: demangle(pn).label,
                    previous: *p,
                    current: *c,
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
        let of = |b: &Build, at: u64| {
            b.measure(
                |c| c.functions.get(&at).copied().unwrap_or(0.0),
                |s| s.functions.binary_search(&at).is_ok(),
            )
        };
        Samples::pair(of(&self.previous, f.previous), of(&self.current, f.current))
    }

    fn piece(&self, f: &Pair, range: Range<usize>) -> Samples {
        let of = |b: &Build, at: u64| -> (Vec<f64>, Option<u64>) {
            let sites = b.sites(at).unwrap_or_default();
            let sites = sites.get(range.clone()).unwrap_or_default();
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
                },
            )
        };
        Samples::pair(of(&self.previous, f.previous), of(&self.current, f.current))
    }
}
