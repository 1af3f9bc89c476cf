//! Sites closer together than a patch. The in-process engine writes a 5-byte `jmp` over a
//! site, which displaces whole instructions, up to [`sbs_agent_abi::inproc::MAX_PATCH`]
//! bytes ([`crate::patch`]). Two sites closer than that cannot both get a `jmp` of their
//! own: each would overwrite the other's first bytes (python 3.11 at -O3 has 39 pairs of
//! inlined `Py_INCREF` entries under 6 bytes apart). Nor can a uprobe sit inside the bytes
//! a patch replaces: the kernel writes its `int3` there at exec, so the counting library
//! finds the code changed, and a `jmp` written over it would silence it.
//!
//! [`plan`] decides for the sites of one module, in address order:
//!
//! - the first of a run of overlapping patches is kept (its *host*); a site that lies at
//!   an instruction the host's stub runs, in the same function, is counted by that stub,
//!   right before that instruction. This is exact: control reaches such a site only by
//!   running the displaced instructions before it, since [`crate::patch::displace`]
//!   refuses a patch into whose bytes a branch, a return or a landing pad leads. It holds
//!   for a site that could not have been patched by itself, too (its own bytes hold a
//!   `ret`): one patch counts both;
//! - any other site inside a host's bytes (a function's entry, which calls reach; a site
//!   in another function; one in bytes after a jump that the stub never runs) is left to a
//!   uprobe, and so is a site whose own patch would overlap a host;
//! - a host whose bytes hold the uprobe of a site it cannot count is given up, and the
//!   choice is made again without it: the sites it displaced may then get patches of
//!   their own, or uprobes, which now lie outside every patch.
//!
//! What comes out ([`Plan::check`]): patches that never overlap, each site counted by one
//! patch or by a uprobe whose address lies outside every patch.

use std::collections::HashMap;

use crate::patch::{Displaced, Patch, PatchRefusal, SiteKind};

/// One site of a module, as [`plan`] sees it.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// Link-time address where the site counts: a function's first instruction, or the
    /// entry point of an inlined copy.
    pub address: u64,
    /// The start of the function holding it.
    pub function: u64,
    /// A function's entry or a place inside one.
    pub kind: SiteKind,
    /// Link-time address of the instruction its uprobe would sit on (the site's own, or
    /// the next one when a uprobe cannot sit on the first: a LOCK prefix).
    pub uprobe: u64,
    /// The site's own patch, or why it cannot have one.
    pub displaced: Result<Displaced, PatchRefusal>,
    /// What it counts, for messages (``` `outer` ```, ``` an inlined copy of `bump` in `pair` ```).
    pub what: String,
}

/// One patch of the plan and the sites it counts.
#[derive(Debug, Clone)]
pub struct PlannedPatch {
    /// The patch; its `counts[n]` counts `sites[n]`.
    pub patch: Patch,
    /// Indices of the candidates it counts; the first is the site it was made for.
    pub sites: Vec<usize>,
}

/// What [`plan`] decided.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// The patches to write.
    pub patches: Vec<PlannedPatch>,
    /// The sites left to uprobes and why, by index.
    pub uprobes: Vec<(usize, PatchRefusal)>,
}

impl Plan {
    /// How many sites are counted by the patch of another site.
    pub fn shared(&self) -> usize {
        self.patches.iter().map(|p| p.sites.len() - 1).sum()
    }

