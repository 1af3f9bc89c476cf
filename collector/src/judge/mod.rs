//! Judging measurements: summaries of a series, comparisons between series (Welch,
//! ANOVA, exact), thresholds and verdicts, and the regression gate that compares a run
//! with its saved history or a baseline.
pub mod compare;
pub mod confirm;
pub mod from_history;
pub mod growth;
pub mod headline;
pub mod pitfalls;
pub mod regression;
pub mod shape;
pub mod sources;
pub mod summary;
