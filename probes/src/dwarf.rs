//! Inlined instances of functions (DWARF `DW_TAG_inlined_subroutine`), which a uprobe at
//! a function's start never sees: counted so that a report can say how many calls were
//! not counted, instead of letting 0 read as "never called".

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use gimli::{AttributeValue, DebugInfoOffset, EndianSlice, RunTimeEndian, UnitSectionOffset};
use object::{Object, ObjectSection};

use crate::demangle::demangle;
use crate::pattern::{name_paths, Pattern};

/// One function that has inlined instances.
#[derive(Debug, Clone)]
pub struct InlinedFunction {
    /// Raw (linkage) name, or the plain DWARF name when there is none.
    pub raw: String,
    /// Demangled name.
    pub demangled: String,
    /// How many `DW_TAG_inlined_subroutine` entries refer to it.
    pub instances: usize,
    paths: Vec<Vec<String>>,
}

/// The inlined functions of one ELF file.
#[derive(Debug, Clone, Default)]
pub struct InlinedIndex {
    /// Functions with at least one inlined instance.
    pub functions: Vec<InlinedFunction>,
    /// Units whose DIEs are in a split DWARF file (`-gsplit-dwarf`, Rust's
    /// `split-debuginfo`): a `.dwo` or `.dwp` file this crate does not read, so their
    /// inlined instances are unknown.
    pub split_units: usize,
}

/// What a pattern names among inlined instances.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InlinedMatch {
    /// Total inlined instances of matching functions.
    pub instances: usize,
    /// Demangled names of the matching functions, most instances first.
    pub functions: Vec<String>,
}

impl InlinedIndex {
    /// Read the DWARF of an ELF file (`data` is the whole file). A file without DWARF
    /// gives an empty index. Errors are described in a sentence.
    pub fn build(data: &[u8]) -> Result<InlinedIndex, String> {
        let file = object::File::parse(data).map_err(|e| format!("malformed ELF ({e})"))?;
        if file.section_by_name(".debug_info").is_none() {
            return Ok(InlinedIndex::default());
        }
        let sections = gimli::DwarfSections::load(|id| -> Result<Cow<[u8]>, String> {
            match file.section_by_name(id.name()) {
                Some(s) => s
                    .uncompressed_data()
                    .map_err(|e| format!("cannot read {} ({e})", id.name())),
                None => Ok(Cow::Borrowed(&[])),
            }
        })?;
        let endian = if file.is_little_endian() {
            RunTimeEndian::Little
        } else {
            RunTimeEndian::Big
        };
        let dwarf = sections.borrow(|s| EndianSlice::new(s, endian));
        scan(&dwarf).map_err(|e| format!("malformed DWARF ({e})"))
    }

    /// The inlined instances of functions that `pattern` names.
    pub fn matching(&self, pattern: &Pattern) -> InlinedMatch {
        let mut found: Vec<&InlinedFunction> = self
            .functions
            .iter()
            .filter(|f| {
                f.raw == pattern.as_str()
                    || f.demangled == pattern.as_str()
                    || pattern.matches_paths(&f.paths)
            })
            .collect();
        found.sort_by(|a, b| {
            b.instances
                .cmp(&a.instances)
                .then(a.demangled.cmp(&b.demangled))
        });
        InlinedMatch {
            instances: found.iter().map(|f| f.instances).sum(),
            functions: found.iter().map(|f| f.demangled.clone()).collect(),
        }
    }
}

type Reader<'a> = EndianSlice<'a, RunTimeEndian>;

