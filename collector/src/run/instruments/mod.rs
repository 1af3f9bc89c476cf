//! The instruments, one module per mechanism. Each plugs into the runner through
//! [`crate::run::instrument::Instrument`].

pub mod alloc;
pub mod boxing;
pub mod counters;
pub mod first_ops;
pub mod following;
pub mod invocations;
pub mod memory;
pub mod per_op;
pub mod preload;
pub mod qemu;
pub mod stacks;
pub mod timing;
pub mod valgrind;
