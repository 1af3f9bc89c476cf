//! The search of SBS chapter 4, over any pair of builds that can say what a function
//! calls and what a piece of its call list cost: DiggingFind, with BinaryFind or
//! LinearFind narrowing each layer's call list. Every "got worse" is one decision of
//! [`crate::judge::compare::compare`], the comparison every other metric uses.

use sbs_reports::model::{Comparison, Verdict};

use sbs_probes as probes;

use crate::judge::compare::{compare_paired, CompareError, Policy, Series};

/// One call of a function's call list, as the search sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call<F> {
    /// The callee's name as both builds are matched on it (demangled, no Rust hash).
    pub name: String,
    /// Its name for people: a monomorphization's generic arguments added where several
    /// share `name`.
    pub label: String,
    /// The callee, when its code is in the program; `None` for an external function or
    /// an indirect call.
    pub callee: Option<F>,
}

/// A function's call lists in the two builds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallLists<F> {
    /// In the previous build.
    pub previous: Vec<Call<F>>,
    /// In the current build.
    pub current: Vec<Call<F>>,
}

/// Per-run values of one piece of code in the two builds.
#[derive(Debug, Clone, PartialEq)]
pub struct Samples {
    /// One value per run of the previous build.
    pub previous: Vec<f64>,
    /// One value per run of the current build.
    pub current: Vec<f64>,
    /// For sampled time: the stack samples behind the values, over all runs of each
    /// build (`[previous, current]`).
    pub hits: Option<[u64; 2]>,
}

impl Samples {
    /// From each build's values and, for sampled time, the samples behind them.
    pub fn pair(previous: (Vec<f64>, Option<u64>), current: (Vec<f64>, Option<u64>)) -> Samples {
        let hits = match (previous.1, current.1) {
            (Some(p), Some(c)) => Some([p, c]),
            _ => None,
        };
        Samples {
            previous: previous.0,
            current: current.0,
            hits,
        }
    }

    /// Whether too few samples lie behind the values to decide: for sampled time, fewer
    /// than [`MIN_SAMPLES_PER_RUN`] per run in both builds.
    pub fn too_few(&self) -> bool {
        self.hits.is_some_and(|[p, c]| {
            let runs = self.previous.len().min(self.current.len()).max(1) as u64;
            p.max(c) < MIN_SAMPLES_PER_RUN * runs
        })
    }
}

/// Below this many stack samples per run in both builds, a piece is undecided rather
/// than clean or worse: a few samples can neither rule out a change of a factor nor
/// show one.
pub const MIN_SAMPLES_PER_RUN: u64 = 5;

/// What the search needs from the two builds. `F` names a function in both builds.
pub trait Builds {
    /// A function, in both builds.
    type F: Clone + PartialEq;
    /// Its name (demangled, without Rust's hash).
    fn name(&self, f: &Self::F) -> String;
    /// The functions of its recursive cycle, itself first, when it is recursive: the
    /// search takes them as one node (empty when it is not).
    fn cycle(&self, _f: &Self::F) -> Vec<String> {
        Vec::new()
    }
    /// The functions that call it (current build), for a reader asking why a call below
    /// it costs more than the call that led to it.
    fn callers(&self, _f: &Self::F) -> Vec<String> {
        Vec::new()
    }
    /// Whether the costs below the inspected function are those of the chain's call path
    /// (stacks), rather than summed over each function's callers (call edges).
    fn per_path(&self) -> bool {
        false
    }
    /// Where inside its own code `f`'s own cost grew most (inlined functions, source
    /// lines), when the builds can say.
    fn inside(&self, _f: &Self::F) -> Vec<Place> {
        Vec::new()
    }
    /// Its call lists (address order) in both builds.
    fn calls(&self, f: &Self::F) -> anyhow::Result<CallLists<Self::F>>;
    /// The inclusive cost of `f`, per run.
    fn cost(&self, f: &Self::F) -> Samples;
    /// The inclusive cost of the calls `sites` (indices into `f`'s call list), per run.
    fn piece(&self, f: &Self::F, sites: &[usize]) -> Samples;
}

/// How a call list is narrowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Halve the list, descend into the half that got worse (SBS's BinaryFind).
    Binary,
    /// Try each call in order (SBS's LinearFind).
    Linear,
}

/// The bounds and the decision rule of a search.
#[derive(Debug, Clone)]
pub struct Options {
    /// Layers below the inspected function the chain may reach (`None`: unlimited).
    pub depth: Option<usize>,
    /// Whether a function must not be dug into (`--ignore`).
    pub ignore: Vec<probes::pattern::Pattern>,
    /// How call lists are narrowed.
    pub strategy: Strategy,
    /// The comparison's level, threshold and exactness.
    pub policy: Policy,
}

