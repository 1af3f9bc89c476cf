//! The HTML page of a pinpoint search: the chain as bars.

use std::fmt::Write as _;
use std::io;

use super::PinpointReport;
use crate::markup::escape;

/// A self-contained HTML page: the chain, one pair of bars per layer (previous, current).
pub fn html(report: &PinpointReport, out: &mut dyn io::Write) -> io::Result<()> {
    let p = &report.pinpoint;
    let mut s = String::new();
    let _ = write!(
        s,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>pinpoint: {}</title><style>{}</style></head><body>",
        escape(&p.function),
        STYLE
    );
    let _ = write!(
        s,
        "<h1>pinpoint: <code>{}</code></h1><p class=\"conditions\">{} ({}), {} runs per build, {} comparisons ({})<br>previous: {}<br>current: {}</p>",
        escape(&p.function),
        escape(&p.metric),
        escape(&p.source),
        p.runs,
        p.comparisons,
        escape(&p.strategy),
        escape(&p.previous),
        escape(&p.current)
    );
    for w in &p.warnings {
        let _ = write!(s, "<p class=\"warning\">warning: {}</p>", escape(w));
    }
    let last = p.chain.len().saturating_sub(1);
    for (i, link) in p.chain.iter().enumerate() {
        let bottleneck = i == last && p.bottleneck.is_some();
        let top = link.previous.max(link.current).max(1.0);
        let width = |v: f64| 100.0 * v / top;
        let _ = write!(
            s,
            "<div class=\"link{}\" style=\"margin-left:{}rem\"><div class=\"name\"><code>{}</code>{}{} <span class=\"change\">{} {}, n={}</span></div>\
<div class=\"bar prev\" style=\"width:{:.1}%\">previous {}</div><div class=\"bar cur\" style=\"width:{:.1}%\">current {}{}</div></div>",
            if bottleneck { " bottleneck" } else { "" },
            link.depth * 2,
            escape(&link.function),
            if link.external { " (external)" } else { "" },
            if bottleneck { " &larr; bottleneck" } else { "" },
            link.change(),
            escape(&link.interval()),
            link.runs,
            width(link.previous),
            link.previous_value(),
            width(link.current),
            link.current_value(),
            link.samples_note(),
        );
    }
    let _ = writeln!(
        s,
        "<p><b>{}</b><br>stopped: {}</p>",
        escape(&p.verdict()),
        escape(&p.stopped)
    );
    for u in &p.undecided {
        let _ = writeln!(s, "<p>undecided (too few samples): {}</p>", escape(u));
    }
    if let Some(note) = &p.sampling {
        let _ = writeln!(s, "<p>sampling: {}</p>", escape(&note.describe()));
    }
    s.push_str("</body></html>\n");
    out.write_all(s.as_bytes())
}

const STYLE: &str = "
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:2rem auto;max-width:60rem;padding:0 1rem;color:#1b1b1b}
h1{font-size:1.4rem}p.conditions{color:#555}.warning{color:#8a4b00}
.link{margin-bottom:.8rem;border-left:3px solid #ddd;padding-left:.5rem}.link.bottleneck{border-left-color:#c0392b}
.name{font-size:.95rem;margin-bottom:.2rem}.change{color:#555;font-variant-numeric:tabular-nums}
.bar{font-size:.75rem;color:#fff;padding:.1rem .3rem;margin:.1rem 0;white-space:nowrap;min-width:6rem;box-sizing:border-box}
.bar.prev{background:#7f8c8d}.bar.cur{background:#2c7bb6}.bottleneck .bar.cur{background:#c0392b}
";
