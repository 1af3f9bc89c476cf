//! `--replay PATTERN`: the captures `sbs-profile capture` wrote (one directory per marked
//! function, `sbs_harness::capture::format`), which of them a pattern selects, and
//! whether the program still has each one's function.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use sbs_harness::capture::format::{Call, Meta, CALLS_FILE, FORMAT, META_FILE, VERSION};
use sbs_probes::pattern::Pattern;

use super::bench_binary::Listed;

/// What `--replay` replays: the captures directory and the pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplaySource {
    /// The captures directory, absolute (the children run with the caller's directory,
    /// but the program reads it by this path).
    pub dir: PathBuf,
    /// Whole-segment pattern over the captured functions' paths (as `--invocations`).
    pub pattern: String,
}

/// One function's capture.
#[derive(Debug, Clone)]
pub struct Capture {
    /// Its directory.
    pub dir: PathBuf,
    /// Its description.
    pub meta: Meta,
}

/// Read a capture's `meta.json`, refusing a corrupt one or another format.
pub fn read_meta(dir: &Path) -> anyhow::Result<Meta> {
    let path = dir.join(META_FILE);
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let meta: Meta = serde_json::from_str(&text).map_err(|e| {
        anyhow::anyhow!(
            "{} is corrupt ({e}); capture again (sbs-profile capture --force -- PROGRAM ...)",
            path.display()
        )
    })?;
    if meta.format != FORMAT || meta.version != VERSION {
        bail!(
            "{} is format `{}` version {}; this sbs-profile reads `{FORMAT}` version {VERSION}: capture again",
            path.display(),
            meta.format,
            meta.version
        );
    }
    Ok(meta)
}

/// Read a capture's kept calls, refusing a corrupt line.
pub fn read_calls(dir: &Path) -> anyhow::Result<Vec<Call>> {
    let path = dir.join(CALLS_FILE);
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(n, l)| {
            serde_json::from_str::<Call>(l).map_err(|e| {
                anyhow::anyhow!(
                    "{} is corrupt at line {} ({e}); capture again (sbs-profile capture --force -- PROGRAM ...)",
                    path.display(),
                    n + 1
                )
            })
        })
        .collect()
}

/// Every capture in `dir` (subdirectories with a `meta.json`), by function path.
pub fn captures(dir: &Path) -> anyhow::Result<Vec<Capture>> {
    let entries = std::fs::read_dir(dir).with_context(|| {
        format!(
            "cannot read the captures directory {}; make one with `sbs-profile capture -- PROGRAM ARGS`",
            dir.display()
        )
    })?;
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.with_context(|| format!("cannot read {}", dir.display()))?;
        let path = entry.path();
        if !path.is_dir() || !path.join(META_FILE).exists() {
            continue;
        }
        let meta = read_meta(&path)?;
        out.push(Capture { dir: path, meta });
    }
    out.sort_by(|a, b| a.meta.function.cmp(&b.meta.function));
    Ok(out)
}

/// The captures `source.pattern` selects, each with its whole-segment match.
pub fn matching(source: &ReplaySource) -> anyhow::Result<Vec<Capture>> {
    let pattern = Pattern::parse(&source.pattern)
        .map_err(|e| anyhow::anyhow!("--replay {}: {e}", source.pattern))?;
    let all = captures(&source.dir)?;
    if all.is_empty() {
        bail!(
            "{} holds no capture; make them with `sbs-profile capture -- PROGRAM ARGS`",
            source.dir.display()
        );
    }
    let (matched, other): (Vec<Capture>, Vec<Capture>) = all
        .into_iter()
        .partition(|c| pattern.matches(&c.meta.function, &c.meta.function));
    if matched.is_empty() {
        let names: Vec<&str> = other.iter().map(|c| c.meta.function.as_str()).collect();
        bail!(
            "--replay {}: no capture in {} matches (captured: {}); the pattern matches whole \
             path segments from the end, e.g. `tokenize` or `app::tokenize`",
            source.pattern,
            source.dir.display(),
            names.join(", ")
        );
    }
    Ok(matched)
}

/// The benchmarks of `program` (as its replay mode `listed` them) that replay the
/// captures `source` selects; an error when the program lacks one's function.
pub fn select(
    source: &ReplaySource,
    program: &Path,
    listed: Vec<Listed>,
) -> anyhow::Result<Vec<Listed>> {
    let matched = matching(source)?;
    for c in &matched {
        if !listed.iter().any(|l| l.name == c.meta.function) {
            bail!(
                "{} has no function `{}` marked #[sbs_harness::capture] (captured in {}): it was \
                 renamed or removed, or this is another program; capture again",
                program.display(),
                c.meta.function,
                c.dir.display()
            );
        }
    }
    Ok(listed
        .into_iter()
        .filter(|l| matched.iter().any(|c| c.meta.function == l.name))
        .collect())
}