/// One link of the chain: a function (or, for layer 0, the inspected function) and the
/// comparison that put it there.
#[derive(Debug, Clone)]
pub struct Link {
    /// The function's name.
    pub function: String,
    /// Layers below the inspected function (0 for it).
    pub depth: usize,
    /// No code to read: an external function or an indirect call.
    pub external: bool,
    /// The values compared: the function's own inclusive cost at layer 0, the cost of the
    /// call that led here below it.
    pub samples: Samples,
    /// The judge's comparison of them.
    pub comparison: Comparison,
    /// For a recursive cycle taken as one node: its functions, the entered one first.
    pub cycle: Vec<String>,
    /// The share of the inspected function's change this link's change is (1.0: all).
    pub share: Option<f64>,
    /// Why the link costs more than the one above it, when it does.
    pub note: Option<String>,
}

impl Link {
    fn new(function: String, samples: Samples, comparison: Comparison) -> Link {
        Link {
            function,
            depth: 0,
            external: false,
            samples,
            comparison,
            cycle: Vec::new(),
            share: None,
            note: None,
        }
    }
}

/// A place inside a bottleneck's own code (an inlined function, a source line) and its
/// own cost in each build (means over the runs).
#[derive(Debug, Clone, PartialEq)]
pub struct Place {
    /// `inlined NAME`, `F's own code`, or `file:line`.
    pub what: String,
    /// Previous build.
    pub previous: f64,
    /// Current build.
    pub current: f64,
}

/// The change of the means, current less previous.
pub fn delta(samples: &Samples) -> f64 {
    let mean = |v: &[f64]| {
        if v.is_empty() {
            0.0
        } else {
            v.iter().sum::<f64>() / v.len() as f64
        }
    };
    mean(&samples.current) - mean(&samples.previous)
}

/// A call (or piece of a call list) is followed only when its change is at least this
/// share of the change of the function it is in: a tiny change in a cheap function
/// (a few instructions more in reading a longer `argv[0]`) cannot capture the search
/// while the function's change is elsewhere.
pub const MATERIAL_SHARE: f64 = 0.25;

/// Why the search ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Stop {
    /// The inspected function did not get worse.
    NoRegression,
    /// The function's call list differs between the builds: the change is in it.
    CallListChanged {
        /// The function.
        function: String,
        /// Calls the current build makes that the previous did not (a name as often as it
        /// was added).
        added: Vec<String>,
        /// Calls the previous build made that the current does not.
        removed: Vec<String>,
    },
    /// No call of the function got worse: its own code did.
    OwnCode(String),
    /// The calls that got worse could not be narrowed to one (each part is within the
    /// threshold, the whole is not).
    Spread {
        /// The function.
        function: String,
        /// The narrowed calls, by name.
        calls: Vec<String>,
    },
    /// `--depth` reached.
    Depth(usize),
    /// A function `--ignore` names.
    Ignored(String),
    /// A function without code in the program.
    External(String),
    /// A function already on the chain.
    Recursion(String),
    /// The inspected function had too few samples to say whether it got worse.
    Undecided(String),
}

impl Stop {
    /// A short code for JSON (`own_code`, `call_list_changed`...).
    pub fn code(&self) -> &'static str {
        match self {
            Stop::NoRegression => "no_regression",
            Stop::CallListChanged { .. } => "call_list_changed",
            Stop::OwnCode(_) => "own_code",
            Stop::Spread { .. } => "spread",
            Stop::Depth(_) => "depth",
            Stop::Ignored(_) => "ignored",
            Stop::External(_) => "external",
            Stop::Recursion(_) => "recursion",
            Stop::Undecided(_) => "undecided",
        }
    }
}

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stop::NoRegression => write!(f, "the inspected function did not get worse"),
            Stop::CallListChanged {
                function,
                added,
                removed,
            } => {
                let what = if added.is_empty() && removed.is_empty() {
                    "the same calls in another order".to_string()
                } else {
                    let list = |v: &[String]| {
                        if v.is_empty() {
                            "none".to_string()
                        } else {
                            v.join(", ")
                        }
                    };
                    format!("added: {}; removed: {}", list(added), list(removed))
                };
                write!(
                    f,
                    "the call list of {function} changed between the builds ({what}): the change is in {function} itself"
                )
            }
            Stop::OwnCode(function) => write!(
                f,
                "no call made by {function} got worse: the extra cost is in its own code (or in what was inlined into it)"
            ),
            Stop::Spread { function, calls } => write!(
                f,
                "the extra cost of {function} is spread over {} calls ({}), none of which alone is past the threshold",
                calls.len(),
                calls.join(", ")
            ),
            Stop::Depth(d) => write!(f, "--depth {d} reached"),
            Stop::Ignored(name) => write!(f, "{name} matches --ignore"),
            Stop::External(name) => write!(
                f,
                "{name} is external (no code in the program to read): the extra cost is in the calls made to it"
            ),
            Stop::Recursion(name) => write!(f, "{name} is already on the chain (recursion)"),
            Stop::Undecided(name) => write!(
                f,
                "{name} had too few samples to decide whether it got worse (fewer than {MIN_SAMPLES_PER_RUN} a run): give the benchmark more work, or more --runs"
            ),
        }
    }
}

