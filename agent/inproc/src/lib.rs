//! The in-process counting library: preloaded (`LD_PRELOAD`) into the benchmark for
//! `--invocations` when the in-process engine counts some sites.
//!
//! Its constructor reads the site table the collector passed in (see
//! `sbs_agent_abi::inproc`), finds each module of the table among the loaded objects by
//! its build id, and redirects each site to a trampoline stub that increments the site's
//! counter (in memory shared with the collector) and runs the displaced instructions.
//! A library the program loads later (`dlopen`) is patched as the loader maps it, before
//! its constructors run, from a hook on the loader's `_dl_debug_state` (see `patch`).
//! Each thread counts in a block of counters of its own, found through the library's one
//! initial-exec TLS word (see `sbs_agent_abi::inproc`), so the hot path is a plain `inc`.
//! The collector did all the decoding and relocation; this library only maps pages,
//! copies bytes and subtracts addresses. It defines nothing else (no `malloc`), so the
//! program's calls reach the same functions as without it.
//!
//! Layout: [`plan`] is plain Rust (which address to try, what to write), unit-tested;
//! the system calls and raw memory accesses are in `patch` and `sys`, compiled only into
//! the library itself.
#![cfg_attr(not(test), no_std)]

pub mod plan;

#[cfg(not(test))]
mod patch;
#[cfg(not(test))]
mod sys;
