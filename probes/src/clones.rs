//! Functions the compiler clones or splits. GCC names a copy of `F` after it, with a
//! suffix per transformation: `F.constprop.N` (constant arguments propagated),
//! `F.isra.N` (arguments removed or passed by value), `F.part.N` (the tail that partial
//! inlining splits off; `F` keeps the head and calls it), `F.cold` (the blocks that
//! hot/cold splitting moves away; `F` jumps to them), `F.lto_priv.N` (a local function
//! renamed by LTO), `F.localalias` (a local alias). They combine:
//! `area.constprop.0.isra.0`, `f.part.0.isra.0`.
//!
//! A whole clone (`constprop`, `isra`, `lto_priv`, `localalias`) is entered by a call:
//! each entry is a call of `F`. A piece (`part`, `cold`) carries on a call that began in a
//! copy of `F`: its entries are new calls only if something else reaches it, which
//! [`References`] tells from the decoded code.

use iced_x86::{Decoder, DecoderOptions, FlowControl};
use object::Object;

use crate::elf::Image;

/// A symbol name split into the function it copies and the clone suffixes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloneName<'a> {
    /// The name of the function it is a copy of (`scale`).
    pub origin: &'a str,
    /// The suffixes, with their leading dot (`.constprop.0`).
    pub suffix: &'a str,
    /// A split-off part (`.part.N`, `.cold`) rather than a whole copy.
    pub piece: bool,
}

/// `name` as a GCC clone of another function, or `None` when it carries no clone suffix.
pub fn clone_name(name: &str) -> Option<CloneName<'_>> {
    let mut from = 1;
    while let Some(dot) = name[from..].find('.').map(|d| d + from) {
        if let Some(piece) = clone_suffix(&name[dot..]) {
            return Some(CloneName {
                origin: &name[..dot],
                suffix: &name[dot..],
                piece,
            });
        }
        from = dot + 1;
    }
    None
}

/// Whether `suffix` (`.constprop.0.isra.0`) is a sequence of GCC clone suffixes, and if
/// so whether one of them makes a piece.
fn clone_suffix(suffix: &str) -> Option<bool> {
    let mut words = suffix.strip_prefix('.')?.split('.').peekable();
    let mut piece = false;
    let mut any = false;
    while let Some(word) = words.next() {
        let numbered = |w: Option<&&str>| w.is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()));
        match word {
            "constprop" | "isra" | "part" | "lto_priv" => {
                if !numbered(words.peek()) {
                    return None;
                }
                words.next();
                piece |= word == "part";
            }
            "cold" => {
                if numbered(words.peek()) {
                    words.next();
                }
                piece = true;
            }
            "localalias" => {}
            _ => return None,
        }
        any = true;
    }
    any.then_some(piece)
}

/// Direct references into code, from every function of an image decoded with
/// `iced-x86`: calls, jumps and RIP-relative address computations (`lea`), and the
/// addresses the dynamic relocations store in data (function pointers of a PIE).
#[derive(Debug, Default)]
pub struct References {
    /// (target, source instruction), sorted by target.
    code: Vec<(u64, u64)>,
    /// Targets stored in data by relocations, sorted.
    data: Vec<u64>,
    /// Functions that do not decode, whose references are unknown: (name, address).
    undecoded: Vec<(String, u64)>,
}

impl References {
    /// Decode every function of `image`.
    pub fn scan(image: &Image) -> References {
        let mut refs = References::default();
        for f in &image.functions {
            let Some(code) = image.code_of(f) else {
                continue;
            };
            let mut decoder = Decoder::with_ip(64, code, f.address, DecoderOptions::NONE);
            while decoder.can_decode() {
                let i = decoder.decode();
                if i.is_invalid() {
                    refs.undecoded.push((f.name.clone(), f.address));
                    break;
                }
                let target = match i.flow_control() {
                    FlowControl::UnconditionalBranch
                    | FlowControl::ConditionalBranch
                    | FlowControl::Call => Some(i.near_branch_target()),
                    _ if i.is_ip_rel_memory_operand() => Some(i.ip_rel_memory_address()),
                    _ => None,
                };
                if let Some(t) = target.filter(|&t| t != 0) {
                    refs.code.push((t, i.ip()));
                }
            }
        }
        refs.code.sort_unstable();
        if let Ok(file) = object::File::parse(image.data()) {
            if let Some(relocations) = file.dynamic_relocations() {
                refs.data.extend(
                    relocations
                        .filter_map(|(_, r)| u64::try_from(r.addend()).ok())
                        .filter(|&a| a != 0),
                );
            }
        }
        refs.data.sort_unstable();
        refs
    }

    /// Why code in `[begin, end)` may be reached from elsewhere than `copies` (half-open
    /// ranges of the copies of the function it belongs to), if it may: a reference from
    /// outside both, its address stored in data, or a function that does not decode.
    pub fn reached_only_from(
        &self,
        image: &Image,
        begin: u64,
        end: u64,
        copies: &[(u64, u64)],
    ) -> Result<(), String> {
        let first = self.code.partition_point(|&(t, _)| t < begin);
        for &(_, source) in self.code[first..].iter().take_while(|&&(t, _)| t < end) {
            let inside = |(b, e): &(u64, u64)| source >= *b && source < *e;
            if (begin..end).contains(&source) || copies.iter().any(inside) {
                continue;
            }
            let from = image
                .function_at(source)
                .map(|f| format!(" (in {})", crate::demangle::demangle(&f.name).label))
                .unwrap_or_default();
            return Err(format!(
                "code at {source:#x}{from}, which is no copy of the function, refers to it"
            ));
        }
        let first = self.data.partition_point(|&t| t < begin);
        if self.data.get(first).is_some_and(|&t| t < end) {
            return Err(
                "its address is stored in data (a relocation): it may be called through a pointer"
                    .into(),
            );
        }
        if let Some((name, _)) = self.undecoded.first() {
            return Err(format!(
                "{name} does not decode, so what it calls is unknown"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gcc_suffixes() {
        let c = clone_name("scale.constprop.0").unwrap();
        assert_eq!(
            (c.origin, c.suffix, c.piece),
            ("scale", ".constprop.0", false)
        );
        let c = clone_name("area.constprop.0.isra.0").unwrap();
        assert_eq!((c.origin, c.piece), ("area", false));
        let c = clone_name("_PyPegen_x.part.0.isra.0").unwrap();
        assert_eq!((c.origin, c.piece), ("_PyPegen_x", true));
        let c = clone_name("check.cold").unwrap();
        assert_eq!((c.origin, c.suffix, c.piece), ("check", ".cold", true));
        assert!(clone_name("f.cold.3").unwrap().piece);
        let c = clone_name("_ZL5scalell.constprop.0").unwrap();
        assert_eq!(c.origin, "_ZL5scalell");
        assert_eq!(clone_name("f.isra").map(|c| c.origin), None, "no number");
        assert_eq!(clone_name("f.part.x"), None);
        assert_eq!(clone_name("scale"), None);
        assert_eq!(clone_name(".cold"), None, "no origin");
        assert_eq!(clone_name("a.b.constprop.1").map(|c| c.origin), Some("a.b"));
        assert_eq!(clone_name("_ZN3foo3bar17h0123456789abcdefE.llvm.42"), None);
    }
}