/// What the current call list has more of (`added`) and less of (`removed`) than the
/// previous, each name as many times as its count changed, in the order of the lists.
pub fn list_change(previous: &[String], current: &[String]) -> (Vec<String>, Vec<String>) {
    let more = |a: &[String], b: &[String]| {
        let mut left: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        for n in b {
            *left.entry(n).or_default() += 1;
        }
        a.iter()
            .filter(|n| match left.get_mut(n.as_str()) {
                Some(k) if *k > 0 => {
                    *k -= 1;
                    false
                }
                _ => true,
            })
            .cloned()
            .collect::<Vec<_>>()
    };
    (more(current, previous), more(previous, current))
}

/// The result of a search.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// From the inspected function to the bottleneck.
    pub chain: Vec<Link>,
    /// The last function of the chain, when something regressed.
    pub bottleneck: Option<String>,
    /// The share of the inspected function's change the bottleneck explains: its own
    /// code's change when the search ended there (`own_code`), else its link's.
    pub bottleneck_share: Option<f64>,
    /// Why the search ended.
    pub stopped: Stop,
    /// How many comparisons the search made (each one a decision of the judge).
    pub comparisons: usize,
    /// Pieces with too few samples to decide whether they got worse.
    pub undecided: Vec<String>,
    /// Where inside the bottleneck's code (its inlined functions, its lines) the change is
    /// (`own_code` and `call_list_changed`).
    pub inside: Vec<Place>,
}

/// The call list being narrowed, one entry per callee.
#[derive(Default)]
struct Layer {
    /// The function whose call list it is.
    function: String,
    /// Each callee's label.
    labels: Vec<String>,
    /// Each callee's call sites (indices into the call list).
    groups: Vec<Vec<usize>>,
}

/// The call sites of `calls`, grouped by callee (its label), in the order of each
/// callee's first call.
fn by_callee<F>(calls: &[Call<F>]) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut at: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for (i, c) in calls.iter().enumerate() {
        match at.get(c.label.as_str()) {
            Some(&g) => groups[g].push(i),
            None => {
                at.insert(&c.label, groups.len());
                groups.push(vec![i]);
            }
        }
    }
    groups
}

struct Search<'a, B: Builds> {
    builds: &'a B,
    options: &'a Options,
    comparisons: usize,
    undecided: Vec<String>,
    /// The function whose call list is being narrowed, and its callees.
    layer: Layer,
    /// The change of that function's inclusive cost: what a piece's share is of.
    base: f64,
    /// Where the search ended in a function's own code: that code's change.
    own: Option<f64>,
    /// And where inside that code it grew.
    inside: Vec<Place>,
}

