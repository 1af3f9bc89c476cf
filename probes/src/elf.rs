//! ELF images: function symbols with their file offsets, the dynamic section, and the
//! shared libraries a program loads, found the way the dynamic loader finds them.

use std::collections::{HashSet, VecDeque};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use object::elf;
use object::read::elf::{Dyn, ElfFile64, FileHeader, ProgramHeader, Sym, SymbolTable};
use object::{Endianness, Object};

use crate::debugfile::{self, DebugFile, Lookup, Wanted};
use crate::error::ProbeError;

/// A function symbol that can be probed safely: its start lies inside an executable
/// `PT_LOAD` segment's file-backed part, and so does its whole extent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Function {
    /// The symbol name as stored (mangled for Rust and C++).
    pub name: String,
    /// Symbol value (virtual address before relocation).
    pub address: u64,
    /// Symbol size in bytes (never 0).
    pub size: u64,
    /// File offset of the first instruction: what a uprobe definition needs.
    pub offset: u64,
    /// Found in `.dynsym` (exported) rather than only in `.symtab` (the file's or its
    /// separate debug file's).
    pub exported: bool,
}

/// A loaded ELF file.
#[derive(Debug)]
pub struct Image {
    /// Canonical path of the file.
    pub path: PathBuf,
    /// Probeable functions, one per (name, address), sorted by address.
    pub functions: Vec<Function>,
    /// No `.symtab`, neither in the file nor in a separate debug file: only exported
    /// functions are known.
    pub stripped: bool,
    /// No `PT_INTERP` and no `PT_DYNAMIC`: a statically linked program.
    pub is_static: bool,
    /// `DT_NEEDED` entries.
    pub needed: Vec<String>,
    /// `DT_RPATH` directories (unexpanded).
    pub rpath: Vec<String>,
    /// `DT_RUNPATH` directories (unexpanded).
    pub runpath: Vec<String>,
    /// `PT_INTERP`: the dynamic loader.
    pub interpreter: Option<PathBuf>,
    /// Function symbols skipped because probing them would not be safe (size 0, IFUNC
    /// resolvers, outside an executable segment).
    pub rejected: usize,
    /// Executable `PT_LOAD` segments: (virtual address, file size, file offset).
    pub exec_segments: Vec<(u64, u64, u64)>,
    /// The GNU build id (`NT_GNU_BUILD_ID`), which names a separate debug file.
    pub build_id: Option<Vec<u8>>,
    /// The `.gnu_debuglink` file name of a separate debug file.
    pub debuglink: Option<String>,
    /// The separate debug file whose symbols or DWARF the file lacks and this image
    /// uses, checked to be of the same build ([`crate::debugfile`]). Looked for only
    /// when the file has no `.symtab` or no `.debug_info`.
    pub debug_file: Option<DebugFile>,
    /// Why separate debug files that were found are not used (`path: why`), when none is.
    pub debug_file_problem: Option<String>,
    /// The file itself has a `.debug_info` section.
    own_dwarf: bool,
    data: Vec<u8>,
}

impl Image {
    /// Read and parse the ELF file at `path`.
    pub fn load(path: &Path) -> Result<Image, ProbeError> {
        let path = path.canonicalize().map_err(|e| ProbeError::read(path, e))?;
        let data = std::fs::read(&path).map_err(|e| ProbeError::read(&path, e))?;
        Image::parse(path, data)
    }

    /// The raw bytes of the file (its code, its own sections).
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// The file-backed parts of the `PT_LOAD` segments: (vaddr, file size, file offset),
    /// for [`Image::read_at`].
    pub fn load_segments(&self) -> Vec<(u64, u64, u64)> {
        use object::read::elf::{FileHeader, ProgramHeader};
        let data = self.data();
        let Ok(header) = object::elf::FileHeader64::<object::Endianness>::parse(data) else {
            return Vec::new();
        };
        let Ok(endian) = header.endian() else {
            return Vec::new();
        };
        let Ok(phdrs) = header.program_headers(endian, data) else {
            return Vec::new();
        };
        phdrs
            .iter()
            .filter(|p| p.p_type(endian) == object::elf::PT_LOAD)
            .map(|p| (p.p_vaddr(endian), p.p_filesz(endian), p.p_offset(endian)))
            .collect()
    }

