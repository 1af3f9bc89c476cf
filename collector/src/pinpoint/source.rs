//! Inside a bottleneck's code: into the functions the compiler inlined into it, and down
//! to the source lines whose cost grew.
//!
//! A function's cost includes the code the compiler inlined into it. Each address of
//! the function has a cost (callgrind's per-instruction counts with `--dump-instr=yes`
//! and the inclusive cost of its calls; for allocations, the blocks of the DHAT stacks
//! whose frame in the function is that call), the DWARF inlined instances
//! (`DW_TAG_inlined_subroutine`, [`sbs_probes::dwarf`]) say which inlined calls hold it,
//! outermost first, and the line tables and call lines give each frame's source line.
//!
//! From the function, the steps go into the inlined function that explains the largest
//! material share of the change of the code they are in (as the chain does with calls),
//! and stop where none does, or where the inlined calls themselves differ between the
//! builds (the code there changed). The lines that grew most are then the lines of the
//! last step's own frame: for code inlined deeper, the line of the call that inlined it.
//! The builds are compared by the inlined functions' demangled names and by `file:line`,
//! a file of one build matched to the other's by the longest common ending of their
//! paths (two checkouts of one crate); a line that moved in the current build (code
//! added above it) shows as one line less and another more.

use std::collections::{BTreeSet, HashMap};

use sbs_probes::demangle::demangle;
use sbs_probes::dwarf::InlinedInstance;
use sbs_probes::elf::Image;

use super::search::{Place, MATERIAL_SHARE};

/// One address of the function with a cost, as the steps read it.
#[derive(Debug, Clone, Default, PartialEq)]
struct Spot {
    /// The inlined functions holding it, outermost first.
    inlined: Vec<String>,
    /// The source line of each frame, the function's own first: one more than `inlined`
    /// (the line of the call that inlined the next function, then the address's own).
    lines: Vec<String>,
    /// Its mean cost over the runs.
    cost: f64,
}

/// One build's view of a function's code (of every function of a recursive cycle).
#[derive(Debug, Default)]
pub struct Code {
    spots: Vec<Spot>,
    /// Each inlined instance with code in it, as the chain of inlined functions that
    /// leads to it (itself last).
    instances: Vec<Vec<String>>,
}

/// Read the code of the functions starting at `starts` in `image`, with the cost of each
/// address (`cost_at`: address -> mean cost).
pub fn read(image: &Image, starts: &[u64], cost_at: &HashMap<u64, f64>) -> Code {
    let data = image.dwarf_data().unwrap_or(image.data());
    let ranges: Vec<(u64, u64)> = starts
        .iter()
        .filter_map(|&s| image.functions.iter().find(|f| f.address == s))
        .map(|f| (f.address, f.address + f.size))
        .collect();
    let inside = |a: u64| ranges.iter().any(|&(lo, hi)| lo <= a && a < hi);
    let (Some(low), Some(high)) = (
        ranges.iter().map(|r| r.0).min(),
        ranges.iter().map(|r| r.1).max(),
    ) else {
        return Code::default();
    };
    // One walk of the DWARF for all the functions (a recursive cycle has several).
    let mut instances = sbs_probes::dwarf::inlined_within(data, low, high).unwrap_or_default();
    instances.retain(|i| i.ranges.iter().any(|&(a, _)| inside(a)));
    // Outermost first: an instance holds the instances nested in it, so it is larger.
    instances.sort_by_key(|i| std::cmp::Reverse(size(i)));
    let mut addresses: Vec<u64> = cost_at.keys().copied().filter(|&a| inside(a)).collect();
    addresses.sort_unstable();
    let lines = sbs_probes::dwarf::lines_at(data, &addresses).unwrap_or_default();
    let spots = addresses
        .iter()
        .map(|&a| {
            let holding: Vec<&InlinedInstance> = instances.iter().filter(|i| holds(i, a)).collect();
            let own = lines.get(&a).cloned().unwrap_or_else(|| "?".to_string());
            Spot {
                inlined: holding.iter().map(|i| name(i)).collect(),
                lines: holding
                    .iter()
                    .map(|i| i.call_line.clone().unwrap_or_else(|| "?".to_string()))
                    .chain(std::iter::once(own))
                    .collect(),
                cost: cost_at[&a],
            }
        })
        .collect();
    // Each instance's chain: the instances before it that hold all its code, then itself.
    let chains = instances
        .iter()
        .enumerate()
        .map(|(k, i)| {
            instances[..k]
                .iter()
                .filter(|o| i.ranges.iter().all(|r| within(o, *r)))
                .chain(std::iter::once(i))
                .map(name)
                .collect()
        })
        .collect();
    Code {
        spots,
        instances: chains,
    }
}