impl<B: Builds> Search<'_, B> {
    /// One layer of the dig below `current` (a regressed function, last in `chain`): the
    /// call that explains the largest material share of its change joins `chain`, and
    /// the answer is its callee to dig into next, or why the dig stops here.
    fn step(
        &mut self,
        current: &B::F,
        chain: &mut Vec<Link>,
        visited: &mut Vec<String>,
    ) -> anyhow::Result<Result<B::F, Stop>> {
        let name = self.builds.name(current);
        let lists = self.builds.calls(current)?;
        let names = |l: &[Call<B::F>]| l.iter().map(|c| c.name.clone()).collect::<Vec<_>>();
        let (previous, now) = (names(&lists.previous), names(&lists.current));
        if previous != now {
            let (added, removed) = list_change(&previous, &now);
            self.inside = self.builds.inside(current);
            return Ok(Err(Stop::CallListChanged {
                function: name,
                added,
                removed,
            }));
        }
        let (site, mut link) = match self.narrow(current, &name, &lists.current, chain)? {
            Ok(found) => found,
            Err(stop) => return Ok(Err(stop)),
        };
        let call = &lists.current[site];
        let depth = chain.len();
        link.function = call.label.clone();
        link.depth = depth;
        link.external = call.callee.is_none();
        if let Some(callee) = &call.callee {
            link.cycle = self.builds.cycle(callee);
        }
        link.note = self.larger_than_parent(current, chain, &link);
        chain.push(link);
        let Some(callee) = call.callee.clone() else {
            return Ok(Err(Stop::External(call.label.clone())));
        };
        let options = self.options;
        if options
            .ignore
            .iter()
            .any(|p| p.matches(&call.name, &call.name))
        {
            return Ok(Err(Stop::Ignored(call.label.clone())));
        }
        // By name: the same function reached again on a longer call path is no new node.
        let callee_name = self.builds.name(&callee);
        if visited.contains(&callee_name) {
            return Ok(Err(Stop::Recursion(call.label.clone())));
        }
        if options.depth.is_some_and(|d| depth >= d) {
            return Ok(Err(Stop::Depth(depth)));
        }
        visited.push(callee_name);
        Ok(Ok(callee))
    }

    /// The callee of `current` (named `name`, its call list `calls`) whose calls explain
    /// the largest material share of its change: the index of its first call and its
    /// link, or why none does (its own code; a spread change).
    fn narrow(
        &mut self,
        current: &B::F,
        name: &str,
        calls: &[Call<B::F>],
        chain: &[Link],
    ) -> anyhow::Result<Result<(usize, Link), Stop>> {
        // A callee called at several sites (an unrolled loop) is one candidate: its sites
        // together are what it explains.
        let groups = by_callee(calls);
        let labels: Vec<String> = groups.iter().map(|g| calls[g[0]].label.clone()).collect();
        let all = 0..groups.len();
        self.layer = Layer {
            function: name.to_string(),
            labels: labels.clone(),
            groups,
        };
        // The function's change over all its callers, as its call list's costs are; the
        // change of the call that led here when the function itself shows none (a
        // function that tail-calls leaves no frame on the stacks DHAT records).
        self.base = delta(&self.builds.cost(current));
        if self.base <= 0.0 {
            self.base = chain.last().map_or(0.0, |l| delta(&l.samples));
        }
        let found = match self.options.strategy {
            Strategy::Binary => self.binary(current, all.clone())?,
            Strategy::Linear => self.linear(current, all.clone())?,
        };
        let Some((range, link)) = found else {
            let every: Vec<usize> = (0..calls.len()).collect();
            let calls = delta(&self.builds.piece(current, &every));
            self.own = Some(self.base - calls);
            self.inside = self.builds.inside(current);
            return Ok(Err(Stop::OwnCode(name.to_string())));
        };
        if range.len() > 1 {
            return Ok(Err(Stop::Spread {
                function: name.to_string(),
                calls: labels[range].to_vec(),
            }));
        }
        Ok(Ok((self.layer.groups[range.start][0], link)))
    }

    /// Why `link`, a call made by `parent`, costs (or changed) more than the link above
    /// it, when it does: `parent`'s calls are counted over all its callers.
    fn larger_than_parent(&self, parent: &B::F, chain: &[Link], link: &Link) -> Option<String> {
        let above = chain.last()?;
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
        // Its cost or its change: either can only exceed the call above it when more
        // than that call is counted.
        let larger = mean(&link.samples.current) > mean(&above.samples.current)
            || mean(&link.samples.previous) > mean(&above.samples.previous)
            || delta(&link.samples) > delta(&above.samples);
        if !larger {
            return None;
        }
        let callers = self.builds.callers(parent);
        let name = self.builds.name(parent);
        if callers.len() > 1 && !self.builds.per_path() {
            return Some(format!(
                "more than the call above it: {name} is called from {} functions ({}), and the costs of its calls are summed over all its callers",
                callers.len(),
                callers.join(", ")
            ));
        }
        // Counted on the same calls: only the change can be larger, when the rest of the
        // function changed the other way.
        Some(format!(
            "changed more than the call above it: the rest of {name} changed the other way (its other calls or its own code cost less)"
        ))
    }

    fn judge(&mut self, samples: &Samples) -> Result<Comparison, CompareError> {
        self.comparisons += 1;
        // The builds run alternately (previous, current, previous...): run i of each is
        // a pair, made under the same load.
        compare_paired(
            &[
                Series {
                    label: "previous",
                    samples: &samples.previous,
                },
                Series {
                    label: "current",
                    samples: &samples.current,
                },
            ],
            0,
            1,
            &self.options.policy,
        )
    }

    /// The judge's comparison, made `Inconclusive` for a piece with too few samples to
    /// decide either way (and remembered as undecided, described by `what`): a handful
    /// of samples can neither rule out a change of a factor nor show one. (Seen under
    /// load: a call with 1 and 8 samples in 10 runs a build, slowed a little by the real
    /// bottleneck's cache misses, passed Welch's test and led BinaryFind away from it.)
    fn decide(
        &mut self,
        samples: &Samples,
        what: impl FnOnce() -> String,
    ) -> Result<Comparison, CompareError> {
        let mut comparison = self.judge(samples)?;
        if samples.too_few() {
            comparison.verdict = Verdict::Inconclusive;
            self.undecided.push(what());
        }
        Ok(comparison)
    }

    /// The piece `range` of `f`'s call list as a link, when it got worse and its change
    /// is a material share ([`MATERIAL_SHARE`]) of `f`'s.
    fn worse(&mut self, f: &B::F, range: std::ops::Range<usize>) -> anyhow::Result<Option<Link>> {
        let sites: Vec<usize> = self.layer.groups[range.clone()].concat();
        let samples = self.builds.piece(f, &sites);
        let what = format!(
            "in {}, the call{} {}",
            self.layer.function,
            if sites.len() == 1 { "" } else { "s" },
            self.layer.labels[range].join(", ")
        );
        let comparison = self.decide(&samples, || what)?;
        let material = self.base <= 0.0 || delta(&samples) >= MATERIAL_SHARE * self.base;
        Ok((comparison.verdict == Verdict::Regressed && material)
            .then(|| Link::new(String::new(), samples, comparison)))
    }

    /// BinaryFind: from the whole list, into the half whose change is the larger of
    /// those that got worse by a material share, down to one call; a piece neither of
    /// whose halves qualifies is the answer (the change is spread).
    fn binary(
        &mut self,
        f: &B::F,
        range: std::ops::Range<usize>,
    ) -> anyhow::Result<Option<(std::ops::Range<usize>, Link)>> {
        if range.is_empty() {
            return Ok(None);
        }
        let Some(mut link) = self.worse(f, range.clone())? else {
            return Ok(None);
        };
        let mut range = range;
        while range.len() > 1 {
            let middle = range.start + range.len() / 2;
            let mut best: Option<(std::ops::Range<usize>, Link)> = None;
            for half in [range.start..middle, middle..range.end] {
                if let Some(l) = self.worse(f, half.clone())? {
                    if best
                        .as_ref()
                        .is_none_or(|(_, b)| delta(&l.samples) > delta(&b.samples))
                    {
                        best = Some((half, l));
                    }
                }
            }
            // Worse as a whole, neither half alone: the piece is the answer.
            let Some((half, l)) = best else { break };
            (range, link) = (half, l);
        }
        Ok(Some((range, link)))
    }

    /// LinearFind: each call in order; of those that got worse by a material share, the
    /// one whose change is the largest.
    fn linear(
        &mut self,
        f: &B::F,
        range: std::ops::Range<usize>,
    ) -> anyhow::Result<Option<(std::ops::Range<usize>, Link)>> {
        let mut best: Option<(std::ops::Range<usize>, Link)> = None;
        for i in range.clone() {
            if let Some(link) = self.worse(f, i..i + 1)? {
                if best
                    .as_ref()
                    .is_none_or(|(_, b)| delta(&link.samples) > delta(&b.samples))
                {
                    best = Some((i..i + 1, link));
                }
            }
        }
        if best.is_none() && range.len() > 1 {
            // No call alone: the calls together may still be (the change is spread).
            return Ok(self.worse(f, range.clone())?.map(|link| (range, link)));
        }
        Ok(best)
    }
}

