//! Joining the counted sites of an optimised build with the call lines of a build
//! without optimisation, and comparing their counts group by group.
//!
//! A counted site stands for calls written at some source lines: an inlined copy for its
//! call site's line (several, where copies share their entry point), a function's entry
//! for the lines of the direct calls to it, a copy without a call line (calls merged into
//! one) for the lines of its function that no other site stands for. A line may lead to several sites (a call the
//! optimizer duplicated into two paths, or partly inlined). The sites and lines that are
//! linked, directly or through each other, form a group: within it, the calls counted
//! must equal the calls the debug build made at those lines, whatever the optimizer did
//! with them. Most groups are one copy and one line.

use std::collections::{BTreeSet, HashMap, HashSet};

use sbs_reports::model::{CheckGroup, CheckVerdict, InvocationCheck};

/// The calls the build without optimisation made to the pattern's functions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Truth {
    /// Per source line of the calling instruction (`file:line`): calls made there.
    pub by_line: HashMap<String, u64>,
    /// Calls from an instruction without a source line (or from another object).
    pub without_line: u64,
    /// The function each line's calls are made in (its demangled name).
    pub function_of: HashMap<String, String>,
}

/// One counted site of the optimised build, for one pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Site {
    /// The report row it is counted in.
    pub row: String,
    /// The source lines of the calls it counts (empty: none known).
    pub lines: Vec<String>,
    /// The function it lies in (demangled), for a site without lines: the calls it counts
    /// were made at the lines of that function that no other site stands for.
    pub function: Option<String>,
    /// Its count, and at most how many calls one counted pass stands for.
    pub count: u64,
    pub calls_per_pass: u64,
    /// A pass may continue a call counted at another site: none of its own.
    pub may_continue: bool,
    /// Its count may be off with no bound (an uncertain entry).
    pub unbounded: bool,
}

/// The label of the group of sites and calls without a source line.
pub const NO_LINE: &str = "(no call line)";

/// Compare the `sites` counted for `metric` with the calls of `truth`. Sites whose
/// calls are all written at `unknown` lines (where the debug build inlines the function
/// too: code of the precompiled standard library) are left out, as are groups in which
/// nothing was counted or made; notes say how many. `with_code`, when known: the call
/// lines of the measured program's copies of the function that have code; a group with no
/// site whose lines are none of them is `NoCode` (nothing there to count).
pub fn compare(
    metric: &str,
    debug_program: &str,
    sites: &[Site],
    truth: &Truth,
    unknown: &HashSet<String>,
    with_code: Option<&HashSet<String>>,
) -> InvocationCheck {
    let (sites, inlined_too): (Vec<&Site>, Vec<&Site>) = sites
        .iter()
        .partition(|s| s.lines.is_empty() || !s.lines.iter().all(|l| unknown.contains(l)));
    let mut out: Vec<CheckGroup> = link(&sites, truth)
        .components()
        .into_iter()
        .map(|keys| group(&keys, &sites, truth, with_code))
        .collect();
    let idle = out.len();
    out.retain(|g| g.counted > 0 || g.made > 0);
    let idle = idle - out.len();
    // What disagrees first, the most calls first; then by line.
    out.sort_by(|a, b| {
        let rank = |g: &CheckGroup| match g.verdict {
            CheckVerdict::Differs => 0,
            CheckVerdict::Uncertain => 1,
            CheckVerdict::NoCode => 2,
            _ => 3,
        };
        rank(a)
            .cmp(&rank(b))
            .then(b.made.max(b.counted).cmp(&a.made.max(a.counted)))
            .then(a.lines.cmp(&b.lines))
    });
    let mut notes = Vec::new();
    if !inlined_too.is_empty() {
        let calls: u64 = inlined_too.iter().map(|s| s.count).sum();
        notes.push(format!(
            "{} site(s) ({calls} calls counted) are not checked: {debug_program} inlines the \
             function at their lines too (code compiled with optimisation, such as the \
             standard library's), so it does not show those calls",
            inlined_too.len()
        ));
    }
    if idle > 0 {
        notes.push(format!(
            "{idle} group(s) of sites and lines where neither build made a call are not listed"
        ));
    }
    InvocationCheck {
        metric: metric.to_string(),
        debug_program: debug_program.to_string(),
        counted: sites.iter().map(|s| s.count).sum(),
        made: truth.by_line.values().sum::<u64>() + truth.without_line,
        groups: out,
        notes,
    }
}

