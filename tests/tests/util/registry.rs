//! Crates from the registry, as published, built outside the repository clone.
//!
//! [`fetch`] asks cargo for a package at an exact version (`cargo metadata` on a probe
//! package that depends on it downloads it into cargo's own cache), copies its source
//! into the test cache, and leaves it there: its later builds stay incremental. Each
//! checkout of this repository edits a copy of its own ([`RegistryCrate::dir`], under
//! `work/<a hash of the checkout's path>/`), since the edited manifest names paths in the
//! checkout. The cache is `/var/tmp/sbs-test-cache`, or the directory `SBS_TEST_CACHE`
//! names; every crate's builds share one target directory in it ([`target_dir`]), so that
//! their common dependencies are built once. Without the cache everything is downloaded
//! and built from scratch (crates.io must then be reachable).

use std::path::{Path, PathBuf};
use std::process::Command;

/// Env var: the cache directory (default [`DEFAULT_CACHE`]).
pub const CACHE_VAR: &str = "SBS_TEST_CACHE";
/// The cache directory without [`CACHE_VAR`]: outside the repository, kept across runs.
pub const DEFAULT_CACHE: &str = "/var/tmp/sbs-test-cache";

/// The cache directory.
pub fn cache_dir() -> PathBuf {
    std::env::var_os(CACHE_VAR)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CACHE))
}

/// The target directory every registry crate's build shares (`CARGO_TARGET_DIR`).
pub fn target_dir() -> PathBuf {
    cache_dir().join("target")
}

/// A published package, unpacked in the cache.
#[derive(Debug, Clone)]
pub struct RegistryCrate {
    pub name: String,
    pub version: String,
    /// This checkout's copy of its source directory (the tests may edit its
    /// `Cargo.toml`; the published manifest stays beside it).
    pub dir: PathBuf,
}

/// The cache's subdirectory for this checkout of the repository: a hash of its path.
fn checkout_tag() -> String {
    use std::hash::{DefaultHasher, Hash, Hasher};
    // `DefaultHasher::new` hashes alike in every run of one build.
    let mut hasher = DefaultHasher::new();
    Path::new(env!("CARGO_MANIFEST_DIR")).hash(&mut hasher);
    format!("{:016x}", hasher.finish())
}

/// This checkout's directory in the cache, for packages the tests make there (they may
/// name paths of the checkout).
pub fn checkout_dir() -> PathBuf {
    cache_dir().join("work").join(checkout_tag())
}

/// Name of the copy of the published manifest, kept beside the one the tests edit.
const PRISTINE: &str = ".sbs-published-Cargo.toml";

fn run(cmd: &mut Command, what: &str) -> Vec<u8> {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}): {}\n(registry crates need crates.io reachable the first time; \
         their sources and builds are then kept in {}, see {CACHE_VAR})",
        out.status,
        String::from_utf8_lossy(&out.stderr).trim(),
        cache_dir().display()
    );
    out.stdout
}

/// Copy the directory tree `from` to `to` (regular files and directories).
fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

