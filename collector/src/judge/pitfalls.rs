//! Benchmarks that measure the wrong thing: the calibration of per-operation metrics
//! against the empty operation (MICROBE's calibrator), and the warnings for AutoJMH's
//! payload pitfalls that counts and times make visible: dead work (an operation that costs
//! what the empty one does) and state that drifts (an operation that changes its own
//! input). Pure functions over numbers and the report model; see `docs/harness.md`.

use sbs_reports::human;
use sbs_reports::model::{BenchmarkResult, Family, MetricId, MetricResult, Report, Unit, Variant};

use super::stats::{self, median};
use super::summary::{metric_result, summarize};

/// The per-operation instruction count, the one metric counted at each size probe
/// (`counter.instructions/op@n=20000`).
pub fn instructions_per_op() -> MetricId {
    MetricId::new(Family::Counter, "instructions").per_op()
}

/// An exact per-operation count (instructions under valgrind) this close to the empty
/// operation's is the same cost: the two closures compile to loops that differ by a few
/// register moves, so an operation the optimizer deleted can differ from the empty one by
/// that much, and a real operation costs far more.
pub const EXACT_JITTER: f64 = 8.0;

/// Level of the drift tests. Stricter than the usual 5%: a warning on a noisy time series
/// must be rare when nothing is wrong.
pub const DRIFT_ALPHA: f64 = 0.01;
/// The first operation must cost at least this fraction more than the next ones (0.75:
/// the next ones cost a quarter of it) to count as an operation that changed its input...
pub const STEP_MIN_FALL: f64 = 0.75;
/// ... and at least this much more in seconds: a first call that is slower only because
/// caches, branch predictors and TLB are cold costs a few microseconds more, not more.
pub const STEP_MIN_SECONDS: f64 = 20e-6;
/// A trend over the kept measurements must change the time per operation by at least this
/// fraction between the first and the second half of the window.
pub const TREND_MIN_CHANGE: f64 = 0.2;

/// Every pitfall pass over a fresh report, in its order: the calibration against the
/// empty operation ([`calibrate`]), then what it says: [`dead_work`], then
/// [`constant_inputs`] (which leaves out the dead work already said).
pub fn all(report: &mut Report, confidence: f64) {
    calibrate(report, confidence);
    dead_work(report);
    constant_inputs(report);
}

/// Add `X.calibrated` after every pair of per-operation metrics `X` and `X.empty` of each
/// benchmark: the raw value minus the empty operation's, run by run (the same process for
/// time, the runs of the calibration group in the same order for counts), with
/// `distinguishable` saying whether it can be told from zero.
pub fn calibrate(report: &mut Report, confidence: f64) {
    for bench in &mut report.benchmarks {
        let mut added = Vec::new();
        for raw in &bench.metrics {
            let Some(id) = MetricId::parse(&raw.id)
                .ok()
                .filter(|id| id.is_per_operation() && id.variant() == Variant::Raw)
            else {
                continue;
            };
            let twin = id.clone().with_variant(Variant::Empty).to_string();
            let Some(empty) = bench.metrics.iter().find(|m| m.id == twin) else {
                continue;
            };
            if raw.samples.len() != empty.samples.len() || raw.samples.is_empty() {
                continue;
            }
            let diff: Vec<f64> = raw
                .samples
                .iter()
                .zip(&empty.samples)
                .map(|(r, e)| r - e)
                .collect();
            let exact = raw.exact && empty.exact;
            let mut m = metric_result(
                id.with_variant(Variant::Calibrated).to_string(),
                raw.unit,
                raw.source.clone(),
                exact,
                diff,
                Vec::new(),
                confidence,
            );
            m.group = raw.group.clone();
            let zero = !distinguishable(&m, raw, empty, confidence);
            m.distinguishable = Some(!zero);
            if zero {
                // For the formats that show numbers only (CSV keeps the notes).
                m.notes.push(format!(
                    "{}: the operation costs what the empty one does ({})",
                    human::INDISTINGUISHABLE,
                    show(empty.summary.mean, raw.unit)
                ));
            }
            added.push((empty.id.clone(), m));
        }
        for (after, m) in added {
            let at = bench
                .metrics
                .iter()
                .position(|x| x.id == after)
                .map_or(bench.metrics.len(), |i| i + 1);
            bench.metrics.insert(at, m);
        }
    }
}

/// A per-operation value for a message.
fn show(v: f64, unit: Unit) -> String {
    match unit {
        Unit::Count => format!("{}/op", human::count(v)),
        unit => format!("{}/op", human::value(v, unit)),
    }
}

/// Whether a calibrated metric can be told from zero, that is, whether the operation
/// costs more than the empty one:
///
/// - an exact count (the same in every run): by more than [`EXACT_JITTER`];
/// - a time: the lower bound of the interval of the mean log ratio `ln(raw / empty)` over
///   the processes is above 0. Timing noise between processes is multiplicative (a loaded
///   machine slows both alike), so the ratio is what stays stable: a 3 us operation next to
///   a 0.6 ns empty one is told apart with three processes at 40% CoV, where the interval
///   of the difference would still contain 0;
/// - any other measurement: the lower bound of the interval of the difference is above 0.
///
/// With a single sample of a measurement there is no interval and no claim: distinguishable.
fn distinguishable(
    m: &MetricResult,
    raw: &MetricResult,
    empty: &MetricResult,
    confidence: f64,
) -> bool {
    let s = &m.summary;
    if m.exact && s.sd == 0.0 {
        return s.mean > EXACT_JITTER;
    }
    if raw.unit == Unit::Seconds {
        let logs: Option<Vec<f64>> = raw
            .samples
            .iter()
            .zip(&empty.samples)
            .map(|(&r, &e)| (r > 0.0 && e > 0.0).then(|| (r / e).ln()))
            .collect();
        if let Some(logs) = logs {
            return match summarize(&logs, confidence).ci_low {
                Some(lo) => lo > 0.0,
                None => true,
            };
        }
    }
    s.ci_low.is_none_or(|lo| lo > 0.0)
}