/// Every site linked to the lines it stands for, and every line of the truth.
fn link(sites: &[&Site], truth: &Truth) -> Groups {
    let claimed: HashSet<&String> = sites.iter().flat_map(|s| &s.lines).collect();
    let mut groups = Groups::default();
    for (i, site) in sites.iter().enumerate() {
        let node = groups.node(Key::Site(i));
        let mut lines: Vec<&String> = site.lines.iter().collect();
        if lines.is_empty() || site.may_continue {
            // A copy DWARF gives no call line (calls the optimizer merged into one), or
            // code that calls share: the lines of its function that no other site stands
            // for (calls whose own copies the optimizer left no trace of may pass there).
            lines.extend(
                truth
                    .function_of
                    .iter()
                    .filter(|(line, f)| {
                        Some(*f) == site.function.as_ref() && !claimed.contains(line)
                    })
                    .map(|(line, _)| line),
            );
        }
        if lines.is_empty() {
            groups.join(node, Key::Line(NO_LINE.to_string()));
        }
        for line in lines {
            groups.join(node, Key::Line(line.clone()));
        }
    }
    for line in truth.by_line.keys() {
        groups.node(Key::Line(line.clone()));
    }
    if truth.without_line > 0 {
        groups.node(Key::Line(NO_LINE.to_string()));
    }
    groups
}

/// The group of `keys`: its sites' counts against its lines' calls.
fn group(
    keys: &[Key],
    sites: &[&Site],
    truth: &Truth,
    with_code: Option<&HashSet<String>>,
) -> CheckGroup {
    let mut g = CheckGroup {
        lines: Vec::new(),
        rows: Vec::new(),
        counted: 0,
        counted_low: 0,
        counted_high: 0,
        made: 0,
        verdict: CheckVerdict::Equal,
    };
    let mut rows = BTreeSet::new();
    let mut unbounded = false;
    for key in keys {
        match key {
            Key::Site(i) => {
                let s = sites[*i];
                g.counted += s.count;
                g.counted_high += s.count.saturating_mul(s.calls_per_pass.max(1));
                if !s.may_continue {
                    g.counted_low += s.count;
                }
                unbounded |= s.unbounded;
                rows.insert(s.row.clone());
            }
            Key::Line(line) => {
                g.made += match line.as_str() {
                    NO_LINE => truth.without_line,
                    _ => truth.by_line.get(line).copied().unwrap_or(0),
                };
                g.lines.push(line.clone());
            }
        }
    }
    g.lines.sort();
    g.rows = rows.into_iter().collect();
    // A group that states a bound (some of its sites count passes that may be several
    // calls, or none) differs when the calls made lie outside it, whatever its other
    // sites; only a group whose count is all it states may be off at an uncertain site.
    let states_a_bound = g.counted_low < g.counted_high;
    g.verdict = if g.counted == g.made {
        CheckVerdict::Equal
    } else if g.counted_low <= g.made && g.made <= g.counted_high {
        CheckVerdict::Bounded
    } else if unbounded && !states_a_bound {
        CheckVerdict::Uncertain
    } else if g.rows.is_empty()
        && !g.lines.is_empty()
        && with_code.is_some_and(|w| g.lines.iter().all(|l| l != NO_LINE && !w.contains(l)))
    {
        // No site, and no copy with code at its lines: nothing there to count.
        CheckVerdict::NoCode
    } else {
        CheckVerdict::Differs
    };
    g
}

/// A node of the groups: a site (by index) or a source line.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Key {
    Site(usize),
    Line(String),
}

/// Union-find over sites and lines.
#[derive(Default)]
struct Groups {
    keys: Vec<Key>,
    index: HashMap<Key, usize>,
    parent: Vec<usize>,
}

impl Groups {
    fn node(&mut self, key: Key) -> usize {
        if let Some(&i) = self.index.get(&key) {
            return i;
        }
        let i = self.keys.len();
        self.keys.push(key.clone());
        self.index.insert(key, i);
        self.parent.push(i);
        i
    }

