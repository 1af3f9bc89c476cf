//! The Markdown report of a pinpoint search: a table of the chain.

use std::fmt::Write as _;
use std::io;

use super::PinpointReport;

/// A Markdown table of the chain, for a pull-request comment.
pub fn markdown(report: &PinpointReport, out: &mut dyn io::Write) -> io::Result<()> {
    let p = &report.pinpoint;
    let mut s = String::new();
    let _ = writeln!(s, "### pinpoint: `{}` ({})\n", p.function, p.metric);
    let _ = writeln!(
        s,
        "| layer | function | previous | current | change | interval | runs | samples |"
    );
    let _ = writeln!(s, "| ---: | --- | ---: | ---: | ---: | --- | ---: | ---: |");
    let last = p.chain.len().saturating_sub(1);
    for (i, link) in p.chain.iter().enumerate() {
        let name = if i == last && p.bottleneck.is_some() {
            format!("**`{}`** (bottleneck)", link.function)
        } else {
            format!("`{}`", link.function)
        };
        let _ = writeln!(
            s,
            "| {} | {}{} | {} | {} | {} | {} | {} | {} |",
            link.depth,
            name,
            if link.external { " (external)" } else { "" },
            link.previous_value(),
            link.current_value(),
            link.change(),
            link.interval(),
            link.runs,
            link.samples
                .map_or_else(|| "".to_string(), |[p, c]| format!("{p} / {c}"))
        );
    }
    let _ = writeln!(s);
    for w in &p.warnings {
        let _ = writeln!(s, "> warning: {w}\n");
    }
    let _ = writeln!(s, "Stopped: {}", p.stopped);
    for u in &p.undecided {
        let _ = writeln!(s, "\nUndecided (too few samples): {u}");
    }
    if let Some(note) = &p.sampling {
        let _ = writeln!(s, "\nSampling: {}", note.describe());
    }
    out.write_all(s.as_bytes())
}
