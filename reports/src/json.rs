//! The JSON report: the schema of `docs/schema.md`, pretty-printed.

use std::io;

use crate::model::Report;
use crate::Render;

/// Renders the whole [`Report`] as JSON.
#[derive(Debug, Default)]
pub struct Json;

impl Render for Json {
    fn render(&self, report: &Report, out: &mut dyn io::Write) -> io::Result<()> {
        serde_json::to_writer_pretty(&mut *out, report)?;
        writeln!(out)
    }
}