    /// Where the loader's view of this file shows its parts, for finding it among the
    /// loaded objects by load bias and dynamic section: the link-time address of the
    /// dynamic section (`PT_DYNAMIC`), of the program headers (inside the `PT_LOAD`
    /// segment that maps them from the file) and their number. `None` when the file has
    /// no dynamic section or its program headers are not loaded.
    pub fn headers_in_memory(&self) -> Option<(u64, u64, u64)> {
        use object::read::elf::{FileHeader, ProgramHeader};
        let data = self.data();
        let header = object::elf::FileHeader64::<object::Endianness>::parse(data).ok()?;
        let endian = header.endian().ok()?;
        let phdrs = header.program_headers(endian, data).ok()?;
        let dynamic = phdrs
            .iter()
            .find(|p| p.p_type(endian) == object::elf::PT_DYNAMIC)?
            .p_vaddr(endian);
        let phoff = header.e_phoff(endian);
        let size = std::mem::size_of_val(phdrs) as u64;
        let phdr_vaddr = phdrs.iter().find_map(|p| {
            let (offset, filesz) = (p.p_offset(endian), p.p_filesz(endian));
            let inside = p.p_type(endian) == object::elf::PT_LOAD
                && phoff >= offset
                && phoff.checked_add(size)? <= offset.checked_add(filesz)?;
            inside.then(|| p.p_vaddr(endian) + (phoff - offset))
        })?;
        Some((dynamic, phdr_vaddr, phdrs.len() as u64))
    }

    /// The file's `len` bytes at link-time address `vaddr` (a jump table in read-only
    /// data), when `segments` ([`Image::load_segments`]) load them from the file.
    pub fn read_at(&self, segments: &[(u64, u64, u64)], vaddr: u64, len: usize) -> Option<&[u8]> {
        let &(at, _, offset) = segments.iter().find(|&&(at, size, _)| {
            vaddr >= at && vaddr.saturating_add(len as u64) <= at.saturating_add(size)
        })?;
        let from = usize::try_from(offset + (vaddr - at)).ok()?;
        self.data.get(from..from.checked_add(len)?)
    }

    /// The bytes of the ELF file that holds this image's DWARF: the file itself, or its
    /// separate debug file; `None` when neither has a `.debug_info`.
    pub fn dwarf_data(&self) -> Option<&[u8]> {
        if self.own_dwarf {
            return Some(&self.data);
        }
        self.debug_file
            .as_ref()
            .filter(|d| d.has_dwarf)
            .map(DebugFile::data)
    }

    /// The separate debug file whose DWARF this image uses, if it uses one.
    pub fn dwarf_file(&self) -> Option<&Path> {
        match &self.debug_file {
            Some(d) if d.has_dwarf && !self.own_dwarf => Some(&d.path),
            _ => None,
        }
    }

