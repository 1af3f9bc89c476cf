//! The measuring mechanisms, one module each.
pub mod counters;
pub mod valgrind;
