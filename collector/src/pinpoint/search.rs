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
    /// Its call lists (address order) in both builds.
    fn calls(&self, f: &Self::F) -> anyhow::Result<CallLists<Self::F>>;
    /// The inclusive cost of `f`, per run.
    fn cost(&self, f: &Self::F) -> Samples;
    /// The inclusive cost of the calls `range` of `f`'s call list, per run.
    fn piece(&self, f: &Self::F, range: std::ops::Range<usize>) -> Samples;
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
}

/// Why the search ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Stop {
    /// The inspected function did not get worse.
    NoRegression,
    /// The function's call list differs between the builds: the change is in it.
    CallListChanged {
        /// The function.
        function: String,
        /// Its callees in the previous build.
        previous: Vec<String>,
        /// Its callees in the current build.
        current: Vec<String>,
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
                previous,
                current,
            } => write!(
                f,
                "the call list of {function} changed between the builds ([{}] -> [{}]): the change is in {function} itself",
                previous.join(", "),
                current.join(", ")
            ),
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

/// The result of a search.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// From the inspected function to the bottleneck.
    pub chain: Vec<Link>,
    /// The last function of the chain, when something regressed.
    pub bottleneck: Option<String>,
    /// Why the search ended.
    pub stopped: Stop,
    /// How many comparisons the search made (each one a decision of the judge).
    pub comparisons: usize,
    /// Pieces with too few samples to decide whether they got worse.
    pub undecided: Vec<String>,
}

struct Search<'a, B: Builds> {
    builds: &'a B,
    options: &'a Options,
    comparisons: usize,
    undecided: Vec<String>,
    /// The function whose call list is being narrowed, and the callees' names.
    layer: (String, Vec<String>),
}

impl<B: Builds> Search<'_, B> {
    /// One layer of the dig below `current` (a regressed function, last in `chain`): the
    /// call the regression lies in joins `chain`, and the answer is its callee to dig
    /// into next, or why the dig stops here.
    fn step(
        &mut self,
        current: &B::F,
        chain: &mut Vec<Link>,
        visited: &mut Vec<B::F>,
    ) -> anyhow::Result<Result<B::F, Stop>> {
        let name = self.builds.name(current);
        let lists = self.builds.calls(current)?;
        let names = |l: &[Call<B::F>]| l.iter().map(|c| c.name.clone()).collect::<Vec<_>>();
        let (previous, now) = (names(&lists.previous), names(&lists.current));
        if previous != now {
            return Ok(Err(Stop::CallListChanged {
                function: name,
                previous,
                current: now,
            }));
        }
        let all = 0..lists.current.len();
        self.layer = (name.clone(), now.clone());
        let found = match self.options.strategy {
            Strategy::Binary => self.binary(current, all)?,
            Strategy::Linear => self.linear(current, all)?,
        };
        let Some((range, mut link)) = found else {
            return Ok(Err(Stop::OwnCode(name)));
        };
        if range.len() > 1 {
            return Ok(Err(Stop::Spread {
                function: name,
                calls: now[range].to_vec(),
            }));
        }
        let call = &lists.current[range.start];
        let depth = chain.len();
        link.function = call.name.clone();
        link.depth = depth;
        link.external = call.callee.is_none();
        chain.push(link);
        let Some(callee) = call.callee.clone() else {
            return Ok(Err(Stop::External(call.name.clone())));
        };
        let options = self.options;
        if options
            .ignore
            .iter()
            .any(|p| p.matches(&call.name, &call.name))
        {
            return Ok(Err(Stop::Ignored(call.name.clone())));
        }
        if visited.contains(&callee) {
            return Ok(Err(Stop::Recursion(call.name.clone())));
        }
        if options.depth.is_some_and(|d| depth >= d) {
            return Ok(Err(Stop::Depth(depth)));
        }
        visited.push(callee.clone());
        Ok(Ok(callee))
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

    fn worse(&mut self, f: &B::F, range: std::ops::Range<usize>) -> anyhow::Result<Option<Link>> {
        let samples = self.builds.piece(f, range.clone());
        let (function, names) = &self.layer;
        let what = format!(
            "in {function}, the call{} {}",
            if range.len() == 1 { "" } else { "s" },
            names.get(range).unwrap_or_default().join(", ")
        );
        let comparison = self.decide(&samples, || what)?;
        Ok((comparison.verdict == Verdict::Regressed).then(|| Link {
            function: String::new(),
            depth: 0,
            external: false,
            samples,
            comparison,
        }))
    }

    /// BinaryFind: the narrowest piece of `range` that got worse, with its comparison.
    fn binary(
        &mut self,
        f: &B::F,
        range: std::ops::Range<usize>,
    ) -> anyhow::Result<Option<(std::ops::Range<usize>, Link)>> {
        if range.is_empty() {
            return Ok(None);
        }
        let Some(link) = self.worse(f, range.clone())? else {
            return Ok(None);
        };
        if range.len() == 1 {
            return Ok(Some((range, link)));
        }
        let middle = range.start + range.len() / 2;
        if let Some(found) = self.binary(f, range.start..middle)? {
            return Ok(Some(found));
        }
        if let Some(found) = self.binary(f, middle..range.end)? {
            return Ok(Some(found));
        }
        // Worse as a whole, neither half alone: the piece is the answer.
        Ok(Some((range, link)))
    }

    /// LinearFind: the first call of `range` that got worse.
    fn linear(
        &mut self,
        f: &B::F,
        range: std::ops::Range<usize>,
    ) -> anyhow::Result<Option<(std::ops::Range<usize>, Link)>> {
        for i in range {
            if let Some(link) = self.worse(f, i..i + 1)? {
                return Ok(Some((i..i + 1, link)));
            }
        }
        Ok(None)
    }
}