/// Package `name` at exactly `version` from the registry, unpacked in the cache (fetched
/// the first time, kept after), in this checkout's copy.
pub fn fetch(name: &str, version: &str) -> RegistryCrate {
    let published = unpack(name, version);
    let dir = checkout_dir().join(format!("{name}-{version}"));
    if !dir.join(PRISTINE).exists() {
        let partial = dir
            .parent()
            .expect("the checkout's directory")
            .join(format!(".{name}-{version}.{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&partial);
        copy_tree(&published, &partial).expect("copy the published package");
        if std::fs::rename(&partial, &dir).is_err() {
            // Another test got there first.
            let _ = std::fs::remove_dir_all(&partial);
        }
    }
    RegistryCrate {
        name: name.to_string(),
        version: version.to_string(),
        dir,
    }
}

/// The published package's directory in the cache (downloaded the first time).
fn unpack(name: &str, version: &str) -> PathBuf {
    let cache = cache_dir();
    let dir = cache.join("crates").join(format!("{name}-{version}"));
    if !dir.join(PRISTINE).exists() {
        let probe = cache.join("probes").join(format!("{name}-{version}"));
        std::fs::create_dir_all(probe.join("src")).expect("create the probe package");
        std::fs::write(
            probe.join("Cargo.toml"),
            format!(
                "[package]\nname = \"sbs-fetch-probe\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\n\
                 [dependencies]\n{name} = \"={version}\"\n\n[workspace]\n"
            ),
        )
        .expect("write the probe manifest");
        std::fs::write(probe.join("src/lib.rs"), "").expect("write the probe library");
        let metadata = run(
            Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
                .args(["metadata", "--format-version", "1", "--manifest-path"])
                .arg(probe.join("Cargo.toml")),
            &format!("cargo metadata (downloading {name} {version})"),
        );
        let metadata: serde_json::Value =
            serde_json::from_slice(&metadata).expect("cargo metadata prints JSON");
        let manifest = metadata["packages"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["name"] == name && p["version"] == version)
            .and_then(|p| p["manifest_path"].as_str())
            .unwrap_or_else(|| panic!("cargo metadata lists no {name} {version}"));
        let source = Path::new(manifest).parent().expect("a package directory");
        // Copied beside, then renamed: a test that runs at the same time sees all or nothing.
        let partial = cache
            .join("crates")
            .join(format!(".{name}-{version}.{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&partial);
        copy_tree(source, &partial).expect("copy the published package");
        std::fs::copy(partial.join("Cargo.toml"), partial.join(PRISTINE))
            .expect("keep the published manifest");
        if std::fs::rename(&partial, &dir).is_err() {
            // Another test got there first.
            let _ = std::fs::remove_dir_all(&partial);
        }
    }
    dir
}

/// The dependency `dep` of a manifest renamed to package `package` at `path`, as a user
/// switches: `dep = { package = "...", path = "..." }` (its `features`,
/// `default-features` and `optional` kept), wherever it is declared (`[dependencies]`,
/// `[dev-dependencies]`, and the same under `[target.'cfg(...)']`). A `[workspace]` table
/// is added when missing, so that the package is built on its own wherever the cache is.
/// Panics when the manifest does not declare `dep`.
pub fn swap_dependency(manifest: &str, dep: &str, package: &str, path: &Path) -> String {
    let mut doc: toml_edit::DocumentMut = manifest.parse().expect("a TOML manifest");
    let path = path.to_str().expect("a UTF-8 path");
    let mut swapped = 0;
    let mut swap = |deps: &mut toml_edit::Item| {
        let Some(deps) = deps.as_table_like_mut() else {
            return;
        };
        let Some(item) = deps.get_mut(dep) else {
            return;
        };
        swapped += 1;
        if let Some(table) = item.as_table_like_mut() {
            for key in ["version", "git", "branch", "tag", "rev", "registry"] {
                table.remove(key);
            }
            table.insert("package", toml_edit::value(package));
            table.insert("path", toml_edit::value(path));
        } else {
            let mut inline = toml_edit::InlineTable::new();
            inline.insert("package", package.into());
            inline.insert("path", path.into());
            *item = toml_edit::value(inline);
        }
    };
    for section in ["dependencies", "dev-dependencies"] {
        if let Some(deps) = doc.get_mut(section) {
            swap(deps);
        }
    }
    if let Some(targets) = doc.get_mut("target").and_then(|t| t.as_table_like_mut()) {
        for (_, target) in targets.iter_mut() {
            let Some(target) = target.as_table_like_mut() else {
                continue;
            };
            for section in ["dependencies", "dev-dependencies"] {
                if let Some(deps) = target.get_mut(section) {
                    swap(deps);
                }
            }
        }
    }
    assert!(swapped > 0, "the manifest declares no dependency `{dep}`");
    if !doc.contains_key("workspace") {
        doc.insert("workspace", toml_edit::table());
    }
    doc.to_string()
}

impl RegistryCrate {
    /// The published manifest.
    pub fn published_manifest(&self) -> String {
        std::fs::read_to_string(self.dir.join(PRISTINE)).expect("the published manifest")
    }

    /// Rename dependency `dep` to package `package` at `path` (see [`swap_dependency`]),
    /// starting from the published manifest. The file is written only when it changes,
    /// so that a cached build stays fresh.
    pub fn swap_dependency(&self, dep: &str, package: &str, path: &Path) {
        let manifest = swap_dependency(&self.published_manifest(), dep, package, path);
        let target = self.dir.join("Cargo.toml");
        if std::fs::read_to_string(&target).ok().as_deref() != Some(manifest.as_str()) {
            std::fs::write(&target, manifest).expect("write the manifest");
        }
    }

    /// [`RegistryCrate::swap_dependency`] for several dependencies at once: each of
    /// `swaps` is (dependency, package, path).
    pub fn swap_dependencies(&self, swaps: &[(&str, &str, &Path)]) {
        let manifest = swaps
            .iter()
            .fold(self.published_manifest(), |m, (dep, package, path)| {
                swap_dependency(&m, dep, package, path)
            });
        write_if_changed(&self.dir.join("Cargo.toml"), &manifest);
    }

    /// A copy of the published package beside this checkout's copy
    /// (`NAME-VERSION-SUFFIX`), its dependency `pin.0` pinned to version `pin.1`
    /// (`=0.1.21`) and the dependencies of `swaps` renamed as
    /// [`RegistryCrate::swap_dependencies`] does. The manifest is written only when it
    /// changes, so that a cached build stays fresh.
    pub fn variant(
        &self,
        suffix: &str,
        pin: (&str, &str),
        swaps: &[(&str, &str, &Path)],
    ) -> PathBuf {
        let (_, dir) = self.copy_beside(suffix);
        let manifest = swaps.iter().fold(
            pin_dependency(&self.published_manifest(), pin.0, pin.1),
            |m, (dep, package, path)| swap_dependency(&m, dep, package, path),
        );
        write_if_changed(&dir.join("Cargo.toml"), &manifest);
        dir
    }

    /// The published package and a copy of it beside this checkout's copy
    /// (`NAME-VERSION-SUFFIX`), made once (atomically: another test may race for it).
    fn copy_beside(&self, suffix: &str) -> (PathBuf, PathBuf) {
        let published = unpack(&self.name, &self.version);
        let dir = self
            .dir
            .with_file_name(format!("{}-{}-{suffix}", self.name, self.version));
        if !dir.join(PRISTINE).exists() {
            let partial = dir.with_file_name(format!(
                ".{}-{}-{suffix}.{}",
                self.name,
                self.version,
                std::process::id()
            ));
            let _ = std::fs::remove_dir_all(&partial);
            copy_tree(&published, &partial).expect("copy the published package");
            if std::fs::rename(&partial, &dir).is_err() {
                // Another test got there first.
                let _ = std::fs::remove_dir_all(&partial);
            }
        }
        (published, dir)
    }

    /// A command run in the package's directory, its builds in [`target_dir`].
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new(program);
        cmd.current_dir(&self.dir)
            .env("CARGO_TARGET_DIR", target_dir());
        cmd
    }
}

impl RegistryCrate {
    /// A copy of the published package beside this checkout's copy (`NAME-VERSION-SUFFIX`)
    /// with `added` inserted after the first line of `file` that is `anchor` (a planted
    /// change). Files are written only when they change, so that a cached build stays
    /// fresh. Panics when the file has no such line.
    pub fn planted(&self, suffix: &str, file: &str, anchor: &str, added: &str) -> PathBuf {
        let (published, dir) = self.copy_beside(suffix);
        let text = std::fs::read_to_string(published.join(file))
            .unwrap_or_else(|e| panic!("{file} of {} {}: {e}", self.name, self.version));
        let at = text
            .lines()
            .position(|l| l == anchor)
            .unwrap_or_else(|| panic!("no line `{anchor}` in {file}"));
        let mut lines: Vec<&str> = text.lines().collect();
        lines.splice(at + 1..at + 1, added.lines());
        let planted = lines.join("\n") + "\n";
        let target = dir.join(file);
        if std::fs::read_to_string(&target).ok().as_deref() != Some(planted.as_str()) {
            std::fs::write(&target, planted).expect("write the planted change");
        }
        dir
    }
}

/// Write `text` to `path` unless the file already holds it (a cached build stays fresh).
fn write_if_changed(path: &Path, text: &str) {
    if std::fs::read_to_string(path).ok().as_deref() != Some(text) {
        std::fs::write(path, text).expect("write the manifest");
    }
}

/// The manifest with dependency `dep`'s version requirement set to `version` wherever
/// it is declared (the dev-dependency a published bench file was written against, pinned
/// to the release the tests compare with). Panics when the manifest does not declare it.
pub fn pin_dependency(manifest: &str, dep: &str, version: &str) -> String {
    let mut doc: toml_edit::DocumentMut = manifest.parse().expect("a TOML manifest");
    let mut pinned = 0;
    for section in ["dependencies", "dev-dependencies"] {
        let Some(item) = doc
            .get_mut(section)
            .and_then(|d| d.as_table_like_mut())
            .and_then(|d| d.get_mut(dep))
        else {
            continue;
        };
        pinned += 1;
        match item.as_table_like_mut() {
            Some(table) => {
                table.insert("version", toml_edit::value(version));
            }
            None => *item = toml_edit::value(version),
        }
    }
    assert!(pinned > 0, "the manifest declares no dependency `{dep}`");
    doc.to_string()
}
