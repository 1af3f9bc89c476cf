//! Recursive cycles: the functions that call each other, directly or through others,
//! taken together as one node of the search.
//!
//! A recursive function's inclusive cost, as callgrind gives it per call edge, is summed
//! over the levels of the recursion: a call made at level 2 is inside the call made at
//! level 1, and both are counted, so the recursive function can cost more than its
//! caller. The cycle (a strongly connected component of the call graph the runs saw) has
//! a true inclusive cost: the cost of the calls that enter it from outside. A call from
//! inside the cycle to a function outside it cannot be nested in another such call at the
//! same site (the callee would then be on a path back into the cycle, and so in it), so
//! the costs of the cycle's calls out are not double counted either.

use std::collections::{HashMap, HashSet};

use super::costs::Costs;

/// The calls between a build's own functions that its runs saw (caller start -> callee
/// starts).
#[derive(Debug, Clone, Default)]
pub struct CallGraph {
    callees: HashMap<u64, HashSet<u64>>,
    callers: HashMap<u64, HashSet<u64>>,
}

impl CallGraph {
    /// The union of the edges of every run.
    pub fn of(runs: &[Costs]) -> CallGraph {
        let mut graph = CallGraph::default();
        for &(caller, callee) in runs.iter().flat_map(|r| r.edges.keys()) {
            graph.callees.entry(caller).or_default().insert(callee);
            graph.callers.entry(callee).or_default().insert(caller);
        }
        graph
    }

    /// The functions of `f`'s cycle: `f` first, then the others by address; only `f` when
    /// it is in no cycle (not even calling itself).
    pub fn cycle(&self, f: u64) -> Vec<u64> {
        let forward = reach(&self.callees, f);
        let backward = reach(&self.callers, f);
        let mut others: Vec<u64> = forward
            .intersection(&backward)
            .copied()
            .filter(|&g| g != f)
            .collect();
        others.sort_unstable();
        std::iter::once(f).chain(others).collect()
    }

    /// The functions that call `f`.
    pub fn callers(&self, f: u64) -> Vec<u64> {
        let mut c: Vec<u64> = self
            .callers
            .get(&f)
            .into_iter()
            .flatten()
            .copied()
            .collect();
        c.sort_unstable();
        c
    }

    /// Whether `f` is recursive: in a cycle with others, or calling itself.
    pub fn recursive(&self, f: u64) -> bool {
        self.callees.get(&f).is_some_and(|c| c.contains(&f)) || self.cycle(f).len() > 1
    }
}

/// The functions reachable from `from` (itself included) along `next`.
fn reach(next: &HashMap<u64, HashSet<u64>>, from: u64) -> HashSet<u64> {
    let mut seen = HashSet::from([from]);
    let mut todo = vec![from];
    while let Some(f) = todo.pop() {
        for &g in next.get(&f).into_iter().flatten() {
            if seen.insert(g) {
                todo.push(g);
            }
        }
    }
    seen
}

/// One run's inclusive cost of the cycle `members` from its call edges: the cost of every
/// call into a member, less the calls from a member to a member (those are inside calls
/// already counted).
pub fn counted_cost(run: &Costs, members: &[u64]) -> f64 {
    let into: f64 = members
        .iter()
        .map(|m| run.functions.get(m).copied().unwrap_or(0.0))
        .sum();
    let inside: f64 = run
        .edges
        .iter()
        .filter(|((a, b), _)| members.contains(a) && members.contains(b))
        .map(|(_, c)| c)
        .sum();
    into - inside
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(edges: &[((u64, u64), f64)], functions: &[(u64, f64)]) -> Costs {
        Costs {
            edges: edges.iter().copied().collect(),
            functions: functions.iter().copied().collect(),
            ..Costs::default()
        }
    }

    /// main(1) -> value(2) -> array(3) -> value(2); value -> number(4); array -> space(5).
    /// One parse: main calls value once (cost 100); value calls array once at level 1
    /// (cost 80, which includes the inner value's 50); the inner value calls number (20)
    /// and the outer one too (10).
    fn parser() -> Costs {
        run(
            &[
                ((1, 2), 100.0),
                ((2, 3), 80.0),
                ((3, 2), 50.0),
                ((2, 4), 30.0),
                ((3, 5), 5.0),
            ],
            &[(2, 150.0), (3, 80.0), (4, 30.0), (5, 5.0)],
        )
    }

    #[test]
    fn a_cycle_is_its_strongly_connected_functions_and_costs_what_enters_it() {
        let p = parser();
        let g = CallGraph::of(std::slice::from_ref(&p));
        assert_eq!(g.cycle(3), [3, 2]);
        assert_eq!(g.cycle(2), [2, 3]);
        assert_eq!(g.cycle(4), [4]);
        assert!(g.recursive(2) && !g.recursive(4) && !g.recursive(1));
        // value's edges sum to 150 over the recursion, more than main's 100: the cycle
        // costs what main's call brought in.
        assert_eq!(counted_cost(&p, &g.cycle(2)), 100.0);
        assert_eq!(counted_cost(&p, &[4]), 30.0);
    }

    #[test]
    fn a_function_calling_itself_is_a_cycle_of_one() {
        let p = run(&[((1, 2), 10.0), ((2, 2), 7.0)], &[(2, 17.0)]);
        let g = CallGraph::of(std::slice::from_ref(&p));
        assert_eq!(g.cycle(2), [2]);
        assert!(g.recursive(2));
        assert_eq!(counted_cost(&p, &[2]), 10.0);
    }
}
