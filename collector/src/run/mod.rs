//! Running the plan: the scheduler drives groups of runs, the runner starts, holds,
//! releases and reaps one child per sample, and the instruments measure it.
pub mod confirm;
pub mod hooks;
pub mod instrument;
pub mod instruments;
mod launcher;
pub mod machine;
pub mod region_fds;
pub mod runner;
pub mod scheduler;
pub mod spec;
mod sys;
