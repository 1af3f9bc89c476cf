//! Where the report goes: stdout, or a file; and the renderer of each format.
//!
//! A regular file (or a name not taken yet) is written atomically: a temporary file in the
//! same directory, renamed into place, so a failed run leaves no partial file behind.
//! Anything else is written through, as a shell's `>` does: a device or a FIFO is opened
//! for writing and stays what it was (renaming over `/dev/null` would replace the device
//! with a regular file). A FIFO waits for its reader, and a stop signal (Ctrl-C, SIGTERM,
//! SIGHUP, SIGQUIT) ends the wait: opened and written without blocking, it is tried
//! again until then (a blocking `open` would outlast every signal the collector
//! catches). A symbolic link is followed to its final target, which is
//! written as above; the link stays a link. Every report file goes through
//! [`Output::open_named`].
//!
//! Writing is best effort across destinations: one that fails (a full disk) does not keep
//! the report from the others, and a report file that cannot be written is replaced by the
//! text report on stdout, so the measurements are never lost with it. A reader of stdout
//! that went away (`| head`) is not an error at all.

use std::io::{IsTerminal, Write};
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use anyhow::Context;
use sbs_reports::human::TimeUnit;
use sbs_reports::model::Report;
use sbs_reports::Render;

/// The format of a report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// An aligned table for people.
    Text,
    /// The JSON schema of `docs/schema.md`.
    Json,
    /// One row per metric.
    Csv,
    /// Bencher Metric Format JSON (bencher.dev, github-action-benchmark).
    Bmf,
    /// A Markdown table for pull-request comments.
    Markdown,
}

/// Where the report goes and in which format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destinations {
    /// Format of the main report.
    pub format: Format,
    /// Colour the text report (`None`: on a terminal, unless `NO_COLOR` is set).
    pub color: Option<bool>,
    /// The unit of every time in the text and Markdown reports (`None`: each its own).
    pub time_unit: Option<sbs_reports::human::TimeUnit>,
    /// A file for the main report (stdout when `None`).
    pub output: Option<PathBuf>,
    /// A file for the HTML page, if one is asked for.
    pub html: Option<PathBuf>,
    /// Further files, each in its own format, written from the same measurements
    /// (`--export-json FILE`...), with the option that named each.
    pub exports: Vec<Export>,
}

/// One `--export-FORMAT FILE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Export {
    /// The option that asked for it, for messages (`--export-json`).
    pub option: &'static str,
    /// Its format.
    pub format: Format,
    /// Its file.
    pub path: PathBuf,
}

/// An opened report destination.
pub enum Output {
    /// Standard output.
    Stdout,
    /// A regular file, or a name with no file yet: a temporary file renamed to `target`
    /// on success.
    Replace {
        /// The destination as given.
        path: PathBuf,
        /// `path`, or the final target of the symbolic links it names: what is replaced.
        target: PathBuf,
        /// The temporary file in the directory of `target`; deleted if dropped.
        tmp: tempfile::NamedTempFile,
    },
    /// Not a regular file (a character or block device, a FIFO): opened for writing once
    /// the report is ready and written through, so that it stays what it is. A FIFO is
    /// opened only then because opening it waits for its reader.
    Through {
        /// The destination as given.
        path: PathBuf,
        /// `path`, or the final target of the symbolic links it names: what is written.
        target: PathBuf,
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
        let target = final_target(path).with_context(|| {
            format!(
                "{option} {}: cannot follow its symbolic links; give a file name",
                path.display()
            )
        })?;
        // Nothing there, or nothing that can be looked at (a parent that is a file): the
        // temporary file below fails with the cause in the second case.
        let kind = std::fs::metadata(&target).ok().map(|m| m.file_type());
        match kind {
            Some(kind) if kind.is_dir() => anyhow::bail!(
                "{option} {}: is a directory; give a file name",
                path.display()
            ),
            Some(kind) if kind.is_socket() => anyhow::bail!(
                "{option} {}: is a socket, which cannot be opened for writing; give a file name",
                path.display()
            ),
            Some(kind) if !kind.is_file() => {
                nix::unistd::access(&target, nix::unistd::AccessFlags::W_OK).with_context(
                    || {
                        format!(
                            "{option} {}: cannot write to it; choose a writable location",
                            path.display()
                        )
                    },
                )?;
                return Ok(Output::Through {
                    path: path.to_path_buf(),
                    target,
                });
            }
            _ => {}
        }
        let dir = parent_dir(&target);
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
        Ok(Output::Replace {
            path: path.to_path_buf(),
            target,
            tmp,
        })
    }