/// The dead-work warning of each benchmark whose operation costs what the empty one does:
/// by its per-operation instructions when they were counted (exact), else by its time.
/// At most one per benchmark.
pub fn dead_work(report: &mut Report) {
    for bench in &mut report.benchmarks {
        if let Some(w) = dead_work_warning(bench) {
            bench.warnings.push(w);
        }
    }
}

fn dead_work_warning(bench: &BenchmarkResult) -> Option<String> {
    let find = |id: &str| bench.metrics.iter().find(|m| m.id == id);
    let calibrated = |id: &MetricId| id.clone().with_variant(Variant::Calibrated).to_string();
    let (instructions, time) = (instructions_per_op(), MetricId::new(Family::Time, "op"));
    let (calibrated, raw) = match find(&calibrated(&instructions)) {
        Some(c) => (c, find(&instructions.to_string())?),
        None => (find(&calibrated(&time))?, find(&time.to_string())?),
    };
    if calibrated.distinguishable != Some(false) {
        return None;
    }
    let cost = match raw.unit {
        Unit::Count => format!("{} instructions/op", human::count(raw.summary.mean)),
        unit => format!("{}/op", human::value(raw.summary.mean, unit)),
    };
    Some(format!(
        "`{}`: the operation costs what an empty one does ({cost}); its result is probably \
         unused or computed at compile time: return it or pass it to `black_box`",
        bench.name
    ))
}

/// The constant-input warning of each benchmark whose per-operation instructions are the
/// same at a size probe (a size parameter doubled) as at its own size: within
/// [`EXACT_JITTER`] for exact counts, within 1% for measured ones. Not for a benchmark that
/// is dead work already (an empty operation does not change with anything either).
pub fn constant_inputs(report: &mut Report) {
    for bench in &mut report.benchmarks {
        if dead_work_warning(bench).is_some() {
            continue;
        }
        let per_op = instructions_per_op();
        let Some(base) = bench.metrics.iter().find(|m| m.id == per_op.to_string()) else {
            continue;
        };
        let mut warnings = Vec::new();
        for probe in &bench.metrics {
            let Ok(id) = MetricId::parse(&probe.id) else {
                continue;
            };
            let Some(at) = id.probe().filter(|_| id.base() == per_op) else {
                continue;
            };
            let (a, b) = (base.summary.mean, probe.summary.mean);
            let exact =
                base.exact && probe.exact && base.summary.sd == 0.0 && probe.summary.sd == 0.0;
            let same = if exact {
                (a - b).abs() <= EXACT_JITTER
            } else {
                (a - b).abs() <= 0.01 * a.abs()
            };
            if !same {
                continue;
            }
            let key = at.split_once('=').map_or(at, |(k, _)| k);
            warnings.push(format!(
                "`{}`: per-op instructions do not change when size parameter `{key}` doubles \
                 ({} instructions/op, and {} at {at}): the input may be folded as a constant, \
                 or the operation ignores `{key}`; build its input from the state the set-up \
                 makes of `{key}` and pass it through `black_box`",
                bench.name,
                human::count(a),
                human::count(b)
            ));
        }
        bench.warnings.extend(warnings);
    }
}

/// The step at the first operation, over several processes: in each, the first
/// operation's rank among the first `n` operations (1 = cheapest). If the operations are
/// exchangeable (nothing changes after the first), each rank is uniform on `1..=n`
/// and independent between processes. Returns the exact one-sided p-values of the sum of
/// the ranks being this large (the first is dearer) and this small (the first is cheaper).
pub fn first_rank_p_values(ranks: &[usize], n: usize) -> (f64, f64) {
    if n == 0 || ranks.is_empty() {
        return (1.0, 1.0);
    }
    // Distribution of the sum of k uniform{1..n}: probability of each s in 0..=k*n.
    let mut ways = vec![1.0f64];
    for _ in ranks {
        let mut next = vec![0.0f64; ways.len() + n];
        for (s, &w) in ways.iter().enumerate() {
            if w == 0.0 {
                continue;
            }
            for r in 1..=n {
                next[s + r] += w / n as f64;
            }
        }
        ways = next;
    }
    let total: f64 = ways.iter().sum();
    let observed: usize = ranks.iter().sum();
    let at_least: f64 = ways[observed.min(ways.len() - 1)..].iter().sum();
    let at_most: f64 = ways[..=observed.min(ways.len() - 1)].iter().sum();
    (at_least / total, at_most / total)
}