    /// File name for messages (`libc.so.6`).
    pub fn file_name(&self) -> String {
        self.path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| self.path.display().to_string())
    }

    fn parse(path: PathBuf, data: Vec<u8>) -> Result<Image, ProbeError> {
        check_header(&path, &data)?;
        let unsupported = |reason: String| ProbeError::UnsupportedElf {
            path: path.clone(),
            reason,
        };
        let file = ElfFile64::<Endianness>::parse(&*data)
            .map_err(|e| unsupported(format!("malformed ELF file ({e})")))?;
        let endian = file.endian();
        let segments = Segments::read(&file, &data);
        let e_type = file.elf_header().e_type(endian);
        if e_type != elf::ET_EXEC && e_type != elf::ET_DYN {
            return Err(unsupported(
                "is an ELF object or core file, not an executable or shared library".into(),
            ));
        }

        let (needed, rpath, runpath) = dynamic_strings(&file, endian, &data)
            .map_err(|e| unsupported(format!("malformed dynamic section ({e})")))?;

        let own_symbols = !file.elf_symbol_table().is_empty();
        let own_dwarf = file.section_by_name(".debug_info").is_some();
        let build_id = file.build_id().ok().flatten().map(<[u8]>::to_vec);
        let link = file.gnu_debuglink().ok().flatten();
        let debuglink = link.map(|(name, _crc)| String::from_utf8_lossy(name).into_owned());

        let (mut debug_file, mut debug_file_problem) = (None, None);
        if !own_symbols || !own_dwarf {
            let wanted = Wanted {
                path: &path,
                build_id: build_id.as_deref(),
                debuglink: link
                    .and_then(|(name, crc)| Some((std::str::from_utf8(name).ok()?, crc))),
            };
            match debugfile::find(wanted) {
                Lookup::Found(d) => debug_file = Some(d),
                Lookup::Unusable(why) => debug_file_problem = Some(why),
                Lookup::Absent => {}
            }
        }
        // The debug file's symbol table replaces the missing one; code and segments stay
        // the file's own (the build id or CRC says both describe the same bytes).
        let debug_symbols = match &debug_file {
            Some(d) if !own_symbols && d.has_symbols => {
                ElfFile64::<Endianness>::parse(d.data()).ok()
            }
            _ => None,
        };
        let mut tables = vec![
            (file.elf_dynamic_symbol_table(), true),
            (file.elf_symbol_table(), false),
        ];
        if let Some(d) = &debug_symbols {
            tables.push((d.elf_symbol_table(), false));
        }
        let (functions, rejected) = function_symbols(endian, &tables, &segments.exec);
        let stripped = !own_symbols && debug_symbols.is_none();

        Ok(Image {
            path,
            functions,
            stripped,
            is_static: segments.interpreter.is_none() && !segments.has_dynamic,
            needed,
            rpath,
            runpath,
            interpreter: segments.interpreter,
            rejected,
            exec_segments: segments.exec,
            build_id,
            debuglink,
            debug_file,
            debug_file_problem,
            own_dwarf,
            data,
        })
    }

    /// The function symbol whose extent holds `address` (the smallest, if several do).
    pub fn function_at(&self, address: u64) -> Option<&Function> {
        let end = self.functions.partition_point(|f| f.address <= address);
        self.functions[..end]
            .iter()
            .filter(|f| address < f.address + f.size)
            .min_by_key(|f| f.size)
    }

    /// The name for people (demangled) of the function whose extent holds `address`
    /// ([`Image::function_at`]).
    pub fn function_label(&self, address: u64) -> Option<String> {
        self.function_at(address)
            .map(|f| crate::demangle::demangle(&f.name).label)
    }

    /// The link-time address of the byte at file offset `offset` of an executable
    /// segment (where a uprobe at that offset sits).
    pub fn address_of_offset(&self, offset: u64) -> Option<u64> {
        self.exec_segments
            .iter()
            .find(|&&(_, filesz, file_offset)| {
                offset >= file_offset && offset - file_offset < filesz
            })
            .map(|&(vaddr, _, file_offset)| vaddr + (offset - file_offset))
    }

    /// The bytes of `function`, whose extent [`safe_offset`] checked when it was loaded.
    pub fn code_of(&self, function: &Function) -> Option<&[u8]> {
        let start = usize::try_from(function.offset).ok()?;
        let len = usize::try_from(function.size).ok()?;
        self.data.get(start..start.checked_add(len)?)
    }
}

/// The file offset of a function at `address` of `size` bytes, if the whole function
/// lies in the file-backed part of one executable `PT_LOAD` segment.
///
/// This is the only check between a symbol table and the kernel, which does not validate
/// uprobe offsets: an offset outside code kills or silently corrupts the benchmark.
pub fn safe_offset(exec_segments: &[(u64, u64, u64)], address: u64, size: u64) -> Option<u64> {
    if size == 0 {
        return None;
    }
    let end = address.checked_add(size)?;
    exec_segments
        .iter()
        .find(|&&(vaddr, filesz, _)| address >= vaddr && end <= vaddr.saturating_add(filesz))
        .map(|&(vaddr, _, file_offset)| address - vaddr + file_offset)
}

