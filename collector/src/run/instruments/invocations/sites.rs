//! From the resolved patterns to counted sites and report rows: each distinct place to
//! count (a function's entry, an entry point of an inlined copy) is one [`Site`], and each
//! row of a pattern sums some sites.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use sbs_probes::patch::SiteKind;
use sbs_probes::program::Program;
use sbs_probes::resolve::{InlinedSite, PatternMatch};
use sbs_reports::model::{Family, MetricId, Unit};

use crate::run::instrument::MetricSpec;

/// One place where calls are counted.
#[derive(Debug, Clone)]
pub(super) struct Site {
    /// The file.
    pub path: PathBuf,
    /// Index of the file in the target's images.
    pub image: usize,
    /// File offset where a uprobe counts.
    pub uprobe_offset: u64,
    /// Link-time address where the in-process engine patches (a function's first
    /// instruction, or the entry point of an inlined copy), and the function holding it.
    pub address: u64,
    pub function: u64,
    /// Whether it is a function's entry or a place inside one.
    pub kind: SiteKind,
    /// What it counts, for messages.
    pub what: String,
    /// At most this many calls per counted pass (an unrolled loop; else 1).
    pub calls_per_pass: u64,
    /// A pass may continue a call counted at another site rather than start one (code
    /// without a call line that calls of the function share, entries one call may pass
    /// twice, a landing pad): at least no call per pass.
    pub may_continue: bool,
    /// Its count may be off in a way no bound can be given (an uncertain entry).
    pub unbounded: bool,
    /// Where the calls it counts were written (`file:line`): the call site of an inlined
    /// copy, several when copies share the entry point; none for a function's entry (its
    /// callers are anywhere) or a copy whose call line the DWARF does not give.
    pub call_lines: Vec<String>,
}

/// One pattern's metric and its rows: (label, indices of the sites summed in it).
#[derive(Debug)]
pub(super) struct PatternRows {
    pub metric: MetricSpec,
    pub rows: Vec<(String, Vec<usize>)>,
}

impl PatternRows {
    /// Every site the pattern counts, once each, in index order.
    pub fn sites(&self) -> Vec<usize> {
        let mut all: Vec<usize> = self
            .rows
            .iter()
            .flat_map(|(_, i)| i.iter().copied())
            .collect();
        all.sort_unstable();
        all.dedup();
        all
    }
}

/// The sites of every pattern, deduplicated, and each pattern's rows. `detail` gives
/// each inlined copy its own row (with its caller and call site).
pub(super) fn sites_and_rows(
    target: &Program,
    matches: &[PatternMatch],
    detail: bool,
) -> (Vec<Site>, Vec<PatternRows>) {
    let mut sites = Sites::default();
    let rows_of = matches
        .iter()
        .map(|m| {
            let mut rows = function_rows(target, m, &mut sites);
            rows.extend(inlined_rows(target, m, detail, &mut sites));
            PatternRows {
                metric: MetricSpec::new(
                    MetricId::new(Family::Invocations, m.pattern.as_str()).to_string(),
                    Unit::Count,
                    "uprobe",
                    true,
                ),
                rows,
            }
        })
        .collect();
    (sites.list, rows_of)
}

/// The distinct sites so far; one place counted by several patterns is one site.
#[derive(Default)]
struct Sites {
    list: Vec<Site>,
    index: HashMap<(PathBuf, u64), usize>,
}

impl Sites {
    /// The index of `site`, added if it is new.
    fn add(&mut self, site: Site) -> usize {
        let key = (site.path.clone(), site.uprobe_offset);
        if let Some(&i) = self.index.get(&key) {
            let lines = &mut self.list[i].call_lines;
            for line in site.call_lines {
                if !lines.contains(&line) {
                    lines.push(line);
                }
            }
            return i;
        }
        self.index.insert(key, self.list.len());
        self.list.push(site);
        self.list.len() - 1
    }
}