fn scan(dwarf: &gimli::Dwarf<Reader<'_>>) -> gimli::Result<InlinedIndex> {
    // Pass 1: count inlined instances per abstract origin (global .debug_info offset).
    let mut origins: HashMap<usize, usize> = HashMap::new();
    let mut headers = Vec::new();
    let mut split_units = 0;
    let mut iter = dwarf.units();
    while let Some(header) = iter.next()? {
        let unit = dwarf.unit(header)?;
        // A skeleton (DWARF 5) or a GNU split unit (DWARF 4) names its DIEs' file by id.
        if unit.dwo_id.is_some() {
            split_units += 1;
        }
        // Raw entries: the attributes of every other DIE are skipped, not parsed.
        let mut entries = unit.entries_raw(None)?;
        while !entries.is_empty() {
            let Some(abbrev) = entries.read_abbreviation()? else {
                continue;
            };
            if abbrev.tag() != gimli::DW_TAG_inlined_subroutine {
                entries.skip_attributes(abbrev.attributes())?;
                continue;
            }
            let mut origin = None;
            for spec in abbrev.attributes() {
                let attr = entries.read_attribute(*spec)?;
                if attr.name() == gimli::DW_AT_abstract_origin {
                    origin = match attr.value() {
                        AttributeValue::UnitRef(o) => o.to_debug_info_offset(&header).map(|o| o.0),
                        AttributeValue::DebugInfoRef(o) => Some(o.0),
                        _ => None,
                    };
                }
            }
            if let Some(o) = origin {
                *origins.entry(o).or_default() += 1;
            }
        }
        if let UnitSectionOffset::DebugInfoOffset(o) = header.offset() {
            headers.push((o.0, header));
        }
    }
    headers.sort_by_key(|(o, _)| *o);

    // Pass 2: name each origin, following specification/abstract_origin to a linkage name.
    let mut units: HashMap<usize, gimli::Unit<Reader<'_>>> = HashMap::new();
    let mut by_name: HashMap<String, usize> = HashMap::new();
    for (origin, count) in origins {
        if let Some(name) = origin_name(dwarf, &headers, &mut units, origin, 0)? {
            *by_name.entry(name).or_default() += count;
        }
    }
    let mut functions: Vec<InlinedFunction> = by_name
        .into_iter()
        .map(|(raw, instances)| {
            let demangled = demangle(&raw).label;
            let paths = name_paths(&demangled);
            InlinedFunction {
                raw,
                demangled,
                instances,
                paths,
            }
        })
        .collect();
    functions.sort_by(|a, b| a.demangled.cmp(&b.demangled));
    Ok(InlinedIndex {
        functions,
        split_units,
    })
}