    /// Write the whole report and put it in place. On stdout, a reader that went away
    /// (`EPIPE`) is not an error: nobody is left to read the rest.
    pub fn write_all(self, bytes: &[u8]) -> std::io::Result<()> {
        match self {
            Output::Stdout => {
                let mut out = std::io::stdout().lock();
                match out.write_all(bytes).and_then(|()| out.flush()) {
                    Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
                    other => other,
                }
            }
            Output::Replace {
                target, mut tmp, ..
            } => {
                // Through the file itself: the temporary's name means nothing to anyone.
                tmp.as_file_mut().write_all(bytes)?;
                keep_mode_and_owner(tmp.as_file(), &target)?;
                tmp.as_file().sync_all()?;
                tmp.persist(&target).map_err(|e| e.error)?;
                Ok(())
            }
            Output::Through { path, target } => {
                let file = open_through(&path, &target)?;
                write_through(&file, bytes)
            }
        }
    }

    fn is_stdout(&self) -> bool {
        matches!(self, Output::Stdout)
    }

    /// The file it goes to, as given (`None` for stdout).
    pub fn path(&self) -> Option<&Path> {
        match self {
            Output::Replace { path, .. } | Output::Through { path, .. } => Some(path),
            Output::Stdout => None,
        }
    }
}

/// How often a wait for a FIFO's reader, or for room in it, looks for a stop signal.
const THROUGH_TICK: std::time::Duration = std::time::Duration::from_millis(20);

/// The error of a write through that a stop signal ended.
fn stopped_waiting() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::Interrupted,
        crate::run::runner::RunError::Interrupted,
    )
}

/// Open `target` (a device or a FIFO, `path` as given) for writing, without blocking.
/// A FIFO with no reader yet refuses (`ENXIO`): tried again until a reader comes or a
/// stop signal arrives (then an `Interrupted` error), with a note on stderr after a
/// second. No O_CREAT (it exists) and no O_TRUNC (meaningless for a device or a FIFO).
fn open_through(path: &Path, target: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let fifo = std::fs::metadata(target).is_ok_and(|m| m.file_type().is_fifo());
    let started = std::time::Instant::now();
    let mut told = false;
    loop {
        match std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(target)
        {
            Err(e) if fifo && e.raw_os_error() == Some(libc::ENXIO) => {
                if crate::run::runner::interrupt_requested() {
                    return Err(stopped_waiting());
                }
                if !told && started.elapsed() >= std::time::Duration::from_secs(1) {
                    eprintln!(
                        "sbs-profile: waiting for a reader of the FIFO {} (Ctrl-C gives up)",
                        path.display()
                    );
                    told = true;
                }
                std::thread::sleep(THROUGH_TICK);
            }
            other => return other,
        }
    }
}

