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
    let mut iter = dwarf.units();
    while let Some(header) = iter.next()? {
        let unit = dwarf.unit(header)?;
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
    Ok(InlinedIndex { functions })
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
    let idx = match headers.binary_search_by_key(&offset, |(o, _)| *o) {
        Ok(i) => i,
        Err(0) => return Ok(None),
        Err(i) => i - 1,
    };
    if let std::collections::hash_map::Entry::Vacant(v) = units.entry(idx) {
        v.insert(dwarf.unit(headers[idx].1)?);
    }
    let Some(unit) = units.get(&idx) else {
        return Ok(None);
    };
    let Some(unit_offset) = DebugInfoOffset(offset).to_unit_offset(&unit.header) else {
        return Ok(None);
    };
    let entry = unit.entry(unit_offset)?;
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
/// so is everything when the file has no readable DWARF.
pub fn generic_names(data: &[u8], raw_names: &HashSet<String>) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let Ok(file) = object::File::parse(data) else {
        return out;
    };
    if raw_names.is_empty() || file.section_by_name(".debug_info").is_none() {
        return out;
    }
    let Ok(sections) = gimli::DwarfSections::load(|id| -> Result<Cow<[u8]>, ()> {
        match file.section_by_name(id.name()) {
            Some(s) => s.uncompressed_data().map_err(|_| ()),
            None => Ok(Cow::Borrowed(&[])),
        }
    }) else {
        return out;
    };
    let endian = if file.is_little_endian() {
        RunTimeEndian::Little
    } else {
        RunTimeEndian::Big
    };
    let dwarf = sections.borrow(|s| EndianSlice::new(s, endian));
    let _ = collect_generic_names(&dwarf, raw_names, &mut out);
    out
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