/// The unit holding the DIE at `.debug_info` offset `offset` (parsed on first use and
/// kept in `units`, by its index in `headers`) and the DIE's offset in it.
fn unit_at<'a>(
    dwarf: &gimli::Dwarf<Reader<'a>>,
    headers: &[(usize, gimli::UnitHeader<Reader<'a>>)],
    units: &mut HashMap<usize, gimli::Unit<Reader<'a>>>,
    offset: usize,
) -> gimli::Result<Option<(usize, gimli::UnitOffset)>> {
    let idx = match headers.binary_search_by_key(&offset, |(o, _)| *o) {
        Ok(i) => i,
        Err(0) => return Ok(None),
        Err(i) => i - 1,
    };
    if let std::collections::hash_map::Entry::Vacant(v) = units.entry(idx) {
        v.insert(dwarf.unit(headers[idx].1)?);
    }
    Ok(units
        .get(&idx)
        .and_then(|unit| DebugInfoOffset(offset).to_unit_offset(&unit.header))
        .map(|at| (idx, at)))
}

fn origin_name<'a>(
    dwarf: &gimli::Dwarf<Reader<'a>>,
    headers: &[(usize, gimli::UnitHeader<Reader<'a>>)],
    units: &mut HashMap<usize, gimli::Unit<Reader<'a>>>,
    offset: usize,
    depth: u32,
) -> gimli::Result<Option<String>> {
    if depth > 4 {
        return Ok(None);
    }
    let Some((idx, at)) = unit_at(dwarf, headers, units, offset)? else {
        return Ok(None);
    };
    let Some(unit) = units.get(&idx) else {
        return Ok(None);
    };
    let entry = unit.entry(at)?;
    for at in [gimli::DW_AT_linkage_name, gimli::DW_AT_MIPS_linkage_name] {
        if let Some(v) = entry.attr_value(at)? {
            let s = dwarf.attr_string(unit, v)?;
            return Ok(Some(s.to_string_lossy().into_owned()));
        }
    }
    let mut next = None;
    for at in [gimli::DW_AT_specification, gimli::DW_AT_abstract_origin] {
        next = match entry.attr_value(at)? {
            Some(AttributeValue::UnitRef(o)) => o.to_debug_info_offset(&unit.header).map(|o| o.0),
            Some(AttributeValue::DebugInfoRef(o)) => Some(o.0),
            _ => None,
        };
        if next.is_some() {
            break;
        }
    }
    let plain = match entry.attr_value(gimli::DW_AT_name)? {
        Some(v) => Some(dwarf.attr_string(unit, v)?.to_string_lossy().into_owned()),
        None => None,
    };
    if let Some(next) = next {
        if let Some(name) = origin_name(dwarf, headers, units, next, depth + 1)? {
            return Ok(Some(name));
        }
    }
    Ok(plain)
}

/// DWARF names with generic arguments (`generic_step<u32>`) of the subprograms whose
/// linkage name is in `raw_names`: the only place a legacy-mangled Rust
/// monomorphization's type arguments are written down. Names without `<` are left out;
/// a file without DWARF gives none. Errors are described in a sentence.
pub fn generic_names(
    data: &[u8],
    raw_names: &HashSet<String>,
) -> Result<HashMap<String, String>, String> {
    let mut out = HashMap::new();
    if raw_names.is_empty() {
        return Ok(out);
    }
    walk_dwarf(data, |dwarf| {
        collect_generic_names(dwarf, raw_names, &mut out)
    })?;
    Ok(out)
}

fn collect_generic_names(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    raw_names: &HashSet<String>,
    out: &mut HashMap<String, String>,
) -> gimli::Result<()> {
    let mut iter = dwarf.units();
    while let Some(header) = iter.next()? {
        let unit = dwarf.unit(header)?;
        let mut entries = unit.entries_raw(None)?;
        while !entries.is_empty() {
            let Some(abbrev) = entries.read_abbreviation()? else {
                continue;
            };
            if abbrev.tag() != gimli::DW_TAG_subprogram {
                entries.skip_attributes(abbrev.attributes())?;
                continue;
            }
            let (mut linkage, mut name) = (None, None);
            for spec in abbrev.attributes() {
                let attr = entries.read_attribute(*spec)?;
                match attr.name() {
                    gimli::DW_AT_linkage_name | gimli::DW_AT_MIPS_linkage_name => {
                        linkage = Some(dwarf.attr_string(&unit, attr.value())?)
                    }
                    gimli::DW_AT_name => name = Some(dwarf.attr_string(&unit, attr.value())?),
                    _ => {}
                }
            }
            if let (Some(l), Some(n)) = (linkage, name) {
                let l = l.to_string_lossy();
                let n = n.to_string_lossy();
                if n.contains('<') && raw_names.contains(l.as_ref()) {
                    out.insert(l.into_owned(), n.into_owned());
                }
            }
        }
    }
    Ok(())
}

/// One `DW_TAG_inlined_subroutine` of a function a pattern names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InlinedInstance {
    /// Raw (linkage) name of the inlined function, or its plain DWARF name.
    pub raw: String,
    /// Demangled name.
    pub demangled: String,
    /// Its code: half-open address ranges, sorted; empty when it has no code of its own.
    pub ranges: Vec<(u64, u64)>,
    /// The call site, `file:line` (`DW_AT_call_file`, `DW_AT_call_line`), when known.
    pub call_site: Option<String>,
    /// The call site with the file's whole path (a relative name joined to the unit's
    /// compilation directory), when it has a line: the form [`lines_at`] gives, so that
    /// call lines of two builds compare whatever directory each was compiled in.
    pub call_line: Option<String>,
    /// No call line (`DW_AT_call_line` 0 or absent): code the optimizer shares between
    /// several calls of the function (a merged tail), no call of its own.
    pub no_call_line: bool,
    /// Where several pieces of its code start at the same source line. An unrolled loop
    /// looks like this: one copy of the call per piece, one pass through them all.
    pub repeated_line: Option<RepeatedLine>,
    /// Set when this is no call but a part of the function that GCC split off
    /// (`F.part.N`, partial inlining) and inlined back into a copy of the same function:
    /// DWARF nests it in that copy, with the function's own declaration as its call site.
    pub split_from: Option<SplitFrom>,
    /// The DIE (offset in `.debug_info`) of the function body it was written in: the
    /// subprogram or inlined instance enclosing it. Instances of one function with the
    /// same parent are calls written in the same body.
    pub parent: u64,
    /// It lies inside an inlined instance without a call line (of any function): code
    /// the optimizer merged out of several calls of that function, so this instance too
    /// is code shared by several calls of its own function, named after one of them.
    pub in_merged: bool,
}

/// The copy of a function that one of its split parts was inlined back into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SplitFrom {
    /// Another inlined instance of the function: its index in the same list.
    Instance(usize),
    /// An out-of-line copy of it (the function itself or one of its clones), with that
    /// copy's code: half-open ranges, sorted.
    Function(Vec<(u64, u64)>),
}

