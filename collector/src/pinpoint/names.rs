//! Names a reader can tell apart: legacy-mangled Rust monomorphizations share one
//! demangled name (`serde_json::de::Deserializer::deserialize_seq` four times), so the
//! chain shows them with the generic arguments DWARF gives them
//! (`...::deserialize_seq<serde_json::value::de::ValueVisitor>`), else with their hash.
//!
//! The builds are still matched on the plain demangled name: a hash differs between two
//! builds of one source, and a build without DWARF would otherwise never match one with.

use std::collections::{HashMap, HashSet};

use sbs_probes::demangle::demangle;
use sbs_probes::elf::Image;

/// Start address -> the label of each function whose demangled name another function of
/// the image shares.
pub fn monomorph_labels(image: &Image) -> HashMap<u64, String> {
    let mut by_label: HashMap<String, Vec<(u64, &str)>> = HashMap::new();
    for f in &image.functions {
        let label = demangle(&f.name).label;
        let same = by_label.entry(label).or_default();
        if !same.iter().any(|&(a, _)| a == f.address) {
            same.push((f.address, &f.name));
        }
    }
    by_label.retain(|_, fs| fs.len() > 1);
    let raws: HashSet<String> = by_label
        .values()
        .flatten()
        .map(|(_, raw)| raw.to_string())
        .collect();
    let data = image.dwarf_data().unwrap_or(image.data());
    // Without DWARF (or unreadable), the hash tells them apart.
    let generic = sbs_probes::dwarf::generic_names(data, &raws).unwrap_or_default();
    let mut labels = HashMap::new();
    for (label, fs) in &by_label {
        for &(address, raw) in fs {
            let named = match (generic.get(raw), demangle(raw).hash) {
                (Some(name), _) => with_generic_name(label, name),
                (None, Some(hash)) => format!("{label} [{hash}]"),
                (None, None) => format!("{label} [@{address:#x}]"),
            };
            labels.insert(address, named);
        }
    }
    // Still equal (DWARF names without the arguments that differ): the address.
    let mut seen: HashMap<String, usize> = HashMap::new();
    for l in labels.values() {
        *seen.entry(l.clone()).or_default() += 1;
    }
    for (address, l) in labels.iter_mut() {
        if seen[l.as_str()] > 1 {
            *l = format!("{l} [@{address:#x}]");
        }
    }
    labels
}

/// Add to `labels` (start address -> label, the monomorphizations' from
/// [`monomorph_labels`]) the functions the linker folded into one: several names whose
/// code is the same bytes at one address (identical code folding, LLVM's merged
/// functions, an alias). Their costs are those of every name's calls, so the label names
/// the others too: `a::f (also named b::g)`, `a::f (also named b::g and 2 others)`. The
/// first name is the one [`Image::function_at`] gives the address.
pub fn add_folded(image: &Image, labels: &mut HashMap<u64, String>) {
    let mut names: HashMap<u64, Vec<String>> = HashMap::new();
    for f in &image.functions {
        let label = demangle(&f.name).label;
        let same = names.entry(f.address).or_default();
        if !same.contains(&label) {
            same.push(label);
        }
    }
    for (address, mut all) in names.into_iter().filter(|(_, n)| n.len() > 1) {
        let Some(f) = image.function_at(address).filter(|f| f.address == address) else {
            continue;
        };
        let plain = demangle(&f.name).label;
        let first = labels
            .get(&address)
            .cloned()
            .unwrap_or_else(|| plain.clone());
        all.retain(|l| l != &plain);
        all.sort();
        let others = match all.len() {
            0 => continue,
            1 => all[0].clone(),
            n => format!("{} and {} others", all[0], n - 1),
        };
        labels.insert(address, format!("{first} (also named {others})"));
    }
}

/// `a::b::work` and DWARF's `work<u8>` give `a::b::work<u8>`.
fn with_generic_name(label: &str, name: &str) -> String {
    match label.rsplit_once("::") {
        Some((prefix, _)) => format!("{prefix}::{name}"),
        None => name.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generic_name_replaces_the_last_segment() {
        assert_eq!(with_generic_name("m::work", "work<u8>"), "m::work<u8>");
        assert_eq!(
            with_generic_name("<X as T>::f", "f<u32>"),
            "<X as T>::f<u32>"
        );
        assert_eq!(with_generic_name("work", "work<u8>"), "work<u8>");
    }
}