/// What the program headers say.
struct Segments {
    /// Executable `PT_LOAD` segments: (virtual address, file size, file offset).
    exec: Vec<(u64, u64, u64)>,
    /// `PT_INTERP`.
    interpreter: Option<PathBuf>,
    /// Has a `PT_DYNAMIC`.
    has_dynamic: bool,
}

impl Segments {
    fn read(file: &ElfFile64<'_, Endianness>, data: &[u8]) -> Segments {
        let endian = file.endian();
        let mut out = Segments {
            exec: Vec::new(),
            interpreter: None,
            has_dynamic: false,
        };
        for ph in file.elf_program_headers() {
            match ph.p_type(endian) {
                elf::PT_LOAD if ph.p_flags(endian) & elf::PF_X != 0 => {
                    out.exec
                        .push((ph.p_vaddr(endian), ph.p_filesz(endian), ph.p_offset(endian)))
                }
                elf::PT_INTERP => {
                    if let Ok(Some(interp)) = ph.interpreter(endian, data) {
                        out.interpreter = Some(PathBuf::from(OsStr::from_bytes(interp)));
                    }
                }
                elf::PT_DYNAMIC => out.has_dynamic = true,
                _ => {}
            }
        }
        out
    }
}

/// The probeable functions of the symbol `tables` (`.dynsym`, then `.symtab`s; with
/// whether a table's symbols are exported), one per name and address, sorted by address;
/// and how many function symbols were rejected as unsafe to probe.
fn function_symbols(
    endian: Endianness,
    tables: &[(
        &SymbolTable<'_, object::elf::FileHeader64<Endianness>>,
        bool,
    )],
    exec_segments: &[(u64, u64, u64)],
) -> (Vec<Function>, usize) {
    let mut functions = Vec::new();
    let mut rejected = 0;
    let mut seen = HashSet::new();
    for &(table, exported) in tables {
        for (_, sym) in table.enumerate() {
            let st_type = sym.st_type();
            if (st_type != elf::STT_FUNC && st_type != elf::STT_GNU_IFUNC)
                || sym.st_shndx(endian) == elf::SHN_UNDEF
            {
                continue;
            }
            let Ok(name) = table.symbol_name(endian, sym) else {
                continue;
            };
            let Ok(name) = std::str::from_utf8(name) else {
                continue;
            };
            if name.is_empty() {
                continue;
            }
            let address = sym.st_value(endian);
            let size = sym.st_size(endian);
            if !seen.insert((name.to_string(), address)) {
                // Already found in .dynsym (or in another .symtab).
                continue;
            }
            let offset = if st_type == elf::STT_GNU_IFUNC {
                // The symbol is the resolver, run once at load time, not the function.
                None
            } else {
                safe_offset(exec_segments, address, size)
            };
            match offset {
                Some(offset) => functions.push(Function {
                    name: name.to_string(),
                    address,
                    size,
                    offset,
                    exported,
                }),
                None => rejected += 1,
            }
        }
    }
    functions.sort_by(|a, b| a.address.cmp(&b.address).then(a.name.cmp(&b.name)));
    (functions, rejected)
}

fn check_header(path: &Path, data: &[u8]) -> Result<(), ProbeError> {
    if data.starts_with(b"#!") {
        let head = &data[..data.len().min(256)];
        let end = head.iter().position(|&b| b == b'\n').unwrap_or(head.len());
        return Err(ProbeError::Script {
            path: path.into(),
            line: String::from_utf8_lossy(&head[..end]).trim_end().to_string(),
        });
    }
    if data.len() < 20 || &data[..4] != b"\x7fELF" {
        return Err(ProbeError::NotElf { path: path.into() });
    }
    if data[4] != elf::ELFCLASS64 || data[5] != elf::ELFDATA2LSB {
        return Err(ProbeError::UnsupportedElf {
            path: path.into(),
            reason: "is not a 64-bit little-endian ELF file; only native x86_64 and aarch64 programs can be probed".into(),
        });
    }
    let machine = u16::from_le_bytes([data[18], data[19]]);
    if machine != native_machine() {
        return Err(ProbeError::UnsupportedElf {
            path: path.into(),
            reason: format!(
                "is built for another architecture (e_machine {machine}); probe a program built for this machine"
            ),
        });
    }
    Ok(())
}

