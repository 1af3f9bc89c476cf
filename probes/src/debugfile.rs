//! Separate debug files: the full symbol table and DWARF that a distribution strips from
//! a program or library and ships apart (Debian's `-dbg` and `-dbgsym` packages, Fedora's
//! `-debuginfo`), or that a build split off with `objcopy --only-keep-debug`.
//!
//! Looked up where gdb looks, in its order: by the `NT_GNU_BUILD_ID` note under
//! `/usr/lib/debug/.build-id/xx/rest.debug`; by the `.gnu_debuglink` name next to the
//! file, in a `.debug/` directory next to it, and under `/usr/lib/debug/<its directory>/`;
//! last, in the cache of a debuginfod client (`$DEBUGINFOD_CACHE_PATH`, else
//! `$XDG_CACHE_HOME/debuginfod_client`, else `~/.cache/debuginfod_client`:
//! `<build id>/debuginfo`), which is read, never filled. A file found must be the one
//! built with the program: the same build id, and for a `.gnu_debuglink` name the CRC the
//! link records. One that is not is passed over, and the first reason is kept for a note.

use std::path::{Path, PathBuf};

use object::{Object, ObjectSection};

/// A separate debug file that matches its image.
#[derive(Debug)]
pub struct DebugFile {
    /// Where it was found.
    pub path: PathBuf,
    /// Its build id, if it has one (equal to its image's when both have one).
    pub build_id: Option<Vec<u8>>,
    /// Whether it has a `.symtab`.
    pub has_symbols: bool,
    /// Whether it has a `.debug_info`.
    pub has_dwarf: bool,
    data: Vec<u8>,
}

impl DebugFile {
    /// The whole file.
    pub fn data(&self) -> &[u8] {
        &self.data
    }
}

/// What the search for a separate debug file found.
#[derive(Debug)]
pub enum Lookup {
    /// A debug file that matches the image.
    Found(DebugFile),
    /// Files that do not match or cannot be read, and none that does: the first one,
    /// `path: why`.
    Unusable(String),
    /// Nothing at any of the places looked at.
    Absent,
}

/// What an image says about its debug file.
#[derive(Debug, Clone, Copy)]
pub struct Wanted<'a> {
    /// The image's canonical path.
    pub path: &'a Path,
    /// Its `NT_GNU_BUILD_ID`.
    pub build_id: Option<&'a [u8]>,
    /// Its `.gnu_debuglink`: file name and CRC-32 of the debug file.
    pub debuglink: Option<(&'a str, u32)>,
}

/// How a candidate was named, which decides how it is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Named {
    BuildId,
    Debuglink,
}

/// The debug file of an image, searched in the system's places.
pub fn find(wanted: Wanted<'_>) -> Lookup {
    find_in(
        wanted,
        Path::new("/usr/lib/debug"),
        debuginfod_cache().as_deref(),
    )
}

/// The debug file of an image, with `root` in place of `/usr/lib/debug` and `debuginfod`
/// the client cache, if any.
pub fn find_in(wanted: Wanted<'_>, root: &Path, debuginfod: Option<&Path>) -> Lookup {
    let mut unusable = None;
    for (candidate, named) in candidates(wanted, root, debuginfod) {
        let data = match std::fs::read(&candidate) {
            Ok(data) => data,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                unusable.get_or_insert(format!("{}: {e}", candidate.display()));
                continue;
            }
        };
        match check(wanted, named, data) {
            Ok((build_id, has_symbols, has_dwarf, data)) => {
                return Lookup::Found(DebugFile {
                    path: candidate,
                    build_id,
                    has_symbols,
                    has_dwarf,
                    data,
                })
            }
            Err(why) => {
                unusable.get_or_insert(format!("{}: {why}", candidate.display()));
            }
        }
    }
    match unusable {
        Some(why) => Lookup::Unusable(why),
        None => Lookup::Absent,
    }
}

/// The places to look, in order, with how each is named.
fn candidates(wanted: Wanted<'_>, root: &Path, debuginfod: Option<&Path>) -> Vec<(PathBuf, Named)> {
    let mut out = Vec::new();
    let hex = wanted
        .build_id
        .filter(|id| id.len() > 1)
        .map(|id| id.iter().map(|b| format!("{b:02x}")).collect::<String>());
    if let Some(hex) = &hex {
        let by_id = root
            .join(".build-id")
            .join(&hex[..2])
            .join(format!("{}.debug", &hex[2..]));
        out.push((by_id, Named::BuildId));
    }
    if let (Some((link, _)), Some(dir)) = (wanted.debuglink, wanted.path.parent()) {
        // A name with a directory in it is no debuglink gdb would follow either.
        if !link.is_empty() && !link.contains('/') {
            out.push((dir.join(link), Named::Debuglink));
            out.push((dir.join(".debug").join(link), Named::Debuglink));
            let relative = dir.strip_prefix("/").unwrap_or(dir);
            out.push((root.join(relative).join(link), Named::Debuglink));
        }
    }
    if let (Some(hex), Some(cache)) = (&hex, debuginfod) {
        out.push((cache.join(hex).join("debuginfo"), Named::BuildId));
    }
    out.retain(|(p, _)| p != wanted.path);
    out
}

type Checked = (Option<Vec<u8>>, bool, bool, Vec<u8>);