/// Write all of `bytes` to `file`, opened without blocking: when it is full (a FIFO
/// whose reader is slow, or stopped reading), wait for room or a stop signal. No fsync,
/// which a FIFO refuses.
fn write_through(mut file: &std::fs::File, mut bytes: &[u8]) -> std::io::Result<()> {
    use std::os::fd::AsFd;
    while !bytes.is_empty() {
        match file.write(bytes) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if crate::run::runner::interrupt_requested() {
                    return Err(stopped_waiting());
                }
                let mut fds = [nix::poll::PollFd::new(
                    file.as_fd(),
                    nix::poll::PollFlags::POLLOUT,
                )];
                let tick = nix::poll::PollTimeout::try_from(THROUGH_TICK)
                    .unwrap_or(nix::poll::PollTimeout::MAX);
                let _ = nix::poll::poll(&mut fds, tick);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The most symbolic links followed in a row before giving up, as the kernel's `ELOOP`.
const MAX_LINKS: usize = 40;

/// Give `file`, about to replace `target`, the mode of the regular file there, and its
/// owner where this process may (root, or the same owner): replacing a report keeps
/// who may read it, as `>` would. Nothing there: nothing to keep.
fn keep_mode_and_owner(file: &std::fs::File, target: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let Ok(old) = std::fs::metadata(target) else {
        return Ok(());
    };
    if !old.is_file() {
        return Ok(());
    }
    file.set_permissions(old.permissions())?;
    match std::os::unix::fs::fchown(file, Some(old.uid()), Some(old.gid())) {
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => Ok(()),
        other => other,
    }
}

/// What writing to `path` writes: `path` itself, or the last name of the chain of
/// symbolic links it starts (which need not exist yet); an error only for a loop of links
/// or a link that cannot be read. Links in the directories above it need no following:
/// the kernel follows them for the rename.
fn final_target(path: &Path) -> std::io::Result<PathBuf> {
    let mut at = path.to_path_buf();
    for _ in 0..MAX_LINKS {
        match std::fs::symlink_metadata(&at) {
            Ok(meta) if meta.file_type().is_symlink() => {
                // A relative link is relative to the directory of the link; an absolute
                // one replaces the whole path (`join`).
                let link = std::fs::read_link(&at)?;
                at = parent_dir(&at).join(link);
            }
            // Not a link, nothing there, or nothing that can be looked at: what to do
            // with `at` is decided (or fails) when it is opened.
            _ => return Ok(at),
        }
    }
    Err(std::io::Error::from_raw_os_error(libc::ELOOP))
}

/// The directory a file destination is created in.
fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// The file `path` writes, its directory canonicalised and its links followed, so that
/// two spellings of one file compare equal; `None` when it does not resolve (opening it
/// fails then anyway).
fn resolved(path: &Path) -> Option<PathBuf> {
    let target = final_target(path).ok()?;
    let name = target.file_name()?;
    Some(parent_dir(&target).canonicalize().ok()?.join(name))
}

/// The destinations that could not be written, each with its cause; every other one was.
#[derive(Debug)]
pub struct Unwritten {
    /// One error per failed destination, naming it.
    pub failures: Vec<anyhow::Error>,
}

impl std::fmt::Display for Unwritten {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let all: Vec<String> = self.failures.iter().map(|e| format!("{e:#}")).collect();
        f.write_str(&all.join("; "))
    }
}

impl std::error::Error for Unwritten {}

impl Unwritten {
    /// Whether a stop signal ended one of the writes (a FIFO that no reader opened).
    pub fn interrupted(&self) -> bool {
        self.failures.iter().any(|f| {
            f.chain().any(|c| {
                matches!(
                    c.downcast_ref::<crate::run::runner::RunError>(),
                    Some(crate::run::runner::RunError::Interrupted)
                )
            })
        })
    }
}

/// The failure of a write that a stop signal ended, if `e` is one: nothing replaces it
/// on stdout (the user asked to stop).
fn stopped(e: &anyhow::Error, path: &Path) -> Option<anyhow::Error> {
    let io = e.downcast_ref::<std::io::Error>()?;
    (io.kind() == std::io::ErrorKind::Interrupted).then(|| {
        anyhow::Error::new(crate::run::runner::RunError::Interrupted).context(format!(
            "interrupted while waiting for a reader of the FIFO {}: the report was not \
             written there",
            path.display()
        ))
    })
}

/// Where a finished report goes: the main output in its format, then the HTML page and the
/// exports, each a file of its own.
pub struct Sinks {
    output: Output,
    format: Format,
    color: Option<bool>,
    time_unit: Option<TimeUnit>,
    files: Vec<FileSink>,
}

/// A report file besides the main output: the HTML page or an `--export-FORMAT` file.
struct FileSink {
    /// The option that named it (`--html`, `--export-json`).
    option: &'static str,
    /// `None` for the HTML page.
    format: Option<Format>,
    output: Output,
}

impl Sinks {
    /// [`refuse_read_files`] for every file destination of these sinks.
    pub fn refuse_read_files(&self, inputs: &[(&str, &Path)]) -> anyhow::Result<()> {
        let outputs: Vec<(&str, &Path)> = std::iter::once(("--output", &self.output))
            .chain(self.files.iter().map(|f| (f.option, &f.output)))
            .filter_map(|(option, output)| output.path().map(|p| (option, p)))
            .collect();
        refuse_read_files(&outputs, inputs)
    }

    /// Open every destination, failing now if one cannot be written or if two of them are
    /// the same file (one report would silently replace the other).
    pub fn open(destinations: &Destinations) -> anyhow::Result<Sinks> {
        let mut named: Vec<(&'static str, Option<Format>, &Path)> = Vec::new();
        if let Some(html) = &destinations.html {
            named.push(("--html", None, html));
        }
        for e in &destinations.exports {
            named.push((e.option, Some(e.format), &e.path));
        }
        let output = destinations.output.as_deref().map(|p| ("--output", p));
        let all: Vec<(&str, &Path)> = output
            .into_iter()
            .chain(named.iter().map(|(option, _, path)| (*option, *path)))
            .collect();
        refuse_same_files(&all)?;
        let files = named
            .into_iter()
            .map(|(option, format, path)| {
                Ok(FileSink {
                    option,
                    format,
                    output: Output::open_named(path, option)?,
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(Sinks {
            output: Output::open(destinations.output.as_deref())?,
            format: destinations.format,
            color: destinations.color,
            time_unit: destinations.time_unit,
            files,
        })
    }

    /// Render the report into every destination that can take it. A report file that
    /// cannot be written is replaced by the text report on stdout; its error says so.
    pub fn write(self, report: &Report) -> Result<(), Unwritten> {
        let mut failures = Vec::new();
        let color = self.color.unwrap_or_else(|| {
            self.output.is_stdout()
                && std::io::stdout().is_terminal()
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
        });
        let main_path = self.output.path().map(Path::to_path_buf);
        let main = render(renderer(self.format, color, self.time_unit), report)
            .and_then(|bytes| Ok(self.output.write_all(&bytes)?));
        if let Err(e) = main {
            let stop = main_path.as_deref().and_then(|path| stopped(&e, path));
            failures.push(match (stop, main_path) {
                (Some(stop), _) => stop,
                (None, Some(path)) => {
                    let what = match self.format {
                        Format::Text => "the report",
                        _ => "the text report",
                    };
                    let instead = match print_text(report) {
                        Ok(()) => format!("{what} is on stdout instead"),
                        Err(p) => format!("nor could {what} be printed ({p:#})"),
                    };
                    anyhow::anyhow!(
                        "cannot write the report to {}: {e:#}; {instead}; free space there or \
                         choose another --output",
                        path.display()
                    )
                }
                (None, None) => anyhow::anyhow!("cannot write the report to stdout: {e:#}"),
            });
        }
        for file in self.files {
            let path = file
                .output
                .path()
                .map(Path::to_path_buf)
                .unwrap_or_default();
            let (what, renderer): (&str, Box<dyn Render>) = match file.format {
                None => ("the HTML page", Box::new(sbs_reports::html::Html)),
                Some(format) => ("the report", renderer(format, false, self.time_unit)),
            };
            let written = render(renderer, report).and_then(|b| Ok(file.output.write_all(&b)?));
            if let Err(e) = written {
                if let Some(stopped) = stopped(&e, &path) {
                    failures.push(stopped);
                    continue;
                }
                failures.push(anyhow::anyhow!(
                    "cannot write {what} to {}: {e:#}; free space there or choose another {}",
                    path.display(),
                    file.option
                ));
            }
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(Unwritten { failures })
        }
    }
}

/// Refuse two destinations (`(option, path)`) that are the same file, symbolic links
/// followed: one report would silently replace the other.
pub fn refuse_same_files(all: &[(&str, &Path)]) -> anyhow::Result<()> {
    for (i, (a_opt, a)) in all.iter().enumerate() {
        for (b_opt, b) in &all[i + 1..] {
            let same = match (resolved(a), resolved(b)) {
                (Some(x), Some(y)) => x == y,
                _ => a == b,
            };
            if same {
                anyhow::bail!(
                    "{a_opt} {} and {b_opt} {} are the same file; give each report its own path",
                    a.display(),
                    b.display()
                );
            }
        }
    }
    Ok(())
}

/// Refuse a report destination (`outputs`: `(option, path)`) that names one of the files
/// the runs read (`inputs`: `(what, path)`, e.g. the benchmark's program or its
/// `--input`), symbolic links followed: the report would replace it. Two names are one
/// file when they resolve to the same path (`./x` and `x`, a link and its target) or,
/// both existing, to the same device and inode (a hard link, a bind mount). Only a
/// destination that is replaced counts: writing through a device (`/dev/null`) or a
/// FIFO changes no file.
pub fn refuse_read_files(
    outputs: &[(&str, &Path)],
    inputs: &[(&str, &Path)],
) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt;
    for (option, out) in outputs {
        let out_meta = std::fs::metadata(out).ok();
        if out_meta.as_ref().is_some_and(|m| !m.is_file()) {
            continue;
        }
        for (what, input) in inputs {
            let same_path = match (resolved(out), resolved(input)) {
                (Some(x), Some(y)) => x == y,
                _ => out == input,
            };
            let same_inode = match (&out_meta, std::fs::metadata(input)) {
                (Some(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
                _ => false,
            };
            if same_path || same_inode {
                anyhow::bail!(
                    "{option} {} is {what} {} (the same file), which the report would replace; \
                     give the report another path",
                    out.display(),
                    input.display()
                );
            }
        }
    }
    Ok(())
}

/// The plain text report on stdout, in place of a report file that could not be written.
fn print_text(report: &Report) -> anyhow::Result<()> {
    let text = render(renderer(Format::Text, false, None), report)?;
    Ok(Output::Stdout.write_all(&text)?)
}

/// The report in one format, as bytes.
fn render(renderer: Box<dyn Render>, report: &Report) -> anyhow::Result<Vec<u8>> {
    let mut buf = Vec::new();
    renderer
        .render(report, &mut buf)
        .context("cannot render the report")?;
    Ok(buf)
}

/// The renderer of a format; `color` applies to text, `time_unit` to text and Markdown.
/// By default text is coloured on a terminal only, and never with `NO_COLOR`
/// (<https://no-color.org>).
fn renderer(format: Format, color: bool, time_unit: Option<TimeUnit>) -> Box<dyn Render> {
    match format {
        Format::Text => Box::new(sbs_reports::text::Text { color, time_unit }),
        Format::Markdown => Box::new(sbs_reports::markdown::Markdown { time_unit }),
        Format::Json => Box::new(sbs_reports::json::Json),
        Format::Csv => Box::new(sbs_reports::csv::Csv),
        Format::Bmf => Box::new(sbs_reports::bmf::Bmf),
    }
}