/// Spearman's rank correlation of `(x, y)` pairs (average ranks for ties) and its
/// two-sided p-value from Student's t with `n - 2` degrees of freedom. `None` with fewer
/// than 4 pairs or when either side is constant.
pub fn spearman(pairs: &[(f64, f64)]) -> Option<(f64, f64)> {
    let n = pairs.len();
    if n < 4 {
        return None;
    }
    let rx = ranks(&pairs.iter().map(|p| p.0).collect::<Vec<_>>());
    let ry = ranks(&pairs.iter().map(|p| p.1).collect::<Vec<_>>());
    let mean = (n as f64 + 1.0) / 2.0;
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (a, b) in rx.iter().zip(&ry) {
        sxy += (a - mean) * (b - mean);
        sxx += (a - mean) * (a - mean);
        syy += (b - mean) * (b - mean);
    }
    if sxx == 0.0 || syy == 0.0 {
        return None;
    }
    let rho = (sxy / (sxx * syy).sqrt()).clamp(-1.0, 1.0);
    let df = n as f64 - 2.0;
    let p = if rho.abs() >= 1.0 {
        0.0
    } else {
        let t = rho * (df / (1.0 - rho * rho)).sqrt();
        stats::t_p_value(t, df)?
    };
    Some((rho, p))
}

/// Ranks 1..=n, ties given their average rank.
fn ranks(values: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| values[a].total_cmp(&values[b]));
    let mut out = vec![0.0; values.len()];
    let mut i = 0;
    while i < order.len() {
        let mut j = i;
        while j + 1 < order.len() && values[order[j + 1]] == values[order[i]] {
            j += 1;
        }
        let rank = (i + j) as f64 / 2.0 + 1.0;
        for &k in &order[i..=j] {
            out[k] = rank;
        }
        i = j + 1;
    }
    out
}

/// Two instruction counts of single operations are the same cost within this fraction of
/// the larger...
pub const FIRST_COUNT_REL: f64 = 0.01;
/// ... or within this many instructions: what the allocator's paths and the harness's own
/// lines may add to one operation and not another (a few hundred in a debug build,
/// `docs/harness.md`), far less than a sort of a shuffled input saves on a sorted one.
pub const FIRST_COUNT_ABS: f64 = 100.0;

/// The instructions of a harnessed benchmark's first operations, each counted alone under
/// callgrind in one process (`SBS_HARNESS_MODE=first`): what cold caches cannot change
/// and a changed input does.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FirstCounts {
    /// The first operations of the process, on its first set-up.
    pub process: Vec<u64>,
    /// The first operations on a second set-up in the same process, after the first
    /// set-up's: a fresh input in a process whose one-time work is done. Empty when the
    /// second set-up (or an operation on it) panicked.
    pub fresh: Vec<u64>,
}

/// What the drift check had besides the times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FirstCheck<'a> {
    /// The first operations' instructions, counted one at a time.
    Counted(&'a FirstCounts),
    /// No count, for this reason (valgrind missing, the counting run failed): the step
    /// after the first operation is judged on times alone, as the warning says.
    TimingOnly(&'a str),
}

/// The drift check's outcome for one benchmark: its warnings, and a neutral note for
/// `time.op` when the first operation was dearer for a reason that is not a drift.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DriftVerdict {
    /// At most one warning.
    pub warnings: Vec<String>,
    /// Why the first operation was dearer, when it was and the input did not change.
    pub note: Option<String>,
}

/// The state-drift check of one harnessed benchmark. `first` holds, per timing process,
/// the first operations timed one at a time and what the empty operation costs timed the
/// same way; `kept`, per process, the kept measurements (seconds per operation) in order;
/// `check`, the first operations' instruction counts or why there are none.
///
/// - A step after the first operation, with counts: the instructions of the first
///   operation on a fresh input (the second set-up's, else the process's first) differ
///   from the next one's by more than [`FIRST_COUNT_REL`] and [`FIRST_COUNT_ABS`], or the
///   process's later operations differ from one another: the input changed, whatever the
///   times say. Equal counts and a dearer first operation are cold caches (or one-time
///   work of the process, when only the process's very first operation differs): a note.
/// - Without counts: in every process the first operation is the dearest (exact rank
///   test, [`first_rank_p_values`]) and the next ones cost at most a quarter of it,
///   [`STEP_MIN_SECONDS`] less at least; the warning says that the check was timing-only.
/// - A trend within the kept measurements: Spearman's rank correlation of the time per
///   operation with its index, pooled over the processes, significant at [`DRIFT_ALPHA`],
///   with the second half of the window [`TREND_MIN_CHANGE`] dearer or cheaper than the
///   first. Times only: a slow drift shows after more operations than are counted.
pub fn drift_warnings(
    bench: &str,
    first: &[(Vec<f64>, f64)],
    kept: &[Vec<f64>],
    check: FirstCheck<'_>,
) -> DriftVerdict {
    let step = first_step(first);
    let mut verdict = DriftVerdict::default();
    match check {
        FirstCheck::TimingOnly(why) => {
            if let Some(step) = step {
                verdict.warnings.push(format!(
                    "`{bench}`: {step}: the operation changes its own input, or its first call \
                     met cold caches; this check was timing-only ({why}); if the operation \
                     changes its input, add `.reset(...)`"
                ));
                return verdict;
            }
        }
        FirstCheck::Counted(counts) => {
            if let Some(w) = counted_drift(bench, counts, step.as_deref()) {
                verdict.warnings.push(w);
                return verdict;
            }
            verdict.note = not_a_drift(counts, step.as_deref());
            // Counts that do not move say the input does not change: a trend of the times
            // alone is then the machine's (its load changed during the runs, and the
            // processes' times are not independent), or a drift too slow for the counted
            // operations to show. Counts that creep one way (within the tolerance) back a
            // slow drift: a warning, below.
            let creeping = counts.process.windows(2).all(|w| w[1] > w[0])
                || counts.process.windows(2).all(|w| w[1] < w[0]);
            if let Some(trend) = kept_trend(kept).filter(|_| !creeping) {
                let said = format!(
                    "{trend}, while the first {} operations ran the same instructions: the \
                     machine's load changed during the runs, or the input drifts too slowly \
                     to show in them (if the operation changes its input, add `.reset(...)`)",
                    counts.process.len()
                );
                verdict.note = Some(match verdict.note.take() {
                    Some(first) => format!("{first}; {said}"),
                    None => said,
                });
                return verdict;
            }
        }
    }
    verdict.warnings.extend(kept_trend(kept).map(|trend| {
        format!("`{bench}`: {trend}: the operation changes its own input; add `.reset(...)`")
    }));
    verdict
}