fn native_machine() -> u16 {
    if cfg!(target_arch = "aarch64") {
        elf::EM_AARCH64
    } else {
        elf::EM_X86_64
    }
}

/// Whether `path` is a 64-bit ELF file for this machine (cheap: reads the header only).
fn is_native_elf(path: &Path) -> bool {
    use std::io::Read;
    let mut header = [0u8; 20];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut header))
        .is_ok()
        && check_header(path, &header).is_ok()
}

type DynStrings = (Vec<String>, Vec<String>, Vec<String>);

fn dynamic_strings(
    file: &ElfFile64<Endianness>,
    endian: Endianness,
    data: &[u8],
) -> object::read::Result<DynStrings> {
    let mut needed = Vec::new();
    let mut rpath = Vec::new();
    let mut runpath = Vec::new();
    let sections = file.elf_section_table();
    let Some((dynamic, link)) = sections.dynamic(endian, data)? else {
        return Ok((needed, rpath, runpath));
    };
    let strings = sections.strings(endian, data, link)?;
    for d in dynamic {
        let tag = d.tag32(endian);
        if tag == Some(elf::DT_NULL) {
            break;
        }
        if !d.is_string(endian) {
            continue;
        }
        let value = String::from_utf8_lossy(d.string(endian, strings)?).into_owned();
        match tag {
            Some(elf::DT_NEEDED) => needed.push(value),
            Some(elf::DT_RPATH) => rpath.extend(value.split(':').map(str::to_string)),
            Some(elf::DT_RUNPATH) => runpath.extend(value.split(':').map(str::to_string)),
            _ => {}
        }
    }
    Ok((needed, rpath, runpath))
}

/// The shared libraries a program loads, in load order, and the names not found.
#[derive(Debug, Default)]
pub struct Libraries {
    /// Canonical paths of the libraries found (the dynamic loader first if any).
    pub found: Vec<PathBuf>,
    /// `DT_NEEDED` names that could not be found.
    pub missing: Vec<String>,
}

/// Find the libraries `exe` loads, transitively, the way `ld.so` does: `DT_RPATH` (when
/// there is no `DT_RUNPATH`), `LD_LIBRARY_PATH`, `DT_RUNPATH`, the directories of
/// `/etc/ld.so.conf`, then the default directories. `$ORIGIN` is expanded.
/// Each library is loaded with [`Image::load`] to read its own `DT_NEEDED`.
pub fn resolve_libraries(exe: &Image, ld_library_path: Option<&OsStr>) -> (Libraries, Vec<Image>) {
    let system_dirs = system_library_dirs();
    let env_dirs: Vec<PathBuf> = ld_library_path
        .map(|p| {
            std::env::split_paths(p)
                .filter(|d| !d.as_os_str().is_empty())
                .collect()
        })
        .unwrap_or_default();
    let mut libs = Libraries::default();
    let mut images: Vec<Image> = Vec::new();
    let mut seen_names = HashSet::new();
    let mut seen_paths = HashSet::new();
    seen_paths.insert(exe.path.clone());

    if let Some(interp) = &exe.interpreter {
        if let Ok(image) = Image::load(interp) {
            seen_paths.insert(image.path.clone());
            if let Some(name) = interp.file_name() {
                seen_names.insert(name.to_string_lossy().into_owned());
            }
            libs.found.push(image.path.clone());
            images.push(image);
        }
    }

    // (name, index of the requesting image: None = the executable)
    let mut queue: VecDeque<(String, Option<usize>)> =
        exe.needed.iter().map(|n| (n.clone(), None)).collect();
    while let Some((name, requester)) = queue.pop_front() {
        if !seen_names.insert(name.clone()) {
            continue;
        }
        let req = requester.map(|i| &images[i]).unwrap_or(exe);
        let Some(path) = find_library(&name, req, exe, &env_dirs, &system_dirs) else {
            libs.missing.push(name);
            continue;
        };
        let Ok(image) = Image::load(&path) else {
            libs.missing.push(name);
            continue;
        };
        if !seen_paths.insert(image.path.clone()) {
            continue;
        }
        let index = images.len();
        queue.extend(image.needed.iter().map(|n| (n.clone(), Some(index))));
        libs.found.push(image.path.clone());
        images.push(image);
    }
    (libs, images)
}