/// One row per matched function, for its entry.
fn function_rows(
    target: &Program,
    m: &PatternMatch,
    sites: &mut Sites,
) -> Vec<(String, Vec<usize>)> {
    m.functions
        .iter()
        .map(|f| {
            let address = target.images[f.image]
                .functions
                .iter()
                .find(|g| g.offset == f.offset)
                .map(|g| g.address)
                .unwrap_or(0);
            let i = sites.add(Site {
                path: f.path.clone(),
                image: f.image,
                uprobe_offset: f.probe,
                address,
                function: address,
                kind: SiteKind::Entry,
                what: format!("`{}`", f.label),
                calls_per_pass: 1,
                may_continue: false,
                unbounded: f.uncertain.is_some(),
                call_lines: Vec::new(),
            });
            (f.label.clone(), vec![i])
        })
        .collect()
}

/// The rows of the inlined copies: one per inlined function (per copy with `detail`),
/// summing the entry points of its copies.
fn inlined_rows(
    target: &Program,
    m: &PatternMatch,
    detail: bool,
    sites: &mut Sites,
) -> Vec<(String, Vec<usize>)> {
    let mut inlined: Vec<(String, Vec<usize>, usize)> = Vec::new();
    let mut row_of: HashMap<String, usize> = HashMap::new();
    for site in &m.sites {
        let image = &target.images[site.image];
        let what = format!(
            "an inlined copy of `{}` in `{}`",
            site.function, site.caller
        );
        // Code shared by calls stands for the lines of those calls (a copy with a line
        // that is the end of such code, for its own line and theirs).
        let mut call_lines: Vec<String> = site.call_line.iter().cloned().collect();
        for line in &site.shared_by {
            if !call_lines.contains(line) {
                call_lines.push(line.clone());
            }
        }
        let indices: Vec<usize> = site
            .points
            .iter()
            .map(|p| {
                sites.add(Site {
                    path: site.path.clone(),
                    image: site.image,
                    uprobe_offset: p.offset,
                    address: p.address,
                    function: image.function_at(p.address).map_or(0, |f| f.address),
                    kind: SiteKind::Inside,
                    what: what.clone(),
                    calls_per_pass: site.calls_per_pass.unwrap_or(1),
                    may_continue: site.may_continue || p.unwinding,
                    unbounded: site.unbounded,
                    call_lines: call_lines.clone(),
                })
            })
            .collect();
        let label = inlined_label(site, detail);
        match row_of.get(&label) {
            Some(&r) => {
                inlined[r].1.extend(indices);
                inlined[r].2 += 1;
            }
            None => {
                row_of.insert(label.clone(), inlined.len());
                inlined.push((label, indices, 1));
            }
        }
    }
    inlined
        .into_iter()
        .map(|(label, indices, count)| {
            let label = if detail && count > 1 {
                format!("{label} [{count} sites]")
            } else if detail {
                label
            } else {
                format!(
                    "{label} [inlined, {count} site{}]",
                    if count == 1 { "" } else { "s" }
                )
            };
            (label, indices)
        })
        .collect()
}

fn inlined_label(site: &InlinedSite, detail: bool) -> String {
    let library = library_suffix(site.image, &site.path);
    if detail {
        format!(
            "{} [inlined in {} at {}{}]{}",
            site.function,
            site.caller,
            site.call_site.as_deref().unwrap_or("?"),
            if site.uncertain.is_some() {
                ", uncertain"
            } else {
                ""
            },
            library
        )
    } else {
        format!("{}{}", site.function, library)
    }
}

/// ` [libfoo.so]` for a site in a library, nothing for the program itself.
fn library_suffix(image: usize, path: &Path) -> String {
    if image == 0 {
        String::new()
    } else {
        let name = path.file_name().unwrap_or(path.as_os_str());
        format!(" [{}]", name.to_string_lossy())
    }
}