/// The DWARF sections of an ELF file, or `None` when it has none. Errors are described in
/// a sentence.
/// Run `walk` over the DWARF of `data` (a whole ELF file, possibly a separate debug
/// file); nothing to do when it has none. A malformed section is described in a sentence.
fn walk_dwarf(
    data: &[u8],
    walk: impl FnOnce(&gimli::Dwarf<Reader<'_>>) -> gimli::Result<()>,
) -> Result<(), String> {
    let Some(sections) = load_dwarf(data)? else {
        return Ok(());
    };
    let endian = match object::File::parse(data) {
        Ok(f) if !f.is_little_endian() => RunTimeEndian::Big,
        _ => RunTimeEndian::Little,
    };
    let dwarf = sections.borrow(|s| EndianSlice::new(s, endian));
    walk(&dwarf).map_err(|e| format!("malformed DWARF ({e})"))
}

fn load_dwarf(data: &[u8]) -> Result<Option<gimli::DwarfSections<Cow<'_, [u8]>>>, String> {
    let file = object::File::parse(data).map_err(|e| format!("malformed ELF ({e})"))?;
    if file.section_by_name(".debug_info").is_none() {
        return Ok(None);
    }
    gimli::DwarfSections::load(|id| -> Result<Cow<[u8]>, String> {
        match file.section_by_name(id.name()) {
            Some(s) => s
                .uncompressed_data()
                .map_err(|e| format!("cannot read {} ({e})", id.name())),
            None => Ok(Cow::Borrowed(&[])),
        }
    })
    .map(Some)
}

/// The source position of each of `addresses` in the DWARF of `data`: `file:line` of the
/// line-table row that covers it (the innermost position: inside inlined code, where the
/// inlined function's code was written), with the file's whole path, as
/// [`InlinedInstance::call_line`] names it, so that the two compare. Addresses that no row
/// covers, or only a row of line 0 (code without a source line), are left out.
pub fn lines_at(data: &[u8], addresses: &[u64]) -> Result<HashMap<u64, String>, String> {
    let mut wanted = addresses.to_vec();
    wanted.sort_unstable();
    wanted.dedup();
    let mut out = HashMap::new();
    walk_dwarf(data, |dwarf| {
        let mut iter = dwarf.units();
        while let Some(header) = iter.next()? {
            let unit = dwarf.unit(header)?;
            let wanted_here = |ranges: &[(u64, u64)]| {
                ranges.iter().any(|&(a, b)| {
                    wanted.partition_point(|&x| x < a) < wanted.partition_point(|&x| x < b)
                })
            };
            if !unit_meets(dwarf, &unit, &wanted_here)? {
                continue;
            }
            let rows = unit_rows(&unit)?;
            for pair in rows.windows(2) {
                let ((from, at), (to, _)) = (pair[0], pair[1]);
                let Some((file, line)) = at.filter(|&(_, line)| line > 0) else {
                    continue;
                };
                let first = wanted.partition_point(|&a| a < from);
                let last = wanted.partition_point(|&a| a < to);
                if first == last {
                    continue;
                }
                let Some(name) = file_path(dwarf, &unit, file) else {
                    continue;
                };
                for &a in &wanted[first..last] {
                    out.insert(a, format!("{name}:{line}"));
                }
            }
        }
        Ok(())
    })?;
    Ok(out)
}

/// Whether an ELF file (`data`) carries DWARF (`.debug_info`).
pub fn has_dwarf(data: &[u8]) -> bool {
    object::File::parse(data).is_ok_and(|f| f.section_by_name(".debug_info").is_some())
}

/// Every inlined instance of a function `pattern` names, in the DWARF of `data` (a whole
/// ELF file, possibly a separate debug file). Errors are described in a sentence.
pub fn inlined_instances(data: &[u8], pattern: &Pattern) -> Result<Vec<InlinedInstance>, String> {
    let mut out = Vec::new();
    walk_dwarf(data, |dwarf| {
        out = collect_instances(dwarf, &|raw| named_by(pattern, raw), None)?;
        Ok(())
    })?;
    Ok(out)
}

/// Every inlined instance with code in `[low, high)` (a function's code), whatever
/// function it is of, in the DWARF of `data`. Errors are described in a sentence.
pub fn inlined_within(data: &[u8], low: u64, high: u64) -> Result<Vec<InlinedInstance>, String> {
    let mut out = Vec::new();
    walk_dwarf(data, |dwarf| {
        out = collect_instances(
            dwarf,
            &|raw| {
                let demangled = demangle(&raw).label;
                Some((raw, demangled))
            },
            Some((low, high)),
        )?;
        Ok(())
    })?;
    Ok(out)
}

/// Names an inlined function's origin (its raw name) as `(raw, demangled)` when it is
/// wanted.
type Namer<'a> = dyn Fn(String) -> Option<(String, String)> + 'a;

