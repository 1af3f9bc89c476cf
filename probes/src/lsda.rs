//! Landing pads: where the unwinder enters a function when a panic or a C++ exception
//! passes through one of its calls. No branch of the function leads there, so the
//! in-process engine must learn of them from the unwind tables before it writes over
//! bytes that no branch reaches (`patch`).
//!
//! The function's frame description entry in `.eh_frame` (found with `gimli`) points to
//! its language-specific data area (LSDA, in `.gcc_except_table`), whose call-site table
//! (Itanium C++ ABI, as GCC and LLVM write it) gives, per range of calls, the landing pad
//! as an offset from the landing-pad base. `gimli` reads the frame entries but not the
//! LSDA; the few fields read here follow the encodings of the `DW_EH_PE_*` constants.

use gimli::{BaseAddresses, EhFrame, LittleEndian, Pointer, Reader, UnwindSection};
use object::{Object, ObjectSection};

use crate::elf::Image;

/// Why the landing pads of a function could not be read; written by
/// [`crate::refusal`], which elides its addresses with the rest of a reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LsdaError {
    /// Reading the ELF file, its unwind tables or the section of the exception table
    /// failed (what was read, and why).
    Read(String),
    /// The exception table lies in no section.
    InNoSection {
        /// The table.
        at: u64,
    },
    /// The exception table starts past its section's bytes.
    PastSection {
        /// The table.
        at: u64,
    },
    /// The exception table itself could not be read.
    Table {
        /// The table.
        at: u64,
        /// Why.
        why: String,
    },
}

/// `DW_EH_PE_omit`: the field is absent.
const OMIT: u8 = 0xff;

/// The landing pads of the function at link-time address `function`, or why they could
/// not be read (the caller then treats every address as one).
pub fn landing_pads(image: &Image, function: u64) -> Result<Vec<u64>, LsdaError> {
    let read = |what: &str, e: &dyn std::fmt::Display| LsdaError::Read(format!("{what}{e}"));
    let file = object::File::parse(image.data()).map_err(|e| read("reading the ELF: ", &e))?;
    let Some(section) = file.section_by_name(".eh_frame") else {
        // No unwind tables: nothing can unwind into the function.
        return Ok(Vec::new());
    };
    let data = section
        .data()
        .map_err(|e| read("reading .eh_frame: ", &e))?;
    let mut bases = BaseAddresses::default().set_eh_frame(section.address());
    if let Some(text) = file.section_by_name(".text") {
        bases = bases.set_text(text.address());
    }
    if let Some(got) = file.section_by_name(".got") {
        bases = bases.set_got(got.address());
    }
    let eh_frame = EhFrame::new(data, LittleEndian);
    let fde = match eh_frame.fde_for_address(&bases, function, EhFrame::cie_from_offset) {
        Ok(fde) => fde,
        Err(gimli::Error::NoUnwindInfoForAddress) => return Ok(Vec::new()),
        Err(e) => return Err(read("reading its unwind entry in .eh_frame: ", &e)),
    };
    let lsda = match fde.lsda() {
        None => return Ok(Vec::new()),
        Some(Pointer::Direct(address)) => address,
        Some(Pointer::Indirect(_)) => {
            return Err(read(
                "its exception table is reached through a pointer",
                &"",
            ))
        }
    };
    let table = file
        .sections()
        .find(|s| (s.address()..s.address() + s.size()).contains(&lsda))
        .ok_or(LsdaError::InNoSection { at: lsda })?;
    let bytes = table
        .data()
        .map_err(|e| read(&format!("reading {}: ", table.name().unwrap_or("?")), &e))?;
    let from = usize::try_from(lsda - table.address()).map_err(|e| read("", &e))?;
    let bytes = bytes
        .get(from..)
        .ok_or(LsdaError::PastSection { at: lsda })?;
    call_site_pads(bytes, fde.initial_address()).map_err(|why| LsdaError::Table { at: lsda, why })
}

