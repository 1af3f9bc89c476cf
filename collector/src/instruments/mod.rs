//! The instruments, one module per mechanism. Each plugs into the runner through
//! [`crate::instrument::Instrument`].

pub mod alloc;
pub mod boxing;
pub mod counters;
pub mod harness;
pub mod invocations;
pub mod memory;
pub mod timing;
pub mod valgrind;