    /// Check what the plan promises: every site counted once, by a patch or a uprobe;
    /// no two patches overlap (from their sites to the end of their displaced bytes); no
    /// uprobe lies inside a patch; a site a patch counts lies at the start of an
    /// instruction its stub runs, in the patch's function.
    pub fn check(&self, sites: &[Candidate]) -> Result<(), String> {
        let mut seen = vec![0usize; sites.len()];
        let mut windows: Vec<(u64, u64)> = Vec::new();
        for p in &self.patches {
            let d = &p.patch.displaced;
            windows.push(span(&sites[p.sites[0]], d));
            if p.sites.len() != p.patch.counts.len() {
                return Err("a patch has as many counts as sites".into());
            }
            for (&k, &at) in p.sites.iter().zip(&p.patch.counts) {
                seen[k] += 1;
                let host = &sites[p.sites[0]];
                let s = &sites[k];
                let place = if at == 0 {
                    s.address == d.address || s.address == host.address
                } else {
                    d.instruction_at(s.address) == Some(at)
                };
                if !place || s.function != host.function {
                    return Err(format!(
                        "{} at 0x{:x} is not counted where it lies",
                        s.what, s.address
                    ));
                }
            }
        }
        for &(k, _) in &self.uprobes {
            seen[k] += 1;
            let u = sites[k].uprobe;
            if windows.iter().any(|&(from, to)| u >= from && u < to) {
                return Err(format!("the uprobe at 0x{u:x} lies inside a patch"));
            }
        }
        if let Some(k) = seen.iter().position(|&n| n != 1) {
            return Err(format!("{} is counted {} times", sites[k].what, seen[k]));
        }
        windows.sort_unstable();
        if let Some(w) = windows.windows(2).find(|w| w[1].0 < w[0].1) {
            return Err(format!(
                "the patches at 0x{:x} and 0x{:x} overlap",
                w[0].0, w[1].0
            ));
        }
        Ok(())
    }
}

/// Decide which of the sites of one module are patched, which are counted by the patch of
/// a site before them, and which are left to uprobes (see the module documentation).
pub fn plan(sites: &[Candidate]) -> Plan {
    let mut given_up: Vec<Option<PatchRefusal>> = vec![None; sites.len()];
    loop {
        let hosts = Hosts::choose(sites, &given_up);
        let (counted, uprobes) = assign(sites, &hosts, &given_up);
        // A host that holds the uprobe of a site it cannot count is given up.
        let mut changed = false;
        for (k, _) in &uprobes {
            let s = &sites[*k];
            let Some(h) = hosts.holding(s.uprobe) else {
                continue;
            };
            if given_up[h].is_some() {
                continue;
            }
            let d = displaced(&sites[h]);
            let why = match mergeable(&sites[h], d, s) {
                Err(why) => why,
                Ok(_) => PatchRefusal::CountsOutside { at: s.address },
            };
            given_up[h] = Some(PatchRefusal::HoldsUprobe {
                what: s.what.clone(),
                uprobe: s.uprobe,
                len: d.original.len(),
                why: Box::new(why),
            });
            changed = true;
        }
        if changed {
            continue;
        }
        return build(sites, &hosts, counted, uprobes);
    }
}

/// The displaced instructions of a host (which has them).
fn displaced(site: &Candidate) -> &Displaced {
    match &site.displaced {
        Ok(d) => d,
        Err(_) => unreachable!("a host has a patch"),
    }
}

/// Where a patch made for `site` reaches: from the site (a function's entry, whose
/// `endbr64` the patch follows) or from its displaced bytes, to their end. Calls land at
/// the site: nothing may be written there by another patch either.
fn span(site: &Candidate, d: &Displaced) -> (u64, u64) {
    (site.address.min(d.address), d.end())
}

/// The patches kept, in address order; their spans never overlap.
struct Hosts {
    list: Vec<usize>,
    /// The [`span`] of each patch, as in `list`.
    windows: Vec<(u64, u64)>,
    /// From a site to its place in `list`.
    index: HashMap<usize, usize>,
}

impl Hosts {
    /// Keep the first of every run of overlapping patches, in address order, among the
    /// sites that have one and were not given up.
    fn choose(sites: &[Candidate], given_up: &[Option<PatchRefusal>]) -> Hosts {
        let mut order: Vec<(u64, u64, usize)> = sites
            .iter()
            .enumerate()
            .filter(|&(k, _)| given_up[k].is_none())
            .filter_map(|(k, s)| Some((span(s, s.displaced.as_ref().ok()?).0, s.address, k)))
            .collect();
        order.sort_unstable();
        let mut hosts = Hosts {
            list: Vec::new(),
            windows: Vec::new(),
            index: HashMap::new(),
        };
        for (start, _, k) in order {
            if hosts.windows.last().is_some_and(|&(_, end)| start < end) {
                continue;
            }
            hosts.index.insert(k, hosts.list.len());
            hosts.list.push(k);
            hosts.windows.push((start, displaced(&sites[k]).end()));
            debug_assert_eq!(
                hosts.windows.last(),
                Some(&span(&sites[k], displaced(&sites[k])))
            );
        }
        hosts
    }

