//! How well the history gate works, simulated: the detection rate of a 5% regression and
//! the false-alarm rate of an A/A run, for histories of 1, 5, 20 and 100 saved sessions.
//!
//! Noise model: every session (one `sbs-profile` invocation, 10 runs) has a mean that
//! drifts from session to session (CoV a quarter of the run-to-run CoV: machine state,
//! layout, frequency), and every run adds its own noise (CoV 2% or 20%). The gate is the
//! one a run with `--save`d history goes through: 95% confidence, the default 2%
//! threshold, a measured (not exact) metric. A false alarm is a "regressed" verdict when
//! nothing changed; a detection is a "regressed" verdict for a 5% slower candidate.
//!
//! Run: `cargo bench -p sbs-profile --bench gate` (a few seconds; seeded, so repeatable).

use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Normal};
use sbs_profile::gate::judge_against_history;
use sbs_profile::gate::{Policy, Series};
use sbs_reports::model::Verdict;

const RUNS: usize = 10;
const TRIALS: usize = 200;
const DEPTHS: [usize; 4] = [1, 5, 20, 100];

fn session(rng: &mut StdRng, cov: f64, effect: f64) -> Vec<f64> {
    let drift = Normal::new(1.0, cov / 4.0).expect("valid sd");
    let noise = Normal::new(1.0, cov).expect("valid sd");
    let mean = 100.0 * drift.sample(rng) * (1.0 + effect);
    (0..RUNS).map(|_| mean * noise.sample(rng)).collect()
}

/// The share of trials whose verdict is "regressed".
fn rate(depth: usize, cov: f64, effect: f64, seed: u64) -> f64 {
    let mut rng = StdRng::seed_from_u64(seed);
    let policy = Policy {
        confidence: 0.95,
        threshold: 0.02,
        threshold_absolute: 0.0,
        exact: false,
        resolution: 0.0,
    };
    let mut regressed = 0;
    for _ in 0..TRIALS {
        let history: Vec<Vec<f64>> = (0..depth).map(|_| session(&mut rng, cov, 0.0)).collect();
        let current = session(&mut rng, cov, effect);
        let labels: Vec<String> = (0..depth).map(|i| format!("session {i}")).collect();
        let saved: Vec<Series<'_>> = labels
            .iter()
            .zip(&history)
            .map(|(label, samples)| Series { label, samples })
            .collect();
        let c = judge_against_history(&saved, &current, &policy).expect("comparable series");
        if c.verdict == Verdict::Regressed {
            regressed += 1;
        }
    }
    regressed as f64 / TRIALS as f64
}

fn main() {
    println!("| run-to-run CoV | history depth | A/A false alarms | 5% regression detected |");
    println!("| --- | --- | --- | --- |");
    for cov in [0.02, 0.20] {
        for (i, depth) in DEPTHS.into_iter().enumerate() {
            let seed = 1000 * i as u64 + (cov * 100.0) as u64;
            let aa = rate(depth, cov, 0.0, seed);
            let hit = rate(depth, cov, 0.05, seed + 1);
            println!(
                "| {:.0}% | {depth} | {:.1}% | {:.1}% |",
                cov * 100.0,
                aa * 100.0,
                hit * 100.0
            );
        }
    }
}