/// Dig from `inspected` down to the smallest piece of code that got worse.
pub fn dig<B: Builds>(builds: &B, inspected: &B::F, options: &Options) -> anyhow::Result<Outcome> {
    let mut search = Search {
        builds,
        options,
        comparisons: 0,
        undecided: Vec::new(),
        layer: (String::new(), Vec::new()),
    };
    let samples = builds.cost(inspected);
    let comparison = search.decide(&samples, || builds.name(inspected))?;
    let regressed = comparison.verdict == Verdict::Regressed;
    let undecided = comparison.verdict == Verdict::Inconclusive;
    let mut chain = vec![Link {
        function: builds.name(inspected),
        depth: 0,
        external: false,
        samples,
        comparison,
    }];
    if !regressed {
        return Ok(Outcome {
            stopped: if undecided {
                Stop::Undecided(chain[0].function.clone())
            } else {
                Stop::NoRegression
            },
            chain,
            bottleneck: None,
            comparisons: search.comparisons,
            undecided: search.undecided,
        });
    }
    let mut visited = vec![inspected.clone()];
    let mut current = inspected.clone();
    let stopped = loop {
        match search.step(&current, &mut chain, &mut visited)? {
            Ok(callee) => current = callee,
            Err(stop) => break stop,
        }
    };
    Ok(Outcome {
        bottleneck: chain.last().map(|l| l.function.clone()),
        chain,
        stopped,
        comparisons: search.comparisons,
        undecided: search.undecided,
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
        fn piece(&self, f: &&'static str, range: std::ops::Range<usize>) -> Samples {
            let c = &self.calls[f][range];
            self.samples(
                c.iter().map(|&(_, p, _)| p).sum(),
                c.iter().map(|&(_, _, n)| n).sum(),
            )
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

    /// main calls 16 workers and `outer` 14th; outer -> deep, whose own code grew 30%.
    fn program(deep_current: f64) -> Scripted {
        let mut main: Vec<(&'static str, f64, f64)> =
            (0..16).map(|i| (["w"; 16][i], 100.0, 100.0)).collect();
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
        // LinearFind looks at one call at a time and finds none worse: it can only blame
        // main's own code.
        o.strategy = Strategy::Linear;
        let out = dig(&b, &"main", &o).unwrap();
        assert_eq!(out.stopped, Stop::OwnCode("main".into()));
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
}
