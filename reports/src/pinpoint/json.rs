//! The JSON report of a pinpoint search: the model as it is (`docs/schema.md`).

use std::io;

use super::PinpointReport;

/// The JSON report.
pub fn json(report: &PinpointReport, out: &mut dyn io::Write) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, report)?;
    writeln!(out)
}