fn size(i: &InlinedInstance) -> u64 {
    i.ranges.iter().map(|(a, b)| b - a).sum()
}

fn holds(i: &InlinedInstance, address: u64) -> bool {
    i.ranges.iter().any(|&(a, b)| a <= address && address < b)
}

/// Whether the range `r` lies inside one of `i`'s ranges.
fn within(i: &InlinedInstance, (from, to): (u64, u64)) -> bool {
    i.ranges.iter().any(|&(a, b)| a <= from && to <= b)
}

fn name(i: &InlinedInstance) -> String {
    demangle(&i.demangled).label
}

/// The file of `line` (`file:line`) and its number.
fn file_of(line: &str) -> (&str, &str) {
    line.rsplit_once(':').unwrap_or((line, ""))
}

/// Give the previous build's files the names of the current build's where their paths
/// differ but end alike (the same crate built from two directories): each current file
/// takes the previous file with the longest common ending, when only one has it.
pub fn match_files(previous: &mut Code, current: &Code) {
    let files = |c: &Code| -> BTreeSet<String> {
        c.spots
            .iter()
            .flat_map(|s| &s.lines)
            .map(|l| file_of(l).0.to_string())
            .collect()
    };
    let (ours, theirs) = (files(current), files(previous));
    let common = |a: &str, b: &str| {
        a.rsplit('/')
            .zip(b.rsplit('/'))
            .take_while(|(x, y)| x == y)
            .count()
    };
    let mut renamed: HashMap<String, String> = HashMap::new();
    for file in ours.iter().filter(|f| !theirs.contains(*f)) {
        let best = theirs.iter().map(|t| common(file, t)).max().unwrap_or(0);
        let matching: Vec<&String> = theirs
            .iter()
            .filter(|t| !ours.contains(*t) && common(file, t) == best)
            .collect();
        if let [one] = matching.as_slice() {
            if best > 0 {
                renamed.insert((*one).clone(), file.clone());
            }
        }
    }
    for line in previous.spots.iter_mut().flat_map(|s| &mut s.lines) {
        let (file, number) = file_of(line);
        if let Some(to) = renamed.get(file) {
            *line = format!("{to}:{number}");
        }
    }
}

/// The steps into the inlined functions that explain the change of `function`'s code
/// (each followed only when it explains a material share of the code it is in), then the
/// lines of the last step's frame that grew most (at most `most`).
pub fn places(previous: &Code, current: &Code, function: &str, most: usize) -> Vec<Place> {
    let mut prefix: Vec<String> = Vec::new();
    let mut out = Vec::new();
    loop {
        let (p, c) = (children(previous, &prefix), children(current, &prefix));
        let next = step(previous, current, &prefix);
        // A function inlined here only in the current build is the changed code itself
        // when it explains the change, unless it is the toolchain's library (a
        // `Vec::with_capacity` added to the function): the change is then the call.
        let added = next
            .as_ref()
            .is_some_and(|(n, _, _)| !p.contains(n) && !library(current, &prefix, n));
        if p != c && !added {
            let whose = prefix.last().map_or(function, String::as_str);
            out.push(Place {
                what: changed(whose, &p, &c),
                previous: under(previous, &prefix),
                current: under(current, &prefix),
            });
            break;
        }
        let Some((next, before, after)) = next else {
            break;
        };
        out.push(Place {
            what: if added {
                format!("inlined {next} (inlined here in the current build only)")
            } else {
                format!("inlined {next}")
            },
            previous: before,
            current: after,
        });
        prefix.push(next);
    }
    let depth = prefix.len();
    let lines = |code: &Code| {
        let mut by: HashMap<String, f64> = HashMap::new();
        for s in code.spots.iter().filter(|s| s.inlined.starts_with(&prefix)) {
            if let Some(line) = s.lines.get(depth) {
                *by.entry(line.clone()).or_default() += s.cost;
            }
        }
        by
    };
    out.extend(
        grown(&lines(previous), &lines(current), most)
            .into_iter()
            .map(|(what, previous, current)| Place {
                what,
                previous,
                current,
            }),
    );
    out
}

