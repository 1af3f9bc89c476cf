//! The allocation agent: a `LD_PRELOAD` library that counts what a process allocates.
//!
//! It interposes the malloc family, forwards to glibc's `__libc_*` entry points (so it
//! never recurses into itself) and keeps its counters in the report file the collector
//! passed in (see `sbs-agent-abi`). It is `no_std` on purpose: a std-based agent brings a
//! TLS segment that changes every thread's allocations, and nothing in a hook may allocate.
//!
//! Layout: [`trailer`] (block trailers) and `sbs_agent_abi::counters` (slot updates) are
//! plain Rust and unit-tested; the FFI shims, the initialisation and the fork handler are in `hooks`,
//! compiled only into the library itself (not into the unit-test binary, whose own
//! allocator they would otherwise replace).
#![cfg_attr(not(test), no_std)]

pub mod trailer;

#[cfg(not(test))]
mod hooks;
#[cfg(not(test))]
mod sys;