/// The inlined instances whose function `wanted` names and, with `within`, whose code
/// meets `[low, high)` (units whose code lies elsewhere are not read).
fn collect_instances(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    wanted: &Namer<'_>,
    within: Option<(u64, u64)>,
) -> gimli::Result<Vec<InlinedInstance>> {
    let headers = sorted_headers(dwarf)?;
    let mut units: HashMap<usize, gimli::Unit<Reader<'_>>> = HashMap::new();
    // Origin offset -> (raw, demangled) when the pattern names it, else None.
    let mut names: HashMap<usize, Option<(String, String)>> = HashMap::new();
    let mut out = Vec::new();
    let meets = |ranges: &[(u64, u64)]| {
        within.is_none_or(|(low, high)| ranges.iter().any(|&(a, b)| a < high && b > low))
    };
    for (_, header) in &headers {
        let unit = dwarf.unit(*header)?;
        if within.is_some() && !unit_meets(dwarf, &unit, &meets)? {
            continue;
        }
        // The unit's line table, read at its first instance a pattern names.
        let mut rows: Option<Vec<LineRow>> = None;
        // The enclosing subprograms and inlined instances of the current DIE.
        let mut copies: Vec<Enclosing> = Vec::new();
        // The enclosing function bodies (subprograms and inlined instances): (depth, DIE,
        // whether it or a body enclosing it is an inlined instance without a call line).
        let mut bodies: Vec<(isize, u64, bool)> = Vec::new();
        let mut depth: isize = 0;
        let mut cursor = unit.entries();
        while let Some((delta, entry)) = cursor.next_dfs()? {
            depth += delta;
            while copies.last().is_some_and(|c| c.depth >= depth) {
                copies.pop();
            }
            while bodies.last().is_some_and(|b| b.0 >= depth) {
                bodies.pop();
            }
            let tag = entry.tag();
            if tag != gimli::DW_TAG_inlined_subroutine && tag != gimli::DW_TAG_subprogram {
                continue;
            }
            let (parent, in_merged) = bodies.last().map_or((0, false), |b| (b.1, b.2));
            let die = entry
                .offset()
                .to_debug_info_offset(&unit.header)
                .map_or(0, |o| o.0 as u64);
            let merged =
                tag == gimli::DW_TAG_inlined_subroutine && (in_merged || call_line_of(entry)? == 0);
            bodies.push((depth, die, merged));
            let origin = abstract_origin(&unit, entry)?;
            if tag == gimli::DW_TAG_subprogram {
                // An out-of-line copy (concrete instance) of an inlinable function.
                if let Some(origin) = origin {
                    copies.push(Enclosing {
                        depth,
                        origin,
                        what: EnclosingCopy::Function(entry.offset()),
                    });
                }
                continue;
            }
            let Some(origin) = origin else { continue };
            let ranges = die_code(dwarf, &unit, entry)?;
            // Code outside `within`: nor can an instance nested in it meet it.
            if meets(&ranges) {
                if let std::collections::hash_map::Entry::Vacant(slot) = names.entry(origin) {
                    let name = origin_name(dwarf, &headers, &mut units, origin, 0)?;
                    slot.insert(name.and_then(wanted));
                }
            }
            let named = meets(&ranges).then(|| names.get(&origin)).flatten();
            let Some(Some((raw, demangled))) = named else {
                copies.push(Enclosing {
                    depth,
                    origin,
                    what: EnclosingCopy::Unmatched,
                });
                continue;
            };
            let (call_file, line) = call_position(dwarf, &unit, entry)?;
            let call_line = whole_call_line(dwarf, &unit, entry, line)?;
            let call = call_file.clone().map(|f| (f, line));
            let split_from = split_from(dwarf, &headers, &mut units, &unit, &copies, origin, call)?;
            let call_site = call_file.map(|f| if line > 0 { format!("{f}:{line}") } else { f });
            copies.push(Enclosing {
                depth,
                origin,
                what: EnclosingCopy::Instance(out.len()),
            });
            out.push(InlinedInstance {
                raw: raw.clone(),
                demangled: demangled.clone(),
                repeated_line: repeated_line(unit_rows_once(&mut rows, &unit)?, &ranges),
                ranges,
                call_site,
                call_line,
                no_call_line: line == 0,
                split_from,
                parent,
                in_merged,
            });
        }
    }
    Ok(out)
}

