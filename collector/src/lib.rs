//! sbs-profile's collector: the plan, the child-process runner, statistics and history.
pub mod counters_plan;
pub mod instrument;
pub mod instruments;