/// Dig from `inspected` down to the smallest piece of code that got worse.
pub fn dig<B: Builds>(builds: &B, inspected: &B::F, options: &Options) -> anyhow::Result<Outcome> {
    let mut search = Search {
        builds,
        options,
        comparisons: 0,
        undecided: Vec::new(),
        layer: Layer::default(),
        base: 0.0,
        own: None,
        inside: Vec::new(),
    };
    let samples = builds.cost(inspected);
    let comparison = search.decide(&samples, || builds.name(inspected))?;
    let regressed = comparison.verdict == Verdict::Regressed;
    let undecided = comparison.verdict == Verdict::Inconclusive;
    let mut first = Link::new(builds.name(inspected), samples, comparison);
    first.cycle = builds.cycle(inspected);
    let mut chain = vec![first];
    if !regressed {
        return Ok(Outcome {
            stopped: if undecided {
                Stop::Undecided(chain[0].function.clone())
            } else {
                Stop::NoRegression
            },
            chain,
            bottleneck: None,
            bottleneck_share: None,
            comparisons: search.comparisons,
            undecided: search.undecided,
            inside: Vec::new(),
        });
    }
    let mut visited = vec![builds.name(inspected)];
    let mut current = inspected.clone();
    // `--depth 0`: no layer below the inspected function; its verdict is the answer.
    let stopped = match options.depth {
        Some(0) => Stop::Depth(0),
        _ => loop {
            match search.step(&current, &mut chain, &mut visited)? {
                Ok(callee) => current = callee,
                Err(stop) => break stop,
            }
        },
    };
    let total = delta(&chain[0].samples);
    let share = |d: f64| (total != 0.0).then(|| d / total);
    for link in &mut chain {
        link.share = share(delta(&link.samples));
    }
    let bottleneck_share = match (&stopped, search.own) {
        (Stop::OwnCode(_), Some(own)) => share(own),
        _ => chain.last().and_then(|l| l.share),
    };
    Ok(Outcome {
        bottleneck: chain.last().map(|l| l.function.clone()),
        bottleneck_share,
        chain,
        stopped,
        comparisons: search.comparisons,
        undecided: search.undecided,
        inside: search.inside,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// Scripted builds: per function, its callees and per-call costs in each build.
    struct Scripted {
        /// name -> [(callee, previous cost, current cost)]
        calls: HashMap<&'static str, Vec<(&'static str, f64, f64)>>,
        /// Functions whose call list differs in the current build.
        changed: Vec<&'static str>,
        /// Own cost of each function: (previous, current).
        own: HashMap<&'static str, (f64, f64)>,
        /// Runs per build; above 1 the values vary by ±1% between runs.
        runs: usize,
        /// Samples behind every value (sampled time), or `None` for counts.
        hits: Option<[u64; 2]>,
    }

    impl Scripted {
        fn samples(&self, previous: f64, current: f64) -> Samples {
            let spread = |v: f64| -> Vec<f64> {
                (0..self.runs)
                    .map(|i| v * (1.0 + 0.01 * (i as f64 - (self.runs as f64 - 1.0) / 2.0)))
                    .collect()
            };
            Samples {
                previous: spread(previous),
                current: spread(current),
                hits: self.hits,
            }
        }
    }

    impl Scripted {
        fn total(&self, f: &str, current: bool) -> f64 {
            let own = self
                .own
                .get(f)
                .map_or(0.0, |o| if current { o.1 } else { o.0 });
            own + self.calls.get(f).map_or(0.0, |c| {
                c.iter().map(|&(_, p, n)| if current { n } else { p }).sum()
            })
        }
    }

    impl Builds for Scripted {
        type F = &'static str;
        fn name(&self, f: &&'static str) -> String {
            f.to_string()
        }
        fn calls(&self, f: &&'static str) -> anyhow::Result<CallLists<&'static str>> {
            let list: Vec<Call<&'static str>> = self
                .calls
                .get(f)
                .map(|c| {
                    c.iter()
                        .map(|&(name, _, _)| Call {
                            name: name.to_string(),
                            label: name.to_string(),
                            callee: (name != "malloc").then_some(name),
                        })
                        .collect()
                })
                .unwrap_or_default();
            let mut current = list.clone();
            if self.changed.contains(f) {
                current.reverse();
            }
            Ok(CallLists {
                previous: list,
                current,
            })
        }
        fn cost(&self, f: &&'static str) -> Samples {
            self.samples(self.total(f, false), self.total(f, true))
        }
        fn piece(&self, f: &&'static str, sites: &[usize]) -> Samples {
            let c = self.calls.get(f).map_or(&[][..], |c| &c[..]);
            let sum = |k: fn(&(&str, f64, f64)) -> f64| sites.iter().map(|&i| k(&c[i])).sum();
            self.samples(sum(|c| c.1), sum(|c| c.2))
        }
    }

    fn options(strategy: Strategy, depth: Option<usize>) -> Options {
        Options {
            depth,
            ignore: Vec::new(),
            strategy,
            policy: Policy {
                confidence: 0.95,
                threshold: 0.02,
                threshold_absolute: 0.0,
                exact: true,
                resolution: 0.0,
            },
        }
    }

    const WORKERS: [&str; 16] = [
        "w0", "w1", "w2", "w3", "w4", "w5", "w6", "w7", "w8", "w9", "w10", "w11", "w12", "w13",
        "w14", "w15",
    ];

    /// main calls 16 workers and `outer` 14th; outer -> deep, whose own code grew 30%.
    fn program(deep_current: f64) -> Scripted {
        let mut main: Vec<(&'static str, f64, f64)> =
            (0..16).map(|i| (WORKERS[i], 100.0, 100.0)).collect();
        main.insert(13, ("outer", 700.0, 300.0 + deep_current));
        let mut calls = HashMap::new();
        calls.insert("main", main);
        calls.insert(
            "outer",
            vec![("side", 300.0, 300.0), ("deep", 400.0, deep_current)],
        );
        calls.insert("deep", vec![("malloc", 50.0, 50.0)]);
        let mut own = HashMap::new();
        own.insert("deep", (350.0, deep_current - 50.0));
        Scripted {
            calls,
            changed: vec!["w"],
            own,
            runs: 1,
            hits: None,
        }
    }

    #[test]
    fn digs_down_to_the_function_whose_own_code_got_worse() {
        let b = program(520.0);
        let out = dig(&b, &"main", &options(Strategy::Binary, None)).unwrap();
        let names: Vec<&str> = out.chain.iter().map(|l| l.function.as_str()).collect();
        assert_eq!(names, ["main", "outer", "deep"]);
        assert_eq!(out.bottleneck.as_deref(), Some("deep"));
        assert_eq!(out.stopped, Stop::OwnCode("deep".into()));
        let linear = dig(&b, &"main", &options(Strategy::Linear, None)).unwrap();
        assert_eq!(linear.bottleneck, out.bottleneck);
        // 17 calls in main: BinaryFind needs about 2 log2(17), LinearFind 14 for main alone.
        assert!(
            out.comparisons < linear.comparisons,
            "{} vs {}",
            out.comparisons,
            linear.comparisons
        );
    }

    #[test]
    fn counts_that_vary_between_runs_are_judged_in_pairs() {
        let mut b = program(520.0);
        b.runs = 5;
        let out = dig(&b, &"main", &options(Strategy::Binary, None)).unwrap();
        let names: Vec<&str> = out.chain.iter().map(|l| l.function.as_str()).collect();
        assert_eq!(names, ["main", "outer", "deep"]);
        for link in &out.chain {
            // Run i of one build with run i of the other: they ran one after the other.
            assert!(
                link.comparison.method.paired(),
                "{:?}",
                link.comparison.method
            );
            assert!(link.comparison.ci_low.is_some_and(|lo| lo > 0.0));
        }
    }

    #[test]
    fn nothing_worse_means_no_bottleneck_and_depth_stops_early() {
        let b = program(400.0);
        let out = dig(&b, &"main", &options(Strategy::Binary, None)).unwrap();
        assert_eq!(out.bottleneck, None);
        assert_eq!(out.stopped, Stop::NoRegression);
        assert_eq!(out.comparisons, 1);
        let b = program(520.0);
        let out = dig(&b, &"main", &options(Strategy::Binary, Some(1))).unwrap();
        assert_eq!(out.bottleneck.as_deref(), Some("outer"));
        assert_eq!(out.stopped, Stop::Depth(1));
        // Depth 0: main's own verdict, one comparison, no layer below it.
        let out = dig(&b, &"main", &options(Strategy::Binary, Some(0))).unwrap();
        assert_eq!(out.bottleneck.as_deref(), Some("main"));
        assert_eq!(out.stopped, Stop::Depth(0));
        assert_eq!((out.chain.len(), out.comparisons), (1, 1));
    }

    #[test]
    fn a_changed_call_list_stops_at_its_function() {
        let mut b = program(520.0);
        b.changed = vec!["outer"];
        let out = dig(&b, &"main", &options(Strategy::Binary, None)).unwrap();
        assert_eq!(out.bottleneck.as_deref(), Some("outer"));
        assert!(matches!(out.stopped, Stop::CallListChanged { .. }));
    }

    #[test]
    fn an_external_callee_ends_the_chain() {
        let mut b = program(400.0);
        b.calls.insert("deep", vec![("malloc", 50.0, 150.0)]);
        b.own.insert("deep", (350.0, 350.0));
        b.calls.get_mut("outer").unwrap()[1].2 = 500.0;
        b.calls.get_mut("main").unwrap()[13].2 = 800.0;
        let out = dig(&b, &"main", &options(Strategy::Binary, None)).unwrap();
        let names: Vec<&str> = out.chain.iter().map(|l| l.function.as_str()).collect();
        assert_eq!(names, ["main", "outer", "deep", "malloc"]);
        assert!(out.chain[3].external);
        assert_eq!(out.stopped, Stop::External("malloc".into()));
    }

    #[test]
    fn a_change_spread_below_the_threshold_is_reported_as_the_piece() {
        // Two calls 1.5 worse each: with an absolute threshold of 2, only both together
        // are past it.
        let mut calls = HashMap::new();
        calls.insert("main", vec![("a", 100.0, 101.5), ("b", 100.0, 101.5)]);
        let b = Scripted {
            calls,
            changed: Vec::new(),
            own: HashMap::new(),
            runs: 1,
            hits: None,
        };
        let mut o = options(Strategy::Binary, None);
        o.policy.threshold = 0.0;
        o.policy.threshold_absolute = 2.0;
        let out = dig(&b, &"main", &o).unwrap();
        assert_eq!(
            out.stopped,
            Stop::Spread {
                function: "main".into(),
                calls: vec!["a".into(), "b".into()]
            }
        );
        assert_eq!(out.bottleneck.as_deref(), Some("main"));
        // LinearFind looks at one call at a time and finds none worse, then at all of
        // them together.
        o.strategy = Strategy::Linear;
        let out = dig(&b, &"main", &o).unwrap();
        assert!(
            matches!(out.stopped, Stop::Spread { .. }),
            "{:?}",
            out.stopped
        );
    }

    #[test]
    fn too_few_samples_are_undecided_not_clean() {
        let mut o = options(Strategy::Binary, None);
        o.policy.exact = false;
        // Nothing changed, but 3 samples a run are too few to call main clean.
        let mut b = program(400.0);
        b.runs = 5;
        b.hits = Some([15, 15]);
        let out = dig(&b, &"main", &o).unwrap();
        assert_eq!(out.stopped, Stop::Undecided("main".into()));
        assert_eq!(out.bottleneck, None);
        assert_eq!(
            out.chain[0].comparison.verdict,
            sbs_reports::model::Verdict::Inconclusive
        );
        assert_eq!(out.undecided, ["main"]);
        // Enough samples: clean.
        b.hits = Some([50, 50]);
        let out = dig(&b, &"main", &o).unwrap();
        assert_eq!(out.stopped, Stop::NoRegression);
        assert!(out.undecided.is_empty());
        // Worse on too few samples: undecided too, not a regression.
        let mut b = program(520.0);
        b.runs = 5;
        b.hits = Some([15, 20]);
        let out = dig(&b, &"main", &o).unwrap();
        assert_eq!(out.stopped, Stop::Undecided("main".into()));
        assert_eq!(out.bottleneck, None);
        // With enough samples, the regression is followed down.
        b.hits = Some([50, 65]);
        let out = dig(&b, &"main", &o).unwrap();
        assert_eq!(out.bottleneck.as_deref(), Some("deep"));
    }

    #[test]
    fn the_call_that_explains_the_change_is_followed_not_a_cheap_one_that_changed_more() {
        // main: banner (10 -> 20, +100%, 10 of the change), parse (1000 -> 1500, +50%,
        // 500 of it). Both got worse; only parse explains a material share.
        let mut calls = HashMap::new();
        calls.insert(
            "main",
            vec![("banner", 10.0, 20.0), ("parse", 1000.0, 1500.0)],
        );
        let b = Scripted {
            calls,
            changed: Vec::new(),
            own: HashMap::new(),
            runs: 1,
            hits: None,
        };
        for strategy in [Strategy::Binary, Strategy::Linear] {
            let out = dig(&b, &"main", &options(strategy, None)).unwrap();
            assert_eq!(out.bottleneck.as_deref(), Some("parse"), "{strategy:?}");
            let share = out.chain[1].share.unwrap();
            assert!((share - 500.0 / 510.0).abs() < 1e-9, "{share}");
        }
    }

    #[test]
    fn a_call_below_the_material_share_is_not_followed() {
        // main's own code grew by 300, its one call by 90 (+90%): 90 / 390 is 23%, under
        // the 25% that a call must explain. At 110 (110 / 410 = 27%) it is followed.
        for (extra, followed) in [(90.0, false), (110.0, true)] {
            let mut calls = HashMap::new();
            calls.insert("main", vec![("cheap", 100.0, 100.0 + extra)]);
            let mut own = HashMap::new();
            own.insert("main", (1000.0, 1300.0));
            let b = Scripted {
                calls,
                changed: Vec::new(),
                own,
                runs: 1,
                hits: None,
            };
            for strategy in [Strategy::Binary, Strategy::Linear] {
                let out = dig(&b, &"main", &options(strategy, None)).unwrap();
                if followed {
                    assert_eq!(out.bottleneck.as_deref(), Some("cheap"), "{strategy:?}");
                } else {
                    assert_eq!(out.stopped, Stop::OwnCode("main".into()), "{strategy:?}");
                    // main's own code: 300 of the 390.
                    let share = out.bottleneck_share.unwrap();
                    assert!((share - 300.0 / 390.0).abs() < 1e-9, "{share}");
                }
            }
        }
    }

    #[test]
    fn binary_find_takes_the_half_with_the_larger_change() {
        // Two calls got worse, a by 100 (first half), b by 400 (second half): the older
        // BinaryFind took the first half that got worse.
        let mut calls = HashMap::new();
        calls.insert("main", vec![("a", 100.0, 200.0), ("b", 100.0, 500.0)]);
        let b = Scripted {
            calls,
            changed: Vec::new(),
            own: HashMap::new(),
            runs: 1,
            hits: None,
        };
        let out = dig(&b, &"main", &options(Strategy::Binary, None)).unwrap();
        assert_eq!(out.bottleneck.as_deref(), Some("b"));
    }

    #[test]
    fn a_changed_call_list_is_told_as_what_was_added_and_removed() {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let (added, removed) = list_change(
            &names(&["a", "malloc", "free", "b"]),
            &names(&["a", "malloc", "free", "malloc", "free", "c"]),
        );
        assert_eq!(added, ["malloc", "free", "c"]);
        assert_eq!(removed, ["b"]);
        let stop = Stop::CallListChanged {
            function: "f".into(),
            added,
            removed,
        };
        assert_eq!(
            stop.to_string(),
            "the call list of f changed between the builds (added: malloc, free, c; removed: b): the change is in f itself"
        );
        let (added, removed) = list_change(&names(&["a", "b"]), &names(&["b", "a"]));
        assert!(added.is_empty() && removed.is_empty());
        let stop = Stop::CallListChanged {
            function: "f".into(),
            added,
            removed,
        };
        assert!(stop
            .to_string()
            .contains("(the same calls in another order)"));
    }

    #[test]
    fn a_callee_called_at_many_sites_is_judged_on_all_of_them() {
        // An unrolled loop: ten calls of grow, each 10% of main's change, none material
        // alone; together all of it.
        let mut calls = HashMap::new();
        let mut list = vec![("grow", 4.0, 5.0); 10];
        list.push(("middle", 100.0, 100.0));
        calls.insert("main", list);
        let b = Scripted {
            calls,
            changed: Vec::new(),
            own: HashMap::new(),
            runs: 1,
            hits: None,
        };
        for strategy in [Strategy::Binary, Strategy::Linear] {
            let out = dig(&b, &"main", &options(strategy, None)).unwrap();
            assert_eq!(out.bottleneck.as_deref(), Some("grow"), "{strategy:?}");
            assert_eq!(out.chain[1].samples.current, [50.0], "{strategy:?}");
        }
    }
}
