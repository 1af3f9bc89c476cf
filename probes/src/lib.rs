//! ELF symbols, demangling, uprobes and perf counters.
//!
//! The pipeline for invocation counts: [`elf`] loads the program and the libraries it
//! loads (with the symbols and DWARF of their separate debug files, [`debugfile`]),
//! [`demangle`] and [`pattern`] pick the functions a user names, [`dwarf`] counts
//! the inlined instances a probe cannot see, [`tracefs`] defines the uprobes (and always
//! removes them), [`hits`] counts their hits in a child process and its descendants.
//! [`clones`] ties the copies GCC makes of a function (`F.constprop.0`, `F.part.0`,
//! `F.cold`) to it, and [`entries`] finds where control enters an inlined copy. For the
//! in-process engine, [`patch`] decides which sites can be patched and encodes their
//! trampolines, and [`overlap`] which of the sites closer together than a patch share one.

pub mod clones;
pub mod debugfile;
pub mod demangle;
pub mod dwarf;
pub mod elf;
pub mod entries;
pub mod error;
pub mod execs;
pub mod hits;
mod jumptable;
pub mod lsda;
pub mod overlap;
pub mod patch;
pub mod pattern;
pub mod program;
pub mod refusal;
pub mod resolve;
pub mod sample;
mod sys;
pub mod tracefs;
pub mod unwind;

pub mod callgrind;
pub mod calls;
pub mod capability;
pub mod counters;
pub mod dhat;
pub mod valgrind;

pub use error::ProbeError;
