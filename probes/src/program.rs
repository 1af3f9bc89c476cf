//! Loading a program to probe: the command's executable found as `execvp` would, `#!`
//! interpreters followed to the ELF file, and the libraries it loads, each an [`Image`]
//! with its symbols and debug info. Matching patterns against them is `resolve.rs`'s.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use crate::dwarf::InlinedIndex;
use crate::elf::{resolve_libraries, Image, Libraries};
use crate::error::ProbeError;
use crate::pattern::Pattern;

/// The program behind a command, with the libraries it loads.
#[derive(Debug)]
pub struct Program {
    /// The executable as given (a script or an ELF file).
    pub program: PathBuf,
    /// The `#!` interpreter chain followed to reach the ELF file, if any.
    pub script: Option<PathBuf>,
    /// The ELF executable first, then the loader and the libraries in load order.
    pub images: Vec<Image>,
    /// Library resolution results.
    pub libraries: Libraries,
    pub(crate) inlined: Vec<Option<Result<InlinedIndex, String>>>,
    /// How many of `images` the program loads at start; the others were named by a
    /// pattern (`LIBRARY:NAME`): libraries it may load at run time (`dlopen`).
    pub linked: usize,
}

impl Program {
    /// Resolve `program` (a path, or a name looked up in `PATH`) to its ELF file and load
    /// it with its libraries. `ld_library_path` is the child's `LD_LIBRARY_PATH`.
    pub fn load(program: &Path, ld_library_path: Option<&OsStr>) -> Result<Program, ProbeError> {
        let given = find_in_path(program).ok_or_else(|| {
            ProbeError::read(
                program,
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "no such file, and not found in PATH",
                ),
            )
        })?;
        let (elf_path, script) = follow_shebang(&given, 0)?;
        let exe = Image::load(&elf_path)?;
        let (libraries, libs) = resolve_libraries(&exe, ld_library_path);
        let mut images = vec![exe];
        images.extend(libs);
        let inlined = images.iter().map(|_| None).collect();
        let linked = images.len();
        Ok(Program {
            program: given,
            script,
            images,
            libraries,
            inlined,
            linked,
        })
    }

    /// The image of the library a pattern names (`LIBRARY:NAME`): one the program loads at
    /// start, or else the file loaded now as a library it may load at run time. A name
    /// without a `/` is looked for among the program's libraries, then in the
    /// directories they come from and the system's library directories.
    pub fn library(&mut self, name: &str) -> Result<usize, ProbeError> {
        let by_name = |img: &Image| img.path.file_name().is_some_and(|f| f == name);
        let path = if name.contains('/') {
            let path = Path::new(name)
                .canonicalize()
                .map_err(|e| ProbeError::read(Path::new(name), e))?;
            if let Some(i) = self.images.iter().position(|img| img.path == path) {
                return Ok(i);
            }
            path
        } else {
            if let Some(i) = self.images.iter().position(by_name) {
                return Ok(i);
            }
            let mut dirs: Vec<PathBuf> = self
                .images
                .iter()
                .filter_map(|img| img.path.parent().map(Path::to_path_buf))
                .collect();
            dirs.extend(
                [
                    "/lib/x86_64-linux-gnu",
                    "/usr/lib/x86_64-linux-gnu",
                    "/lib64",
                    "/usr/lib",
                ]
                .map(PathBuf::from),
            );
            dirs.iter()
                .map(|d| d.join(name))
                .find(|p| p.is_file())
                .ok_or_else(|| {
                    ProbeError::read(
                        Path::new(name),
                        std::io::Error::new(
                            std::io::ErrorKind::NotFound,
                            "not among the program's libraries nor in the library \
                             directories; give the library's path",
                        ),
                    )
                })?
        };
        self.images.push(Image::load(&path)?);
        self.inlined.push(None);
        Ok(self.images.len() - 1)
    }

    /// Whether `pattern` looks for functions in image `i`: the library it names, or else
    /// every image the program loads at start.
    pub(crate) fn searches(&self, pattern: &Pattern, i: usize) -> bool {
        match pattern.library() {
            Some(name) => {
                let img = &self.images[i];
                let wanted = Path::new(name);
                if name.contains('/') {
                    wanted.canonicalize().is_ok_and(|p| p == img.path)
                } else {
                    img.path.file_name().is_some_and(|f| f == name)
                }
            }
            None => i < self.linked,
        }
    }

    /// Whether image `i` is a library the program loads at run time (named by a pattern,
    /// not linked): code that is not there when the program starts.
    pub fn loaded_at_run_time(&self, i: usize) -> bool {
        i >= self.linked
    }

    /// The ELF executable.
    pub fn exe(&self) -> &Image {
        &self.images[0]
    }

    pub(crate) fn inlined_of(&mut self, image: usize) -> &Result<InlinedIndex, String> {
        let data = self.images[image].dwarf_data().unwrap_or(&[]);
        self.inlined[image].get_or_insert_with(|| {
            if data.is_empty() {
                Ok(InlinedIndex::default())
            } else {
                InlinedIndex::build(data)
            }
        })
    }

    /// The bytes of the ELF file holding `image`'s DWARF: the file, or its separate
    /// debug file (found and checked by [`Image::load`]).
    pub(crate) fn dwarf_data(&self, image: usize) -> Option<&[u8]> {
        self.images[image].dwarf_data()
    }

    /// The separate debug file whose DWARF `image` uses, if any.
    pub fn debug_file(&self, image: usize) -> Option<PathBuf> {
        self.images[image].dwarf_file().map(Path::to_path_buf)
    }

    /// Whether `image` has DWARF, in the file or in a separate debug file.
    pub fn has_debug_info(&self, image: usize) -> bool {
        self.images[image].dwarf_data().is_some()
    }

    /// Why `image` has no usable DWARF although a separate debug file was found, if that
    /// is so.
    pub(crate) fn unusable_debug_file(&self, image: usize) -> Option<String> {
        let img = &self.images[image];
        if img.dwarf_data().is_some() {
            return None;
        }
        if let Some(d) = &img.debug_file {
            return Some(format!(
                "its separate debug file {} has symbols but no DWARF",
                d.path.display()
            ));
        }
        img.debug_file_problem
            .as_ref()
            .map(|why| format!("its separate debug file is unusable: {why}"))
    }
}

