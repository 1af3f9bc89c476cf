//! Fixture: `sleepy N MS` sleeps N times for MS milliseconds, so it blocks (and is
//! switched out) at least N times.
fn main() {
    let mut args = std::env::args().skip(1);
    let n: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(5);
    let ms: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(2);
    for _ in 0..n {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
}