/// The landing pads of an LSDA (`bytes` from its start) of a function starting at
/// `function`.
fn call_site_pads(bytes: &[u8], function: u64) -> Result<Vec<u64>, String> {
    let mut r = gimli::EndianSlice::new(bytes, LittleEndian);
    let e = |e: gimli::Error| e.to_string();
    let base = match r.read_u8().map_err(e)? {
        OMIT => function,
        encoding => read_encoded(&mut r, encoding)?,
    };
    if r.read_u8().map_err(e)? != OMIT {
        // The type table's offset: not needed for the pads.
        r.read_uleb128().map_err(e)?;
    }
    let encoding = r.read_u8().map_err(e)?;
    let len = usize::try_from(r.read_uleb128().map_err(e)?).map_err(|e| e.to_string())?;
    let (mut sites, _) = r.split_at(len.min(r.len()));
    if sites.len() < len {
        return Err("the call-site table runs past the section".into());
    }
    let mut pads = Vec::new();
    while !sites.is_empty() {
        let _start = read_encoded(&mut sites, encoding)?;
        let _len = read_encoded(&mut sites, encoding)?;
        let pad = read_encoded(&mut sites, encoding)?;
        sites.read_uleb128().map_err(e)?;
        if pad != 0 {
            pads.push(base.wrapping_add(pad));
        }
    }
    Ok(pads)
}

/// A value of a `DW_EH_PE_*` format with no application part (call-site fields are
/// offsets; an absolute landing-pad base is read as is).
fn read_encoded(r: &mut gimli::EndianSlice<'_, LittleEndian>, encoding: u8) -> Result<u64, String> {
    let e = |e: gimli::Error| e.to_string();
    if encoding & 0x70 != 0 {
        return Err(format!("unsupported pointer encoding 0x{encoding:02x}"));
    }
    Ok(match encoding & 0x0f {
        0x00 | 0x04 => r.read_u64().map_err(e)?,
        0x01 => r.read_uleb128().map_err(e)?,
        0x02 => u64::from(r.read_u16().map_err(e)?),
        0x03 => u64::from(r.read_u32().map_err(e)?),
        0x09 => r.read_sleb128().map_err(e)? as u64,
        0x0a => i64::from(r.read_i16().map_err(e)?) as u64,
        0x0b => i64::from(r.read_i32().map_err(e)?) as u64,
        0x0c => r.read_i64().map_err(e)? as u64,
        other => return Err(format!("unsupported value format 0x{other:02x}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_call_site_table_gives_the_landing_pads() {
        // lpstart omitted, no type table, uleb128 call sites, 3 records: the second
        // without a landing pad.
        let lsda = [
            0xff, 0xff, 0x01, 12, // header: table of 12 bytes
            0x04, 0x05, 0x20, 0x00, // call at +4, 5 bytes, pad +0x20, no action
            0x10, 0x05, 0x00, 0x00, // call at +0x10: no pad
            0x18, 0x05, 0x30, 0x01, // call at +0x18, pad +0x30, action 1
        ];
        assert_eq!(call_site_pads(&lsda, 0x1000).unwrap(), vec![0x1020, 0x1030]);
        // udata4 call sites, one record.
        let mut lsda = vec![0xff, 0xff, 0x03, 13];
        for v in [4u32, 5, 0x40] {
            lsda.extend_from_slice(&v.to_le_bytes());
        }
        lsda.push(0);
        assert_eq!(call_site_pads(&lsda, 0x1000).unwrap(), vec![0x1040]);
        // A table longer than the bytes: an error, not a guess.
        assert!(call_site_pads(&[0xff, 0xff, 0x01, 40, 1, 2], 0x1000).is_err());
        // A pc-relative call-site encoding is not supported: an error.
        assert!(call_site_pads(&[0xff, 0xff, 0x13, 4, 0, 0, 0, 0], 0x1000).is_err());
    }
}
