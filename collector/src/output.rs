//! Where the report goes: stdout, or a file written atomically (temporary file in the same
//! directory, renamed into place), so a failed run leaves no partial file behind; and the
//! renderer of each format.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use sbs_reports::model::Report;
use sbs_reports::Render;

use crate::plan::{Destinations, Format};

/// An opened report destination.
pub enum Output {
    /// Standard output.
    Stdout,
    /// A temporary file renamed to `path` on success.
    File {
        /// Final destination.
        path: PathBuf,
        /// The temporary file in the same directory; deleted if dropped.
        tmp: tempfile::NamedTempFile,
    },
}

impl Output {
    /// Prepare the `--output` destination, failing now if it cannot be written.
    pub fn open(path: Option<&Path>) -> anyhow::Result<Output> {
        match path {
            Some(path) => Output::open_named(path, "--output"),
            None => Ok(Output::Stdout),
        }
    }

    /// Prepare a file destination given by `option`, failing now if it cannot be written.
    pub fn open_named(path: &Path, option: &str) -> anyhow::Result<Output> {
        if path.is_dir() {
            anyhow::bail!(
                "{option} {}: is a directory; give a file name",
                path.display()
            );
        }
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let tmp = tempfile::Builder::new()
            .prefix(".sbs-profile-")
            .suffix(".tmp")
            // A report is an ordinary file, not a secret (tempfile's default is 0600).
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .tempfile_in(dir)
            .with_context(|| {
                format!(
                    "{option} {}: cannot write in {}; choose a writable location",
                    path.display(),
                    dir.display()
                )
            })?;
        Ok(Output::File {
            path: path.to_path_buf(),
            tmp,
        })
    }

    /// Write the whole report and put it in place.
    pub fn write_all(self, bytes: &[u8]) -> anyhow::Result<()> {
        match self {
            Output::Stdout => {
                let mut out = std::io::stdout().lock();
                out.write_all(bytes)?;
                out.flush()?;
                Ok(())
            }
            Output::File { path, mut tmp } => {
                let ctx = || format!("cannot write the report to {}", path.display());
                tmp.write_all(bytes).with_context(ctx)?;
                tmp.as_file().sync_all().with_context(ctx)?;
                tmp.persist(&path).map_err(|e| e.error).with_context(ctx)?;
                Ok(())
            }
        }
    }
}

/// Where a finished report goes: the main output in its format, and the HTML page.
pub struct Sinks {
    output: Output,
    html: Option<Output>,
    format: Format,
    to_stdout: bool,
}

impl Sinks {
    /// Open every destination, failing now if one cannot be written.
    pub fn open(destinations: &Destinations) -> anyhow::Result<Sinks> {
        Ok(Sinks {
            output: Output::open(destinations.output.as_deref())?,
            html: destinations
                .html
                .as_deref()
                .map(|p| Output::open_named(p, "--html"))
                .transpose()?,
            format: destinations.format,
            to_stdout: destinations.output.is_none(),
        })
    }

    /// Render the report into every destination.
    pub fn write(self, report: &Report) -> anyhow::Result<()> {
        let mut buf = Vec::new();
        let to_terminal = self.to_stdout && std::io::stdout().is_terminal();
        renderer(self.format, to_terminal)
            .render(report, &mut buf)
            .context("cannot render the report")?;
        if let Some(html) = self.html {
            let mut page = Vec::new();
            sbs_reports::html::Html
                .render(report, &mut page)
                .context("cannot render the HTML page")?;
            html.write_all(&page)?;
        }
        self.output.write_all(&buf)
    }
}

/// The renderer of a format; text is coloured on a terminal only, and never with
/// `NO_COLOR` (<https://no-color.org>).
fn renderer(format: Format, to_terminal: bool) -> Box<dyn Render> {
    match format {
        Format::Text => Box::new(sbs_reports::text::Text {
            color: to_terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
        }),
        Format::Markdown => Box::new(sbs_reports::markdown::Markdown),
        Format::Json => Box::new(sbs_reports::json::Json),
        Format::Csv => Box::new(sbs_reports::csv::Csv),
        Format::Bmf => Box::new(sbs_reports::bmf::Bmf),
    }
}
