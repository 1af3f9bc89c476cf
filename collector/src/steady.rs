//! Steady-state detection, shared with the benchmark harness: see the `sbs-steady` crate.
pub use sbs_steady::*;
