//! What one run of a build measured, as pinpoint reads it: costs per call site, per
//! function and per call between functions, and the stacks behind them. The data that
//! the builds, their call graph and the profile readers share.

use std::collections::HashMap;

/// What one run measured in the program's own object: per call site (address of the
/// call instruction) and per function (start address), the inclusive cost.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Costs {
    /// Call site -> inclusive cost of its calls.
    pub sites: HashMap<u64, f64>,
    /// Function start -> inclusive cost of the calls into it.
    pub functions: HashMap<u64, f64>,
    /// Calls between the program's own functions, (caller start, callee start) -> the
    /// inclusive cost of those calls (callgrind), or 0 where stacks only show the call
    /// was made (DHAT, sampled time): the call graph recursive cycles are found in.
    pub edges: HashMap<(u64, u64), f64>,
    /// For stacks (DHAT's program points, sampled time): each stack's weight and the
    /// functions and call sites on it (each once), so that a piece of several call sites,
    /// or a cycle of several functions, counts a stack once.
    pub stacks: Option<Vec<SampledStack>>,
    /// The stacks are time samples, whose number decides whether a piece is undecided.
    pub timed: bool,
    /// Instructions only: each instruction's own (exclusive) count, by address.
    pub own_at: HashMap<u64, f64>,
}

/// One stack sample of the program, as pinpoint reads it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SampledStack {
    /// The time it stands for.
    pub weight: f64,
    /// Start addresses of the program's functions on the stack, sorted, each once.
    pub functions: Vec<u64>,
    /// Call sites on the stack (the call instruction of each return address), sorted,
    /// each once.
    pub sites: Vec<u64>,
    /// Time samples only: the program's own frames from the innermost out, as the address
    /// in each (the sampled instruction, then each call site), in stack order: where in
    /// a function its time went.
    pub at: Vec<u64>,
}
