//! sbs-profile's collector: the plan, the child-process runner, statistics and history.
pub mod cli;
pub mod compare;
pub mod counters_plan;
pub mod harness;
pub mod history;
pub mod instrument;
pub mod instruments;
pub mod output;
pub mod plan;
pub mod region;
pub mod regression;
pub mod report_cmd;
pub mod runner;
pub mod scheduler;
pub mod sources;
pub mod stats;
pub mod steady;
mod sys;
