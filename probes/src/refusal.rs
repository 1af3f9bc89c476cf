//! Why a site of `--invocations` is counted by a uprobe rather than patched in-process:
//! one [`PatchRefusal`] per kind of reason, born where it is decided ([`crate::patch`]
//! for a site's own code and its trampoline, [`crate::overlap`] for sites closer together
//! than a patch, the collector for a whole module or program), each carrying the
//! addresses and details it names. Its `Display` is the sentence reports show;
//! [`PatchRefusal::general`] is the same sentence with the addresses elided (`…`), so that
//! sites refused for the same reason at different addresses are counted together.

use std::fmt;
use std::path::PathBuf;

use sbs_agent_abi::inproc::{Refusal, MAX_PATCH};

use crate::lsda::LsdaError;
use sbs_agent_abi::inproc::JMP_LEN;

/// Why a site is left to the uprobe engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatchRefusal {
    /// The function's code is not in the file (its section holds no bytes).
    CodeNotInFile,
    /// The site's function is not among the module's functions.
    FunctionUnknown,
    /// Another function symbol starts inside the bytes the patch would replace.
    SymbolInside {
        /// The other function.
        name: String,
        /// Where it starts.
        at: u64,
        /// The bytes the patch would replace.
        len: usize,
    },
    /// The function jumps through memory that is not a RIP-relative slot.
    IndirectJumpThroughMemory {
        /// The jump.
        at: u64,
    },
    /// The site does not start an instruction of its function.
    NotABoundary {
        /// The site.
        at: u64,
    },
    /// A branch lands right after the `endbr64` the patch would follow.
    BranchAfterEndbr {
        /// The instruction after the `endbr64`.
        at: u64,
    },
    /// The patch would cover bytes after a jump, and the landing pads could not be read.
    LandingPadsUnknown {
        /// The bytes after the jump.
        dead: usize,
        /// Why the exception table could not be read.
        why: LsdaError,
    },
    /// A landing pad lies inside the bytes the patch would replace.
    LandingPadInside {
        /// The landing pad.
        at: u64,
        /// The bytes the patch would replace.
        len: usize,
    },
    /// The displaced instructions are longer than a patch may be.
    TooLong {
        /// Their length.
        len: usize,
    },
    /// A branch or return lands inside the bytes the patch would replace.
    BranchInside {
        /// Where it lands.
        at: u64,
        /// The bytes the patch would replace.
        len: usize,
    },
    /// The function ends before the jump fits.
    FunctionEnds {
        /// The bytes from the site to the end.
        len: usize,
    },
    /// An instruction among the displaced ones cannot run from a trampoline.
    Unmovable {
        /// The instruction.
        at: u64,
        /// What it is, in words (`a return`).
        what: &'static str,
        /// Its mnemonic (`ret`).
        mnemonic: String,
    },
    /// A call ends the displaced instructions before the jump fits.
    CallEndsBlock {
        /// The call.
        at: u64,
        /// The bytes from the site to its end.
        len: usize,
    },
    /// A jump ends the block, and the function ends before the jump fits.
    JumpEndsFunction {
        /// The jump.
        at: u64,
        /// The bytes from the site to its end.
        len: usize,
    },
    /// The function has bytes that do not decode.
    Undecodable {
        /// The first of them.
        at: u64,
    },
    /// The trampoline could not be encoded (an internal failure, named by the encoder).
    Encoding {
        /// What failed.
        why: String,
    },
    /// Relocating the displaced instructions failed.
    Relocation {
        /// The encoder's error.
        why: String,
    },
    /// The site is in another function than the patch it lies in.
    OtherFunction,
    /// The site is a function's entry, which calls reach, inside another site's patch.
    EntryInside,
    /// No instruction the patch moves starts at the site.
    NoInstructionThere,
    /// The site counts outside the patch whose bytes hold its uprobe.
    CountsOutside {
        /// The site.
        at: u64,
    },
    /// The patch would hold the uprobe of a site it cannot count.
    HoldsUprobe {
        /// That site, for people.
        what: String,
        /// Its uprobe.
        uprobe: u64,
        /// The bytes the patch would replace.
        len: usize,
        /// Why the patch cannot count it.
        why: Box<PatchRefusal>,
    },
    /// The site lies inside the patch of another site, which cannot count it.
    InsidePatch {
        /// The bytes the other patch replaces.
        len: usize,
        /// The other site, for people.
        host: String,
        /// Where the other patch starts.
        at: u64,
        /// Why it cannot count this site.
        why: Box<PatchRefusal>,
    },
    /// The site's patch would overlap the patch of a site before it.
    Overlaps {
        /// The other site, for people.
        host: String,
        /// Where the other patch starts.
        at: u64,
        /// How far before this one's.
        distance: u64,
    },
    /// The plan neither patched nor overlapped a patchable site (a bug).
    Unplanned,
    /// The site is in a library loaded at run time whose dynamic section or program
    /// headers are not loaded (the counting library finds such a library by them).
    LoadedLater,
    /// Its module has no build id (the counting library matches modules by it).
    NoBuildId {
        /// The module.
        path: PathBuf,
    },
    /// The in-process engine cannot count this program at all.
    Unavailable {
        /// Why.
        why: String,
    },
    /// Process images of a run declined to patch a module (the counting library's answer).
    ImageRefused {
        /// The module.
        module: PathBuf,
        /// How many process images declined.
        images: u64,
        /// Why, when the library's code is known.
        refusal: Option<Refusal>,
    },
    /// A run counted in-process was killed by SIGSYS.
    Sigsys,
}