    /// The host whose span holds the byte at `address`.
    fn holding(&self, address: u64) -> Option<usize> {
        let n = self.windows.partition_point(|&(start, _)| start <= address);
        let n = n.checked_sub(1)?;
        (address < self.windows[n].1).then_some(self.list[n])
    }
}

/// Where the stub of host `h` (displacing `d`) counts site `s`: before which displaced
/// instruction; or why it cannot.
fn mergeable(h: &Candidate, d: &Displaced, s: &Candidate) -> Result<usize, PatchRefusal> {
    if s.function != h.function {
        return Err(PatchRefusal::OtherFunction);
    }
    if s.address == h.address || s.address == d.address {
        return Ok(0);
    }
    if s.kind == SiteKind::Entry {
        return Err(PatchRefusal::EntryInside);
    }
    d.instruction_at(s.address)
        .ok_or(PatchRefusal::NoInstructionThere)
}

/// Which host counts each site, where (by site: host and instruction index), and the
/// sites left to uprobes with the reason.
#[allow(clippy::type_complexity)]
fn assign(
    sites: &[Candidate],
    hosts: &Hosts,
    given_up: &[Option<PatchRefusal>],
) -> (Vec<Option<(usize, usize)>>, Vec<(usize, PatchRefusal)>) {
    let mut counted = vec![None; sites.len()];
    let mut uprobes = Vec::new();
    for (k, s) in sites.iter().enumerate() {
        if hosts.index.contains_key(&k) {
            counted[k] = Some((k, 0));
            continue;
        }
        if let Some(h) = hosts.holding(s.address) {
            let d = displaced(&sites[h]);
            match mergeable(&sites[h], d, s) {
                Ok(at) => counted[k] = Some((h, at)),
                Err(why) => uprobes.push((
                    k,
                    PatchRefusal::InsidePatch {
                        len: d.original.len(),
                        host: sites[h].what.clone(),
                        at: d.address,
                        why: Box::new(why),
                    },
                )),
            }
            continue;
        }
        let why = match (&given_up[k], &s.displaced) {
            (Some(why), _) | (None, Err(why)) => why.clone(),
            (None, Ok(own)) => match hosts.holding(span(s, own).0) {
                Some(h) => PatchRefusal::Overlaps {
                    host: sites[h].what.clone(),
                    at: displaced(&sites[h]).address,
                    distance: own.address.saturating_sub(displaced(&sites[h]).address),
                },
                None => PatchRefusal::Unplanned,
            },
        };
        uprobes.push((k, why));
    }
    (counted, uprobes)
}