/// The enclosing copy of the same function an instance was split from: one whose
/// declaration is where the instance is called from (`call`, file and line).
fn split_from<'a>(
    dwarf: &gimli::Dwarf<Reader<'a>>,
    headers: &[(usize, gimli::UnitHeader<Reader<'a>>)],
    units: &mut HashMap<usize, gimli::Unit<Reader<'a>>>,
    unit: &gimli::Unit<Reader<'a>>,
    copies: &[Enclosing],
    origin: usize,
    call: Option<(String, u64)>,
) -> gimli::Result<Option<SplitFrom>> {
    let Some(copy) = copies.iter().rev().find(|c| c.origin == origin) else {
        return Ok(None);
    };
    if call.as_ref().is_none_or(|(_, line)| *line == 0)
        || decl_site(dwarf, headers, units, origin)? != call
    {
        return Ok(None);
    }
    split_part_of(dwarf, unit, copy)
}

/// A half-open range of addresses.
type Range = (u64, u64);

/// Whether a unit's code meets what `meets` accepts; a unit that says nothing of its code
/// does, to be safe.
fn unit_meets(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    unit: &gimli::Unit<Reader<'_>>,
    meets: &dyn Fn(&[Range]) -> bool,
) -> gimli::Result<bool> {
    let mut ranges = Vec::new();
    let mut it = dwarf.unit_ranges(unit)?;
    while let Some(r) = it.next()? {
        if r.end > r.begin {
            ranges.push((r.begin, r.end));
        }
    }
    Ok(ranges.is_empty() || meets(&ranges))
}

/// A DIE enclosing the current one in [`collect_instances`]'s walk: a copy of the
/// function whose abstract DIE is `origin`.
struct Enclosing {
    depth: isize,
    origin: usize,
    what: EnclosingCopy,
}

enum EnclosingCopy {
    /// An out-of-line copy: the concrete `DW_TAG_subprogram` at this offset.
    Function(gimli::UnitOffset),
    /// An inlined instance the pattern names: its index in the list.
    Instance(usize),
    /// An inlined instance of a function the pattern does not name.
    Unmatched,
}

/// The code of a DIE: half-open ranges, sorted, without empty ones and without the
/// linker's tombstone (code removed by `--gc-sections` keeps its ranges at address 0).
/// `(raw, demangled)` when `pattern` names the function called `raw`.
fn named_by(pattern: &Pattern, raw: String) -> Option<(String, String)> {
    let demangled = demangle(&raw).label;
    let hit = raw == pattern.as_str()
        || demangled == pattern.as_str()
        || pattern.matches_paths(&name_paths(&demangled));
    hit.then_some((raw, demangled))
}

/// The units' headers, by their offset in `.debug_info`.
fn sorted_headers<'a>(
    dwarf: &gimli::Dwarf<Reader<'a>>,
) -> gimli::Result<Vec<(usize, gimli::UnitHeader<Reader<'a>>)>> {
    let mut headers = Vec::new();
    let mut iter = dwarf.units();
    while let Some(header) = iter.next()? {
        if let UnitSectionOffset::DebugInfoOffset(o) = header.offset() {
            headers.push((o.0, header));
        }
    }
    headers.sort_by_key(|(o, _)| *o);
    Ok(headers)
}

/// The `.debug_info` offset of a DIE's `DW_AT_abstract_origin`, if it has one.
fn abstract_origin(
    unit: &gimli::Unit<Reader<'_>>,
    entry: &gimli::DebuggingInformationEntry<Reader<'_>>,
) -> gimli::Result<Option<usize>> {
    Ok(match entry.attr_value(gimli::DW_AT_abstract_origin)? {
        Some(AttributeValue::UnitRef(o)) => o.to_debug_info_offset(&unit.header).map(|o| o.0),
        Some(AttributeValue::DebugInfoRef(o)) => Some(o.0),
        _ => None,
    })
}

/// An inlined instance's call site: its file, if known, and its line (0 if unknown).
fn call_position(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    unit: &gimli::Unit<Reader<'_>>,
    entry: &gimli::DebuggingInformationEntry<Reader<'_>>,
) -> gimli::Result<(Option<String>, u64)> {
    let file = call_file_index(entry)?.and_then(|i| file_name(dwarf, unit, i));
    Ok((file, call_line_of(entry)?))
}

/// An inlined instance's `DW_AT_call_line`, 0 when it has none.
fn call_line_of(entry: &gimli::DebuggingInformationEntry<Reader<'_>>) -> gimli::Result<u64> {
    Ok(match entry.attr_value(gimli::DW_AT_call_line)? {
        Some(v) => v.udata_value().unwrap_or(0),
        None => 0,
    })
}

/// An inlined instance's call site with the file's whole path, when it has a `line`
/// ([`InlinedInstance::call_line`]).
fn whole_call_line(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    unit: &gimli::Unit<Reader<'_>>,
    entry: &gimli::DebuggingInformationEntry<Reader<'_>>,
    line: u64,
) -> gimli::Result<Option<String>> {
    if line == 0 {
        return Ok(None);
    }
    Ok(call_file_index(entry)?
        .and_then(|i| file_path(dwarf, unit, i))
        .map(|f| format!("{f}:{line}")))
}