/// Whether addresses are written or elided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Addresses {
    /// `0x1234`.
    Shown,
    /// `…`.
    Elided,
}

/// An address, written or elided.
struct At(u64, Addresses);

impl fmt::Display for At {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.1 {
            Addresses::Shown => write!(f, "0x{:x}", self.0),
            Addresses::Elided => f.write_str("…"),
        }
    }
}

/// Why landing pads could not be read, its addresses shown or elided.
struct Unread<'a>(&'a LsdaError, Addresses);

impl fmt::Display for Unread<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            LsdaError::Read(why) => f.write_str(why),
            LsdaError::InNoSection { at } => write!(
                f,
                "its exception table at {} is in no section",
                At(*at, self.1)
            ),
            LsdaError::PastSection { at } => write!(
                f,
                "its exception table at {} is past its section",
                At(*at, self.1)
            ),
            LsdaError::Table { at, why } => write!(
                f,
                "reading its exception table at {}: {why}",
                At(*at, self.1)
            ),
        }
    }
}

impl fmt::Display for LsdaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Unread(self, Addresses::Shown).fmt(f)
    }
}

/// A reason written with its addresses shown or elided.
struct Written<'a>(&'a PatchRefusal, Addresses);

impl fmt::Display for Written<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.write_code(f, self.1) {
            Some(written) => written,
            None => self.0.write_placement(f, self.1),
        }
    }
}

impl fmt::Display for PatchRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Written(self, Addresses::Shown).fmt(f)
    }
}

/// Why the sites of a library loaded at run time are left to uprobes.
const LOADED_LATER: &str = "it is in a library the program loads at run time (dlopen) whose \
                            dynamic section or program headers are not loaded, by which the \
                            in-process engine finds such a library in memory";

impl PatchRefusal {
    /// The reason with its addresses elided (`…`): the same for every site refused for
    /// the same reason, wherever it lies.
    pub fn general(&self) -> String {
        Written(self, Addresses::Elided).to_string()
    }