/// The plan from the hosts and what each one counts.
fn build(
    sites: &[Candidate],
    hosts: &Hosts,
    counted: Vec<Option<(usize, usize)>>,
    uprobes: Vec<(usize, PatchRefusal)>,
) -> Plan {
    let mut patches: Vec<PlannedPatch> = hosts
        .list
        .iter()
        .map(|&h| PlannedPatch {
            patch: Patch {
                displaced: displaced(&sites[h]).clone(),
                counts: vec![0],
            },
            sites: vec![h],
        })
        .collect();
    for (k, c) in counted.into_iter().enumerate() {
        let Some((h, at)) = c else { continue };
        if h == k {
            continue;
        }
        let p = &mut patches[hosts.index[&h]];
        p.patch.counts.push(at);
        p.sites.push(k);
    }
    Plan { patches, uprobes }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::patch::{displace_in, module_code_at};
    use sbs_agent_abi::inproc::LiveLayout;

    /// The candidates of sites at `addresses` (inside `code` at 0x1000, one function) with
    /// their own patches.
    fn candidates(code: &[u8], addresses: &[(u64, SiteKind)]) -> Vec<Candidate> {
        addresses
            .iter()
            .map(|&(address, kind)| Candidate {
                address,
                function: 0x1000,
                kind,
                uprobe: address,
                displaced: displace_in(
                    code,
                    0x1000,
                    &[],
                    &|_, _| None,
                    &|| Ok(Vec::new()),
                    address,
                    kind,
                ),
                what: format!("site 0x{address:x}"),
            })
            .collect()
    }

    const ADD_RDI: [u8; 4] = [0x48, 0x83, 0x07, 0x01]; // add qword [rdi],1
    const ADD_RSI: [u8; 4] = [0x48, 0x83, 0x06, 0x01]; // add qword [rsi],1
    const MOV_RDX: [u8; 7] = [0x48, 0xc7, 0x02, 5, 0, 0, 0]; // mov qword [rdx],5

    fn code(parts: &[&[u8]]) -> Vec<u8> {
        parts.concat()
    }

    #[test]
    fn two_sites_four_bytes_apart_share_one_patch() {
        // 0x1000 add [rdi]; 0x1004 add [rsi]; 0x1008 mov [rdx],5; 0x100f ret: each site
        // could be patched alone, and each patch would displace the other's bytes.
        let code = code(&[&ADD_RDI, &ADD_RSI, &MOV_RDX, &[0xc3]]);
        let sites = candidates(
            &code,
            &[(0x1000, SiteKind::Inside), (0x1004, SiteKind::Inside)],
        );
        assert!(sites.iter().all(|s| s.displaced.is_ok()));
        let plan = plan(&sites);
        plan.check(&sites).unwrap();
        assert!(plan.uprobes.is_empty(), "{:?}", plan.uprobes);
        assert_eq!(plan.patches.len(), 1);
        assert_eq!(plan.patches[0].sites, [0, 1]);
        assert_eq!(plan.patches[0].patch.counts, [0, 1]);
        assert_eq!(plan.shared(), 1);

        // The stub: count the first, add [rdi], count the second (red zone and flags
        // kept: a flag set by the first instruction may be live), add [rsi], jump back.
        let m = module_code_at(
            0x2000,
            &[(plan.patches[0].patch.clone(), 0)],
            &LiveLayout::new(1, 8, 0),
        )
        .unwrap();
        let stub: Vec<_> = iced_x86::Decoder::with_ip(64, &m.code, 0, 0)
            .into_iter()
            .take(14)
            .map(|i| {
                (
                    i.mnemonic(),
                    i.is_ip_rel_memory_operand()
                        .then(|| i.ip_rel_memory_address()),
                )
            })
            .collect();
        use iced_x86::Mnemonic::*;
        let counter = |n: u64| Some(m.code_pages + 64 + 8 * n);
        assert_eq!(
            stub.iter().map(|s| s.0).collect::<Vec<_>>(),
            [Lea, Pushfq, Inc, Popfq, Lea, Add, Lea, Pushfq, Inc, Popfq, Lea, Add, Jmp, Int3]
        );
        assert_eq!(stub[2].1, counter(0));
        assert_eq!(stub[8].1, counter(1));
        // Only the jump back refers to the module: the counters move with the stub.
        assert_eq!(m.fixups.len(), 1);
        assert_eq!(m.fixups[0].target, 0x1008);
    }

    #[test]
    fn a_site_that_cannot_be_patched_is_counted_by_its_neighbour() {
        // 0x1000 add [rdi]; 0x1004 add [rsi]; 0x1008 ret: the second site's own patch
        // would move the ret, so only a uprobe could count it, and its int3 would lie in
        // the first site's patch (the library then finds the code changed).
        let code = code(&[&ADD_RDI, &ADD_RSI, &[0xc3]]);
        let sites = candidates(
            &code,
            &[(0x1000, SiteKind::Inside), (0x1004, SiteKind::Inside)],
        );
        assert!(sites[1].displaced.is_err());
        let plan = plan(&sites);
        plan.check(&sites).unwrap();
        assert!(plan.uprobes.is_empty());
        assert_eq!(plan.patches[0].sites, [0, 1]);
    }

    #[test]
    fn a_function_entry_inside_a_patch_gives_the_patch_up() {
        // Two functions, the second starting 4 bytes into the first (which falls through
        // into it): calls of the second land inside the first's patch, which cannot count
        // them. The first is left to a uprobe (before the second's patch), the second is
        // patched.
        let code = code(&[&ADD_RDI, &ADD_RSI, &MOV_RDX, &[0xc3]]);
        let mut sites = candidates(
            &code,
            &[(0x1000, SiteKind::Entry), (0x1004, SiteKind::Inside)],
        );
        sites[1].kind = SiteKind::Entry;
        sites[1].function = 0x1004;
        sites[1].displaced = displace_in(
            &code[4..],
            0x1004,
            &[],
            &|_, _| None,
            &|| Ok(Vec::new()),
            0x1004,
            SiteKind::Entry,
        );
        let plan = plan(&sites);
        plan.check(&sites).unwrap();
        assert_eq!(plan.patches.len(), 1);
        assert_eq!(plan.patches[0].sites, [1]);
        assert_eq!(plan.uprobes.len(), 1);
        let (k, why) = &plan.uprobes[0];
        let why = why.to_string();
        assert_eq!(*k, 0);
        assert!(
            why.contains("the uprobe of site 0x1004 at 0x1004 would lie inside the 8 bytes")
                && why.contains("it is in another function"),
            "{why}"
        );
    }

    #[test]
    fn a_uprobe_inside_a_patch_that_cannot_count_it_gives_the_patch_up() {
        // 0x1000 xor eax,eax; 0x1002 jmp +0x10 (short); 0x1004 add [rsi] ...: the first
        // site's patch covers the add, which the stub never runs. A site there (entered
        // by a way this plan does not know) is left to a uprobe, so the patch is given
        // up and each site is counted on its own.
        let mut code = code(&[&[0x31, 0xc0, 0xeb, 0x10], &ADD_RSI, &MOV_RDX, &[0xc3]]);
        code.resize(0x30, 0xc3);
        let sites = candidates(
            &code,
            &[(0x1000, SiteKind::Inside), (0x1004, SiteKind::Inside)],
        );
        assert_eq!(sites[0].displaced.as_ref().unwrap().end(), 0x1008);
        let plan = plan(&sites);
        plan.check(&sites).unwrap();
        assert_eq!(plan.uprobes.len(), 1);
        assert_eq!(plan.uprobes[0].0, 0);
        assert!(
            plan.uprobes[0]
                .1
                .to_string()
                .contains("no instruction the patch moves starts there"),
            "{}",
            plan.uprobes[0].1
        );
        assert_eq!(plan.patches.len(), 1);
        assert_eq!(plan.patches[0].sites, [1]);
    }

    #[test]
    fn a_site_whose_patch_overlaps_a_host_but_lies_before_it_falls_back() {
        // A site whose uprobe sits after its patch start (a LOCK-prefixed first
        // instruction is probed at the next one): here only the overlap matters. Sites
        // at 0x1000 (patch 0x1000..0x1008) and a function entry at 0x1004 whose patch
        // starts after an endbr64 at 0x1008: the host is the first; the entry's endbr64
        // lies in it, the entry cannot be counted there and its uprobe would lie inside,
        // so the first is given up.
        let endbr = [0xf3, 0x0f, 0x1e, 0xfa];
        let code = code(&[&ADD_RDI, &endbr, &ADD_RSI, &MOV_RDX, &[0xc3]]);
        let sites = candidates(
            &code,
            &[(0x1000, SiteKind::Inside), (0x1004, SiteKind::Entry)],
        );
        let plan = plan(&sites);
        plan.check(&sites).unwrap();
        assert_eq!(plan.patches.len(), 1);
        assert_eq!(plan.patches[0].sites, [1]);
        assert_eq!(plan.uprobes[0].0, 0);
    }

    #[test]
    fn chains_of_close_sites_get_patches_that_never_overlap() {
        // Every 4 bytes an add, a site at each, some followed by a ret (unpatchable
        // alone), some entries of functions (which calls reach): whatever the mix, the
        // plan keeps its promises.
        for mask in 0u32..256 {
            let mut code = Vec::new();
            let mut sites_at = Vec::new();
            for n in 0..8u32 {
                sites_at.push((0x1000 + code.len() as u64, mask & (1 << n) != 0));
                code.extend_from_slice(&ADD_RDI);
                if n % 3 == 2 {
                    code.push(0xc3);
                }
            }
            code.extend_from_slice(&MOV_RDX);
            code.push(0xc3);
            let mut sites = candidates(
                &code,
                &sites_at
                    .iter()
                    .map(|&(a, _)| (a, SiteKind::Inside))
                    .collect::<Vec<_>>(),
            );
            for (s, &(a, entry)) in sites.iter_mut().zip(&sites_at) {
                if entry {
                    s.kind = SiteKind::Entry;
                    s.function = a;
                }
            }
            let plan = plan(&sites);
            assert_eq!(plan.check(&sites), Ok(()), "mask {mask:b}");
        }
    }
}