/// The line-table file index of an inlined instance's `DW_AT_call_file`.
fn call_file_index(
    entry: &gimli::DebuggingInformationEntry<Reader<'_>>,
) -> gimli::Result<Option<u64>> {
    Ok(match entry.attr_value(gimli::DW_AT_call_file)? {
        Some(AttributeValue::FileIndex(i)) | Some(AttributeValue::Udata(i)) => Some(i),
        _ => None,
    })
}

/// Pieces of an inlined instance's code that start at the same source line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepeatedLine {
    /// Where those pieces start.
    pub starts: Vec<u64>,
    /// The address spans of that line inside the instance's code.
    pub spans: Vec<(u64, u64)>,
}

/// One row of a line table: its address, and (file index, line) from there on; the end
/// of a sequence has no line (`None`).
type LineRow = (u64, Option<(u64, u64)>);

/// The rows of a unit's line table, by address.
fn unit_rows(unit: &gimli::Unit<Reader<'_>>) -> gimli::Result<Vec<LineRow>> {
    let mut out = Vec::new();
    let Some(program) = unit.line_program.clone() else {
        return Ok(out);
    };
    let mut rows = program.rows();
    while let Some((_, row)) = rows.next_row()? {
        let at = match (row.end_sequence(), row.line()) {
            (true, _) | (_, None) => None,
            (false, Some(line)) => Some((row.file_index(), line.get())),
        };
        out.push((row.address(), at));
    }
    out.sort_by_key(|r| r.0);
    Ok(out)
}

/// [`unit_rows`], read once into `rows`.
fn unit_rows_once<'a>(
    rows: &'a mut Option<Vec<LineRow>>,
    unit: &gimli::Unit<Reader<'_>>,
) -> gimli::Result<&'a [LineRow]> {
    if rows.is_none() {
        *rows = Some(unit_rows(unit)?);
    }
    Ok(rows.as_deref().unwrap_or_default())
}

/// The line at which the most pieces of `ranges` start, when two or more do, with the
/// address spans of that line inside `ranges` (see [`InlinedInstance::repeated_line`]).
fn repeated_line(rows: &[LineRow], ranges: &[(u64, u64)]) -> Option<RepeatedLine> {
    if ranges.len() < 2 {
        return None;
    }
    let line_at = |a: u64| {
        let i = rows.partition_point(|r| r.0 <= a).checked_sub(1)?;
        rows[i].1
    };
    let mut starts: HashMap<(u64, u64), usize> = HashMap::new();
    for &(b, _) in ranges {
        if let Some(at) = line_at(b) {
            *starts.entry(at).or_default() += 1;
        }
    }
    let (&line, &pieces) = starts
        .iter()
        .max_by_key(|&(&at, &n)| (n, std::cmp::Reverse(at)))?;
    if pieces < 2 {
        return None;
    }
    let firsts: Vec<u64> = ranges
        .iter()
        .map(|&(b, _)| b)
        .filter(|&b| line_at(b) == Some(line))
        .collect();
    let mut spans = Vec::new();
    for w in rows.windows(2) {
        if w[0].1 != Some(line) {
            continue;
        }
        for &(b, e) in ranges {
            let (lo, hi) = (w[0].0.max(b), w[1].0.min(e));
            if lo < hi {
                spans.push((lo, hi));
            }
        }
    }
    Some(RepeatedLine {
        starts: firsts,
        spans,
    })
}

/// The copy a split part inlined back into `copy` (a copy of the same function that
/// encloses it) belongs to.
fn split_part_of(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    unit: &gimli::Unit<Reader<'_>>,
    copy: &Enclosing,
) -> gimli::Result<Option<SplitFrom>> {
    Ok(match copy.what {
        EnclosingCopy::Instance(k) => Some(SplitFrom::Instance(k)),
        EnclosingCopy::Function(at) => Some(SplitFrom::Function(die_code(
            dwarf,
            unit,
            &unit.entry(at)?,
        )?)),
        EnclosingCopy::Unmatched => None,
    })
}

fn die_code(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    unit: &gimli::Unit<Reader<'_>>,
    entry: &gimli::DebuggingInformationEntry<Reader<'_>>,
) -> gimli::Result<Vec<(u64, u64)>> {
    let mut ranges = Vec::new();
    let mut it = dwarf.die_ranges(unit, entry)?;
    while let Some(r) = it.next()? {
        if r.end > r.begin && r.begin != 0 {
            ranges.push((r.begin, r.end));
        }
    }
    ranges.sort_unstable();
    Ok(ranges)
}