    /// The reasons about the site's own code and its trampoline; `None` for the others.
    fn write_code(&self, f: &mut fmt::Formatter<'_>, shown: Addresses) -> Option<fmt::Result> {
        let at = |a: &u64| At(*a, shown);
        Some(match self {
            PatchRefusal::CodeNotInFile => f.write_str("its code is not in the file"),
            PatchRefusal::FunctionUnknown => f.write_str("its function is unknown"),
            PatchRefusal::SymbolInside { name, at: a, len } => write!(
                f,
                "the function `{name}` starts at {}, inside the {len} bytes the patch would replace",
                at(a)
            ),
            PatchRefusal::IndirectJumpThroughMemory { at: a } => write!(
                f,
                "its function has an indirect jump through memory at {} (an absolute jump table?), which could land inside the patch",
                at(a)
            ),
            PatchRefusal::NotABoundary { at: a } => write!(
                f,
                "{} is not an instruction boundary of its function",
                at(a)
            ),
            PatchRefusal::BranchAfterEndbr { at: a } => write!(
                f,
                "a branch lands on {}, right after the endbr64 the patch would follow",
                at(a)
            ),
            PatchRefusal::LandingPadsUnknown { dead, why } => write!(
                f,
                "the patch would cover {dead} bytes after a jump, and its landing pads are unknown: {}",
                Unread(why, shown)
            ),
            PatchRefusal::LandingPadInside { at: a, len } => write!(
                f,
                "a landing pad is at {}, inside the {len} bytes the patch would replace",
                at(a)
            ),
            PatchRefusal::TooLong { len } => write!(
                f,
                "the displaced instructions take {len} bytes, more than {MAX_PATCH}"
            ),
            PatchRefusal::BranchInside { at: a, len } => write!(
                f,
                "a branch or return lands at {}, inside the {len} bytes the patch would replace",
                at(a)
            ),
            _ => return self.write_instructions(f, shown),
        })
    }

    /// The reasons about the displaced instructions and the encoding; `None` for the
    /// others.
    fn write_instructions(
        &self,
        f: &mut fmt::Formatter<'_>,
        shown: Addresses,
    ) -> Option<fmt::Result> {
        let at = |a: &u64| At(*a, shown);
        Some(match self {
            PatchRefusal::FunctionEnds { len } => write!(
                f,
                "the function ends {len} bytes after the site: shorter than the {JMP_LEN}-byte jump"
            ),
            PatchRefusal::Unmovable { at: a, what, mnemonic } => write!(
                f,
                "the instruction at {} is {what} (`{mnemonic}`), which cannot be moved into a trampoline",
                at(a)
            ),
            PatchRefusal::CallEndsBlock { at: a, len } => write!(
                f,
                "the call at {} ends the block {len} bytes after the site: shorter than the {JMP_LEN}-byte jump",
                at(a)
            ),
            PatchRefusal::JumpEndsFunction { at: a, len } => write!(
                f,
                "the jump at {} ends the block {len} bytes after the site, and the function ends before the {JMP_LEN}-byte jump fits",
                at(a)
            ),
            PatchRefusal::Undecodable { at: a } => write!(
                f,
                "its function has bytes that do not decode at {}",
                at(a)
            ),
            PatchRefusal::Encoding { why } => f.write_str(why),
            PatchRefusal::Relocation { why } => {
                write!(f, "relocating the displaced instructions failed: {why}")
            }
            _ => return None,
        })
    }

