//! The text report of a pinpoint search: the chain as an indented tree.

use std::fmt::Write as _;
use std::io;

use super::{Pinpoint, PinpointReport};
use crate::human;

/// The text report: the chain as an indented tree, the bottleneck marked.
pub fn text(report: &PinpointReport, out: &mut dyn io::Write) -> io::Result<()> {
    let p = &report.pinpoint;
    let mut s = String::new();
    conditions(&mut s, p);
    let _ = writeln!(s);
    chain(&mut s, p);
    let _ = writeln!(s);
    conclusion(&mut s, p);
    out.write_all(s.as_bytes())
}

/// The search's first lines: the function, how it was measured, the builds, warnings.
fn conditions(s: &mut String, p: &Pinpoint) {
    let _ = writeln!(
        s,
        "pinpoint: {} ({}, {} run{} per build, {} comparisons, {})",
        p.function,
        p.source,
        p.runs,
        if p.runs == 1 { "" } else { "s" },
        p.comparisons,
        p.strategy
    );
    match p.repeated {
        Some(true) => {
            let _ = writeln!(
                s,
                "  runs: one per build: a second run of the previous build repeated its counts exactly"
            );
        }
        Some(false) => {
            let _ = writeln!(
                s,
                "  runs: {} per build: a second run of the previous build did not repeat its counts",
                p.runs
            );
        }
        None => {}
    }
    let _ = writeln!(s, "  previous: {}", p.previous);
    let _ = writeln!(s, "  current:  {}", p.current);
    for w in &p.warnings {
        let _ = writeln!(s, "  warning: {w}");
    }
}

/// One line per link, indented by its depth, the bottleneck marked; a link's note below it.
fn chain(s: &mut String, p: &Pinpoint) {
    let last = p.chain.len().saturating_sub(1);
    for (i, link) in p.chain.iter().enumerate() {
        let indent = "   ".repeat(link.depth);
        let branch = if link.depth == 0 { "" } else { "└─ " };
        let mark = if i == last && p.bottleneck.is_some() {
            "  <== bottleneck"
        } else {
            ""
        };
        let external = if link.external { " (external)" } else { "" };
        let _ = writeln!(
            s,
            "{indent}{branch}{}{}{external}  {} -> {} {}  {} {}  n={}{}{}{mark}",
            link.function,
            link.cycle_note(),
            link.previous_value(),
            link.current_value(),
            p.unit,
            link.change(),
            link.interval(),
            link.runs,
            link.samples_note(),
            link.share_note(),
        );
        if let Some(note) = &link.note {
            let _ = writeln!(s, "{indent}   ({note})");
        }
    }
}

/// The verdict, why the search stopped, the places inside the bottleneck, what was left
/// undecided and how the sampling went.
fn conclusion(s: &mut String, p: &Pinpoint) {
    let _ = writeln!(s, "{}", p.verdict());
    let _ = writeln!(s, "stopped: {}", p.stopped);
    for place in &p.inside {
        let share = place
            .share_percent
            .map(|x| format!(" ({x:.1}% of the change)"))
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "inside: {}  {} -> {} {}{share}",
            place.what,
            human::count(place.previous),
            human::count(place.current),
            p.unit
        );
    }
    for u in &p.undecided {
        let _ = writeln!(s, "undecided (too few samples): {u}");
    }
    if let Some(note) = &p.sampling {
        let _ = writeln!(s, "sampling: {}", note.describe());
    }
}