fn find_library(
    name: &str,
    requester: &Image,
    exe: &Image,
    env_dirs: &[PathBuf],
    system_dirs: &[PathBuf],
) -> Option<PathBuf> {
    if name.contains('/') {
        let p = PathBuf::from(name);
        return is_native_elf(&p).then_some(p);
    }
    let mut dirs: Vec<PathBuf> = Vec::new();
    if requester.runpath.is_empty() {
        dirs.extend(expand(&requester.rpath, requester));
        if !std::ptr::eq(requester, exe) && exe.runpath.is_empty() {
            dirs.extend(expand(&exe.rpath, exe));
        }
    }
    dirs.extend(env_dirs.iter().cloned());
    dirs.extend(expand(&requester.runpath, requester));
    dirs.extend(system_dirs.iter().cloned());
    dirs.into_iter()
        .map(|d| d.join(name))
        .find(|p| is_native_elf(p))
}

fn expand(dirs: &[String], owner: &Image) -> Vec<PathBuf> {
    let origin = owner
        .path
        .parent()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    dirs.iter()
        .filter(|d| !d.is_empty())
        .map(|d| {
            PathBuf::from(
                d.replace("${ORIGIN}", &origin)
                    .replace("$ORIGIN", &origin)
                    .replace("$LIB", "lib64")
                    .replace("$PLATFORM", std::env::consts::ARCH),
            )
        })
        .collect()
}

/// Directories from `/etc/ld.so.conf` (with its `include`s), then the defaults.
pub fn system_library_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    read_ld_conf(Path::new("/etc/ld.so.conf"), &mut dirs, 0);
    let multiarch = format!("{}-linux-gnu", std::env::consts::ARCH);
    for d in [
        format!("/lib/{multiarch}"),
        format!("/usr/lib/{multiarch}"),
        "/lib64".to_string(),
        "/usr/lib64".to_string(),
        "/lib".to_string(),
        "/usr/lib".to_string(),
    ] {
        let d = PathBuf::from(d);
        if !dirs.contains(&d) {
            dirs.push(d);
        }
    }
    dirs
}

fn read_ld_conf(path: &Path, dirs: &mut Vec<PathBuf>, depth: u32) {
    if depth > 8 {
        return;
    }
    let Ok(text) = std::fs::read_to_string(path) else {
        return;
    };
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        if let Some(pattern) = line.strip_prefix("include") {
            for file in glob_simple(pattern.trim(), path) {
                read_ld_conf(&file, dirs, depth + 1);
            }
        } else if line.starts_with('/') {
            let d = PathBuf::from(line);
            if !dirs.contains(&d) {
                dirs.push(d);
            }
        }
    }
}