/// What changed in the functions inlined into `whose`, from `previous` to `current`.
fn changed(whose: &str, previous: &BTreeSet<String>, current: &BTreeSet<String>) -> String {
    let list = |v: Vec<&String>| {
        if v.is_empty() {
            "none".to_string()
        } else {
            v.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
        }
    };
    format!(
        "the functions inlined into {whose} changed (added: {}; removed: {})",
        list(current.difference(previous).take(5).collect()),
        list(previous.difference(current).take(5).collect())
    )
}

/// Where the toolchain's library sources are: Rust's standard library (rustc names its
/// sources `/rustc/<commit>/...`), the system's C and C++ headers.
const LIBRARY: [&str; 3] = ["/rustc/", "/usr/include/", "/usr/lib/"];

/// Whether the code of `name`, inlined into the code `prefix` leads to, is all from the
/// toolchain's library.
fn library(code: &Code, prefix: &[String], name: &str) -> bool {
    let depth = prefix.len();
    code.spots
        .iter()
        .filter(|s| {
            s.inlined.starts_with(prefix) && s.inlined.get(depth).is_some_and(|n| n == name)
        })
        .filter_map(|s| s.lines.get(depth + 1))
        .all(|l| LIBRARY.iter().any(|p| l.starts_with(p)))
}

/// The names of the functions inlined directly into the code `prefix` leads to.
fn children(code: &Code, prefix: &[String]) -> BTreeSet<String> {
    code.instances
        .iter()
        .filter(|chain| chain.len() == prefix.len() + 1 && chain.starts_with(prefix))
        .map(|chain| chain[prefix.len()].clone())
        .collect()
}

/// The cost of the code `prefix` leads to.
fn under(code: &Code, prefix: &[String]) -> f64 {
    code.spots
        .iter()
        .filter(|s| s.inlined.starts_with(prefix))
        .map(|s| s.cost)
        .sum()
}

/// The function inlined into the code `prefix` leads to whose change is the largest,
/// with its cost in each build, when that change is a material share of the code's.
fn step(previous: &Code, current: &Code, prefix: &[String]) -> Option<(String, f64, f64)> {
    let total = under(current, prefix) - under(previous, prefix);
    if total <= 0.0 {
        return None;
    }
    let by = |code: &Code| {
        let mut by: HashMap<String, f64> = HashMap::new();
        for s in code.spots.iter().filter(|s| s.inlined.starts_with(prefix)) {
            if let Some(name) = s.inlined.get(prefix.len()) {
                *by.entry(name.clone()).or_default() += s.cost;
            }
        }
        by
    };
    let (next, before, after) = grown(&by(previous), &by(current), 1).pop()?;
    (after - before >= MATERIAL_SHARE * total).then_some((next, before, after))
}

