//! Before a run's measurements: that what it will save can be written, so that saving
//! does not fail after minutes of runs. Creates nothing that stays.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::{io_error, History, HistoryError};

impl History {
    /// Check, before any run, that what the store saves ([`Saving`](super::Saving)) for `benchmarks`
    /// (with none given, in its directory) will be able to create its files: the nearest
    /// existing directory on the way to each, and to the history's own directory, must
    /// be a directory that takes a new file (a temporary one, deleted at once). Creates
    /// nothing that stays; checks nothing when nothing is saved.
    pub fn check_writable(&self, benchmarks: &[String]) -> Result<(), HistoryError> {
        if !self.saving.any() {
            return Ok(());
        }
        let mut dirs = vec![self.root.clone()];
        for name in benchmarks {
            if self.saving.entries {
                dirs.push(self.entries_dir(name));
            }
            if let Some(base) = &self.saving.baseline {
                let path = self.baseline_path(base, name)?;
                dirs.extend(path.parent().map(Path::to_path_buf));
            }
        }
        dirs.sort();
        dirs.dedup();
        for dir in dirs {
            let existing = nearest_existing(&dir)?;
            if !existing.is_dir() {
                return Err(io_error("create directory", &dir)(io::Error::other(
                    format!("{} is not a directory", existing.display()),
                )));
            }
            tempfile::Builder::new()
                .prefix(".sbs-profile-probe-")
                .tempfile_in(&existing)
                .map_err(io_error("create a file in", &existing))?;
        }
        Ok(())
    }
}

/// `dir`, or the nearest of its ancestors that exists (`.` for a relative path none of
/// whose components exists).
fn nearest_existing(dir: &Path) -> Result<PathBuf, HistoryError> {
    let mut at = dir;
    loop {
        match fs::metadata(at) {
            Ok(_) => return Ok(at.to_path_buf()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => match at.parent() {
                Some(p) if !p.as_os_str().is_empty() => at = p,
                _ => return Ok(PathBuf::from(".")),
            },
            Err(e) => return Err(io_error("inspect", at)(e)),
        }
    }
}
