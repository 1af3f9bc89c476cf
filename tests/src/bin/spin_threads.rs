//! Fixture: `spin_threads THREADS ITERATIONS` spawns THREADS threads that each do
//! ITERATIONS units of arithmetic work, so CPU time adds up across threads.
use std::hint::black_box;

fn main() {
    let mut args = std::env::args().skip(1);
    let threads: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(2);
    let iterations: u64 = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            std::thread::spawn(move || {
                let mut x = t as u64;
                for i in 0..iterations {
                    x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
                }
                x
            })
        })
        .collect();
    let total = handles
        .into_iter()
        .map(|h| h.join().expect("thread"))
        .fold(0, u64::wrapping_add);
    black_box(total);
}