    fn root(&mut self, mut i: usize) -> usize {
        while self.parent[i] != i {
            self.parent[i] = self.parent[self.parent[i]];
            i = self.parent[i];
        }
        i
    }

    fn join(&mut self, a: usize, key: Key) {
        let b = self.node(key);
        let (ra, rb) = (self.root(a), self.root(b));
        if ra != rb {
            self.parent[ra.max(rb)] = ra.min(rb);
        }
    }

    /// The keys of each group, in the order their first key was added.
    fn components(&mut self) -> Vec<Vec<Key>> {
        let mut of_root: HashMap<usize, usize> = HashMap::new();
        let mut out: Vec<Vec<Key>> = Vec::new();
        for i in 0..self.keys.len() {
            let r = self.root(i);
            let g = *of_root.entry(r).or_insert_with(|| {
                out.push(Vec::new());
                out.len() - 1
            });
            out[g].push(self.keys[i].clone());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(row: &str, lines: &[&str], count: u64, calls_per_pass: u64) -> Site {
        Site {
            row: row.into(),
            lines: lines.iter().map(|l| l.to_string()).collect(),
            function: None,
            count,
            calls_per_pass,
            may_continue: false,
            unbounded: false,
        }
    }

    fn truth(lines: &[(&str, u64)], without_line: u64) -> Truth {
        Truth {
            by_line: lines.iter().map(|(l, n)| (l.to_string(), *n)).collect(),
            without_line,
            function_of: HashMap::new(),
        }
    }

    #[test]
    fn each_copy_meets_its_line_and_a_shared_entry_joins_two_lines() {
        let sites = [
            // One copy, one line: equal.
            site("push [a.rs:3]", &["a.rs:3"], 10, 1),
            // Two copies sharing an entry point (a merged tail) for lines 7 and 9.
            site("push [a.rs:7]", &["a.rs:7"], 4, 1),
            site("push [shared]", &["a.rs:7", "a.rs:9"], 6, 1),
            // An unrolled loop: 1 pass counted, 8 calls made, within the bound.
            site("push [b.rs:2]", &["b.rs:2"], 1, 8),
            // The out-of-line copy, called from line 20 only.
            site("push", &["c.rs:20"], 5, 1),
            site("push [e.rs:5]", &["e.rs:5"], 0, 1),
        ];
        let t = truth(
            &[
                ("a.rs:3", 10),
                ("a.rs:7", 4),
                ("a.rs:9", 3),
                ("b.rs:2", 8),
                ("c.rs:20", 5),
                ("d.rs:1", 2),
            ],
            1,
        );
        let check = compare("invocations.push", "dbg", &sites, &t, &HashSet::new(), None);
        assert_eq!((check.counted, check.made), (26, 33));
        let by_first_line: HashMap<&str, &CheckGroup> = check
            .groups
            .iter()
            .map(|g| (g.lines[0].as_str(), g))
            .collect();
        let g = by_first_line["a.rs:7"];
        assert_eq!(g.lines, ["a.rs:7", "a.rs:9"]);
        assert_eq!(
            (g.counted, g.made, g.verdict),
            (10, 7, CheckVerdict::Differs)
        );
        assert_eq!(by_first_line["a.rs:3"].verdict, CheckVerdict::Equal);
        assert_eq!(by_first_line["b.rs:2"].verdict, CheckVerdict::Bounded);
        assert_eq!(by_first_line["c.rs:20"].verdict, CheckVerdict::Equal);
        // A line no site stands for: calls made, none counted.
        let d = by_first_line["d.rs:1"];
        assert_eq!(
            (d.counted, d.made, d.verdict),
            (0, 2, CheckVerdict::Differs)
        );
        assert!(d.rows.is_empty());
        let none = by_first_line[NO_LINE];
        // Nothing counted, nothing made: not listed.
        assert!(!by_first_line.contains_key("e.rs:5"));
        assert_eq!((none.made, none.verdict), (1, CheckVerdict::Differs));
        // What differs comes first, the most calls first.
        let order: Vec<&str> = check.groups.iter().map(|g| g.lines[0].as_str()).collect();
        assert_eq!(order[..3], ["a.rs:7", "d.rs:1", NO_LINE]);
        assert_eq!(check.differing().count(), 3);
    }

    #[test]
    fn a_site_without_a_line_meets_the_calls_without_one() {
        let sites = [site("push [indirect only]", &[], 3, 1)];
        let check = compare("m", "dbg", &sites, &truth(&[], 3), &HashSet::new(), None);
        assert_eq!(check.groups.len(), 1);
        assert_eq!(check.groups[0].verdict, CheckVerdict::Equal);
        assert_eq!(check.groups[0].lines, [NO_LINE]);
    }
}

#[cfg(test)]
mod unknown_lines {
    use super::*;

    #[test]
    fn sites_at_lines_the_debug_build_inlines_too_are_left_out_and_said() {
        let sites = [
            Site {
                row: "push [std]".into(),
                lines: vec!["std.rs:58".into()],
                function: None,
                count: 2,
                calls_per_pass: 1,
                may_continue: false,
                unbounded: false,
            },
            Site {
                row: "push [a.rs:1]".into(),
                lines: vec!["a.rs:1".into()],
                function: None,
                count: 4,
                calls_per_pass: 1,
                may_continue: false,
                unbounded: false,
            },
        ];
        let truth = Truth {
            by_line: [("a.rs:1".to_string(), 4)].into(),
            without_line: 0,
            function_of: HashMap::new(),
        };
        let unknown: HashSet<String> = ["std.rs:58".to_string()].into();
        let check = compare("m", "dbg", &sites, &truth, &unknown, None);
        assert_eq!(check.groups.len(), 1);
        assert_eq!(check.groups[0].verdict, CheckVerdict::Equal);
        assert_eq!(check.counted, 4);
        assert!(
            check.notes[0].starts_with("1 site(s) (2 calls counted)"),
            "{:?}",
            check.notes
        );
    }
}

#[cfg(test)]
mod merged_calls {
    use super::*;

    #[test]
    fn a_copy_without_a_call_line_meets_the_unclaimed_lines_of_its_function() {
        // parse_escape's pushes merged into one copy without a call line: its calls were
        // written at lines 887 and 890; line 880 has a copy of its own, and another
        // function's line is not taken.
        let site = |row: &str, lines: &[&str], count| Site {
            row: row.into(),
            lines: lines.iter().map(|l| l.to_string()).collect(),
            function: Some("parse_escape".into()),
            count,
            calls_per_pass: 1,
            may_continue: false,
            unbounded: false,
        };
        let sites = [
            site("push [merged]", &[], 7),
            site("push [880]", &["r.rs:880"], 3),
        ];
        let truth = Truth {
            by_line: [
                ("r.rs:880", 3),
                ("r.rs:887", 5),
                ("r.rs:890", 2),
                ("s.rs:9", 4),
            ]
            .map(|(l, n)| (l.to_string(), n))
            .into(),
            without_line: 0,
            function_of: [
                ("r.rs:880", "parse_escape"),
                ("r.rs:887", "parse_escape"),
                ("r.rs:890", "parse_escape"),
                ("s.rs:9", "other"),
            ]
            .map(|(l, f)| (l.to_string(), f.to_string()))
            .into(),
        };
        let check = compare("m", "dbg", &sites, &truth, &HashSet::new(), None);
        let merged = check
            .groups
            .iter()
            .find(|g| g.rows == ["push [merged]"])
            .expect("the merged copy's group");
        assert_eq!(merged.lines, ["r.rs:887", "r.rs:890"]);
        assert_eq!(
            (merged.counted, merged.made, merged.verdict),
            (7, 7, CheckVerdict::Equal)
        );
        assert_eq!(
            check.differing().count(),
            1,
            "only s.rs:9, no site: {check:?}"
        );
    }
}

#[cfg(test)]
mod shared_code {
    use super::*;

    #[test]
    fn code_that_calls_share_is_bounded_from_none_to_its_count() {
        // regex-syntax's `visit`: pushes at lines 218 and 246 share code without a call
        // line that some of them enter directly (24 of 48 at line 246), the others after
        // their own entry. Counted 22 + 24 + 70 = 116 for 70 made: within [46, 116].
        let site = |row: &str, lines: &[&str], count, may_continue| Site {
            row: row.into(),
            lines: lines.iter().map(|l| l.to_string()).collect(),
            function: Some("visit".into()),
            count,
            calls_per_pass: 1,
            may_continue,
            unbounded: false,
        };
        let sites = [
            site("push [218]", &["v.rs:218"], 22, false),
            site("push [246]", &["v.rs:246"], 24, false),
            site("push [shared]", &["v.rs:218", "v.rs:246"], 70, true),
        ];
        let truth = Truth {
            by_line: [("v.rs:218", 22), ("v.rs:246", 48)]
                .map(|(l, n)| (l.to_string(), n))
                .into(),
            without_line: 0,
            function_of: HashMap::new(),
        };
        let check = compare("m", "dbg", &sites, &truth, &HashSet::new(), None);
        assert_eq!(check.groups.len(), 1, "{:#?}", check.groups);
        let g = &check.groups[0];
        assert_eq!(
            (g.counted, g.counted_low, g.counted_high, g.made),
            (116, 46, 116, 70)
        );
        assert_eq!(g.verdict, CheckVerdict::Bounded);
        // Had the shared code been counted as calls of its own, the group would differ.
        let own = [
            sites[0].clone(),
            sites[1].clone(),
            site("s", &["v.rs:218"], 70, false),
        ];
        let check = compare("m", "dbg", &own, &truth, &HashSet::new(), None);
        assert_eq!(check.groups[0].verdict, CheckVerdict::Differs);
    }
}

#[cfg(test)]
mod stated_bounds {
    use super::*;

    fn site(row: &str, count: u64, calls_per_pass: u64, unbounded: bool) -> Site {
        Site {
            row: row.into(),
            lines: vec!["t.rs:443".into(), "t.rs:445".into()],
            function: None,
            count,
            calls_per_pass,
            may_continue: false,
            unbounded,
        }
    }

    fn made(n: u64) -> Truth {
        Truth {
            by_line: [("t.rs:443".to_string(), n)].into(),
            without_line: 0,
            function_of: HashMap::new(),
        }
    }

    #[test]
    fn a_bound_that_misses_the_calls_made_differs_even_with_an_uncertain_site() {
        // tokei's `range_trie.rs:443/445`: bounded 200 to 300, 100 made. One of its sites
        // has uncertain entries, but the group states a bound, and it misses.
        let sites = [site("a", 100, 1, true), site("b", 100, 2, false)];
        let check = compare("m", "dbg", &sites, &made(100), &HashSet::new(), None);
        let g = &check.groups[0];
        assert_eq!((g.counted_low, g.counted_high, g.made), (200, 300, 100));
        assert_eq!(g.verdict, CheckVerdict::Differs);
        // Within it: bounded.
        let check = compare("m", "dbg", &sites, &made(250), &HashSet::new(), None);
        assert_eq!(check.groups[0].verdict, CheckVerdict::Bounded);
        // A group whose uncertain site states no bound is off where the report said.
        let check = compare("m", "dbg", &sites[..1], &made(90), &HashSet::new(), None);
        assert_eq!(check.groups[0].verdict, CheckVerdict::Uncertain);
    }

    #[test]
    fn calls_at_lines_whose_copies_have_no_code_are_not_a_difference() {
        // fd's derived clones of `Copy` values (`map.rs:212-222`): made in the debug
        // build, no code in the release build, nothing counted.
        let with_code: HashSet<String> = ["t.rs:500".to_string()].into();
        let check = compare(
            "m",
            "dbg",
            &[],
            &made(40),
            &HashSet::new(),
            Some(&with_code),
        );
        assert_eq!(check.groups[0].verdict, CheckVerdict::NoCode);
        // Without that knowledge, with a copy that has code at the line, or with a
        // counted site, it differs.
        let check = compare("m", "dbg", &[], &made(40), &HashSet::new(), None);
        assert_eq!(check.groups[0].verdict, CheckVerdict::Differs);
        let coded: HashSet<String> = ["t.rs:443".to_string()].into();
        let check = compare("m", "dbg", &[], &made(40), &HashSet::new(), Some(&coded));
        assert_eq!(check.groups[0].verdict, CheckVerdict::Differs);
        let sites = [site("a", 10, 1, false)];
        let check = compare(
            "m",
            "dbg",
            &sites,
            &made(40),
            &HashSet::new(),
            Some(&with_code),
        );
        assert_eq!(check.groups[0].verdict, CheckVerdict::Differs);
    }
}