    /// The reasons about the site's place among the others, its module and its program.
    fn write_placement(&self, f: &mut fmt::Formatter<'_>, shown: Addresses) -> fmt::Result {
        let at = |a: &u64| At(*a, shown);
        match self {
            PatchRefusal::OtherFunction => f.write_str("it is in another function"),
            PatchRefusal::EntryInside => f.write_str("it is a function's entry, which calls reach"),
            PatchRefusal::NoInstructionThere => {
                f.write_str("no instruction the patch moves starts there")
            }
            PatchRefusal::CountsOutside { at: a } => {
                write!(f, "it counts at {}, outside the patch", at(a))
            }
            PatchRefusal::HoldsUprobe {
                what,
                uprobe,
                len,
                why,
            } => write!(
                f,
                "the uprobe of {what} at {} would lie inside the {len} bytes the patch would \
                 replace, and the patch cannot count that site ({})",
                at(uprobe),
                Written(why, shown)
            ),
            PatchRefusal::InsidePatch {
                len,
                host,
                at: a,
                why,
            } => write!(
                f,
                "it lies inside the {len} bytes the patch of {host} at {} replaces, which cannot \
                 count it: {}",
                at(a),
                Written(why, shown)
            ),
            PatchRefusal::Overlaps {
                host,
                at: a,
                distance,
            } => write!(
                f,
                "its patch would overlap the patch of {host} at {}, {distance} bytes before it",
                at(a)
            ),
            PatchRefusal::Unplanned => {
                f.write_str("internal error: a patchable site was neither patched nor overlapped")
            }
            _ => self.write_module(f),
        }
    }

    /// The reasons about the site's module or the whole program (no addresses).
    fn write_module(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PatchRefusal::LoadedLater => f.write_str(LOADED_LATER),
            PatchRefusal::NoBuildId { path } => write!(f, "{} has no build id", path.display()),
            PatchRefusal::Unavailable { why } => {
                write!(f, "in-process counting unavailable: {why}")
            }
            PatchRefusal::ImageRefused {
                module,
                images,
                refusal,
            } => write!(
                f,
                "the in-process engine could not patch {} in {images} process image(s) of the \
                 run: {}",
                module.display(),
                refusal.map_or("an unknown reason", Refusal::describe)
            ),
            PatchRefusal::Sigsys => f.write_str(
                "the program was killed by SIGSYS in a run counted in-process: a seccomp filter \
                 refused a system call, maybe one the counting library makes",
            ),
            // Written by `write_code` and `write_placement`.
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_sites_refused_for_the_same_reason_at_different_addresses_group_together() {
        let first = PatchRefusal::BranchInside { at: 0x1234, len: 6 };
        let second = PatchRefusal::BranchInside { at: 0x5678, len: 6 };
        assert_ne!(first.to_string(), second.to_string());
        assert_eq!(first.general(), second.general());
        assert_eq!(
            first.general(),
            "a branch or return lands at …, inside the 6 bytes the patch would replace"
        );
        // Addresses inside the reason's details too.
        let unread = |at| PatchRefusal::LandingPadsUnknown {
            dead: 2,
            why: LsdaError::PastSection { at },
        };
        assert_eq!(unread(0x40).general(), unread(0x80).general());
        assert!(unread(0x40)
            .to_string()
            .ends_with("table at 0x40 is past its section"));
        // Other details still tell reasons apart.
        let longer = PatchRefusal::BranchInside { at: 0x1234, len: 7 };
        assert_ne!(first.general(), longer.general());
    }

    #[test]
    fn nested_reasons_elide_their_addresses_too() {
        let why = |at| PatchRefusal::InsidePatch {
            len: 5,
            host: "`outer`".into(),
            at,
            why: Box::new(PatchRefusal::CountsOutside { at: at + 2 }),
        };
        assert_eq!(
            why(0x10).to_string(),
            "it lies inside the 5 bytes the patch of `outer` at 0x10 replaces, which cannot \
             count it: it counts at 0x12, outside the patch"
        );
        assert_eq!(why(0x10).general(), why(0x2000).general());
        assert!(!why(0x10).general().contains("0x"));
    }

    #[test]
    fn the_counting_librarys_refusal_is_worded_by_the_abi() {
        let refused = PatchRefusal::ImageRefused {
            module: "/bin/prog".into(),
            images: 2,
            refusal: Some(Refusal::Threads),
        };
        assert_eq!(
            refused.to_string(),
            format!(
                "the in-process engine could not patch /bin/prog in 2 process image(s) of the \
                 run: {}",
                Refusal::Threads.describe()
            )
        );
    }
}