/// How many times the difference between the same operations after two set-ups a
/// difference between operations must exceed to be a drift (see [`counted_drift`]).
const NOISE_FACTOR: u64 = 3;

/// Whether two single operations' instruction counts are the same cost.
fn same_count(a: u64, b: u64) -> bool {
    let (a, b) = (a as f64, b as f64);
    (a - b).abs() <= FIRST_COUNT_ABS.max(FIRST_COUNT_REL * a.max(b))
}

/// `a, b, c and d`, each a count.
fn list_counts(counts: &[u64]) -> String {
    let shown: Vec<String> = counts.iter().map(|&n| human::count(n as f64)).collect();
    match shown.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => shown.join(""),
    }
}

/// The drift warning the counts make, if they differ.
fn counted_drift(bench: &str, c: &FirstCounts, step: Option<&str>) -> Option<String> {
    let base = if c.fresh.len() >= 2 {
        &c.fresh
    } else {
        &c.process
    };
    // The same operations on a fresh input, after each set-up, differ by this much when
    // the program itself is not repeatable (a hash seed drawn per set-up): only a change
    // well beyond it is the input's. The first operations are left out: the process's
    // one-time work is in the first set-up's only.
    let noise = c
        .process
        .iter()
        .zip(&c.fresh)
        .skip(1)
        .map(|(&a, &b)| a.abs_diff(b))
        .max()
        .unwrap_or(0);
    let alike = |a: u64, b: u64| same_count(a, b) || a.abs_diff(b) <= NOISE_FACTOR * noise;
    let first_differs = base.len() >= 2 && !alike(base[0], base[1]);
    let later_differ = c
        .process
        .get(1..)
        .is_some_and(|later| later.windows(2).any(|w| !alike(w[0], w[1])));
    if !first_differs && !later_differ {
        return None;
    }
    let fresh = if c.fresh.len() >= 2 {
        format!(", and on a second set-up {}", list_counts(&c.fresh))
    } else {
        " (a second set-up panicked, so one-time work of the first call is not ruled out)"
            .to_string()
    };
    let timed = step.map(|s| format!("; {s}")).unwrap_or_default();
    Some(format!(
        "`{bench}`: the operation changes its own input: its first operations, each counted \
         alone under callgrind, run {} instructions{fresh}{timed}; add `.reset(...)`",
        list_counts(&c.process)
    ))
}

/// The note for a first operation that was dearer without a change of the input: one-time
/// work of the process, or (its count the same as the next ones') cold caches.
fn not_a_drift(c: &FirstCounts, step: Option<&str>) -> Option<String> {
    let (&first, &next) = (c.process.first()?, c.process.get(1)?);
    if !same_count(first, next) {
        // A first operation that runs fewer instructions than the next ones explains no
        // dearer first operation, and asks nothing of the reader: no note.
        if first < next {
            return None;
        }
        return Some(format!(
            "the first operation of each process runs {} than the next ones (each counted \
             alone under callgrind), the first on a second set-up does not: one-time work of \
             the process (a lazy static, the allocator's first pass), not a change of the \
             input; the warm-up absorbs it",
            human::more_or_fewer(first as f64 - next as f64, "instructions")
        ));
    }
    let step = step?;
    Some(format!(
        "{step}, yet the first {} operations run the same instructions ({}, each counted \
         alone under callgrind): cold caches, not a change of the input; the warm-up absorbs \
         them",
        c.process.len(),
        list_counts(&c.process)
    ))
}