/// The keys whose value grew, with both values, by growth, largest first, at most `most`.
fn grown<K: Clone + Eq + std::hash::Hash + Ord>(
    previous: &HashMap<K, f64>,
    current: &HashMap<K, f64>,
    most: usize,
) -> Vec<(K, f64, f64)> {
    let mut keys: Vec<&K> = previous.keys().chain(current.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut out: Vec<(K, f64, f64)> = keys
        .into_iter()
        .map(|k| {
            let p = previous.get(k).copied().unwrap_or(0.0);
            let c = current.get(k).copied().unwrap_or(0.0);
            (k.clone(), p, c)
        })
        .filter(|(_, p, c)| c > p)
        .collect();
    out.sort_by(|a, b| (b.2 - b.1).total_cmp(&(a.2 - a.1)));
    out.truncate(most);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spot(inlined: &[&str], lines: &[&str], cost: f64) -> Spot {
        Spot {
            inlined: inlined.iter().map(|s| s.to_string()).collect(),
            lines: lines.iter().map(|s| s.to_string()).collect(),
            cost,
        }
    }

    fn code(spots: Vec<Spot>, instances: &[&[&str]]) -> Code {
        Code {
            spots,
            instances: instances
                .iter()
                .map(|c| c.iter().map(|s| s.to_string()).collect())
                .collect(),
        }
    }

    #[test]
    fn the_steps_follow_the_inlined_function_that_explains_the_change_down_to_its_lines() {
        let instances: &[&[&str]] = &[&["any"], &["any", "visit"], &["any", "peek"]];
        let previous = code(
            vec![
                spot(&[], &["a.rs:1"], 100.0),
                spot(&["any"], &["a.rs:2", "b.rs:10"], 50.0),
                spot(&["any", "visit"], &["a.rs:2", "b.rs:11", "c.rs:5"], 10.0),
                spot(&["any", "peek"], &["a.rs:2", "b.rs:12", "d.rs:1"], 40.0),
            ],
            instances,
        );
        let current = code(
            vec![
                spot(&[], &["a.rs:1"], 90.0),
                spot(&["any"], &["a.rs:2", "b.rs:10"], 50.0),
                spot(&["any", "visit"], &["a.rs:2", "b.rs:11", "c.rs:5"], 10.0),
                spot(&["any", "visit"], &["a.rs:2", "b.rs:11", "c.rs:6"], 400.0),
                spot(&["any", "peek"], &["a.rs:2", "b.rs:12", "d.rs:1"], 45.0),
            ],
            instances,
        );
        let p = places(&previous, &current, "f", 3);
        let what: Vec<&str> = p.iter().map(|p| p.what.as_str()).collect();
        assert_eq!(what, ["inlined any", "inlined visit", "c.rs:6"]);
        assert_eq!((p[1].previous, p[1].current), (10.0, 410.0));
    }

    #[test]
    fn inlined_library_calls_added_stop_the_steps_and_a_function_of_the_program_is_entered() {
        let vec = "/rustc/abc/library/alloc/src/vec/mod.rs:3";
        let previous = code(
            vec![spot(&["parse"], &["a.rs:2", "b.rs:10"], 50.0)],
            &[&["parse"]],
        );
        let current = code(
            vec![
                spot(&["parse"], &["a.rs:2", "b.rs:10"], 50.0),
                spot(
                    &["parse", "with_capacity"],
                    &["a.rs:2", "b.rs:11", vec],
                    30.0,
                ),
            ],
            &[&["parse"], &["parse", "with_capacity"]],
        );
        let p = places(&previous, &current, "f", 3);
        let what: Vec<&str> = p.iter().map(|p| p.what.as_str()).collect();
        assert_eq!(
            what,
            [
                "inlined parse",
                "the functions inlined into parse changed (added: with_capacity; removed: none)",
                "b.rs:11"
            ]
        );
        // A function of the program inlined only in the current build, that explains the
        // change, is the changed code: its lines are named.
        let previous = code(vec![spot(&[], &["a.rs:2"], 50.0)], &[]);
        let current = code(
            vec![
                spot(&[], &["a.rs:2"], 50.0),
                spot(&["visit"], &["a.rs:3", "v.rs:7"], 300.0),
            ],
            &[&["visit"]],
        );
        let p = places(&previous, &current, "f", 3);
        let what: Vec<&str> = p.iter().map(|p| p.what.as_str()).collect();
        assert_eq!(
            what,
            [
                "inlined visit (inlined here in the current build only)",
                "v.rs:7"
            ]
        );
    }

    #[test]
    fn a_crate_built_from_another_directory_is_matched_by_the_end_of_its_paths() {
        let mut previous = code(
            vec![spot(&[], &["/registry/serde_json-1.0/src/read.rs:5"], 1.0)],
            &[],
        );
        let current = code(
            vec![spot(&[], &["/work/copy/serde_json-1.0/src/read.rs:5"], 2.0)],
            &[],
        );
        match_files(&mut previous, &current);
        assert_eq!(
            previous.spots[0].lines,
            ["/work/copy/serde_json-1.0/src/read.rs:5"]
        );
    }
}
