//! Result model and renderers of sbs-profile.
//!
//! One renderer per format behind the small [`Render`] trait, in the manner of
//! hyperfine's exporters. Renderers only format: every number they print was computed by
//! the collector.
#![forbid(unsafe_code)]

pub mod bmf;
pub mod csv;
pub mod html;
pub mod human;
pub mod json;
pub mod markdown;
mod markup;
pub mod metric_id;
pub mod model;
pub mod pinpoint;
pub mod text;
pub mod verdicts;

use std::io;

use model::Report;

/// A report format.
pub trait Render {
    /// Write `report` in this format.
    fn render(&self, report: &Report, out: &mut dyn io::Write) -> io::Result<()>;
}