/// The step after the first operation by times alone, described ("time per operation
/// falls by 97% after the first operation (...)"), if every process shows it.
fn first_step(first: &[(Vec<f64>, f64)]) -> Option<String> {
    let n = first.first()?.0.len();
    if n < 2 || first.iter().any(|(f, _)| f.len() != n) {
        return None;
    }
    let mut ranks_high = Vec::new();
    let mut ranks_low = Vec::new();
    let mut dearest = 0;
    let mut falls = Vec::new();
    let mut rises = Vec::new();
    let mut gaps = Vec::new();
    for (ops, empty) in first {
        let v: Vec<f64> = ops.iter().map(|t| (t - empty).max(0.0)).collect();
        let (head, rest) = (v[0], &v[1..]);
        ranks_high.push(1 + rest.iter().filter(|&&x| x < head).count());
        if ranks_high.last() == Some(&n) {
            dearest += 1;
        }
        ranks_low.push(n - rest.iter().filter(|&&x| x > head).count());
        let later = median(rest);
        falls.push(if head > 0.0 { 1.0 - later / head } else { 0.0 });
        rises.push(if later > 0.0 { 1.0 - head / later } else { 0.0 });
        gaps.push(head - later);
    }
    let (p_high, _) = first_rank_p_values(&ranks_high, n);
    let (_, p_low) = first_rank_p_values(&ranks_low, n);
    let gap = median(&gaps);
    // Two one-sided tests: each at half the level.
    if 2.0 * p_high < DRIFT_ALPHA && median(&falls) >= STEP_MIN_FALL && gap >= STEP_MIN_SECONDS {
        return Some(format!(
            "time per operation falls by {:.0}% after the first operation (the dearest of \
             the first {n} in {dearest} of {} processes, p = {:.2e})",
            (median(&falls) * 100.0).floor(),
            first.len(),
            2.0 * p_high
        ));
    }
    if 2.0 * p_low < DRIFT_ALPHA && median(&rises) >= STEP_MIN_FALL && -gap >= STEP_MIN_SECONDS {
        return Some(format!(
            "time per operation rises by {:.0}% after the first operation (p = {:.2e})",
            ((1.0 / (1.0 - median(&rises)).max(1e-3) - 1.0) * 100.0).floor(),
            2.0 * p_low
        ));
    }
    None
}