/// Where the function whose abstract DIE is at `offset` is declared: (file, line).
fn decl_site<'a>(
    dwarf: &gimli::Dwarf<Reader<'a>>,
    headers: &[(usize, gimli::UnitHeader<Reader<'a>>)],
    units: &mut HashMap<usize, gimli::Unit<Reader<'a>>>,
    offset: usize,
) -> gimli::Result<Option<(String, u64)>> {
    let Some((idx, at)) = unit_at(dwarf, headers, units, offset)? else {
        return Ok(None);
    };
    let Some(unit) = units.get(&idx) else {
        return Ok(None);
    };
    let entry = unit.entry(at)?;
    let file = match entry.attr_value(gimli::DW_AT_decl_file)? {
        Some(AttributeValue::FileIndex(i)) => file_name(dwarf, unit, i),
        Some(AttributeValue::Udata(i)) => file_name(dwarf, unit, i),
        _ => None,
    };
    let line = match entry.attr_value(gimli::DW_AT_decl_line)? {
        Some(v) => v.udata_value(),
        None => None,
    };
    Ok(file.zip(line))
}

/// The origin (linkage name, else plain DWARF name) of the out-of-line copies whose code
/// begins at one of `addresses`: a concrete `DW_TAG_subprogram` with an
/// `DW_AT_abstract_origin` or `DW_AT_specification` (how GCC describes a clone such as
/// `scale.constprop.0`, and the `.cold` part of a function, one of whose ranges begins
/// there). `data` is a whole ELF file; errors are described in a sentence.
pub fn copy_origins(data: &[u8], addresses: &HashSet<u64>) -> Result<HashMap<u64, String>, String> {
    let mut out = HashMap::new();
    if addresses.is_empty() {
        return Ok(out);
    }
    walk_dwarf(data, |dwarf| {
        collect_copy_origins(dwarf, addresses, &mut out)
    })?;
    Ok(out)
}

fn collect_copy_origins(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    addresses: &HashSet<u64>,
    out: &mut HashMap<u64, String>,
) -> gimli::Result<()> {
    let headers = sorted_headers(dwarf)?;
    let mut units: HashMap<usize, gimli::Unit<Reader<'_>>> = HashMap::new();
    for (_, header) in &headers {
        let unit = dwarf.unit(*header)?;
        let mut cursor = unit.entries();
        while let Some((_, entry)) = cursor.next_dfs()? {
            if entry.tag() != gimli::DW_TAG_subprogram {
                continue;
            }
            let mut origin = None;
            for at in [gimli::DW_AT_abstract_origin, gimli::DW_AT_specification] {
                origin = match entry.attr_value(at)? {
                    Some(AttributeValue::UnitRef(o)) => {
                        o.to_debug_info_offset(&unit.header).map(|o| o.0)
                    }
                    Some(AttributeValue::DebugInfoRef(o)) => Some(o.0),
                    _ => None,
                };
                if origin.is_some() {
                    break;
                }
            }
            let Some(origin) = origin else { continue };
            let starts: Vec<u64> = die_code(dwarf, &unit, entry)?
                .into_iter()
                .map(|(b, _)| b)
                .filter(|b| addresses.contains(b))
                .collect();
            if starts.is_empty() {
                continue;
            }
            if let Some(name) = origin_name(dwarf, &headers, &mut units, origin, 0)? {
                for b in starts {
                    out.insert(b, name.clone());
                }
            }
        }
    }
    Ok(())
}

/// The whole path of file `index` of a unit's line program: [`file_name`], joined to the
/// unit's compilation directory when still relative.
fn file_path(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    unit: &gimli::Unit<Reader<'_>>,
    index: u64,
) -> Option<String> {
    let name = file_name(dwarf, unit, index)?;
    if name.starts_with('/') {
        return Some(name);
    }
    match &unit.comp_dir {
        Some(dir) => {
            let dir = dir.to_string_lossy().into_owned();
            Some(format!("{}/{name}", dir.trim_end_matches('/')))
        }
        None => Some(name),
    }
}

/// The name of file `index` of a unit's line program: the path as written, joined to its
/// directory when that is relative (`src/main.rs`), without the compilation directory.
fn file_name(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    unit: &gimli::Unit<Reader<'_>>,
    index: u64,
) -> Option<String> {
    let program = unit.line_program.as_ref()?;
    let header = program.header();
    let file = header.file(index)?;
    let name = dwarf
        .attr_string(unit, file.path_name())
        .ok()?
        .to_string_lossy()
        .into_owned();
    if name.starts_with('/') {
        return Some(name);
    }
    let dir = file
        .directory(header)
        .and_then(|d| dwarf.attr_string(unit, d).ok())
        .map(|d| d.to_string_lossy().into_owned())
        .unwrap_or_default();
    if dir.is_empty() || dir.starts_with('/') && file.directory_index() == 0 {
        Some(name)
    } else {
        Some(format!("{dir}/{name}"))
    }
}
