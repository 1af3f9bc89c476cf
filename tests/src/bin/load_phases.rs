//! Fixture: `load_phases SECONDS [SEED]` loads every core with a time-varying load, one
//! thread per core, each alternating busy phases (a spin loop) and idle phases (sleep) of
//! 20 to 400 ms drawn at random, and exits after SECONDS (60 by default). It stands in
//! for the neighbours of a shared machine in benchmarks of the statistics: a program
//! measured beside it gets a wall time that depends on when it ran, and much less so a
//! CPU time. The phases come from a seeded generator (splitmix64), so a seed repeats the
//! same pattern of lengths.
use std::hint::black_box;
use std::time::{Duration, Instant};

/// splitmix64: a small, well-mixed generator, enough to draw phase lengths.
struct Phases(u64);

impl Phases {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A phase length from 20 to 400 ms.
    fn length(&mut self) -> Duration {
        Duration::from_millis(20 + self.next() % 381)
    }
}

fn core(seed: u64, end: Instant) {
    let mut phases = Phases(seed);
    let mut x = seed;
    // Cores start in different phases: half of them idle first.
    let mut busy = seed % 2 == 0;
    while Instant::now() < end {
        let until = (Instant::now() + phases.length()).min(end);
        if busy {
            while Instant::now() < until {
                for i in 0..10_000u64 {
                    x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
                }
            }
        } else {
            std::thread::sleep(until.saturating_duration_since(Instant::now()));
        }
        busy = !busy;
    }
    black_box(x);
}

fn main() {
    let mut args = std::env::args().skip(1);
    let seconds: f64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(60.0);
    let seed: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    let end = Instant::now() + Duration::from_secs_f64(seconds.clamp(0.0, 3600.0));
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads: Vec<_> = (0..cores as u64)
        .map(|c| std::thread::spawn(move || core(seed.wrapping_mul(1000).wrapping_add(c), end)))
        .collect();
    for t in threads {
        // A thread that panicked has nothing to report: the load just ends early.
        let _ = t.join();
    }
}