/// A trend of the time per operation over the kept measurements, described ("time per
/// operation rises by 55% over the kept measurements (Spearman's ...)"), if there is one.
fn kept_trend(kept: &[Vec<f64>]) -> Option<String> {
    let pairs: Vec<(f64, f64)> = kept
        .iter()
        .flat_map(|k| k.iter().enumerate().map(|(i, &t)| (i as f64, t)))
        .collect();
    let (rho, p) = spearman(&pairs)?;
    if p >= DRIFT_ALPHA {
        return None;
    }
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for k in kept {
        let half = k.len() / 2;
        a.extend_from_slice(&k[..half]);
        b.extend_from_slice(&k[k.len() - half..]);
    }
    if a.is_empty() {
        return None;
    }
    let (ma, mb) = (
        a.iter().sum::<f64>() / a.len() as f64,
        b.iter().sum::<f64>() / b.len() as f64,
    );
    if ma <= 0.0 {
        return None;
    }
    let change = mb / ma - 1.0;
    if change.abs() < TREND_MIN_CHANGE {
        return None;
    }
    Some(format!(
        "time per operation {} by {:.0}% over the kept measurements (Spearman's rho \
         {rho:.2} with the operation's index, p = {p:.2e})",
        if change > 0.0 { "rises" } else { "falls" },
        (change.abs() * 100.0).floor()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_sum_p_values_are_exact() {
        // One process, 8 operations: the first is the dearest with probability 1/8.
        let (hi, lo) = first_rank_p_values(&[8], 8);
        assert!((hi - 0.125).abs() < 1e-12 && (lo - 1.0).abs() < 1e-12);
        // Three processes, all dearest: (1/8)^3.
        let (hi, _) = first_rank_p_values(&[8, 8, 8], 8);
        assert!((hi - 1.0 / 512.0).abs() < 1e-15, "{hi}");
        // Two processes of 3, sum 5 or more: sums (2,3),(3,2),(3,3) = 3/9.
        let (hi, lo) = first_rank_p_values(&[2, 3], 3);
        assert!((hi - 3.0 / 9.0).abs() < 1e-12, "{hi}");
        // Sum 5 or less: every pair but (3,3): 8/9.
        assert!((lo - 8.0 / 9.0).abs() < 1e-12, "{lo}");
        // Many processes: probabilities, no overflow.
        let (hi, _) = first_rank_p_values(&[4; 400], 8);
        assert!(hi.is_finite() && hi > 0.9, "{hi}");
    }

    #[test]
    fn spearman_matches_scipy() {
        // scipy.stats.spearmanr([1,2,3,4,5,6], [2,1,4,3,6,5]) -> (0.8285714, 0.0415626)
        let pairs: Vec<(f64, f64)> = [2.0, 1.0, 4.0, 3.0, 6.0, 5.0]
            .iter()
            .enumerate()
            .map(|(i, &y)| (i as f64 + 1.0, y))
            .collect();
        let (rho, p) = spearman(&pairs).unwrap();
        assert!((rho - 0.8285714285714285).abs() < 1e-12, "{rho}");
        assert!((p - 0.04156268221574334).abs() < 1e-9, "{p}");
        // Ties take their average rank: spearmanr([1,1,2,2,3,3], [1,2,3,4,5,6])
        // -> (0.9561828874675149, 0.0028648...)
        let pairs: Vec<(f64, f64)> = [1.0, 1.0, 2.0, 2.0, 3.0, 3.0]
            .iter()
            .enumerate()
            .map(|(i, &x)| (x, i as f64 + 1.0))
            .collect();
        let (rho, _) = spearman(&pairs).unwrap();
        assert!((rho - 0.9561828874675149).abs() < 1e-12, "{rho}");
        assert_eq!(
            spearman(&[(1.0, 1.0), (2.0, 1.0), (3.0, 1.0), (4.0, 1.0)]),
            None
        );
    }

    fn sorted_in_place(processes: usize) -> Vec<(Vec<f64>, f64)> {
        (0..processes)
            .map(|p| {
                let mut ops = vec![5e-3];
                ops.extend((1..8).map(|i| 60e-6 + (i * 7 + p) as f64 % 5.0 * 1e-6));
                (ops, 30e-9)
            })
            .collect()
    }

    #[test]
    fn an_operation_that_sorts_its_input_is_caught_at_the_first_step() {
        let w = drift_warnings("list/sort", &sorted_in_place(3), &[], NO_COUNT).warnings;
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].starts_with(
                "`list/sort`: time per operation falls by 98% after the first operation"
            ) && w[0].contains("this check was timing-only (valgrind is not installed)")
                && w[0].ends_with("add `.reset(...)`"),
            "{w:?}"
        );
        // Two processes cannot reach the level: (1/8)^2 * 2 = 0.031.
        assert!(
            drift_warnings("list/sort", &sorted_in_place(2), &[], NO_COUNT)
                .warnings
                .is_empty()
        );
    }

    #[test]
    fn a_cold_first_call_is_not_a_drift() {
        // First operation 3 us dearer (cold caches) of a 1 us operation: a large fraction,
        // a small time.
        let first: Vec<(Vec<f64>, f64)> = (0..5)
            .map(|_| {
                let mut ops = vec![4e-6];
                ops.extend([1.0e-6, 1.1e-6, 0.9e-6, 1.0e-6, 1.05e-6, 0.95e-6, 1.0e-6]);
                (ops, 30e-9)
            })
            .collect();
        assert_eq!(
            drift_warnings("b", &first, &[], NO_COUNT),
            DriftVerdict::default()
        );
        // Stationary kept measurements: no trend.
        let kept: Vec<Vec<f64>> = (0..5)
            .map(|p| {
                (0..10)
                    .map(|i| 1e-6 * (1.0 + ((i * 3 + p) % 7) as f64 * 0.01))
                    .collect()
            })
            .collect();
        assert!(
            drift_warnings("b", &[], &kept, NO_COUNT)
                .warnings
                .is_empty(),
            "{kept:?}"
        );
    }

    #[test]
    fn a_rising_trend_in_the_kept_measurements_is_caught() {
        // A vector that grows without a reset: each operation dearer than the last.
        let kept: Vec<Vec<f64>> = (0..5)
            .map(|p| {
                (0..10)
                    .map(|i| 1e-6 * (1.0 + 0.1 * i as f64) + p as f64 * 1e-9)
                    .collect()
            })
            .collect();
        let w = drift_warnings("vec/grow", &[], &kept, NO_COUNT).warnings;
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("rises by"), "{w:?}");
        // Counts of the first operations do not see a slow trend: it is still reported.
        let counts = FirstCounts {
            process: vec![5000, 5001, 5002, 5003],
            fresh: vec![5000, 5001],
        };
        let w = drift_warnings("vec/grow", &[], &kept, FirstCheck::Counted(&counts)).warnings;
        assert!(w.len() == 1 && w[0].contains("rises by"), "{w:?}");
        // Counts that do not move: the same times are the machine's (a load that changed
        // during the runs), said in a note, not a warning.
        let still = FirstCounts {
            process: vec![5000, 5000, 5000, 5000],
            fresh: vec![5000, 5000],
        };
        let v = drift_warnings("vec/grow", &[], &kept, FirstCheck::Counted(&still));
        assert!(v.warnings.is_empty(), "{v:?}");
        let note = v.note.unwrap_or_default();
        assert!(note.contains("rises by") && note.contains("load"), "{note}");
    }

    const NO_COUNT: FirstCheck<'static> = FirstCheck::TimingOnly("valgrind is not installed");

    /// A first operation 30 us dearer than the next ones (3 us) in every process: what
    /// the timing rule alone calls a drift.
    fn cold_first_call() -> Vec<(Vec<f64>, f64)> {
        (0..10)
            .map(|p| {
                let mut ops = vec![33e-6 + p as f64 * 1e-7];
                ops.extend((1..8).map(|i| 3e-6 + (i % 3) as f64 * 1e-8));
                (ops, 30e-9)
            })
            .collect()
    }

    #[test]
    fn equal_counts_make_a_dearer_first_call_cold_caches() {
        let timed = drift_warnings("drift/sum", &cold_first_call(), &[], NO_COUNT);
        assert_eq!(timed.warnings.len(), 1, "{timed:?}");
        let counts = FirstCounts {
            process: vec![20_012, 20_012, 20_012, 20_012],
            fresh: vec![20_012, 20_012],
        };
        let v = drift_warnings(
            "drift/sum",
            &cold_first_call(),
            &[],
            FirstCheck::Counted(&counts),
        );
        assert!(v.warnings.is_empty(), "{v:?}");
        let note = v.note.unwrap();
        assert!(
            note.starts_with("time per operation falls by 91% after the first operation")
                && note.contains(
                    "yet the first 4 operations run the same instructions (20,012, 20,012, \
                     20,012 and 20,012, each counted alone under callgrind): cold caches"
                ),
            "{note}"
        );
        // Within the tolerance: the same.
        let close = FirstCounts {
            process: vec![20_090, 20_012, 20_012, 20_012],
            fresh: vec![20_012, 20_012],
        };
        let v = drift_warnings("drift/sum", &[], &[], FirstCheck::Counted(&close));
        assert_eq!(v, DriftVerdict::default());
    }

    #[test]
    fn different_counts_are_a_drift_whatever_the_times() {
        // A small sort in place: no timing step at all (under the 20 us floor).
        let counts = FirstCounts {
            process: vec![14_250, 2_101, 2_101, 2_101],
            fresh: vec![14_250, 2_101],
        };
        let v = drift_warnings("drift/sort", &[], &[], FirstCheck::Counted(&counts));
        assert_eq!(
            v.warnings,
            [
                "`drift/sort`: the operation changes its own input: its first operations, each \
              counted alone under callgrind, run 14,250, 2,101, 2,101 and 2,101 instructions, \
              and on a second set-up 14,250 and 2,101; add `.reset(...)`"
            ]
        );
        assert_eq!(v.note, None);
        // With the timing step, the warning says it too.
        let v = drift_warnings(
            "drift/sort",
            &cold_first_call(),
            &[],
            FirstCheck::Counted(&counts),
        );
        assert!(
            v.warnings[0].contains("2,101; time per operation falls by 91% after the first"),
            "{v:?}"
        );
        // Later operations that differ from one another: a drift too (a vector that
        // grows by a block per operation, again on a second set-up).
        let growing = FirstCounts {
            process: vec![1000, 2000, 3000, 4000],
            fresh: vec![1000, 2000],
        };
        let v = drift_warnings("vec/grow", &[], &[], FirstCheck::Counted(&growing));
        assert_eq!(v.warnings.len(), 1, "{v:?}");
        // Counts that move by 1-2% either way, the same operations after two set-ups as
        // much as one operation from the next (a HashMap's seed drawn per set-up, as the
        // example's `wordfreq/top` under CI): the program is not repeatable, no drift.
        let seeded = FirstCounts {
            process: vec![3_731_783, 3_748_851, 3_704_136, 3_703_276],
            fresh: vec![3_675_867, 3_651_184],
        };
        let v = drift_warnings("wordfreq/top", &[], &[], FirstCheck::Counted(&seeded));
        assert!(v.warnings.is_empty(), "{v:?}");
        // The same counts with the operations after the second set-up repeating the
        // first ones exactly: the input's change, a drift.
        let repeated = FirstCounts {
            fresh: vec![3_731_783, 3_748_851],
            ..seeded
        };
        let v = drift_warnings("wordfreq/top", &[], &[], FirstCheck::Counted(&repeated));
        assert_eq!(v.warnings.len(), 1, "{v:?}");
        // Without the second set-up, the process's own first operations decide.
        let alone = FirstCounts {
            process: vec![14_250, 2_101, 2_101, 2_101],
            fresh: Vec::new(),
        };
        let v = drift_warnings("drift/sort", &[], &[], FirstCheck::Counted(&alone));
        assert!(
            v.warnings[0].contains("instructions (a second set-up panicked"),
            "{v:?}"
        );
    }

    #[test]
    fn one_time_work_of_the_process_is_not_a_drift() {
        // A lazily built table: the first call of the process pays for it, the first call
        // on a second set-up does not.
        let counts = FirstCounts {
            process: vec![90_000, 10_000, 10_000, 10_000],
            fresh: vec![10_000, 10_000],
        };
        let v = drift_warnings(
            "table",
            &cold_first_call(),
            &[],
            FirstCheck::Counted(&counts),
        );
        assert!(v.warnings.is_empty(), "{v:?}");
        assert!(
            v.note.as_deref().is_some_and(|n| n.starts_with(
                "the first operation of each process runs \
                    80,000 instructions more than the next ones"
            )),
            "{v:?}"
        );
        // A cheaper first operation (wordfreq's ran 205,168 instructions fewer) is no
        // pitfall and explains nothing: neither a warning nor a note.
        let counts = FirstCounts {
            process: vec![29_000_000, 29_205_168, 29_205_168, 29_205_168],
            fresh: vec![29_205_168, 29_205_168],
        };
        let v = drift_warnings("table", &[], &[], FirstCheck::Counted(&counts));
        assert!(v.warnings.is_empty() && v.note.is_none(), "{v:?}");
    }

    fn metric(id: &str, unit: Unit, exact: bool, samples: &[f64]) -> MetricResult {
        let mut m = metric_result(
            id.into(),
            unit,
            "test".into(),
            exact,
            samples.to_vec(),
            Vec::new(),
            0.95,
        );
        m.group = "g".into();
        m
    }

    fn report(metrics: Vec<MetricResult>) -> Report {
        Report {
            schema_version: 1,
            tool_version: "t".into(),
            conditions: sbs_reports::model::Conditions {
                instructions: None,
                runs: 3,
                group_runs: Vec::new(),
                warmup: 0,
                aslr_disabled: true,
                pinned_cpus: Vec::new(),
                clean_env: false,
                machine: None,
            },
            benchmarks: vec![BenchmarkResult {
                name: "vec/sum".into(),
                command: Vec::new(),
                metrics,
                warnings: Vec::new(),
                invocation_checks: Vec::new(),
            }],
            from_history: None,
            headline: None,
            speed: Vec::new(),
            scans: Vec::new(),
        }
    }

    #[test]
    fn the_same_instructions_at_twice_the_size_is_a_constant_input() {
        let mut r = report(vec![
            metric("counter.instructions/op", Unit::Count, true, &[7203.0; 3]),
            metric(
                "counter.instructions/op.empty",
                Unit::Count,
                true,
                &[10.0; 3],
            ),
            metric(
                "counter.instructions/op@n=20000",
                Unit::Count,
                true,
                &[7203.0; 3],
            ),
        ]);
        calibrate(&mut r, 0.95);
        dead_work(&mut r);
        constant_inputs(&mut r);
        assert_eq!(
            r.benchmarks[0].warnings,
            [
                "`vec/sum`: per-op instructions do not change when size parameter `n` doubles \
              (7,203 instructions/op, and 7,203 at n=20000): the input may be folded as a \
              constant, or the operation ignores `n`; build its input from the state the \
              set-up makes of `n` and pass it through `black_box`"
            ]
        );
        // A count that grows with the size: no warning.
        let mut r = report(vec![
            metric("counter.instructions/op", Unit::Count, true, &[7203.0; 3]),
            metric(
                "counter.instructions/op@n=20000",
                Unit::Count,
                true,
                &[14_403.0; 3],
            ),
        ]);
        constant_inputs(&mut r);
        assert!(r.benchmarks[0].warnings.is_empty());
        // Dead work does not change with the size either: one warning, the dead-work one.
        let mut r = report(vec![
            metric("counter.instructions/op", Unit::Count, true, &[10.0; 3]),
            metric(
                "counter.instructions/op.empty",
                Unit::Count,
                true,
                &[10.0; 3],
            ),
            metric(
                "counter.instructions/op@n=20000",
                Unit::Count,
                true,
                &[10.0; 3],
            ),
        ]);
        calibrate(&mut r, 0.95);
        dead_work(&mut r);
        constant_inputs(&mut r);
        assert_eq!(r.benchmarks[0].warnings.len(), 1);
        assert!(r.benchmarks[0].warnings[0].contains("costs what an empty one does"));
    }

    #[test]
    fn calibration_subtracts_the_empty_operation_run_by_run() {
        let mut r = report(vec![
            metric("time.op", Unit::Seconds, false, &[10e-9, 11e-9, 12e-9]),
            metric("time.op.empty", Unit::Seconds, false, &[1e-9, 1e-9, 2e-9]),
            metric("counter.instructions/op", Unit::Count, true, &[1003.0; 3]),
            metric(
                "counter.instructions/op.empty",
                Unit::Count,
                true,
                &[3.0; 3],
            ),
        ]);
        calibrate(&mut r, 0.95);
        let ids: Vec<&str> = r.benchmarks[0]
            .metrics
            .iter()
            .map(|m| m.id.as_str())
            .collect();
        assert_eq!(
            ids,
            [
                "time.op",
                "time.op.empty",
                "time.op.calibrated",
                "counter.instructions/op",
                "counter.instructions/op.empty",
                "counter.instructions/op.calibrated"
            ]
        );
        let t = &r.benchmarks[0].metrics[2];
        assert_eq!(t.samples.len(), 3);
        assert!((t.summary.mean - 9.666666666666666e-9).abs() < 1e-18);
        assert_eq!(t.distinguishable, Some(true));
        let i = &r.benchmarks[0].metrics[5];
        assert_eq!(
            (i.summary.mean, i.exact, i.distinguishable),
            (1000.0, true, Some(true))
        );
        dead_work(&mut r);
        assert!(r.benchmarks[0].warnings.is_empty());
    }

    #[test]
    fn an_operation_that_costs_what_the_empty_one_does_is_dead_work() {
        let mut r = report(vec![
            metric("time.op", Unit::Seconds, false, &[1.0e-9, 1.2e-9, 0.9e-9]),
            metric(
                "time.op.empty",
                Unit::Seconds,
                false,
                &[1.1e-9, 1.0e-9, 1.0e-9],
            ),
            metric("counter.instructions/op", Unit::Count, true, &[5.0; 3]),
            metric(
                "counter.instructions/op.empty",
                Unit::Count,
                true,
                &[3.0; 3],
            ),
        ]);
        calibrate(&mut r, 0.95);
        dead_work(&mut r);
        assert_eq!(
            r.benchmarks[0].warnings,
            [
                "`vec/sum`: the operation costs what an empty one does (5 instructions/op); its \
             result is probably unused or computed at compile time: return it or pass it to \
             `black_box`"
            ]
        );
        // By time alone, when no instruction was counted.
        let mut r = report(vec![
            metric("time.op", Unit::Seconds, false, &[1.0e-9, 1.2e-9, 0.9e-9]),
            metric(
                "time.op.empty",
                Unit::Seconds,
                false,
                &[1.1e-9, 1.0e-9, 1.0e-9],
            ),
        ]);
        calibrate(&mut r, 0.95);
        assert_eq!(r.benchmarks[0].metrics[2].distinguishable, Some(false));
        dead_work(&mut r);
        assert!(
            r.benchmarks[0].warnings[0].contains("(1.033 ns/op)"),
            "{:?}",
            r.benchmarks[0].warnings
        );
    }
}
