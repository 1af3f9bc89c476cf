//! Allocation costs per call site and per function, from DHAT's stacks.
//!
//! A program point (one stack) adds its blocks (or bytes) once to every function of the
//! program that is on its stack and once to every call site the stack passes through: the
//! inclusive allocation count, as DHAT attributes it, with recursion counted once. The
//! stacks are kept too, so that a piece of several call sites, or a recursive cycle of
//! several functions, counts each stack once.

use std::collections::HashMap;

use sbs_probes::calls::{call_sites, CallTargets};
use sbs_probes::dhat::Point;
use sbs_probes::elf::Image;

pub use sbs_probes::dhat::{parse, wrapper};

use super::costs::{Costs, SampledStack};

/// The load offset of the program under valgrind: for frames valgrind named after one of
/// its symbols, the page-aligned offset that puts the frame inside that symbol.
fn load_offset(points: &[Point], image: &Image) -> u64 {
    let mut by_name: HashMap<&str, Vec<(u64, u64)>> = HashMap::new();
    for f in &image.functions {
        by_name
            .entry(&f.name)
            .or_default()
            .push((f.address, f.size));
    }
    let mut votes: HashMap<u64, usize> = HashMap::new();
    for frame in points.iter().flat_map(|p| &p.frames) {
        let Some(symbols) = frame.name.as_deref().and_then(|n| by_name.get(n)) else {
            continue;
        };
        for &(start, size) in symbols {
            let offset = frame.address.wrapping_sub(start) & !0xfff;
            let at = frame.address.wrapping_sub(offset);
            if at >= start && at < start + size {
                *votes.entry(offset).or_default() += 1;
            }
        }
    }
    votes
        .into_iter()
        .max_by_key(|&(offset, n)| (n, std::cmp::Reverse(offset)))
        .map_or(0, |(offset, _)| offset)
}

/// Whether one of the symbols starting at `address` is `name`.
fn named_at(image: &Image, address: u64, name: &str) -> bool {
    let from = image.functions.partition_point(|f| f.address < address);
    image.functions[from..]
        .iter()
        .take_while(|f| f.address == address)
        .any(|f| f.name == name)
}

/// Per call site and per function of `image`, the blocks (or with `bytes`, the bytes)
/// allocated while it was on the stack.
pub fn costs(points: &[Point], image: &Image, bytes: bool) -> Costs {
    let offset = load_offset(points, image);
    let targets = CallTargets::of(image).unwrap_or_default();
    let mut sites_of: HashMap<u64, Vec<u64>> = HashMap::new();
    let mut costs = Costs::default();
    let mut stacks = Vec::with_capacity(points.len());
    let mut frames = Vec::with_capacity(points.len());
    for point in points {
        let value = if bytes { point.bytes } else { point.blocks } as f64;
        let mut order = Vec::new();
        let mut functions = Vec::new();
        let mut sites = Vec::new();
        for frame in &point.frames {
            let at = frame.address.wrapping_sub(offset);
            let Some(f) = image.function_at(at) else {
                continue;
            };
            // A frame of another object can land on an address of ours: the names agree
            // only for our own frames. Functions the linker folded into one share its
            // code, under several names, and valgrind may give any of them.
            if !frame
                .name
                .as_deref()
                .is_some_and(|n| named_at(image, f.address, n))
            {
                continue;
            }
            functions.push(f.address);
            order.push(f.address);
            let list = sites_of.entry(f.address).or_insert_with(|| {
                call_sites(image, &targets, f)
                    .map(|s| s.iter().map(|c| c.address).collect())
                    .unwrap_or_default()
            });
            // The frame lies inside its call instruction: the last site at or before it.
            let i = list.partition_point(|&s| s <= at);
            if i > 0 {
                sites.push(list[i - 1]);
            }
        }
        for v in [&mut functions, &mut sites] {
            v.sort_unstable();
            v.dedup();
        }
        for f in &functions {
            *costs.functions.entry(*f).or_default() += value;
        }
        for s in &sites {
            *costs.sites.entry(*s).or_default() += value;
        }
        frames.push(order);
        stacks.push(SampledStack {
            weight: value,
            functions,
            sites,
            at: Vec::new(),
        });
    }
    costs.edges = Costs::edges_of_stacks(&frames);
    costs.stacks = Some(stacks);
    costs
}