fn find_in_path(program: &Path) -> Option<PathBuf> {
    if program.components().count() > 1 || program.is_absolute() {
        return program.exists().then(|| program.to_path_buf());
    }
    if program.exists() && program.to_string_lossy().contains('/') {
        return Some(program.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// Follow `#!` lines to the ELF file that the kernel will run. Returns the ELF path and
/// the script, if `path` was one.
fn follow_shebang(path: &Path, depth: u32) -> Result<(PathBuf, Option<PathBuf>), ProbeError> {
    use std::io::Read;
    let mut head = [0u8; 256];
    let n = std::fs::File::open(path)
        .and_then(|mut f| f.read(&mut head))
        .map_err(|e| ProbeError::read(path, e))?;
    let head = &head[..n];
    if !head.starts_with(b"#!") {
        return Ok((path.to_path_buf(), None));
    }
    let line_end = head.iter().position(|&b| b == b'\n').unwrap_or(head.len());
    let line = String::from_utf8_lossy(&head[2..line_end])
        .trim()
        .to_string();
    let mut words = line.split_whitespace();
    let interp = words.next().unwrap_or("").to_string();
    let arg: Vec<&str> = words.collect();
    let fail = |hint: &str| ProbeError::Interpreter {
        path: path.to_path_buf(),
        interpreter: line.clone(),
        hint: hint.to_string(),
    };
    if depth > 4 {
        return Err(fail(
            "too many nested `#!` interpreters; run the interpreter directly",
        ));
    }
    if interp.is_empty() {
        return Err(fail("the `#!` line is empty; add an interpreter path"));
    }
    let mut interp_path = PathBuf::from(&interp);
    if interp_path.file_name() == Some(OsStr::new("env")) {
        // `#!/usr/bin/env [-S] prog [args]`: PATH lookup of prog.
        let prog = arg
            .iter()
            .find(|a| !a.starts_with('-') && !a.contains('='))
            .ok_or_else(|| fail("`env` is given no program name"))?;
        interp_path = find_in_path(Path::new(prog)).ok_or_else(|| {
            fail(&format!(
                "`{prog}` is not in PATH; install it or give its full path"
            ))
        })?;
    }
    if !interp_path.exists() {
        return Err(fail("install it, or fix the `#!` line"));
    }
    let (elf, _) = follow_shebang(&interp_path, depth + 1)?;
    Ok((elf, Some(path.to_path_buf())))
}
