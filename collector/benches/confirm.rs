//! Confirmation runs (`--confirm N`) simulated: how often the history gate fails an
//! unchanged benchmark (A/A false alarms) and how often it catches a regression, at
//! history depths 1, 5 and 20, with the first look alone (`--confirm 0`) and with
//! confirmation (the default, as many runs again).
//!
//! Every trial goes through the gate a run goes through: `judge_against_history` (one
//! saved session: Welch; sessions that agree: pooled, Welch; sessions that disagree: the
//! prediction interval of their means) and `judge::confirm::decide` (a measured metric
//! that looks regressed gets the confirmation runs, and the gate decides over all runs).
//! 95% confidence, a measured metric, 10 runs per session, 10 confirmation runs.
//!
//! Noise models:
//! - `iid`: every run independent, normal, sd 2% of the mean; threshold 0, so the rate
//!   of "regressed" on no change is the test's own, at most α/2 = 2.5% (the worse side of
//!   a two-sided test at 95%).
//! - `drift`: as `benches` gate.rs: each session's mean moves (sd 0.5%), runs add 2%;
//!   the confirmation runs are of the same session (its drift too); default threshold 2%.
//! - `burst`: the `iid` runs, but the first look's 10 runs are 2% slower (a neighbour
//!   that was busy for them), the confirmation runs are not; threshold 0. A false alarm
//!   caused by the machine, which only runs made later can clear: A/A only, with 10 and
//!   30 confirmation runs.
//!
//! Each trial is judged every way on the same draws, so a column "with confirmation" can
//! only be at or below its "first look" (failing needs both looks to say regressed).
//!
//! Run: `cargo bench -p sbs-profile --bench confirm` (about a minute in release; seeded,
//! so the numbers repeat exactly). `benches/confirm.sh` runs it.

use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Normal};
use sbs_profile::gate::decide;
use sbs_profile::gate::judge_against_history;
use sbs_profile::gate::{Policy, Series};
use sbs_reports::model::Verdict;

const RUNS: usize = 10;
const CONFIRM: usize = 10;
const DEPTHS: [usize; 3] = [1, 5, 20];
const AA_TRIALS: usize = 20_000;
const POWER_TRIALS: usize = 4_000;

#[derive(Clone, Copy)]
enum Model {
    Iid,
    Drift,
    Burst,
}

impl Model {
    fn name(self) -> &'static str {
        match self {
            Model::Iid => "iid",
            Model::Drift => "drift",
            Model::Burst => "burst",
        }
    }

    fn threshold(self) -> f64 {
        match self {
            Model::Drift => 0.02,
            Model::Iid | Model::Burst => 0.0,
        }
    }

    /// The mean of a session (drift between sessions in `Drift` only).
    fn session_mean(self, rng: &mut StdRng) -> f64 {
        match self {
            Model::Drift => 100.0 * Normal::new(1.0, 0.005).expect("valid sd").sample(rng),
            Model::Iid | Model::Burst => 100.0,
        }
    }
}

/// `n` runs around `mean`, sd 2% of it.
fn runs(rng: &mut StdRng, mean: f64, n: usize) -> Vec<f64> {
    let noise = Normal::new(1.0, 0.02).expect("valid sd");
    (0..n).map(|_| mean * noise.sample(rng)).collect()
}

/// What one setting gives over its trials: the share that failed the gate on the first
/// look alone, the share that failed with each number of confirmation runs of
/// `confirms`, and the mean number of confirmation runs made per trial with the first.
struct Rates {
    first_look: f64,
    confirmed: Vec<f64>,
    runs_added: f64,
}

/// `trials` trials of the gate at history `depth` for a candidate `effect` slower. Each
/// trial is judged every way on the same draws (its confirmation runs are drawn whether
/// or not they are needed), so the ways differ only by the rule.
fn rates(
    model: Model,
    depth: usize,
    effect: f64,
    confirms: &[usize],
    trials: usize,
    seed: u64,
) -> Rates {
    let mut rng = StdRng::seed_from_u64(seed);
    let policy = Policy {
        confidence: 0.95,
        threshold: model.threshold(),
        threshold_absolute: 0.0,
        exact: false,
        resolution: 0.0,
    };
    let labels: Vec<String> = (0..depth).map(|i| format!("session {i}")).collect();
    let most = confirms.iter().copied().max().unwrap_or(0);
    let (mut first_failed, mut failed, mut added) = (0, vec![0; confirms.len()], 0);
    for _ in 0..trials {
        let history: Vec<Vec<f64>> = (0..depth)
            .map(|_| {
                let mean = model.session_mean(&mut rng);
                runs(&mut rng, mean, RUNS)
            })
            .collect();
        let saved: Vec<Series<'_>> = labels
            .iter()
            .zip(&history)
            .map(|(label, samples)| Series { label, samples })
            .collect();
        let mean = model.session_mean(&mut rng) * (1.0 + effect);
        let burst = match model {
            Model::Burst => 1.02,
            Model::Iid | Model::Drift => 1.0,
        };
        let first = runs(&mut rng, mean * burst, RUNS);
        let more = runs(&mut rng, mean, most);
        let judge = |s: &[f64]| judge_against_history(&saved, s, &policy);
        for (i, &n) in confirms.iter().enumerate() {
            let (look, last) =
                decide(&first, || more[..n].to_vec(), false, judge).expect("comparable series");
            if i == 0 {
                first_failed += usize::from(look.verdict == Verdict::Regressed);
                added += if last.is_some() { n } else { 0 };
            }
            failed[i] += usize::from(last.is_some_and(|c| c.verdict == Verdict::Regressed));
        }
    }
    let share = |k: usize| k as f64 / trials as f64;
    Rates {
        first_look: share(first_failed),
        confirmed: failed.into_iter().map(share).collect(),
        runs_added: share(added),
    }
}

fn percent(r: f64) -> String {
    format!("{:.2}%", r * 100.0)
}

fn main() {
    println!(
        "| noise | depth | A/A false alarms, first look | with confirmation | confirmation \
         runs per A/A run | power at +2%, first look | with confirmation | power at +4%, \
         first look | with confirmation |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for (m, model) in [Model::Iid, Model::Drift].into_iter().enumerate() {
        for (d, depth) in DEPTHS.into_iter().enumerate() {
            let seed = 10_000 * m as u64 + 100 * d as u64;
            let aa = rates(model, depth, 0.0, &[CONFIRM], AA_TRIALS, seed);
            let mut row = vec![
                model.name().to_string(),
                depth.to_string(),
                percent(aa.first_look),
                percent(aa.confirmed[0]),
                format!("{:.2}", aa.runs_added),
            ];
            for (e, effect) in [0.02, 0.04].into_iter().enumerate() {
                let s = seed + 10 * (e as u64 + 1);
                let hit = rates(model, depth, effect, &[CONFIRM], POWER_TRIALS, s);
                row.push(percent(hit.first_look));
                row.push(percent(hit.confirmed[0]));
            }
            println!("| {} |", row.join(" | "));
        }
    }
    println!();
    println!("| burst: depth | A/A false alarms, first look | --confirm 10 | --confirm 30 |");
    println!("| --- | --- | --- | --- |");
    for (d, depth) in DEPTHS.into_iter().enumerate() {
        let aa = rates(
            Model::Burst,
            depth,
            0.0,
            &[10, 30],
            AA_TRIALS,
            20_000 + d as u64,
        );
        println!(
            "| {depth} | {} | {} | {} |",
            percent(aa.first_look),
            percent(aa.confirmed[0]),
            percent(aa.confirmed[1])
        );
    }
}
