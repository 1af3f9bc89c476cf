//! The TCG plugin of `--instructions qemu`: loaded by `qemu-x86_64 -plugin`, it counts
//! every guest instruction QEMU executes, per process and per guest thread, into the
//! count area the collector shares with it (`sbs_agent_abi::qemu`).
//!
//! - At each block's translation it registers a callback for the block's execution with
//!   the block's instruction count; the callback adds it to the counter of the executing
//!   vCPU (each guest thread has its own index in user mode) in this process's slot.
//!   Only that thread writes that word, so a plain add is exact; an add shared by all
//!   threads (QEMU 7.2's inline add) loses updates.
//! - A system call to [`MARKER_SYSCALL`] switches the measured region on (argument 1) or
//!   off (0) for the calling thread.
//! - `execve`/`execveat` start an image outside QEMU (user mode runs it natively): each
//!   call that does not return is counted, and the collector reports those images as not
//!   measured.
//! - A forked child (a `fork`, `vfork` or `clone` that returns 0 in a process whose pid
//!   differs from its slot's) claims a slot of its own.
//!
//! Licence: MIT OR GPL-2.0-or-later (see `Cargo.toml`): QEMU, which loads it, is
//! GPL-2.0-or-later.
//!
//! The plugin API (version 1, QEMU 7.2) is declared by hand in `api`: the library must
//! build with a bare `rustc` (no dependencies, no std) as the agent does. The maintained
//! Rust binding (the `qemu-plugin` crate, which has an API-version-1 feature) needs std and
//! several crates, and is GPL-2.0-only, which would take away the MIT alternative.
#![cfg_attr(not(test), no_std)]

pub mod words;

#[cfg(not(test))]
mod api;
#[cfg(not(test))]
mod plugin;
#[cfg(not(test))]
mod sys;

pub use sbs_agent_abi::qemu::MARKER_SYSCALL;
