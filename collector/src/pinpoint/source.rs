//! Inside a bottleneck's own code: where its own instructions went, by the inlined
//! function they belong to and by source line.
//!
//! A function's own cost includes the code the compiler inlined into it. Callgrind's
//! per-instruction costs (`--dump-instr=yes`) say which instructions ran how often; the
//! DWARF inlined instances (`DW_TAG_inlined_subroutine`, [`sbs_probes::dwarf`]) say which
//! inlined call each instruction belongs to (the innermost one holding it), and the line
//! tables its `file:line`. The two builds are compared on those names: an inlined
//! function by its demangled name, a line by `file:line` (a line that moved in the current
//! build shows as one line less and another more).

use std::collections::HashMap;

use sbs_probes::demangle::demangle;
use sbs_probes::dwarf::InlinedInstance;
use sbs_probes::elf::Image;

use super::search::Place;

/// Per place (`inlined NAME` or the function itself; `file:line`), one build's mean own
/// cost over its runs.
#[derive(Debug, Default)]
pub struct Split {
    /// By inlined function (`None`: the function's own code, outside any).
    pub inlined: HashMap<Option<String>, f64>,
    /// By source line.
    pub lines: HashMap<String, f64>,
}

/// Split the own instructions `own_at` (address -> mean count) of the functions starting
/// at `starts` in `image`.
pub fn split(image: &Image, starts: &[u64], own_at: &HashMap<u64, f64>) -> Split {
    let data = image.dwarf_data().unwrap_or(image.data());
    let ranges: Vec<(u64, u64)> = starts
        .iter()
        .filter_map(|&s| image.functions.iter().find(|f| f.address == s))
        .map(|f| (f.address, f.address + f.size))
        .collect();
    let mut here: Vec<(u64, f64)> = own_at
        .iter()
        .filter(|(a, _)| ranges.iter().any(|(lo, hi)| (lo..hi).contains(a)))
        .map(|(&a, &c)| (a, c))
        .collect();
    here.sort_by_key(|&(a, _)| a);
    let mut out = Split::default();
    let (Some(low), Some(high)) = (
        ranges.iter().map(|r| r.0).min(),
        ranges.iter().map(|r| r.1).max(),
    ) else {
        return out;
    };
    // One walk of the DWARF for all the functions (a recursive cycle has several).
    let instances = sbs_probes::dwarf::inlined_within(data, low, high).unwrap_or_default();
    let addresses: Vec<u64> = here.iter().map(|&(a, _)| a).collect();
    let lines = sbs_probes::dwarf::lines_at(data, &addresses).unwrap_or_default();
    for (a, c) in here {
        let inlined = innermost(&instances, a).map(|i| i.demangled.clone());
        *out.inlined.entry(inlined).or_default() += c;
        if let Some(line) = lines.get(&a) {
            *out.lines.entry(line.clone()).or_default() += c;
        }
    }
    out
}

/// The inlined instance holding `address` whose code is the smallest (the innermost).
fn innermost(instances: &[InlinedInstance], address: u64) -> Option<&InlinedInstance> {
    instances
        .iter()
        .filter(|i| i.ranges.iter().any(|&(a, b)| a <= address && address < b))
        .min_by_key(|i| i.ranges.iter().map(|(a, b)| b - a).sum::<u64>())
}

/// The places whose own cost grew the most from `previous` to `current`, largest first,
/// at most `most` of each kind (inlined functions first, then lines); `function` names
/// the code outside any inlined function.
pub fn places(previous: &Split, current: &Split, function: &str, most: usize) -> Vec<Place> {
    let mut out = Vec::new();
    let inlined = grown(&previous.inlined, &current.inlined, most);
    // Only worth saying when some of the change is in inlined code.
    if inlined.iter().any(|(k, _, _)| k.is_some()) {
        out.extend(inlined.into_iter().map(|(k, p, c)| Place {
            what: match k {
                Some(name) => format!("inlined {}", demangle(&name).label),
                None => format!("{function}'s own code"),
            },
            previous: p,
            current: c,
        }));
    }
    out.extend(
        grown(&previous.lines, &current.lines, most)
            .into_iter()
            .map(|(k, p, c)| Place {
                what: k,
                previous: p,
                current: c,
            }),
    );
    out
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

    #[test]
    fn the_places_that_grew_most_come_first_and_shrinking_ones_are_left_out() {
        let previous = Split {
            inlined: HashMap::from([(None, 100.0), (Some("mix".to_string()), 10.0)]),
            lines: HashMap::from([("a.c:3".to_string(), 50.0), ("a.c:4".to_string(), 60.0)]),
        };
        let current = Split {
            inlined: HashMap::from([(None, 90.0), (Some("mix".to_string()), 410.0)]),
            lines: HashMap::from([("a.c:3".to_string(), 40.0), ("a.c:4".to_string(), 460.0)]),
        };
        let p = places(&previous, &current, "f", 3);
        let what: Vec<&str> = p.iter().map(|p| p.what.as_str()).collect();
        assert_eq!(what, ["inlined mix", "a.c:4"]);
        assert_eq!((p[1].previous, p[1].current), (60.0, 460.0));
    }
}
