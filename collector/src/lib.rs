//! sbs-profile's collector: the plan, the child-process runner, statistics and history.
pub mod cli;
pub mod instrument;
pub mod instruments;
pub mod output;
pub mod plan;
pub mod runner;
pub mod scheduler;
pub mod stats;
mod sys;
