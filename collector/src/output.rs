//! Where the report goes: stdout, or a file written atomically (temporary file in the same
//! directory, renamed into place), so a failed run leaves no partial file behind.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;

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
