//! Allocations per call stack: valgrind's DHAT and its JSON output.
//!
//! [`wrapper`] runs a program under DHAT with deep stacks (64 frames, so that a Rust
//! program's `main` is still on the stack of an allocation made several generic layers
//! down), raw symbol names and no inlined frames (`--read-inline-info=no`: valgrind then
//! reads no DWARF inlining, a quarter of a short run's time, and the 64 frames are all
//! real ones; what was inlined where is read from the DWARF by the caller when needed); [`parse`] reads the JSON file into program points: the
//! blocks and bytes allocated with one stack, and that stack's frames. A frame's address
//! is a load address (not the object's own): for every frame but the allocator's it lies
//! inside the `call` instruction (the return address minus one).

use std::ffi::OsString;
use std::path::Path;

use serde::Deserialize;

use crate::valgrind::ValgrindError;

/// The DHAT command: `valgrind` and its options, to be followed by the program and its
/// arguments. The profile goes to `out_file`, valgrind's messages to `log_file`.
pub fn wrapper(valgrind: &Path, out_file: &Path, log_file: &Path) -> Vec<OsString> {
    crate::valgrind::to_files(
        valgrind,
        &[
            "--tool=dhat",
            "--num-callers=64",
            "--demangle=no",
            "--read-inline-info=no",
            "--trace-children=no",
        ],
        ("--dhat-out-file=", out_file),
        log_file,
    )
}

/// One frame of a stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Load address.
    pub address: u64,
    /// The function valgrind named, raw (mangled), if it named one.
    pub name: Option<String>,
}

/// What was allocated with one stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Point {
    /// Blocks allocated.
    pub blocks: u64,
    /// Bytes allocated.
    pub bytes: u64,
    /// Innermost frame first (the allocator).
    pub frames: Vec<Frame>,
}

#[derive(Deserialize)]
struct Raw {
    #[serde(rename = "dhatFileVersion")]
    version: u32,
    pps: Vec<RawPoint>,
    ftbl: Vec<String>,
}

#[derive(Deserialize)]
struct RawPoint {
    tb: u64,
    tbk: u64,
    fs: Vec<usize>,
}

/// `0x10940C: grow (pinpoint.c:83)` -> (0x10940c, Some("grow")).
fn frame(text: &str) -> Option<Frame> {
    let (address, rest) = text.split_once(':')?;
    let address = u64::from_str_radix(address.trim().strip_prefix("0x")?, 16).ok()?;
    let rest = rest.trim();
    let name = match rest.rsplit_once(" (") {
        Some((name, _)) => name,
        None => rest,
    };
    let name = (!name.is_empty() && !name.starts_with("???")).then(|| name.to_string());
    Some(Frame { address, name })
}

/// Parse DHAT's JSON output (file version 2).
pub fn parse(text: &str) -> Result<Vec<Point>, ValgrindError> {
    let raw: Raw = serde_json::from_str(text).map_err(|e| ValgrindError::NoSummary {
        pid: None,
        log: format!("not a DHAT JSON file ({e})"),
    })?;
    if raw.version != 2 {
        return Err(ValgrindError::NoSummary {
            pid: None,
            log: format!("DHAT file version {} (2 expected)", raw.version),
        });
    }
    Ok(raw
        .pps
        .into_iter()
        .map(|p| Point {
            blocks: p.tbk,
            bytes: p.tb,
            frames: p
                .fs
                .iter()
                .filter_map(|&i| raw.ftbl.get(i).and_then(|t| frame(t)))
                .collect(),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_points_and_their_frames() {
        let text = r#"{"dhatFileVersion":2,"mode":"heap","pps":[{"tb":1920,"tbk":40,"tl":2339,"fs":[1,2,3]}],
            "ftbl":["[root]","0x48417B4: malloc (in /usr/libexec/valgrind/vgpreload_dhat-amd64-linux.so)","0x10940C: grow (pinpoint.c:83)","0x109119: ???"]}"#;
        let points = parse(text).unwrap();
        assert_eq!(points.len(), 1);
        assert_eq!((points[0].blocks, points[0].bytes), (40, 1920));
        assert_eq!(
            points[0].frames[1],
            Frame {
                address: 0x10940c,
                name: Some("grow".into())
            }
        );
        assert_eq!(points[0].frames[2].name, None);
        assert!(parse("{}").is_err());
    }
}
