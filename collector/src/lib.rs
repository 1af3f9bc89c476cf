//! sbs-profile's collector: the plan, the child-process runner, statistics and history.
pub mod compare;
pub mod history;
pub mod instrument;
pub mod steady;