/// The candidate's build id and what it holds, if it is the image's debug file; else why
/// it is not.
fn check(wanted: Wanted<'_>, named: Named, data: Vec<u8>) -> Result<Checked, String> {
    let (build_id, has_symbols, has_dwarf) = {
        let file = object::File::parse(&*data).map_err(|e| format!("malformed ELF ({e})"))?;
        let build_id = file.build_id().ok().flatten().map(<[u8]>::to_vec);
        let has_symbols = file.section_by_name(".symtab").is_some();
        let has_dwarf = file
            .section_by_name(".debug_info")
            .is_some_and(|s| s.size() > 0);
        (build_id, has_symbols, has_dwarf)
    };
    let hex = |id: &[u8]| id.iter().map(|b| format!("{b:02x}")).collect::<String>();
    match (named, wanted.build_id, &build_id) {
        (_, Some(want), Some(got)) if want != got.as_slice() => {
            return Err(format!(
                "its build id {} is not the program's {} (a debug file of another build)",
                hex(got),
                hex(want)
            ));
        }
        (Named::BuildId, _, None) => {
            return Err("it has no build id, so it cannot be told to match".into());
        }
        _ => {}
    }
    if named == Named::Debuglink {
        if let Some((_, crc)) = wanted.debuglink {
            let actual = crc32fast::hash(&data);
            if actual != crc {
                return Err(format!(
                    "its CRC-32 {actual:08x} is not the {crc:08x} that .gnu_debuglink records (a debug file of another build)"
                ));
            }
        }
    }
    if !has_symbols && !has_dwarf {
        return Err("it holds neither a symbol table nor DWARF".into());
    }
    Ok((build_id, has_symbols, has_dwarf, data))
}

/// The debuginfod client's cache directory, if the environment names one that exists.
fn debuginfod_cache() -> Option<PathBuf> {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    let dir = if let Some(p) = var("DEBUGINFOD_CACHE_PATH") {
        PathBuf::from(p)
    } else if let Some(p) = var("XDG_CACHE_HOME") {
        PathBuf::from(p).join("debuginfod_client")
    } else {
        PathBuf::from(var("HOME")?).join(".cache/debuginfod_client")
    };
    dir.is_dir().then_some(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_follow_gdb_s_order() {
        let wanted = Wanted {
            path: Path::new("/usr/bin/prog"),
            build_id: Some(&[0xab, 0xcd, 0xef]),
            debuglink: Some(("prog.debug", 0)),
        };
        let got: Vec<PathBuf> = candidates(wanted, Path::new("/D"), Some(Path::new("/C")))
            .into_iter()
            .map(|(p, _)| p)
            .collect();
        let want: Vec<PathBuf> = [
            "/D/.build-id/ab/cdef.debug",
            "/usr/bin/prog.debug",
            "/usr/bin/.debug/prog.debug",
            "/D/usr/bin/prog.debug",
            "/C/abcdef/debuginfo",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        assert_eq!(got, want);
        let odd = Wanted {
            debuglink: Some(("../../etc/x", 0)),
            build_id: None,
            ..wanted
        };
        assert!(candidates(odd, Path::new("/D"), None).is_empty());
    }

    #[test]
    fn a_file_of_another_build_is_passed_over_with_its_reason() {
        let dir = tempfile::tempdir().unwrap();
        // This test program has a build id; a copy of it under another build id's name
        // is no debug file of that build.
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let file = object::File::parse(&*me).unwrap();
        let Some(own) = file.build_id().ok().flatten() else {
            // rustc passes no --build-id on this platform: nothing to check.
            return;
        };
        let mut other = own.to_vec();
        other[0] ^= 0xff;
        let hex: String = other.iter().map(|b| format!("{b:02x}")).collect();
        let at = dir.path().join(".build-id").join(&hex[..2]);
        std::fs::create_dir_all(&at).unwrap();
        std::fs::write(at.join(format!("{}.debug", &hex[2..])), &me).unwrap();
        let wanted = Wanted {
            path: Path::new("/nonexistent/prog"),
            build_id: Some(&other),
            debuglink: None,
        };
        match find_in(wanted, dir.path(), None) {
            Lookup::Unusable(why) => assert!(why.contains("is not the program's"), "{why}"),
            found => panic!("{found:?}"),
        }
        // Under its own build id it is found.
        let hex: String = own.iter().map(|b| format!("{b:02x}")).collect();
        let at = dir.path().join(".build-id").join(&hex[..2]);
        std::fs::create_dir_all(&at).unwrap();
        std::fs::write(at.join(format!("{}.debug", &hex[2..])), &me).unwrap();
        let wanted = Wanted {
            build_id: Some(own),
            ..wanted
        };
        assert!(matches!(
            find_in(wanted, dir.path(), None),
            Lookup::Found(DebugFile {
                has_symbols: true,
                ..
            })
        ));
    }

    #[test]
    fn nothing_found_is_absent() {
        let wanted = Wanted {
            path: Path::new("/nonexistent/prog"),
            build_id: Some(&[1, 2, 3, 4]),
            debuglink: Some(("prog.debug", 7)),
        };
        assert!(matches!(
            find_in(wanted, Path::new("/nonexistent/debug"), None),
            Lookup::Absent
        ));
    }
}