/// Expand an `include` pattern of ld.so.conf: a directory and a file name with at most
/// one `*` (what distributions use, e.g. `/etc/ld.so.conf.d/*.conf`).
fn glob_simple(pattern: &str, conf: &Path) -> Vec<PathBuf> {
    let pattern = if pattern.starts_with('/') {
        PathBuf::from(pattern)
    } else {
        conf.parent().unwrap_or(Path::new("/")).join(pattern)
    };
    let (Some(dir), Some(file)) = (pattern.parent(), pattern.file_name()) else {
        return Vec::new();
    };
    let file = file.to_string_lossy();
    let Some((prefix, suffix)) = file.split_once('*') else {
        return vec![pattern.clone()];
    };
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            n.len() >= prefix.len() + suffix.len() && n.starts_with(prefix) && n.ends_with(suffix)
        })
        .map(|e| e.path())
        .collect();
    out.sort();
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn offsets_only_inside_executable_segments() {
        let segs = [(0x1000, 0x2000, 0x1000), (0x10000, 0x100, 0x8000)];
        assert_eq!(safe_offset(&segs, 0x1800, 0x10), Some(0x1800));
        assert_eq!(safe_offset(&segs, 0x10010, 0x10), Some(0x8010));
        assert_eq!(safe_offset(&segs, 0x2ff0, 0x20), None, "crosses the end");
        assert_eq!(safe_offset(&segs, 0x500, 0x10), None, "before the segment");
        assert_eq!(safe_offset(&segs, 0x1800, 0), None, "size 0");
        assert_eq!(safe_offset(&segs, u64::MAX - 1, 8), None, "overflow");
    }

    #[test]
    fn own_executable_has_this_test_function() {
        let exe = std::env::current_exe().unwrap();
        let image = Image::load(&exe).unwrap();
        assert!(!image.stripped);
        assert!(!image.is_static);
        let me = image
            .functions
            .iter()
            .find(|f| {
                crate::demangle::demangle(&f.name)
                    .label
                    .ends_with("tests::own_executable_has_this_test_function")
            })
            .expect("the test function is in .symtab");
        // The file offset points at the same bytes as the function in memory.
        let addr = own_executable_has_this_test_function as fn() as usize;
        let len = me.size.min(16) as usize;
        // SAFETY: `addr` is the start of a function of at least `len` bytes (its symbol
        // size), mapped readable and executable for the life of the process.
        let in_memory = unsafe { std::slice::from_raw_parts(addr as *const u8, len) };
        let off = me.offset as usize;
        assert_eq!(&image.data()[off..off + len], in_memory);
        assert!(image.functions.iter().all(|f| f.size > 0));
    }

    #[test]
    fn finds_libc_among_needed_libraries() {
        let exe = Image::load(&std::env::current_exe().unwrap()).unwrap();
        let (libs, images) = resolve_libraries(&exe, None);
        assert!(libs.missing.is_empty(), "{:?}", libs.missing);
        let libc = images
            .iter()
            .find(|i| i.file_name().starts_with("libc.so"))
            .expect("libc found");
        assert!(libc
            .functions
            .iter()
            .any(|f| f.name == "malloc" && f.exported));
        assert!(images.iter().any(|i| i.file_name().starts_with("ld-linux")));
    }

    #[test]
    fn headers_in_memory_are_where_pt_phdr_and_pt_dynamic_say() {
        use object::read::elf::{FileHeader, ProgramHeader};
        let exe = Image::load(&std::env::current_exe().unwrap()).unwrap();
        let (_, images) = resolve_libraries(&exe, None);
        let libc = images
            .into_iter()
            .find(|i| i.file_name().starts_with("libc.so"))
            .expect("libc found");
        for image in [exe, libc] {
            let (dynamic, phdrs, phnum) = image.headers_in_memory().expect("loaded headers");
            let data = image.data();
            let header = object::elf::FileHeader64::<object::Endianness>::parse(data).unwrap();
            let endian = header.endian().unwrap();
            let all = header.program_headers(endian, data).unwrap();
            assert_eq!(phnum, all.len() as u64);
            let vaddr = |kind: u32| {
                all.iter()
                    .find(|p| p.p_type(endian) == kind)
                    .map(|p| p.p_vaddr(endian))
            };
            assert_eq!(Some(dynamic), vaddr(object::elf::PT_DYNAMIC));
            // PT_PHDR, where the linker wrote one, says where the headers are loaded.
            if let Some(at) = vaddr(object::elf::PT_PHDR) {
                assert_eq!(phdrs, at, "{}", image.path.display());
            }
            assert_eq!(phdrs % 8, 0);
        }
    }

    #[test]
    fn non_elf_is_rejected() {
        let dir = tempfile_dir();
        let p = dir.join("notelf");
        std::fs::write(&p, b"hello world, this is not ELF").unwrap();
        assert!(matches!(Image::load(&p), Err(ProbeError::NotElf { .. })));
        std::fs::remove_dir_all(dir).unwrap();
    }

    pub(crate) fn tempfile_dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "sbs-probes-test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}
